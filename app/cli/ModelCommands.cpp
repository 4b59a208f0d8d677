// latmix eval / capture / demo-model / import-llama2c: checkpoints, perplexity, activations.
#include "cli/CliProgress.h"
#include "cli/Commands.h"
#include "util/AtomicFile.h"
#include "util/DataPath.h"
#include "util/Text.h"

#include "eval/ActivationCapture.h"
#include "eval/KlDivergence.h"
#include "eval/Perplexity.h"
#include "eval/ZeroShot.h"
#include "model/Checkpoint.h"
#include "import/DemoModel.h"
#include "import/Llama2cImport.h"
#include "import/RandomModel.h"
#include "model/Capture.h"
#include "model/LlamaModel.h"
#include "analysis/ModelAnalysis.h"
#include "run/RunCatalog.h"
#include "run/quantize/LayerQuantizer.h"
#include "tokenizer/Tokenizer.h"
#include "util/Runtime.h"
#include "util/TorchCompat.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>

#include <unistd.h>

namespace latmix::cli {
namespace {

namespace fs = std::filesystem;

struct ModelOptions {
    std::string model, dtype = "float32", device = "auto";
};

void addModelOptions(CLI::App* cmd, ModelOptions& o) {
    cmd->add_option("--model", o.model, "Hugging Face model folder")->required();
    cmd->add_option("--dtype", o.dtype, "float32 or bfloat16")->capture_default_str();
    cmd->add_option("--device", o.device, "cpu, cuda, cuda:N or auto (CUDA when available)")->capture_default_str();
}

std::string describe(const model::Checkpoint& ck) {
    const auto& c = ck.config();
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s, %d layers, hidden %d, %.2fM parameters", c.architectureName.c_str(),
                  c.numLayers, c.hiddenSize, ck.parameterCount() / 1e6);
    return buf;
}

// ---- eval ----
struct EvalOptions {
    ModelOptions m;
    std::string dataset = "wikitext2", json, tasks, tokensOut, reference;
    int seqLen = 2048, maxWindows = 0, limit = 0;
    eval::ZeroShotOptions zeroShot;
};

// --tasks: zero-shot accuracy (the table and, with --json, the same as JSON).
int runZeroShot(const EvalOptions& o) {
    // Every task file read and checked before the model loads.
    const auto tasks = eval::loadZeroShotTasks(o.tasks, util::dataDir(), o.limit);
    const auto ck = model::Checkpoint::load(o.m.model);
    {
        CliProgress check("check");
        model::checkWeightsFinite(ck, check);
    }
    const auto device = model::parseDevice(o.m.device);
    const model::LlamaModel m(ck, model::parseDtype(o.m.dtype), device);
    const auto tok = tokenizer::Tokenizer::loadFromDir(o.m.model);
    CliProgress progress("zero-shot");
    const auto r = eval::evaluateZeroShot(m, *tok, tasks, o.zeroShot, progress);
    std::printf("model       %s (%s)\n", o.m.model.c_str(), describe(ck).c_str());
    std::printf("scoring     0-shot, lm-evaluation-harness templates, %s, %.1f s (%s, %s, %d threads)\n",
                o.zeroShot.addBos ? "BOS added" : "no BOS", r.seconds, o.m.dtype.c_str(), device.str().c_str(),
                threadCount());
    std::printf("%s", eval::zeroShotTable(r).c_str());
    if (!o.json.empty()) {
        nlohmann::json j = {{"model", o.m.model}, {"zeroshot", eval::zeroShotJson(r)}, {"bos", o.zeroShot.addBos},
                            {"limit", o.limit}, {"dtype", o.m.dtype}, {"device", device.str()},
                            {"latmix_version", latmixVersion()}, {"libtorch_version", libtorchVersion()}};
        util::writeFileAtomically(o.json, j.dump(2) + "\n");
    }
    return 0;
}

// --tokens-out FILE: the evaluated windows, a line of token ids each, for an evaluator written
// elsewhere (packaging/hf-reference.py); nothing when no file is named.
void writeEvaluatedWindows(const std::string& file, const std::vector<int>& ids, int windows, int seqLen) {
    if (file.empty()) return;
    std::string lines;
    for (int w = 0; w < windows; ++w)
        for (int t = 0; t < seqLen; ++t)
            lines += std::to_string(ids[static_cast<std::size_t>(w) * seqLen + t]) + (t + 1 < seqLen ? " " : "\n");
    util::writeFileAtomically(file, lines);
}

// --reference: the model against a reference on the same windows, llama.cpp's KL mode (SPEC §7).
// The reference runs first and leaves its normed final states in a temporary folder; the two
// models are never in memory together.
int runEvalAgainstReference(const EvalOptions& o, const std::vector<int>& ids, const std::string& path) {
    const std::string modelDir = run::modelFolderOf(o.m.model), refDir = run::modelFolderOf(o.reference);
    const auto ck = model::Checkpoint::load(modelDir), refCk = model::Checkpoint::load(refDir);
    if (ck.config().vocabSize != refCk.config().vocabSize)
        throw std::invalid_argument("the model (" + modelDir + ", " + std::to_string(ck.config().vocabSize) +
                                    " tokens) and the reference (" + refDir + ", " + std::to_string(refCk.config().vocabSize) +
                                    " tokens) have different vocabularies: KL needs the same tokenizer");
    {
        CliProgress check("check");
        model::checkWeightsFinite(refCk, check);
        model::checkWeightsFinite(ck, check);
    }
    const auto device = model::parseDevice(o.m.device);
    const auto dtype = model::parseDtype(o.m.dtype);
    const fs::path spill = fs::temp_directory_path() / ("latmix-kl-reference-" + std::to_string(::getpid()));
    std::optional<eval::ReferenceStates> ref;
    {
        CliProgress progress("reference");
        ref.emplace(eval::ReferenceStates::record(model::LlamaModel(refCk, dtype, device), ids, {o.seqLen, o.maxWindows},
                                                  spill.string(), progress));
    }
    releaseFreeHostMemory();
    CliProgress progress("compare");
    const auto r = eval::evaluateAgainstReference(model::LlamaModel(ck, dtype, device), ids, *ref, progress);
    const auto& p = r.perplexity;
    std::printf("model       %s (%s)\n", modelDir.c_str(), describe(ck).c_str());
    std::printf("reference   %s (%s)\n", refDir.c_str(), describe(refCk).c_str());
    std::printf("dataset     %s: %zu tokens, seqlen %d, %d windows, %lld tokens compared\n", path.c_str(), ids.size(), p.seqLen,
                p.windows, static_cast<long long>(r.tokens));
    std::printf("perplexity  %.4f (reference %.4f), delta %+.4f +- %.4f\n", p.perplexity, r.referencePerplexity.perplexity,
                r.deltaPpl, r.deltaPplStdErr);
    std::printf("KL          mean %.6f +- %.6f, 99th percentile %.6f, max %.6f (nats per token, KL(reference || model))\n",
                r.meanKl, r.klStdErr, r.klP99, r.klMax);
    std::printf("top-1       %.4f +- %.4f of the tokens have the same most likely next token\n", r.top1, r.top1StdErr);
    if (!o.json.empty()) {
        nlohmann::json j = {{"model", modelDir}, {"reference", refDir}, {"dataset", path}, {"seqlen", p.seqLen},
                            {"windows", p.windows}, {"tokens", r.tokens}, {"perplexity", p.perplexity},
                            {"reference_perplexity", r.referencePerplexity.perplexity},
                            {"kl", {{"mean", r.meanKl}, {"stderr", r.klStdErr}, {"p99", r.klP99}, {"max", r.klMax},
                                    {"top1_agreement", r.top1}, {"top1_stderr", r.top1StdErr}, {"delta_ppl", r.deltaPpl},
                                    {"delta_ppl_stderr", r.deltaPplStdErr}}},
                            {"dtype", o.m.dtype}, {"device", device.str()}, {"threads", threadCount()},
                            {"latmix_version", latmixVersion()}, {"libtorch_version", libtorchVersion()}};
        util::writeFileAtomically(o.json, j.dump(2) + "\n");
    }
    writeEvaluatedWindows(o.tokensOut, ids, p.windows, p.seqLen);
    return 0;
}

int runEval(const EvalOptions& o) {
    if (!o.tasks.empty()) return runZeroShot(o);
    if (!o.reference.empty()) {
        const auto tok = tokenizer::Tokenizer::loadFromDir(run::modelFolderOf(o.m.model));
        const bool wiki = o.dataset == "wikitext2";
        const std::string path = wiki ? util::wikiText2TestFile() : o.dataset;
        const std::string text = wiki ? eval::wikiText2TestText(path) : util::readTextFile(path, "evaluation text");
        return runEvalAgainstReference(o, eval::tokenizeForEvaluation(*tok, text), path);
    }
    const std::string modelDir = run::modelFolderOf(o.m.model); // a run folder: its model/
    const auto ck = model::Checkpoint::load(modelDir);
    const auto device = model::parseDevice(o.m.device);
    const model::LlamaModel m(ck, model::parseDtype(o.m.dtype), device);
    const auto tok = tokenizer::Tokenizer::loadFromDir(modelDir);
    const bool wiki = o.dataset == "wikitext2";
    const std::string path = wiki ? util::wikiText2TestFile() : o.dataset;
    const std::string text = wiki ? eval::wikiText2TestText(path) : util::readTextFile(path, "evaluation text");
    const auto ids = eval::tokenizeForEvaluation(*tok, text);
    {
        CliProgress check("check");
        model::checkWeightsFinite(ck, check);
    }
    CliProgress progress("eval");
    const auto r = eval::evaluatePerplexity(m, ids, {o.seqLen, o.maxWindows}, progress);
    // The weights are finite (checked above): a NaN/Inf here is the forward overflowing.
    if (!std::isfinite(r.perplexity))
        throw std::runtime_error("the perplexity of '" + o.m.model + "' on " + path + " is not finite (mean NLL " +
                                 std::to_string(r.meanNll) + ") although its weights are: the forward overflows in " +
                                 o.m.dtype + "; evaluate with --dtype float32");
    std::printf("model       %s (%s)\n", o.m.model.c_str(), describe(ck).c_str());
    std::printf("dataset     %s: %zu tokens, seqlen %d, %d windows\n", path.c_str(), ids.size(), r.seqLen, r.windows);
    std::printf("perplexity  %.4f\n", r.perplexity);
    std::printf("tokens      %lld evaluated, %.1f tokens/s (%s, %s, %d threads)\n", static_cast<long long>(r.tokens),
                r.tokensPerSecond, o.m.dtype.c_str(), device.str().c_str(), threadCount());
    const double peakMiB = peakResidentMiB(), weightsMiB = ck.weightBytes() / 1048576.0;
    const double gpuMiB = device.is_cuda() ? compat::cudaPeakAllocatedBytes(device.index()) / 1048576.0 : 0.0;
    std::printf("memory      peak resident %.1f MiB, weights %.1f MiB", peakMiB, weightsMiB);
    if (device.is_cuda()) std::printf(", peak GPU %.1f MiB", gpuMiB);
    std::printf("\n");
    if (!o.json.empty()) {
        nlohmann::json j = {{"model", o.m.model}, {"dataset", path}, {"perplexity", r.perplexity},
                            {"mean_nll", r.meanNll}, {"tokens", r.tokens}, {"windows", r.windows},
                            {"seqlen", r.seqLen}, {"seconds", r.seconds}, {"tokens_per_second", r.tokensPerSecond},
                            {"dtype", o.m.dtype}, {"device", device.str()}, {"threads", threadCount()},
                            {"peak_rss_mib", peakMiB}, {"peak_gpu_mib", gpuMiB}, {"weights_mib", weightsMiB},
                            {"latmix_version", latmixVersion()}, {"libtorch_version", libtorchVersion()}};
        util::writeFileAtomically(o.json, j.dump(2) + "\n");
    }
    writeEvaluatedWindows(o.tokensOut, ids, r.windows, r.seqLen);
    return 0;
}

// ---- capture ----
struct CaptureCliOptions {
    ModelOptions m;
    eval::CaptureOptions c;
    std::string out, calib;
};

int runCapture(const CaptureCliOptions& o) {
    const auto ck = model::Checkpoint::load(o.m.model);
    const model::LlamaModel m(ck, model::parseDtype(o.m.dtype), model::parseDevice(o.m.device));
    const auto tok = tokenizer::Tokenizer::loadFromDir(o.m.model);
    // SPEC §5: calibrate on a training-side split, never on the test text perplexity uses.
    const std::string calib = util::calibrationTextFile(o.calib);
    const auto ids = tok->encode(util::readTextFile(calib, "calibration text"), false);
    model::capturePoints(ck.config(), o.c.pointsRegex, false, ""); // refused before any work
    {
        CliProgress check("check");
        model::checkWeightsFinite(ck, check);
    }
    CliProgress progress("capture");
    const auto r = eval::captureActivations(
        m, ids, o.c, o.out,
        {{"model", o.m.model}, {"config", ck.config().toJsonText()}, {"calibration", calib},
         {"dtype", o.m.dtype}, {"latmix_version", latmixVersion()}},
        progress);
    std::printf("wrote %s: %zu points x %lld rows (%d windows of %d tokens) in %.1f s\n", o.out.c_str(),
                r.points.size(), static_cast<long long>(r.rowsPerPoint), o.c.samples, o.c.seqLen, r.seconds);
    return 0;
}

// ---- experts ----
struct ExpertsCliOptions {
    ModelOptions m;
    int samples = 32, seqLen = 512;
    std::uint64_t seed = 0;
    std::string calib, json;
};

int runExperts(const ExpertsCliOptions& o) {
    const auto ck = model::Checkpoint::load(o.m.model);
    analysis::ModelCapture request;
    request.modelDir = o.m.model;
    const std::string calib = util::calibrationTextFile(o.calib); // never the test text (SPEC §5)
    request.calibrationText = util::readTextFile(calib, "calibration text");
    request.samples = o.samples, request.seqLen = o.seqLen, request.seed = o.seed;
    request.dtype = model::parseDtype(o.m.dtype), request.device = o.m.device;
    CliProgress progress("experts");
    const auto load = analysis::measureModelExpertLoad(request, progress);
    const double starvedBelow = run::kStarvedShare * double(load.tokensPerLayer);
    std::printf("model     %s (%s)\n", o.m.model.c_str(), describe(ck).c_str());
    std::printf("windows   %d of %d tokens from %s: %lld tokens through each layer, %d experts each\n", o.samples,
                o.seqLen, calib.c_str(), static_cast<long long>(load.tokensPerLayer), load.expertsPerToken);
    std::printf("%-6s %6s %12s %8s %8s %8s %10s\n", "layer", "idle", "under 0.5%", "min", "median", "max", "busiest");
    nlohmann::json layers = nlohmann::json::array();
    for (std::size_t i = 0; i < load.layers.size(); ++i) {
        std::vector<std::int64_t> t = load.tokens[i];
        const int idle = int(std::count(t.begin(), t.end(), 0));
        const int under = int(std::count_if(t.begin(), t.end(), [&](std::int64_t n) { return double(n) < starvedBelow; }));
        layers.push_back({{"layer", load.layers[i]}, {"tokens", t}});
        std::sort(t.begin(), t.end());
        // busiest: the share of the layer's routed slots (tokens x k) its busiest expert takes
        const double busiest = double(t.back()) / double(load.tokensPerLayer * load.expertsPerToken);
        std::printf("%-6d %6d %12d %8lld %8lld %8lld %9.1f%%\n", load.layers[i], idle, under,
                    static_cast<long long>(t.front()), static_cast<long long>(t[t.size() / 2]),
                    static_cast<long long>(t.back()), 100 * busiest);
    }
    std::printf("GPTQ rounds an expert to nearest when it gets under %.1f%% of a layer's calibration tokens "
                "(docs/spec.md, \"Mixture of experts\")\n",
                100 * run::kStarvedShare);
    if (!o.json.empty())
        util::writeFileAtomically(o.json, nlohmann::json{{"model", o.m.model},
                                                         {"calibration", calib},
                                                         {"windows", o.samples},
                                                         {"seqlen", o.seqLen},
                                                         {"tokens_per_layer", load.tokensPerLayer},
                                                         {"experts_per_token", load.expertsPerToken},
                                                         {"layers", layers}}
                                              .dump(2) + "\n");
    return 0;
}

// ---- import-llama2c ----
int runImport(const std::string& bin, const std::string& tokenizer, const std::string& dir) {
    if (fs::exists(dir)) throw std::runtime_error("output folder '" + dir + "' exists; choose a new folder");
    importing::importLlama2cWeights(bin, dir, tokenizer); // nothing half-written is left looking like a model
    std::printf("imported %s -> %s (%s)\n", bin.c_str(), dir.c_str(), describe(model::Checkpoint::load(dir)).c_str());
    return 0;
}

} // namespace

