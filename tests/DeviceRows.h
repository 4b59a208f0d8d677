#pragma once
// CPU and CUDA rows of the device-generic tests. A data function adds a "device" column
// (addDeviceColumn) and one row per name of testDevices(); the test function starts with
//     LATMIX_REQUIRE_DEVICE(dev, device);
// which declares `const c10::Device dev` or QSKIPs the row ("CUDA not available: ...") when this
// libtorch or this machine has no CUDA. With CUDA the rows run on cuda:0 and compare with the CPU's
// reference (or, for the *MatchesCpu tests, which have acceleratorDevices() rows only, the CPU's
// result); the cpu rows run the same checks on the CPU.
// Include this header before <QtTest>: Qt's `slots`/`signals` macros break ATen headers.
#include "model/LlamaModel.h" // parseDevice

#include <ATen/ATen.h>
#include <c10/core/Device.h>

#include <QString>
#include <QStringList>
#include <QtTest>

#include <algorithm>
#include <stdexcept>

namespace latmix::test {

// The devices every device-generic test runs on.
inline QStringList testDevices() { return {QStringLiteral("cpu"), QStringLiteral("cuda:0")}; }
// The devices a test that compares a device with the CPU runs on: a cpu row would compare the
// CPU with itself and prove nothing, so there is none (on a machine without CUDA these rows skip).
inline QStringList acceleratorDevices() { return {QStringLiteral("cuda:0")}; }

inline void addDeviceColumn() { QTest::addColumn<QString>("device"); }

// Why the named device cannot run here (empty when it can): the reason core's parseDevice gives
// the CLI (CPU-only libtorch, no device visible, too few devices). A malformed name is not a
// reason to skip: deviceNamed throws and the row fails (a typo in the rows).
inline QString deviceUnavailable(const QString& name) {
    try {
        model::parseDevice(name.toStdString());
    } catch (const std::invalid_argument& e) {
        const QString why = QString::fromStdString(e.what());
        if (why.contains(QStringLiteral(" is not available: "))) return QStringLiteral("CUDA not available: ") + why;
    }
    return {};
}

// The device of a name that deviceUnavailable accepted ("cuda" means cuda:0).
inline c10::Device deviceNamed(const QString& name) { return model::parseDevice(name.toStdString()); }

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
