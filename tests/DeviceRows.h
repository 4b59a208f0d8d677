#pragma once
// CPU and CUDA rows of the device-generic tests. A data function adds a "device" column
// (addDeviceColumn) and one row per name of testDevices(); the test function starts with
//     LATMIX_REQUIRE_DEVICE(dev, device);
// which declares `const c10::Device dev` or QSKIPs the row ("CUDA not available: ...") when this
// libtorch or this machine has no CUDA. With CUDA the rows run on cuda:0 and compare with the CPU;
// the cpu rows run the same code on the CPU (where the comparison is with itself, exact).
// Include this header before <QtTest>: Qt's `slots`/`signals` macros break ATen headers.
#include <ATen/ATen.h>
#include <ATen/Context.h> // at::hasCUDA
#include <c10/core/Device.h>
#include <torch/cuda.h>   // torch::cuda::is_available, device_count

#include <QString>
#include <QStringList>
#include <QtTest>

#include <algorithm>
#include <exception>

namespace latmix::test {

// The devices every device-generic test runs on.
inline QStringList testDevices() { return {QStringLiteral("cpu"), QStringLiteral("cuda:0")}; }

inline void addDeviceColumn() { QTest::addColumn<QString>("device"); }

// Why the named device cannot run here; empty when it can.
inline QString deviceUnavailable(const QString& name) {
    c10::Device d(c10::kCPU);
    try {
        d = c10::Device(name.toStdString());
    } catch (const std::exception&) {
        return {}; // not a skip: deviceNamed throws and the row fails (a typo in the rows)
    }
    if (!d.is_cuda()) return {};
    if (!at::hasCUDA())
        return QStringLiteral("CUDA not available: this libtorch is a CPU-only build (%1 needs a CUDA libtorch and GPU)").arg(name);
    if (!torch::cuda::is_available()) return QStringLiteral("CUDA not available: no CUDA device visible (%1)").arg(name);
    const auto n = static_cast<int>(torch::cuda::device_count());
    if (d.has_index() && d.index() >= n)
        return QStringLiteral("CUDA not available: %1 asked for, this machine has %2 CUDA device(s)").arg(name).arg(n);
    return {};
}

// The device of a name that deviceUnavailable accepted ("cuda" means cuda:0).
inline c10::Device deviceNamed(const QString& name) {
    c10::Device d(name.toStdString());
    return d.is_cuda() && !d.has_index() ? c10::Device(c10::kCUDA, 0) : d;
}

// A CPU copy (detached), for comparisons and data_ptr access.
inline at::Tensor onCpu(const at::Tensor& t) { return t.detach().to(at::kCPU); }

// max|got - want| / max|want| in float64, on the CPU (either tensor may be on any device).
inline double maxRelativeDiff(const at::Tensor& got, const at::Tensor& want) {
    const auto g = onCpu(got).to(at::kDouble), w = onCpu(want).to(at::kDouble);
    const double scale = w.abs().max().item<double>();
    return (g - w).abs().max().item<double>() / std::max(scale, 1e-300);
}

} // namespace latmix::test

// Declares `const c10::Device var` for the device named by the QString `name`, or skips the
// current row with the reason (QSKIP must run in the test function itself, hence a macro).
#define LATMIX_REQUIRE_DEVICE(var, name)                                                            \
    if (const QString latmixWhy_ = latmix::test::deviceUnavailable(name); !latmixWhy_.isEmpty())    \
        QSKIP(qPrintable(latmixWhy_));                                                              \
    const c10::Device var = latmix::test::deviceNamed(name)