Runner addEvalCommand(CLI::App& app) {
    auto o = std::make_shared<EvalOptions>();
    auto* cmd = app.add_subcommand("eval", "WikiText-2 (or any text file) perplexity of a model (SPEC §7)");
    addModelOptions(cmd, o->m);
    cmd->add_option("--dataset", o->dataset, "wikitext2 (LATMIX_DATA_DIR/wikitext-2/wiki.test.raw) or a text file")
        ->capture_default_str();
    cmd->add_option("--seqlen", o->seqLen, "window length (capped at the model's maximum)")->capture_default_str();
    cmd->add_option("--max-windows", o->maxWindows, "evaluate at most K windows (0: all)")->capture_default_str();
    cmd->add_option("--json", o->json, "also write the results as JSON to this file");
    cmd->add_option("--reference", o->reference,
                    "compare with this model or run folder on the same windows, as llama.cpp's --kl-divergence: mean "
                    "KL(reference || model) and its 99th percentile, top-1 agreement, perplexity difference with its "
                    "standard error (--model may be a run folder too)");
    cmd->add_option("--tokens-out", o->tokensOut,
                    "also write the evaluated windows' token ids to this file, a window a line (for another evaluator "
                    "of the same tokens, e.g. packaging/hf-reference.py)");
    cmd->add_option("--tasks", o->tasks,
                    "zero-shot tasks instead of perplexity, scored as lm-evaluation-harness does (" +
                        util::joinList(eval::zeroShotTaskNames(), ",") +
                        "; data in LATMIX_DATA_DIR/zeroshot)");
    cmd->add_option("--limit", o->limit, "score the first N documents of each task (0: all)")->capture_default_str();
    cmd->add_flag("--bos", o->zeroShot.addBos, "prepend BOS to contexts (the harness's add_bos_token; off by default)");
    cmd->add_option("--batch-tokens", o->zeroShot.batchTokens, "tokens per zero-shot forward (padded rows of several documents)")
        ->capture_default_str();
    return [o] { return runEval(*o); };
}

