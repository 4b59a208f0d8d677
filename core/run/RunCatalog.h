#pragma once
// The run folders on disk: what `latmix quantize` / `latmix sweep` wrote into RUN_DIR
// (latmix.json, train.h5 for learned methods, transforms.h5, model/), read back as one summary per
// run. This is the one reader of latmix.json's result fields: the sweep table (run/Sweep.h), the
// `latmix runs` catalog, the HTML report (report/Report.h) and the GUI's runs table all use it.
//
// Absent numbers: a perplexity, recovery or time that the run did not measure is 0 (a measured
// perplexity is > 1, a measured recovery > 0); finalObjective and zeroShotAverage are negative when
// absent (a KL or an accuracy can be 0). hasValue() says which.
#include "run/quantize/QuantizeOptions.h"

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace latmix::run {

// One linear's GPTQ / RTN weight error, latmix.json "linears".
struct LinearError {
    int layer = 0;
    std::string linear;        // "self_attn.q_proj", ...
    double relativeError = 0;  // tr((W−Q) H (W−Q)ᵀ) / tr(W H Wᵀ), H the layer's Hessian (quant/)
    bool kept = false;         // --keep: left in bf16 (relativeError: its bf16 rounding)
};

// One zero-shot task of latmix.json "zeroshot"/"tasks" (the W4A4 model). Metrics the task does
// not report are NaN (acc_norm: not for boolq, lambada_openai; perplexity: lambada_openai only).
struct ZeroShotScore {
    std::string task;
    int n = 0; // documents evaluated
    double acc = std::numeric_limits<double>::quiet_NaN();
    double accNorm = std::numeric_limits<double>::quiet_NaN();
    double perplexity = std::numeric_limits<double>::quiet_NaN();
};

struct RunSummary {
    std::string dir;                    // the run folder as given / found
    std::string method, methodDescription;
    std::string format;                 // "mxfp4", "mxint4", "nvfp4", ... (a scheme's: what no rule names)
    // Average bits per weight of the quantized linears, scales counted (quant/BitBudget.h): the
    // scheme's (latmix.json weight_quantization.scheme.bits_per_weight) or the format's; 0: unknown.
    double bitsPerWeight = 0;
    std::string scheme;                 // the scheme's rules ("" without one)
    int block = 0;                      // MX block size
    std::string scaleMode;              // "floor", "ceil", "even"
    int steps = 0;                      // training.steps; 0: the method learns nothing
    std::uint64_t seed = 0;
    std::string created;                // ISO 8601 UTC, "2026-11-25T01:12:01Z"
    std::string command;                // the command line that made the run
    std::string model;                  // the source model folder
    std::string device;                 // "cpu", "cuda:0", "auto"
    std::string latmixVersion, libtorchVersion;
    // Every option the run was asked for (latmix.json "options", read through the option table,
    // run/quantize/OptionTable.h); records written before that object existed have none.
    std::optional<RunConfig> options;

    // WikiText-2 test perplexities (0: not evaluated; folded FP: 0 for methods without transforms).
    double fpPerplexity = 0, w4a4Perplexity = 0, foldedFpPerplexity = 0, weightsOnlyPerplexity = 0;
    int evalSeqLen = 0, evalWindows = 0; // their windows (windows 0: all of the split)
    // The W4A4 model against the FP one on those windows (latmix.json perplexity.kl, SPEC §7);
    // runs recorded before 2026-12-04 have none (tokens 0).
    struct Kl {
        std::int64_t tokens = 0;
        double mean = 0, stdErr = 0, p99 = 0, top1 = 0, top1StdErr = 0, deltaPpl = 0, deltaPplStdErr = 0;
        bool present() const { return tokens > 0; }
    } kl;
    // Recovery, as a fraction: FP perplexity / W4A4 perplexity (0 when either is absent). Peers'
    // model cards (FP-Quant, Red Hat's quantized models) report "recovery" as quantized accuracy
    // over FP accuracy; perplexity is lower-is-better, so the same idea is the inverse ratio:
    // 1.0 = nothing lost, 0.95 = the quantized model's perplexity is 1/0.95 of the FP one.
    double recovery = 0;
    double zeroShotAverage = -1;        // < 0: no zero-shot tasks
    std::vector<ZeroShotScore> zeroShot; // per task, in latmix.json order
    double trainSeconds = 0, totalSeconds = 0;
    // Learned methods: the first and last step's objective term (the KL, CE or block MSE of
    // training.loss; < 0: none).
    double firstObjective = -1, finalObjective = -1;
    bool hasTrainSeries = false;        // RUN_DIR/train.h5 exists
    std::vector<LinearError> linears;   // latmix.json order (layer by layer)

    std::string latmixJson() const;     // dir/latmix.json
    std::string trainFile() const;      // dir/train.h5
    // Whether a number of this struct holds a value under the conventions above: > 0 for
    // perplexities, recovery; >= 0 for finalObjective, firstObjective, zeroShotAverage (pass nonNegative).
    static bool hasValue(double v, bool nonNegative = false);
};

// The model folder a path names: a run folder (latmix.json beside model/config.json) gives its
// model/, anything else is returned as given (a Hugging Face model folder).
std::string modelFolderOf(const std::string& runOrModel);

// Reads RUN_DIR/latmix.json. Throws std::runtime_error naming RUN_DIR/latmix.json and what is
// wrong (missing, not JSON, a field of the wrong type) and what to do.
RunSummary readRunSummary(const std::string& runDir);

// Every run folder under root (root itself included): folders holding latmix.json, at most
// maxDepth levels below root, never inside a model/ folder or a hidden / temporary one
// (".name", "*.partial"), symbolic links followed once (a loop is visited once). A folder whose
// latmix.json cannot be read is skipped and, when problems is given, reported there (one line
// naming the file and why); an unreadable folder too. Sorted by dir. Throws
// std::invalid_argument when root is not a folder.
std::vector<RunSummary> scanRuns(const std::string& root, std::vector<std::string>* problems = nullptr,
                                 int maxDepth = 6);

// The label these runs' formats share for a column over them (mx::precisionLabel): "W4A4" when
// every run is 4-bit, "quantized" when they differ or there is none.
std::string precisionLabel(const std::vector<RunSummary>& runs);

} // namespace latmix::run
