// latmix bench mx: bandwidth of MX fake quantization next to a plain tensor copy.
#include "cli/Commands.h"

#include "mx/MxKernelCpu.h"
#include "mx/MxQuantizer.h"
#include "util/Runtime.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

namespace latmix::cli {
namespace {

struct BenchOptions {
    std::string what = "mx";
    int64_t elements = int64_t{64} << 20;
    int repeat = 5;
    bool tensorOps = false;
};

double bestSeconds(int repeat, const std::function<void()>& fn) {
    fn(); // warm-up: page faults, thread pool start
    double best = 1e30;
    for (int i = 0; i < repeat; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        fn();
        const auto t1 = std::chrono::steady_clock::now();
        best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
    }
    return best;
}

int runMx(const BenchOptions& o) {
    if (o.elements < 1024) throw std::invalid_argument("--elements must be at least 1024");
    const int64_t cols = 4096, rows = (o.elements + cols - 1) / cols, n = rows * cols;
    auto x = at::randn({rows, cols}, at::kFloat);
    // Plant outliers in one channel of every row, as LLM activations have.
    x.select(1, 7).mul_(50.0);
    auto y = at::empty_like(x);
    const double bytes = 2.0 * 4.0 * static_cast<double>(n); // read + write

    std::printf("MX fake quantization, %lld float32 elements (%.0f MiB read + %.0f MiB written), "
                "%d threads, best of %d\n",
                static_cast<long long>(n), 4.0 * n / 1048576.0, 4.0 * n / 1048576.0, threadCount(), o.repeat);
    std::printf("%-34s %10s %10s %9s\n", "operation", "ms", "GB/s", "vs copy");
    const double copy = bestSeconds(o.repeat, [&] { y.copy_(x); });
    auto row = [&](const std::string& name, double s) {
        std::printf("%-34s %10.2f %10.2f %9.2f\n", name.c_str(), s * 1e3, bytes / s / 1e9, copy / s);
    };
    row("copy (Tensor::copy_)", copy);
    for (mx::Format f : {mx::Format::MxFp4, mx::Format::MxInt4}) {
        const mx::MxConfig c = mx::makeConfig(f);
        mx::cpu::QuantizeOutputs out;
        out.dequantized = y.data_ptr<float>();
        const double s = bestSeconds(o.repeat, [&] { mx::cpu::quantizeRows(x.data_ptr<float>(), rows, cols, c, 1.0f, out); });
        row(mx::formatName(f) + " (cpu kernel)", s);
        if (o.tensorOps) {
            const double t = bestSeconds(o.repeat, [&] { mx::fakeQuantize(x, c, mx::Backend::TensorOps); });
            row(mx::formatName(f) + " (tensor ops, allocating)", t);
        }
    }
    return 0;
}

} // namespace

Runner addBenchCommand(CLI::App& app) {
    auto o = std::make_shared<BenchOptions>();
    auto* cmd = app.add_subcommand("bench", "benchmarks that print a table");
    cmd->add_option("what", o->what, "what to benchmark: mx")->check(CLI::IsMember({"mx"}))->capture_default_str();
    cmd->add_option("--elements", o->elements, "tensor size in elements")->capture_default_str();
    cmd->add_option("--repeat", o->repeat, "timed repetitions (best is reported)")->capture_default_str();
    cmd->add_flag("--tensor-ops", o->tensorOps, "also time the device-generic tensor-ops path");
    return [o] { return runMx(*o); };
}

} // namespace latmix::cli
