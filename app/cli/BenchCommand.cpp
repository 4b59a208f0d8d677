// latmix bench: mx (bandwidth of MX fake quantization next to a plain tensor copy), forward
// (a model's forward pass), train (a distillation step, split), gptq (Hessian, RTN and GPTQ of one
// weight), memory (the estimates).
#include "cli/Commands.h"

#include "model/Checkpoint.h"
#include "model/LlamaModel.h"
#include "mx/MxKernelCpu.h"
#include "mx/MxQuantizer.h"
#include "quant/WeightQuantizer.h"
#include "run/quantize/MemoryEstimate.h"
#include "run/QuantizeRun.h"
#include "train/Distillation.h"
#include "fold/ModelTransforms.h"
#include "transforms/FixedTransforms.h"
#include "util/Runtime.h"
#include "util/TorchCompat.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <sys/resource.h>

namespace latmix::cli {
namespace {

struct BenchOptions {
    std::string what = "mx";
    std::string model, device = "cpu";
    int seqLen = 256;
    int64_t elements = int64_t{64} << 20;
    int repeat = 5;
    bool tensorOps = false;
    std::string method;              // memory: quantize with this method (empty: eval)
    std::string config, dtype = "bfloat16"; // memory: a config.json instead of a model folder
    int calibSamples = 64, evalSeqLen = 0, batch = 4;
    int windows = 0; // train: the windows the steps draw from (0: new windows every step)
    bool tf32 = false; // forward, train: float32 matrix products in TF32 on CUDA (as quantize --tf32)
    std::string precision = "auto"; // train: the training's arithmetic (as quantize --precision)
};

// --tf32 as `latmix quantize` applies it: on a CUDA device only (a CPU run ignores it); the
// header line says which.
const char* applyTf32(const BenchOptions& o, c10::Device device) {
    const bool on = o.tf32 && device.is_cuda();
    compat::allowTf32Matmuls(on);
    return on ? ", TF32 matmuls" : "";
}

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
    // NVFP4 with its standard scales and with four over six (two candidate scales a block, SPEC §1).
    const std::vector<mx::MxConfig> configs = {mx::makeConfig(mx::Format::MxFp4), mx::makeConfig(mx::Format::MxInt4),
                                               mx::makeConfig(mx::Format::NvFp4),
                                               mx::makeConfig(mx::Format::NvFp4, mx::ScaleMode::FourOverSix)};
    for (const mx::MxConfig& c : configs) {
        const std::string name = mx::formatName(c.format) + (c.fourOverSix() ? " four-over-six" : "");
        mx::cpu::QuantizeOutputs out;
        out.dequantized = y.data_ptr<float>();
        const float g = c.isNvfp4() ? mx::cpu::nvfp4GlobalScale(x.data_ptr<float>(), n) : 1.0f;
        const double s = bestSeconds(o.repeat, [&] { mx::cpu::quantizeRows(x.data_ptr<float>(), rows, cols, c, g, out); });
        row(name + " (cpu kernel)", s);
        if (o.tensorOps) {
            const double t = bestSeconds(o.repeat, [&] { mx::fakeQuantize(x, c, mx::Backend::TensorOps); });
            row(name + " (tensor ops, allocating)", t);
        }
    }
    // T3 of a run (block Hadamard 32, SPEC §4) followed by the activation quantization: the
    // fused one-pass kernel, and the two steps it replaces (batched matmul, then the kernel).
    const auto t3 = transforms::blockHadamard(cols, 32, 1234);
    const float* signs = t3.hadamardSigns().data_ptr<float>();
    for (mx::Format f : {mx::Format::MxFp4, mx::Format::MxInt4}) {
        const mx::MxConfig c = mx::makeConfig(f);
        mx::cpu::QuantizeOutputs out;
        out.dequantized = y.data_ptr<float>();
        const double s = bestSeconds(o.repeat, [&] {
            mx::cpu::quantizeRowsAfterHadamard(x.data_ptr<float>(), signs, rows, cols, c, out);
        });
        row("T3 + " + mx::formatName(f) + " (fused kernel)", s);
    }
    const auto t3f = t3.to(at::kFloat);
    const double unfused = bestSeconds(o.repeat, [&] { mx::fakeQuantize(t3f.apply(x), mx::makeConfig(mx::Format::MxFp4)); });
    row("T3 + mxfp4 (bmm, then kernel)", unfused);
    return 0;
}

// Dense matmul throughput of this machine, the yardstick for the forward pass.
double matmulGflops(at::ScalarType dtype, c10::Device device, int repeat) {
    const int64_t n = 1024;
    auto a = at::randn({n, n}).to(dtype).to(device), b = at::randn({n, n}).to(dtype).to(device);
    auto sync = [&] { (void)a.sum().item<float>(); };
    const double s = bestSeconds(repeat, [&] { at::matmul(a, b); sync(); });
    return 2.0 * n * n * n / s / 1e9;
}

int runForward(const BenchOptions& o) {
    if (o.model.empty()) throw std::invalid_argument("bench forward needs --model DIR");
    const auto ck = model::Checkpoint::load(o.model);
    const auto device = model::parseDevice(o.device);
    const char* tf32 = applyTf32(o, device);
    std::printf("forward pass of %s (%s, %d layers, hidden %d), seqlen %d, %s%s, %d threads, best of %d\n",
                o.model.c_str(), ck.config().architectureName.c_str(), ck.config().numLayers, ck.config().hiddenSize,
                o.seqLen, device.str().c_str(), tf32, threadCount(), o.repeat);
    std::printf("%-10s %12s %12s %14s %14s %9s\n", "dtype", "ms/forward", "tokens/s", "model GFLOP/s", "matmul GFLOP/s",
                "fraction");
    at::NoGradGuard noGrad;
    for (auto dtype : {at::kFloat, at::kBFloat16}) {
        const model::LlamaModel m(ck, dtype, device);
        const int seq = std::min(o.seqLen, ck.config().maxPositions);
        auto ids = at::arange(seq, at::kLong).remainder(ck.config().vocabSize).unsqueeze(0);
        const double s = bestSeconds(o.repeat, [&] { (void)m.forward(ids).sum().item<float>(); });
        const double gflops = m.forwardFlops(seq) / s / 1e9, peak = matmulGflops(dtype, device, o.repeat);
        std::printf("%-10s %12.2f %12.1f %14.2f %14.2f %9.2f\n", dtype == at::kFloat ? "float32" : "bfloat16",
                    s * 1e3, seq / s, gflops, peak, gflops / peak);
    }
    return 0;
}

// One [rows, cols] weight (Gaussian, seeded) and 2·cols calibration rows with correlated channels
// (a shared low-rank part, as real activations have): time to build the Hessian, RTN and GPTQ,
// and their relative errors (GPTQ should be well below RTN there).
int runGptq(const BenchOptions& o) {
    const std::int64_t rows = 768, cols = 2048, samples = 2 * cols;
    const auto device = model::parseDevice(o.device);
    const auto opts = at::TensorOptions().dtype(at::kFloat).device(device);
    at::manual_seed(101);
    const at::Tensor w = at::randn({rows, cols}, opts) * 0.02;
    const at::Tensor x = (at::randn({samples, 64}, opts).mm(at::randn({64, cols}, opts)) + 0.3 * at::randn({samples, cols}, opts));
    const mx::MxConfig c = mx::makeConfig(mx::Format::MxFp4);
    std::printf("GPTQ of a [%lld, %lld] weight, %s, %lld calibration rows, %s, %d threads, best of %d\n",
                static_cast<long long>(rows), static_cast<long long>(cols), c.describe().c_str(),
                static_cast<long long>(samples), device.str().c_str(), threadCount(), o.repeat);
    at::Tensor h;
    const double tH = bestSeconds(o.repeat, [&] {
        quant::HessianAccumulator acc(cols);
        acc.add(x);
        h = acc.hessian();
    });
    quant::QuantizedWeight rtn, gptq;
    const double tR = bestSeconds(o.repeat, [&] { rtn = quant::quantizeRtn(w.cpu(), c, h.cpu()); });
    const double tG = bestSeconds(o.repeat, [&] { gptq = quant::quantizeGptq(w, h, c); });
    // The column loop as tensor operations on the device beside it (the default is the fused
    // CPU kernel, on host copies of each block from a GPU; quant::GptqOptions::backend).
    quant::GptqOptions ops;
    ops.backend = mx::Backend::TensorOps;
    quant::QuantizedWeight gptqOps;
    const double tO = bestSeconds(o.repeat, [&] { gptqOps = quant::quantizeGptq(w, h, c, ops); });
    std::printf("%-10s %12s %16s\n", "step", "ms", "relative error");
    std::printf("%-10s %12.1f %16s\n", "hessian", tH * 1e3, "");
    std::printf("%-10s %12.1f %16.4g\n", "rtn", tR * 1e3, rtn.relativeError);
    std::printf("%-10s %12.1f %16.4g\n", "gptq", tG * 1e3, gptq.relativeError);
    std::printf("%-10s %12.1f %16.4g\n", "gptq-ops", tO * 1e3, gptqOps.relativeError);
    return 0;
}

// The training step of a learned method (train::distill) on --batch windows of --seqlen random
// tokens: the warm-up step, then --repeat timed steps, each split into the teacher's forward, the
// student's folded layers, the loss over the vocabulary, the backward pass and AdamW's update;
// the minor page faults per step (memory the allocator returned to the system and asked for
// again) and the peak resident memory.
int runTrain(const BenchOptions& o) {
    if (o.model.empty()) throw std::invalid_argument("bench train needs --model DIR");
    const std::string method = o.method.empty() ? "latmix-lu" : o.method;
    run::QuantizeOptions q;
    q.method = method;
    const run::MethodSpec m = run::runMethod(q);
    if (!m.learned) {
        std::string learned;
        for (const auto& x : run::methods())
            if (x.learned) learned += (learned.empty() ? "" : ", ") + x.name;
        throw std::invalid_argument("bench train times a method that trains (" + learned + "), not " + method);
    }
    const auto ck = model::Checkpoint::load(o.model);
    const model::ModelConfig& c = ck.config();
    const auto device = model::parseDevice(o.device);
    const int seq = std::min(o.seqLen, c.maxPositions);
    // The frozen weights as `latmix quantize` holds them: as stored, mapped on the CPU.
    const model::LlamaWeights original = model::loadStoredWeights(ck, at::kFloat, device);
    fold::ModelTransforms transforms(c, run::transformSpecOf(m, q));
    transforms.to(device);
    const int steps = 1 + o.repeat;
    const int64_t drawn = o.windows > 0 ? o.windows : int64_t(o.batch) * steps;
    const at::Tensor windows = at::randint(0, c.vocabSize, {drawn, seq}, at::detail::createCPUGenerator(7), at::kLong);
    train::DistillOptions d;
    d.activation = q.format;
    d.steps = steps;
    d.batch = o.batch;
    d.metricsEvery = 0;
    d.checkpointEvery = 0;
    d.warmupSteps = 1;
    const train::Precision precision = train::precisionOf(o.precision, device.is_cuda());
    d.compute = train::computeDtype(precision);
    std::vector<long> faults; // minor page faults after each step
    auto minorFaults = [] {
        rusage u{};
        getrusage(RUSAGE_SELF, &u);
        return u.ru_minflt;
    };
    d.onStep = [&](const train::DistillStep&) { faults.push_back(minorFaults()); };
    const char* tf32 = applyTf32(o, device);
    // The precision's TF32 as the quantize run's train stage applies it (bf16's folds, tf32's products).
    if (train::usesTf32(precision, device.is_cuda())) compat::allowTf32Matmuls(true);
    std::printf("training step of %s (%s, %d layers, hidden %d, vocabulary %d), method %s, batch %d x %d tokens, %s%s, "
                "precision %s, %d threads; step 1 warms up, then %d timed\n",
                o.model.c_str(), c.architectureName.c_str(), c.numLayers, c.hiddenSize, c.vocabSize, method.c_str(), o.batch,
                seq, device.str().c_str(), tf32, train::precisionName(precision), threadCount(), o.repeat);
    if (device.is_cuda()) compat::resetCudaPeakMemory(device.index());
    const auto r = train::distill(c, original, windows, transforms, d);
    std::vector<train::DistillStep> timed(r.history.begin() + 1, r.history.end());
    auto medianOf = [&](const std::function<double(const train::DistillStep&)>& part) {
        std::vector<double> v;
        for (const auto& s : timed) v.push_back(part(s));
        std::sort(v.begin(), v.end());
        return v.empty() ? 0.0 : v[v.size() / 2];
    };
    auto median = [&](double train::DistillStep::*field) { return medianOf([&](const train::DistillStep& s) { return s.*field; }); };
    // Every part is timed on its own; what no timer covers (the batch's gather, the transforms'
    // bookkeeping) is the step's time less their sum, so double counting shows as a negative rest.
    const double unaccounted = medianOf([](const train::DistillStep& s) {
        return s.seconds - s.teacherSeconds - s.studentSeconds - s.backwardSeconds - s.optimizerSeconds - s.metricsSeconds;
    });
    const double step = median(&train::DistillStep::seconds), teacher = median(&train::DistillStep::teacherSeconds),
                 student = median(&train::DistillStep::studentSeconds), loss = median(&train::DistillStep::lossSeconds),
                 backward = median(&train::DistillStep::backwardSeconds), optimizer = median(&train::DistillStep::optimizerSeconds),
                 teacherLogits = median(&train::DistillStep::teacherLogitsSeconds),
                 lossGradient = median(&train::DistillStep::lossGradientSeconds),
                 metrics = median(&train::DistillStep::metricsSeconds);
    std::printf("%-44s %10s %9s\n", "part (median of the timed steps)", "s", "of step");
    auto row = [&](const char* name, double sec) { std::printf("%-44s %10.4f %8.1f%%\n", name, sec, 100 * sec / step); };
    row("step", step);
    row("teacher forward (layers)", teacher);
    row("student forward (folded layers)", student - loss);
    row("loss over the vocabulary", loss);
    if (teacherLogits > 0) { // the CPU's fused loss times its products apart
        row("  of which the teacher's logits", teacherLogits);
        row("  of which the student's logits and the KL", loss - teacherLogits - lossGradient);
        row("  of which the gradient to the hidden states", lossGradient);
    }
    row("backward", backward);
    row("optimizer (AdamW)", optimizer);
    row("metrics (matrix conditions, folded perplexity)", metrics);
    row("untimed rest (batch, transforms)", unaccounted);
    const long perStep = faults.size() > 1 ? (faults.back() - faults.front()) / long(faults.size() - 1) : 0;
    std::printf("minor page faults per step %ld (%.0f MiB of pages); peak resident %.0f MiB\n", perStep,
                perStep * 4096.0 / 1048576.0, peakResidentMiB());
    // With the teacher's states kept, a timed step's "teacher forward" is a lookup: the ratios
    // below take the warm-up step's, which ran the teacher on the windows.
    const std::int64_t keptBytes = train::teacherCacheBytes(c, drawn, seq, steps, o.batch, d.objective);
    const double teacherForward = keptBytes > 0 && !r.history.empty() ? r.history.front().teacherSeconds : teacher;
    if (keptBytes > 0)
        std::printf("teacher states kept for %lld windows (%.1f MiB): a window's later draws skip the teacher's forward; "
                    "the ratios take the warm-up step's teacher forward, %.4f s\n",
                    static_cast<long long>(drawn), keptBytes / 1048576.0, teacherForward);
    // An eager forward (the peers') makes each model's logits in its own forward and the loss's
    // gradient product in the backward; the same split here, beside the plain one.
    std::printf("student / teacher %.2f (each model's forward with its own logits); (student layers + loss) / teacher "
                "layers %.2f\n",
                (student - teacherLogits - lossGradient) / std::max(teacherForward + teacherLogits, 1e-12),
                student / std::max(teacherForward, 1e-12));
    if (device.is_cuda()) // beside `latmix quantize --dry-run --device cuda`'s train stage
        std::printf("peak GPU memory %.0f MiB (PyTorch's allocator; the CUDA context adds about 512 MiB)\n",
                    compat::cudaPeakAllocatedBytes(device.index()) / 1048576.0);
    return 0;
}

// The estimated peak host memory of `latmix eval` (no --method) or `latmix quantize --method X`
// for a model, stage by stage (run/quantize/MemoryEstimate.h); nothing is loaded but the config and the
// file sizes.
int runMemory(const BenchOptions& o) {
    if (o.model.empty() == o.config.empty())
        throw std::invalid_argument("bench memory needs --model DIR or --config config.json (a model not downloaded yet)");
    model::ModelConfig config;
    int stored = 2;
    std::int64_t weightBytes = 0;
    std::string what = o.model;
    if (!o.model.empty()) {
        const auto ck = model::Checkpoint::load(o.model);
        config = ck.config();
        stored = run::storedElementBytes(ck.weightBytes(), ck.parameterCount());
        weightBytes = ck.weightBytes();
    } else {
        config = model::ModelConfig::fromFile(o.config);
        if (o.dtype != "bfloat16" && o.dtype != "float32")
            throw std::invalid_argument("--dtype must be bfloat16 or float32, got '" + o.dtype + "'");
        stored = o.dtype == "float32" ? 4 : 2;
        for (const auto& [name, shape] : model::requiredTensors(config)) {
            std::int64_t n = stored;
            for (auto d : shape) n *= d;
            weightBytes += n;
        }
        what = o.config;
    }
    run::MemoryEstimate e;
    if (o.method.empty()) {
        e = run::estimateEvalMemory(config, stored, o.seqLen);
        std::printf("latmix eval --seqlen %d on %s (%d-byte weights, %s)\n", o.seqLen, what.c_str(), stored,
                    run::gibText(weightBytes).c_str());
    } else {
        run::QuantizeOptions q;
        q.method = o.method;
        q.seqLen = o.seqLen;
        q.calibSamples = o.calibSamples;
        q.evalSeqLen = o.evalSeqLen;
        q.batch = o.batch;
        e = run::estimateQuantizeMemory(config, stored, q, run::runMethod(q));
        std::printf("latmix quantize --method %s --calib-samples %d --seqlen %d --batch %d --eval-seqlen %d on %s "
                    "(%d-byte weights, %s)\n",
                    o.method.c_str(), o.calibSamples, o.seqLen, o.batch, o.evalSeqLen, what.c_str(), stored,
                    run::gibText(weightBytes).c_str());
    }
    std::printf("%s", run::memoryTable(e, run::availableHostMemory()).c_str());
    return 0;
}

} // namespace