Runner addCaptureCommand(CLI::App& app) {
    auto o = std::make_shared<CaptureCliOptions>();
    auto* cmd = app.add_subcommand("capture", "capture activations at quantization points to an HDF5 run file");
    addModelOptions(cmd, o->m);
    cmd->add_option("--points", o->c.pointsRegex, "regex over point names, e.g. 'layers\\.[0-2]\\..*down_proj'")
        ->capture_default_str();
    cmd->add_option("--samples", o->c.samples, "calibration windows")->capture_default_str();
    cmd->add_option("--seqlen", o->c.seqLen, "tokens per window")->capture_default_str();
    cmd->add_option("--seed", o->c.seed, "window sampling seed")->capture_default_str();
    cmd->add_flag("--bf16", o->c.bfloat16, "store activations as bfloat16");
    cmd->add_option("--calib", o->calib, "calibration text (default LATMIX_DATA_DIR/wikitext-2/wiki.valid.tokens)");
    cmd->add_option("--out", o->out, "run file (.h5)")->required();
    return [o] { return runCapture(*o); };
}

Runner addExpertsCommand(CLI::App& app) {
    auto o = std::make_shared<ExpertsCliOptions>();
    auto* cmd = app.add_subcommand("experts", "tokens the router sends to each expert of a mixture-of-experts model, "
                                              "layer by layer, on calibration windows");
    addModelOptions(cmd, o->m);
    cmd->add_option("--samples", o->samples, "calibration windows")->capture_default_str()->check(CLI::PositiveNumber);
    cmd->add_option("--seqlen", o->seqLen, "tokens per window")->capture_default_str()->check(CLI::Range(2, 1 << 20));
    cmd->add_option("--seed", o->seed, "window sampling seed")->capture_default_str();
    cmd->add_option("--calib", o->calib, "calibration text (default LATMIX_DATA_DIR/wikitext-2/wiki.valid.tokens)");
    cmd->add_option("--json", o->json, "also write every expert's count as JSON to this file");
    return [o] { return runExperts(*o); };
}

