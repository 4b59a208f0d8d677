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

double flopRate(bool cuda, int threads) { return cuda ? kGpuFlops : kCpuCoreFlops * std::max(1, threads); }

// The weights [out, in] a layer quantizes (LayerQuantizer::layerLinears): attention, then the
// dense MLP or every expert's (the router is not quantized).
std::vector<std::array<std::int64_t, 2>> quantizedShapes(const model::ModelConfig& c) {
    const std::int64_t h = c.hiddenSize, q = std::int64_t(c.numHeads) * c.headDim,
                       kv = std::int64_t(c.numKvHeads) * c.headDim;
    std::vector<std::array<std::int64_t, 2>> r = {{q, h}, {kv, h}, {kv, h}, {h, q}};
    const std::int64_t width = c.moe ? c.moe->expertWidth : c.intermediateSize, mlps = c.moe ? c.moe->numExperts : 1;
    for (std::int64_t e = 0; e < mlps; ++e) r.insert(r.end(), {{width, h}, {width, h}, {h, width}});
    return r;
}

} // namespace

double linearSeconds(std::int64_t out, std::int64_t in, const LinearCostModel& m) {
    const double o = double(out), i = double(in), weights = o * i, rate = flopRate(m.cuda, m.threads);
    // Packing and the error: on the host, ~50 operations per weight on a CPU run.
    double s = m.cuda ? weights * kGpuSecondsPerWeight : weights * 50 / rate;
    if (!m.gptq) return s;
    // The lazy updates (2·out·in²) and the Hessian's three factorizations (4/3·in³), float64 at
    // half the rate; the column loop on the host's threads and, from a GPU, its copies.
    s += 2 * (2 * o * i * i + 4.0 / 3 * i * i * i) / rate;
    s += weights * (0.5 * m.columnBlock / (kCpuCoreLoopMacs * std::max(1, m.threads)) +
                    (m.cuda ? 16 / kHostCopyBytesPerSecond : 0.0));
    return s;
}

std::vector<int> linearOwners(const std::vector<std::array<std::int64_t, 2>>& shapes, int world, LinearCostModel m) {
    std::vector<int> owner(shapes.size(), 0);
    if (world <= 1) return owner;
    m.threads = 1;
    std::vector<std::pair<double, std::size_t>> cost;
    for (std::size_t i = 0; i < shapes.size(); ++i) cost.push_back({linearSeconds(shapes[i][0], shapes[i][1], m), i});
    std::stable_sort(cost.begin(), cost.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<double> load(static_cast<std::size_t>(world), 0.0);
    for (const auto& [c, i] : cost) {
        const auto least = std::min_element(load.begin(), load.end()) - load.begin();
        owner[i] = static_cast<int>(least);
        load[static_cast<std::size_t>(least)] += c;
    }
    return owner;
}

StageSeconds stageSeconds(const model::ModelConfig& c, const QuantizeOptions& o, const MethodSpec& m, bool cuda,
                          std::int64_t evalTokens) {
    const double h = c.hiddenSize, i = c.intermediateSize, q = double(c.numHeads) * c.headDim, L = c.numLayers,
                 T = o.seqLen;
    const double linear = double(c.layerLinearWeights());
    // A forward pass, FLOPs per token: the weights a token meets (a mixture of experts: k experts).
    const double perToken = 2 * L * double(c.layerActiveWeights()) + 2 * h * c.vocabSize;
    const double rate = flopRate(cuda, threadCount());
    StageSeconds s;
    // Folding T1 into every weight: a [out, in] × [in, in] product per weight (T2's and T3's
    // products are a head's or a block's width: small beside it).
    const double fold = 2 * L * linear * h / rate;
    // Teacher and student forward, the student's backward (twice its forward) and the
    // checkpointed layers' recomputation: five forward passes per training token. And each step
    // folds the student's layers again (train/DistillationStep.cpp, studentLayer): in its
    // forward, in the recomputation and in T1's gradient through the fold, three folds a step.
    // A mixture of experts folds every expert while its tokens meet k of them, so there the folds
    // dominate (Qwen3-MoE widths, 128 experts, 2 CPU cores, 4 × 128 tokens: a step 215 s, the
    // tokens' passes about 30 s of it).
    if (m.learned) s.transforms = double(o.steps) * (o.batch * T * 5 * perToken / rate + 3 * fold);
    if (m.transformed) s.folding = fold;
    // Each layer: its linears quantized (linearSeconds), the calibration windows through it twice
    // (Hessians, then the quantized forward) and the four Hessians' float64 sums.
    const double tokens = weightQuantizationWindows(m, o) * T;
    double hessians = 2 * tokens * (2 * h * h + q * q + i * i) * 2;
    if (c.moe) { // each token reaches k experts' Hessians
        const double w = c.moe->expertWidth, k = c.moe->expertsPerToken;
        hessians = 2 * tokens * (h * h + q * q + k * (h * h + w * w)) * 2;
    }
    const LinearCostModel cost{m.gptq, cuda, o.gptq.columnBlock, threadCount()};
    double linears = 0;
    for (const auto& [out, in] : quantizedShapes(c)) linears += linearSeconds(out, in, cost);
    s.quantizing = L * (linears + (hessians + 2 * tokens * 2 * linear) / rate);
    // Perplexity: one forward per evaluated token; the run's evaluation measures three models
    // (FP, W4A4, weights only); the folded check one. Zero-shot tasks: counted as 256 windows.
    const double evaluated = double(evalTokens) + (o.evalTasks.empty() ? 0.0 : 256.0 * T);
    s.check = evaluated * perToken / rate;
    s.evaluating = 3 * evaluated * perToken / rate;
    return s;
}

} // namespace latmix::run
