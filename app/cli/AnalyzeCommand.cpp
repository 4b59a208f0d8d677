// latmix analyze: the transform analysis of paper §3 / Fig. 2 on a model's activations or a
// captured run file: E(T), per-block errors, the bound of Theorem 1, κ, orthogonality
// deviation, off-block norm and the block-size sweep for each point × transform (SPEC §3).
#include "cli/CliProgress.h"
#include "cli/Commands.h"
#include "util/AtomicFile.h"
#include "util/DataPath.h"
#include "util/Text.h"

#include "eval/Perplexity.h"
#include "analysis/AnalysisStore.h"
#include "analysis/ModelAnalysis.h"
#include "model/Checkpoint.h"
#include "model/LlamaModel.h"
#include "tokenizer/Tokenizer.h"
#include "mx/MxFormat.h"
#include "train/TransformAnalysis.h"
#include "util/Runtime.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <stdexcept>

namespace latmix::cli {
namespace {

struct AnalyzeOptions {
    std::string model, activations, calib, points = ".*", out, json;
    std::string dtype = "float32", device = "auto";
    int samples = 8, seqLen = 256;
    std::uint64_t seed = 0;
    std::string format = "mxfp4", scaleMode = "floor", transforms = "none,block-hadamard,learned-affine-lu";
    std::string sweepBlocks = "8,16,32,64,128,256", init = "default", learnedSize = "method";
    int block = 0; // 0: the format's default
    int steps = 200, batchRows = 512, trackEvery = 10;
    double lr = 1e-3, noiseStd = 1e-3, volumeWeight = 0.1;
    bool biasFromMean = false, expertPoints = false;
    std::int64_t maxRows = 0;
};

// The non-empty entries of a comma list.
std::vector<std::string> splitList(const std::string& s) {
    std::vector<std::string> out;
    for (auto& item : util::splitList(s))
        if (!item.empty()) out.push_back(std::move(item));
    return out;
}

std::vector<int> parseBlocks(const std::string& s) {
    std::vector<int> out;
    for (const auto& item : splitList(s)) {
        size_t used = 0;
        int b = 0;
        try {
            b = std::stoi(item, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used != item.size() || b < 1 || (b & (b - 1)) != 0)
            throw std::invalid_argument("--sweep-blocks: '" + item + "' is not a power-of-two block size");
        out.push_back(b);
    }
    return out;
}

mx::MxConfig mxConfig(const AnalyzeOptions& o) {
    mx::MxConfig c = mx::makeConfig(mx::parseFormat(o.format), mx::parseScaleMode(o.scaleMode));
    if (o.block > 0) c.blockSize = o.block;
    c.validate();
    return c;
}

void validate(const AnalyzeOptions& o) {
    if (o.model.empty() == o.activations.empty())
        throw std::invalid_argument("analyze needs exactly one of --model DIR or --activations RUN.h5");
    if (o.out.empty()) throw std::invalid_argument("analyze needs --out FILE.h5 for the results");
    if (o.steps < 1) throw std::invalid_argument("--steps must be at least 1");
    if (o.expertPoints && o.model.empty())
        throw std::invalid_argument("--expert-points needs --model: a run file of latmix capture keeps only the points "
                                    "every token reaches, not each expert's own");
    if (o.maxRows < 0) throw std::invalid_argument("--max-rows must be >= 0 (0: all rows)");
}

// WUSH reads the weights of each point too (from the model; an activation file has none).
train::PointActivations loadActivations(const AnalyzeOptions& o, analysis::Attributes& attrs,
                                        std::map<std::string, at::Tensor>* pointWeights) {
    if (!o.activations.empty()) {
        attrs["activations"] = o.activations;
        return train::readActivations(o.activations, o.points, o.maxRows);
    }
    // SPEC §5: calibrate on a training-side split, never on the test text perplexity uses.
    const std::string calib = util::calibrationTextFile(o.calib);
    attrs.insert({{"model", o.model}, {"calibration", calib}, {"samples", std::to_string(o.samples)},
                  {"seqlen", std::to_string(o.seqLen)}, {"dtype", o.dtype}});
    CliProgress progress("capture");
    analysis::ModelCapture request{o.model, util::readTextFile(calib, "calibration text"), o.points, o.samples, o.seqLen, o.seed,
                              o.maxRows, model::parseDtype(o.dtype), o.device};
    request.checkWeights = true;
    request.expertPoints = o.expertPoints;
    auto acts = analysis::captureModelActivations(request, progress);
    if (pointWeights) *pointWeights = analysis::capturedPointWeights(request, acts);
    return acts;
}

std::string number(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.4g", v);
    return buf;
}

void printTable(const train::AnalysisResult& r) {
    std::printf("%-32s %-22s %10s %10s %10s %10s %9s %9s %9s\n", "point", "transform", "E(T)", "mean E_B", "max E_B",
                "bound", "kappa", "orth-dev", "off-block");
    for (const auto& e : r.entries) {
        if (!e.error.empty()) {
            std::printf("%-32s %-22s error: %s\n", e.point.c_str(), e.kind.c_str(), e.error.c_str());
            continue;
        }
        const auto& m = e.report;
        std::printf("%-32s %-22s %10s %10s %10s %10s %9s %9s %9s\n", e.point.c_str(), e.kind.c_str(),
                    number(m.mse).c_str(), number(m.perBlockMean).c_str(), number(m.perBlockMax).c_str(),
                    number(m.bound).c_str(), number(m.spectral.conditionNumber).c_str(),
                    number(m.spectral.orthogonalityDeviation).c_str(), number(m.offBlockNorm).c_str());
    }
    for (const auto& e : r.entries)
        if (e.error.empty() && !e.report.remainderNote.empty())
            std::printf("note: %s %s: %s\n", e.point.c_str(), e.kind.c_str(), e.report.remainderNote.c_str());
}

void printSweep(const train::AnalysisResult& r, const std::vector<int>& blocks) {
    if (blocks.empty()) return;
    std::printf("\nblock-size sweep, E(T) (paper Fig. 2a; block-* transforms follow the block)\n%-32s %-22s", "point",
                "transform");
    for (int b : blocks) std::printf(" %10s", ("B=" + std::to_string(b)).c_str());
    std::printf("\n");
    for (const auto& e : r.entries) {
        if (!e.error.empty()) continue;
        std::printf("%-32s %-22s", e.point.c_str(), e.kind.c_str());
        for (int b : blocks) {
            std::string cell = "-";
            for (const auto& s : e.report.sweep)
                if (s.blockSize == b) cell = number(s.mse);
            std::printf(" %10s", cell.c_str());
        }
        std::printf("\n");
    }
}

int runAnalyze(const AnalyzeOptions& o) {
    validate(o);
    train::AnalysisOptions a;
    a.mx = mxConfig(o);
    a.kinds = splitList(o.transforms);
    a.sweepBlocks = parseBlocks(o.sweepBlocks);
    a.transform.seed = o.seed;
    a.transform.init = o.init;
    a.transform.noiseStd = o.noiseStd;
    a.training.steps = o.steps;
    a.training.lr = o.lr;
    a.training.batchRows = o.batchRows;
    a.training.volumeWeight = o.volumeWeight;
    a.training.biasFromMean = o.biasFromMean;
    a.training.seed = o.seed;
    a.training.matrixMetricsEvery = o.trackEvery;
    a.device = model::parseDevice(o.device);
    a.learnedAsMethod = o.learnedSize == "method";
    if (!o.model.empty()) a.headDim = model::ModelConfig::fromFile(o.model + "/config.json").headDim;
    train::validateAnalysisOptions(a); // before the capture: bad arguments cost nothing
    const auto start = std::chrono::steady_clock::now();

    analysis::Attributes attrs{{"format", mx::formatName(a.mx.format)},
                         {"block", std::to_string(a.mx.blockSize)},
                         {"scale_mode", mx::scaleModeName(a.mx.scaleMode)},
                         {"points_regex", o.points},
                         {"transforms", o.transforms},
                         {"sweep_blocks", o.sweepBlocks},
                         {"steps", std::to_string(o.steps)},
                         {"lr", number(o.lr)},
                         {"batch_rows", std::to_string(o.batchRows)},
                         {"volume_weight", number(o.volumeWeight)},
                         {"init", o.init},
                         {"learned_size", o.learnedSize},
                         {"noise_std", number(o.noiseStd)},
                         {"bias_from_mean", o.biasFromMean ? "true" : "false"},
                         {"seed", std::to_string(o.seed)},
                         {"max_rows", std::to_string(o.maxRows)},
                         {"latmix_version", latmixVersion()},
                         {"libtorch_version", libtorchVersion()}};
    const bool wush = std::find(a.kinds.begin(), a.kinds.end(), train::kWushKind) != a.kinds.end();
    const auto activations = loadActivations(o, attrs, wush ? &a.pointWeights : nullptr);
    train::AnalysisResult r;
    {
        CliProgress progress("analyze");
        r = train::analyzeTransforms(activations, a, progress);
    }
    analysis::writeAnalysisHdf5(o.out, r, attrs);
    if (!o.json.empty()) analysis::writeAnalysisJson(o.json, r, attrs);

    // An expert's point has the rows of its own tokens: then the range is printed.
    std::int64_t fewest = r.points.front().second.first, most = fewest;
    for (const auto& p : r.points) fewest = std::min(fewest, p.second.first), most = std::max(most, p.second.first);
    const std::string rows = fewest == most ? std::to_string(most) : std::to_string(fewest) + " to " + std::to_string(most);
    std::printf("%s, %zu points, %zu transforms, %s rows per point\n", a.mx.describe().c_str(), activations.size(),
                a.kinds.size(), rows.c_str());
    printTable(r);
    printSweep(r, a.sweepBlocks);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("\nwrote %s%s%s in %.1f s (%d threads)\n", o.out.c_str(), o.json.empty() ? "" : " and ",
                o.json.c_str(), seconds, threadCount());
    return 0;
}

} // namespace

Runner addAnalyzeCommand(CLI::App& app) {
    auto o = std::make_shared<AnalyzeOptions>();
    auto* cmd = app.add_subcommand(
        "analyze", "MX quantization error of transforms per quantization point: E(T), per-block error, bound, "
                   "kappa, block-size sweep (paper Fig. 2, SPEC §3); learned kinds are trained layer-locally");
    cmd->add_option("--model", o->model, "Hugging Face model folder: capture activations in memory");
    cmd->add_option("--activations", o->activations, "or an activation run file from latmix capture");
    cmd->add_option("--samples", o->samples, "calibration windows (--model)")->capture_default_str();
    cmd->add_option("--seqlen", o->seqLen, "tokens per window (--model)")->capture_default_str();
    cmd->add_option("--calib", o->calib, "calibration text (default LATMIX_DATA_DIR/wikitext-2/wiki.valid.tokens)");
    cmd->add_option("--dtype", o->dtype, "model dtype for the capture: float32 or bfloat16")->capture_default_str();
    cmd->add_option("--device", o->device, "cpu, cuda, cuda:N or auto")->capture_default_str();
    cmd->add_option("--seed", o->seed, "seed of windows, random transforms and minibatches")->capture_default_str();
    cmd->add_option("--points", o->points, "regex over point names, e.g. 'layers\\.0\\..*down_proj'")
        ->capture_default_str();
    cmd->add_flag("--expert-points", o->expertPoints,
                  "with --model, a mixture of experts: also each expert's own down_proj input "
                  "(layers.L.mlp.experts.E.down_proj.input, the tokens routed to it); choose with --points");
    cmd->add_option("--format", o->format, "MX format: " + mx::formatNameList())->capture_default_str();
    cmd->add_option("--block", o->block, "MX block size (default: the format's, 32; nvfp4 16)");
    cmd->add_option("--scale-mode", o->scaleMode, "shared scale: " + mx::scaleModeNameList())->capture_default_str();
    cmd->add_option("--transforms", o->transforms,
                    "comma-separated kinds: " + util::joinList(train::analysisKinds()) +
                        " (wush: its closed form from each point's activations and the weights reading it; needs --model)")
        ->capture_default_str();
    cmd->add_option("--sweep-blocks", o->sweepBlocks, "block sizes of the sweep ('' for none)")->capture_default_str();
    cmd->add_option("--steps", o->steps, "training steps of learned kinds")->capture_default_str();
    cmd->add_option("--lr", o->lr, "AdamW learning rate (cosine schedule, 10% linear warmup)")->capture_default_str();
    cmd->add_option("--batch-rows", o->batchRows, "rows per training minibatch")->capture_default_str();
    cmd->add_option("--volume-weight", o->volumeWeight, "lambda of the volume term (sum log|s|)^2")
        ->capture_default_str();
    cmd->add_option("--init", o->init, "initialisation of learned kinds (default: the paper's)")->capture_default_str();
    cmd->add_option("--learned-size", o->learnedSize,
                    "learned kinds as large as the method's transform at the point (method: T1 full at qkv/gate_up, "
                    "T2's head_dim blocks at o_proj, T3's blocks of 32 at down_proj) or full d x d everywhere")
        ->check(CLI::IsMember({"method", "full"}))
        ->capture_default_str();
    cmd->add_option("--noise-std", o->noiseStd, "off-block noise of '+noise' initialisations")->capture_default_str();
    cmd->add_flag("--bias-from-mean", o->biasFromMean, "start learned biases at -A mean(x)");
    cmd->add_option("--track-every", o->trackEvery, "kappa/orthogonality/off-block every K steps (0: never)")
        ->capture_default_str();
    cmd->add_option("--max-rows", o->maxRows, "use at most R rows per point (0: all)")->capture_default_str();
    cmd->add_option("--out", o->out, "results (.h5)");
    cmd->add_option("--json", o->json, "also write the results as JSON");
    return [o] { return runAnalyze(*o); };
}

} // namespace latmix::cli