Runner addDemoModelCommand(CLI::App& app) {
    struct DemoCli {
        std::string dir, config, dtype = "bfloat16", tokenizer;
        std::uint64_t seed = 0;
    };
    auto o = std::make_shared<DemoCli>();
    auto* cmd = app.add_subcommand("demo-model",
                                   "write the built-in demo Llama checkpoint (with outlier channels), or with --config "
                                   "a random checkpoint of any supported config (dry-run a model's memory and time)");
    cmd->add_option("DIR", o->dir, "output folder")->required();
    cmd->add_option("--seed", o->seed, "weight seed")->capture_default_str();
    cmd->add_option("--config", o->config, "a Hugging Face config.json: random weights of that shape")
        ->check(CLI::ExistingFile);
    cmd->add_option("--dtype", o->dtype, "--config: stored dtype, bfloat16 or float32")->capture_default_str();
    cmd->add_option("--tokenizer", o->tokenizer, "--config: folder whose tokenizer files are copied in");
    return [o] {
        if (o->config.empty()) {
            if (!o->tokenizer.empty()) throw std::invalid_argument("--tokenizer needs --config");
            importing::writeDemoModel(o->dir, o->seed);
        } else {
            importing::RandomModelOptions r;
            r.dtype = o->dtype;
            r.tokenizerDir = o->tokenizer;
            r.seed = o->seed;
            CliProgress progress("random model");
            importing::writeRandomModel(model::ModelConfig::fromFile(o->config), o->dir, r, progress);
        }
        std::printf("wrote %s model to %s (%s)\n", o->config.empty() ? "demo" : "random", o->dir.c_str(),
                    describe(model::Checkpoint::load(o->dir)).c_str());
        return 0;
    };
}

Runner addImportLlama2cCommand(CLI::App& app) {
    auto args = std::make_shared<std::array<std::string, 3>>();
    auto* cmd = app.add_subcommand("import-llama2c", "convert a llama2.c checkpoint + tokenizer into a Hugging Face folder");
    cmd->add_option("MODEL", (*args)[0], "llama2.c .bin checkpoint")->required()->check(CLI::ExistingFile);
    cmd->add_option("TOKENIZER", (*args)[1], "llama2.c tokenizer .bin")->required()->check(CLI::ExistingFile);
    cmd->add_option("DIR", (*args)[2], "new output folder")->required();
    return [args] { return runImport((*args)[0], (*args)[1], (*args)[2]); };
}

} // namespace latmix::cli