Runner addBenchCommand(CLI::App& app) {
    auto o = std::make_shared<BenchOptions>();
    auto* cmd = app.add_subcommand("bench", "benchmarks that print a table");
    cmd->add_option("what", o->what,
                    "what to benchmark: mx (MX kernels), forward (model forward pass), train (a training step), gptq or "
                    "memory (estimate)")
        ->check(CLI::IsMember({"mx", "forward", "train", "gptq", "memory"}))
        ->capture_default_str();
    cmd->add_option("--model", o->model, "forward, train: Hugging Face model folder");
    cmd->add_option("--seqlen", o->seqLen, "forward, train: tokens per forward pass (per window)")->capture_default_str();
    cmd->add_option("--device", o->device, "forward, train, gptq: cpu, cuda, cuda:N or auto")->capture_default_str();
    cmd->add_option("--elements", o->elements, "tensor size in elements")->capture_default_str();
    cmd->add_option("--repeat", o->repeat, "timed repetitions (best is reported)")->capture_default_str();
    cmd->add_flag("--tensor-ops", o->tensorOps, "also time the device-generic tensor-ops path");
    cmd->add_option("--method", o->method, "memory: the quantize method (none: latmix eval); train: the learned method (latmix-lu)");
    cmd->add_option("--config", o->config, "memory: a config.json instead of --model (estimate before downloading)");
    cmd->add_option("--dtype", o->dtype, "memory with --config: the weights' dtype, bfloat16 or float32")->capture_default_str();
    cmd->add_option("--calib-samples", o->calibSamples, "memory: calibration windows")->capture_default_str();
    cmd->add_option("--eval-seqlen", o->evalSeqLen, "memory: quantize's evaluation window (0: none)")->capture_default_str();
    cmd->add_option("--batch", o->batch, "memory, train: training sequences per step")->capture_default_str();
    cmd->add_option("--windows", o->windows,
                    "train: the windows the steps draw their batches from (0: new windows every step, the teacher "
                    "runs every step; --batch: every timed step draws windows whose teacher states are kept, as late "
                    "in a run)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    cmd->add_flag("--tf32", o->tf32, "forward, train: float32 matrix products in TF32 on a CUDA device (ignored on the CPU)");
    cmd->add_option("--precision", o->precision,
                    "train: the training's arithmetic, auto (bf16 on CUDA, fp32 on the CPU), bf16, tf32 or fp32 (as "
                    "quantize --precision)")
        ->capture_default_str()
        ->check(CLI::IsMember({"auto", "bf16", "tf32", "fp32"}));
    return [o] {
        return o->what == "forward" ? runForward(*o)
               : o->what == "train" ? runTrain(*o)
               : o->what == "gptq"  ? runGptq(*o)
               : o->what == "memory" ? runMemory(*o)
                                     : runMx(*o);
    };
}

} // namespace latmix::cli
