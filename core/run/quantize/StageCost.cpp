// The progress bar's shares of a quantize run's stages (Stages.h, stageSeconds): each stage's
// work in rough seconds on the run's device, so that the ETA a listener derives from the bar
// (elapsed × remaining / done) means something from the first stage on, with 5 training steps or
// 5000, on a CPU or a GPU. Only the ratios matter; the rates below are orders of magnitude.
#include "run/quantize/Stages.h"

#include "util/Runtime.h"

#include <algorithm>

namespace latmix::run {
namespace {

// Matrix work, float32: a CPU core does about 5e10 FLOP/s (AVX2/AVX-512 single precision, as
// achieved by libtorch's GEMM); a data-centre GPU about 3e13 (the 1B-shaped training step on an
// H200 without TF32, docs/research/results.md). GPTQ's column loop runs in the fused CPU kernel
// (quant/GptqKernelCpu) whatever the device: columnBlock/2 float64 multiply-adds per weight at
// about 1.5e9 per core (bench gptq on a 2-core VM), and on a GPU run each block's weights go to
// the host and their errors come back, 16 bytes per weight at about 1e10 B/s (pageable copies).
// Writing the quantized weights (packing on the host, the error, the copies) about 4e-8 s per
// weight on a GPU run (H200, 1B shape: 2.4 s of a layer's 10 s with the earlier column loop).
constexpr double kCpuCoreFlops = 5e10, kGpuFlops = 3e13, kGpuSecondsPerWeight = 4e-8;
constexpr double kCpuCoreLoopMacs = 1.5e9, kHostCopyBytesPerSecond = 1e10;

} // namespace

StageSeconds stageSeconds(const model::ModelConfig& c, const QuantizeOptions& o, const MethodSpec& m, bool cuda,
                          std::int64_t evalTokens) {
    const double h = c.hiddenSize, i = c.intermediateSize, q = double(c.numHeads) * c.headDim,
                 kv = double(c.numKvHeads) * c.headDim, L = c.numLayers, T = o.seqLen;
    const double linear = double(c.layerLinearWeights());
    // A forward pass, FLOPs per token: the weights a token meets (a mixture of experts: k experts).
    const double perToken = 2 * L * double(c.layerActiveWeights()) + 2 * h * c.vocabSize;
    const double rate = cuda ? kGpuFlops : kCpuCoreFlops * std::max(1, threadCount());
    StageSeconds s;
    // Teacher and student forward, the student's backward (twice its forward) and the
    // checkpointed layers' recomputation: five forward passes per training token.
    if (m.learned) s.transforms = double(o.steps) * o.batch * T * 5 * perToken / rate;
    if (m.transformed) s.folding = 2 * L * linear * h / rate; // a [out, in] × [in, in] product per weight
    // Each linear's lazy updates (2·out·in²) and its Hessian's three factorizations (4/3·in³),
    // float64 at half the rate; the calibration windows through each layer twice (Hessians, then
    // the quantized forward) and the four Hessians' float64 sums.
    const double windows = weightQuantizationWindows(m, o), tokens = windows * T;
    const auto cube = [](double x) { return x * x * x; };
    double gptqFlops = m.gptq ? 2 * (q * h * h + 2 * kv * h * h + h * q * q + 2 * i * h * h + h * i * i) +
                                    4.0 / 3 * (5 * cube(h) + cube(q) + cube(i))
                              : 0;
    double hessians = 2 * tokens * (2 * h * h + q * q + i * i) * 2;
    if (c.moe) { // every expert's gate/up and down_proj; each token reaches k experts' Hessians
        const double E = c.moe->numExperts, w = c.moe->expertWidth, k = c.moe->expertsPerToken;
        gptqFlops = m.gptq ? 2 * (q * h * h + 2 * kv * h * h + h * q * q + E * (2 * w * h * h + h * w * w)) +
                                 4.0 / 3 * (3 * cube(h) + cube(q) + E * (2 * cube(h) + cube(w)))
                           : 0;
        hessians = 2 * tokens * (h * h + q * q + k * (h * h + w * w)) * 2;
    }
    s.quantizing = L * (2 * gptqFlops + hessians + 2 * tokens * 2 * linear) / rate;
    // GPTQ's column loop on the host's threads (and, from a GPU, its copies).
    const double loop = m.gptq ? linear * (0.5 * o.gptq.columnBlock / (kCpuCoreLoopMacs * std::max(1, threadCount())) +
                                           (cuda ? 16 / kHostCopyBytesPerSecond : 0.0))
                               : 0.0;
    // Packing and the error: on the host, ~50 operations per weight on a CPU run.
    s.quantizing += L * (loop + (cuda ? linear * kGpuSecondsPerWeight : linear * 50 / rate));
    // Perplexity: one forward per evaluated token; the run's evaluation measures three models
    // (FP, W4A4, weights only); the folded check one. Zero-shot tasks: counted as 256 windows.
    const double evaluated = double(evalTokens) + (o.evalTasks.empty() ? 0.0 : 256.0 * T);
    s.check = evaluated * perToken / rate;
    s.evaluating = 3 * evaluated * perToken / rate;
    return s;
}

} // namespace latmix::run
