#pragma once
// `latmix quantize`: a Hugging Face model to a folded, W4A4 MX-quantized run with one of the
// paper's methods (SPEC §6), written to RUN_DIR (docs/run-folder.md):
//   RUN_DIR/model/         the quantized model (run/RunModel.h): loads with model::Checkpoint,
//                          evaluates with `latmix eval`, exports with `latmix export`
//   RUN_DIR/transforms.h5  T1, T2 per layer, T3 seed (learned and fixed methods)
//   RUN_DIR/train.h5       training series, state for --resume (learned methods)
//   RUN_DIR/latmix.json    the run's configuration, seeds, versions, per-layer GPTQ errors,
//                          perplexities and timings
// A run is: preflight (run/quantize/Preflight.h, before anything is written), then the stages
// train, fold, quantize, evaluate, record (run/quantize/Stages.h, one file each), which
// runQuantize (QuantizeRun.cpp) lists in order.
#include "eval/KlDivergence.h"
#include "run/quantize/Preflight.h"
#include "train/Distillation.h"
#include "util/Job.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace latmix::run {

struct LinearReport {
    int layer = 0;
    std::string linear; // "self_attn.q_proj", "mlp.experts.3.up_proj", ...
    double relativeError = 0;
    double seconds = 0;
    // An expert's linear: the calibration tokens routed to it (-1: not an expert, or no windows),
    // and whether it was rounded to nearest for want of them (LayerQuantizer's kStarvedShare).
    std::int64_t tokens = -1;
    bool roundedToNearest = false;
    bool kept = false; // --keep: left in full precision (bf16), relativeError that of its bf16 rounding
};

struct QuantizeResult {
    std::vector<LinearReport> linears;
    double fpPerplexity = 0, quantizedPerplexity = 0, weightOnlyPerplexity = 0; // 0: not evaluated
    double foldedPerplexity = 0; // transformed methods: folded, unquantized (paper Table 3 check)
    // The quantized model (W4A4) against the FP one on the perplexity windows, llama.cpp's KL
    // statistics (tokens 0: not evaluated).
    eval::KlResult kl;
    eval::ZeroShotResult zeroShot; // of the quantized model; no tasks: not evaluated
    double trainSeconds = 0, quantizeSeconds = 0, evalSeconds = 0, totalSeconds = 0;
    double peakRssMb = 0;
    double peakGpuMb = 0; // peak of libtorch's CUDA allocator on the run's device (0 on the CPU)
    // The same per stage, in the stages' order ("training", "folding", "quantizing", ...), each
    // from the stage's start (what earlier stages left on the device counts): beside the
    // per-stage estimates of `quantize --dry-run`. Empty on the CPU.
    std::vector<std::pair<std::string, double>> stagePeakGpuMb;
    // The process's peak resident memory per stage, each from the stage's start (the first one's
    // from the process's): beside --dry-run's host estimates.
    std::vector<std::pair<std::string, double>> stagePeakRssMb;
    // Data parallel: bytes this rank put into all-reduces and broadcasts during the training and
    // during the weight quantization (dist::Group::bytesCommunicated); 0 for one process.
    std::uint64_t trainBytes = 0, quantizeBytes = 0;
    train::DistillResult training;
    std::vector<std::string> notes; // what the user should know, e.g. a stale lock of the run folder taken over
};

// What the ranks of a data-parallel run must agree on (dist::Group::connect's run key), a line
// each: the model (config and weight files' names and sizes), the method and every option that
// changes what is computed, and a hash of the calibration and evaluation ids.
std::string runKey(const ResolvedRun& resolved, const QuantizeOptions& options, const std::vector<int>& calibIds,
                   const std::vector<int>& evalIds);

// The run `resolved` (preflight of these options) into runDir. calibIds: tokenized calibration
// text (never the evaluation split); evalIds: tokenized WikiText-2 test (SPEC §7) or empty.
// Progress: the stages in order, each its share of the bar; cancel stops at the next step/layer,
// leaving a resumable train.h5, the unfinished-run marker and no RUN_DIR/model. The front ends
// (CLI, workbench, sweep) call it through run/PrepareRun.h, which decides the options, the
// resume and the inputs the same way for all three.
QuantizeResult runQuantize(const ResolvedRun& resolved, const std::vector<int>& calibIds, const std::vector<int>& evalIds,
                           const std::string& runDir, const QuantizeOptions& options, JobContext& job = silentJob(),
                           const RunHooks& hooks = {});
// The same with preflight(modelDir, options) first.
QuantizeResult runQuantize(const std::string& modelDir, const std::vector<int>& calibIds, const std::vector<int>& evalIds,
                           const std::string& runDir, const QuantizeOptions& options, JobContext& job = silentJob(),
                           const RunHooks& hooks = {});

} // namespace latmix::run
