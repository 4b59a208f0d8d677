#include "run/quantize/Preflight.h"

#include "run/quantize/OptionTable.h"
#include "run/FormatScheme.h"

#include "model/ConfigJson.h"
#include "model/Device.h"
#include "model/TensorNames.h"
#include "transforms/Hadamard.h"
#include "transforms/LearnedTransforms.h"

#include <filesystem>
#include <regex>
#include <set>
#include <stdexcept>

namespace fs = std::filesystem;

namespace latmix::run {
namespace {

// The options that need nothing of the model.
void checkOptions(const MethodSpec& method, const RunConfig& o) {
    o.format.validate();
    if (o.calibSamples < 1 || o.seqLen < 2) throw std::invalid_argument("need at least one calibration window of 2+ tokens");
    if (method.learned && o.steps < 1) throw std::invalid_argument("--steps must be at least 1");
    if (o.foldedEvalEvery > 0 && !method.learned)
        throw RunRefused("the folded model's check during training (paper Table 2) needs a method that trains, and " +
                             o.method + " trains nothing",
                         {{"folded_eval_every", "0"}, {"method", "latmix-lu"}});
    if (o.foldedEvalEvery > 0 && o.evalSeqLen < 1)
        throw RunRefused("the folded model's check during training (paper Table 2) measures perplexity: it needs the "
                         "evaluation windows",
                         {{"eval_seqlen", "256"}, {"folded_eval_every", "0"}});
    if (!o.devices.empty() && !method.learned)
        throw RunRefused("splitting the training's layers over devices needs a method that trains, and " + o.method +
                             " trains nothing",
                         {{"device", "", "a single", "instead"}, {"offload", "", "", "with it for a model larger than the device"}});
    if (!o.devices.empty() && o.offload)
        throw RunRefused("splitting the layers over devices and keeping them in host memory exclude each other",
                         {{"devices", "", "", "alone"}, {"offload", "", "", "alone"}});
}

// --devices: the layers over the devices, each device named before any work when absent.
void planPlacement(ResolvedRun& r, const RunConfig& o) {
    if (o.devices.empty()) {
        r.device = o.device;
        return;
    }
    r.placement = planLayerPlacement(r.config, r.storedBytes, o.devices, o);
    r.device = r.placement.front().device;
}

// The estimates, and the refusal of a run that does not fit (options.memoryCheck; --force skips):
// for a run (its devices checked before), not for the estimates alone.
void checkMemory(ResolvedRun& r, const RunConfig& o, PreflightFor purpose) {
    r.memory = estimateRunMemory(r.config, r.storedBytes, o, r.method);
    if (o.memoryCheck && purpose == PreflightFor::Run) refuseOverMemory(r.memory, o);
}

// --t1-bias auto (the default): the learned T1 bias where the family's hf and compressed-tensors
// exports load the biases it folds into (model::hfBiasProblem), off where they do not (Qwen3: no
// MLP biases), so that a first run on any family exports; `on` keeps the paper's recipe. Said in
// one line (ResolvedRun::notes), with what llama.cpp's GGUF loads.
void resolveT1Bias(ResolvedRun& r, const RunConfig& o) {
    if (o.t1Bias || !r.method.transformed || !transforms::kindHasBias(r.method.t1Kind)) return;
    const std::string problem = model::hfBiasProblem(r.config, true);
    r.method.t1Bias = problem.empty();
    if (r.method.t1Bias)
        r.notes.emplace_back("learned T1 bias on (auto: " + r.config.architectureName +
                                 " exports to hf, compressed-tensors and GGUF load the q/k/v and gate/up biases it "
                                 "folds into)",
                             std::vector<util::Remedy>{{"t1_bias", "off", "", "for T1 without a bias"}});
    else if (r.config.moe) // no way to the bias: the router and experts cannot take it (preflightShape)
        r.notes.emplace_back("learned T1 bias off (auto: " + problem + ")", std::vector<util::Remedy>{});
    else
        r.notes.emplace_back("learned T1 bias off (auto: " + problem + ")",
                             std::vector<util::Remedy>{{"t1_bias", "on", "",
                                                        "for the paper's exact recipe (its hf and compressed-tensors "
                                                        "exports are then refused)"}});
}

// WUSH's refusals (SPEC §2): no mixture of experts, no T1/T2/T3 ablation on top.
void checkWush(const model::ModelConfig& c, const MethodSpec& m, const RunConfig& o) {
    if (!m.wush) return;
    if (c.moe)
        throw RunRefused("method " + o.method + " computes one WUSH transform per input from the weights that read it, and "
                             "the experts of " + c.architectureName + " read their own rows of the gate/up input: WUSH is not "
                             "supported on mixtures of experts",
                         {{"method", "mr-gptq", "", "(block Hadamard), or gptq"}});
    if (m.transformed)
        throw RunRefused("method " + o.method + " transforms every block linear's input with WUSH and takes no T1, T2 or T3 "
                             "on top (ablation options given)",
                         {{"t1", "", "no", ""}, {"t2", "", "no", ""}, {"t3", "", "no", ""}});
}

// --scheme: each fusion group's format; bf16 groups join the kept linears.
void resolveRunScheme(ResolvedRun& r, const RunConfig& o) {
    const model::ModelConfig& c = r.config;
    // WUSH builds each point's transform for the format's block; a scheme's points may have others.
    if (r.method.wush)
        throw RunRefused("method " + o.method + " does not read a mixed-precision scheme (its transforms are built for one "
                             "format's blocks)",
                         {{"method", "mr-gptq"}, {"method", "gptq"}, {"scheme", "", "no", ""}});
    std::vector<GroupFormat> groups;
    try {
        groups = resolveScheme(c, readSchemeRules(o.scheme), o.format);
    } catch (const std::exception& e) {
        throw RunRefused(e.what(), {{"scheme", "self_attn = mxfp8; layers\\.0\\. = bf16", "e.g.", ""}});
    }
    std::set<std::string> kept(r.keptLinears.begin(), r.keptLinears.end());
    bool anyQuantized = false;
    for (const auto& g : groups) {
        if (g.format && kept.count(g.group.linears.front()) == 0) anyQuantized = true;
        if (!g.format) {
            if (c.isSparseLayer(g.group.layer) && g.group.name.find(".experts") != std::string::npos)
                throw RunRefused("scheme rule " + std::to_string(g.rule + 1) + " keeps " + g.group.name +
                                     " in bf16: a sparse layer's experts are quantized in every run so far",
                                 {{"scheme", "self_attn = bf16", "e.g.", ""}});
            kept.insert(g.group.linears.begin(), g.group.linears.end());
        } else if (g.rule >= 0 && schemeFormatName(g.format) != schemeFormatName(o.format)) {
            r.groupFormats[g.group.name] = *g.format;
        }
    }
    if (!anyQuantized)
        throw RunRefused("the scheme keeps every block linear in bf16: nothing would be quantized", {{"scheme", "", "a narrower", ""}});
    r.keptLinears.clear();
    for (const auto& p : model::names::blockLinearPrefixes(c)) // the model's order
        if (kept.count(p)) r.keptLinears.push_back(p);
    for (auto& g : groups)
        if (kept.count(g.group.linears.front())) g.format.reset();
    r.schemeBits = averageBits(groups);
}

ResolvedRun preflightShape(ResolvedRun r, const RunConfig& o, PreflightFor purpose) {
    const model::ModelConfig& c = r.config;
    resolveT1Bias(r, o);
    checkWush(c, r.method, o);
    if (!o.keep.empty()) r.keptLinears = resolveKeptLinears(c, o.keep);
    if (!o.scheme.empty()) resolveRunScheme(r, o);
    if (c.moe && r.method.transformed && transforms::kindHasBias(r.method.t1Kind) && r.method.t1Bias)
        throw RunRefused("method " + o.method + " with a learned T1 bias folds it into biases of the router and the "
                             "experts, which " + c.architectureName + " does not have (docs/spec.md, \"Mixture of experts\")",
                         {{"t1_bias", "off", "", "(or auto)"}});
    try {
        if (r.method.t3Block > 0) c.downProjWidth(); // one T3 for every down_proj
    } catch (const std::invalid_argument& e) {
        throw RunRefused(std::string(e.what()) + " (method " + o.method + " applies T3)",
                         {{"method", "gptq", "", "or rtn (no T3)"}});
    }
    checkExportable(c, r.method, o);
    checkMethodFits(c, r.method, o);
    if (o.trackedLayer < 0 || o.trackedLayer >= c.numLayers)
        throw RunRefused("tracked layer " + std::to_string(o.trackedLayer) + " is not a layer of " + r.modelDir + " (0.." +
                             std::to_string(c.numLayers - 1) + ")",
                         {{"tracked_layer", "0"}});
    planPlacement(r, o);
    if (purpose == PreflightFor::Run) {
        if (!r.checkpoint) throw std::invalid_argument(r.modelDir + " is a config alone: a run needs the model folder with its weights");
        // Every device named before any work when this machine lacks it.
        for (const auto& p : r.placement) model::parseDevice(p.device);
        model::parseDevice(o.device);
    }
    checkMemory(r, o, purpose);
    return r;
}

ResolvedRun preflightCheckpoint(MethodSpec method, std::shared_ptr<const model::Checkpoint> checkpoint,
                                const RunConfig& o, PreflightFor purpose) {
    ResolvedRun r;
    r.method = std::move(method);
    r.modelDir = checkpoint->dir();
    r.config = checkpoint->config();
    r.storedBytes = storedElementBytes(checkpoint->weightBytes(), checkpoint->parameterCount());
    r.checkpoint = std::move(checkpoint);
    return preflightShape(std::move(r), o, purpose);
}

} // namespace

ResolvedRun preflight(std::shared_ptr<const model::Checkpoint> checkpoint, const RunConfig& o, PreflightFor purpose) {
    MethodSpec method = runMethod(o);
    checkOptions(method, o);
    return preflightCheckpoint(std::move(method), std::move(checkpoint), o, purpose);
}

ResolvedRun preflight(const std::string& modelPath, const RunConfig& o, PreflightFor purpose) {
    MethodSpec method = runMethod(o); // an unknown method is named before the model is read
    checkOptions(method, o);
    if (fs::is_regular_file(modelPath) && fs::path(modelPath).extension() == ".json") {
        ResolvedRun r;
        r.method = std::move(method);
        r.modelDir = modelPath;
        r.config = model::ModelConfig::fromFile(modelPath);
        r.storedBytes = r.config.torchDtype == "float32" ? 4 : 2;
        return preflightShape(std::move(r), o, purpose);
    }
    return preflightCheckpoint(std::move(method), std::make_shared<const model::Checkpoint>(model::Checkpoint::load(modelPath)),
                               o, purpose);
}

std::vector<std::string> resolveKeptLinears(const model::ModelConfig& c, const std::string& pattern) {
    std::regex re;
    try {
        re = std::regex(pattern, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
        throw RunRefused("--keep '" + pattern + "' is not a regular expression (" + e.what() + ")",
                         {{"keep", "layers\\.0\\.|down_proj", "e.g.", ""}});
    }
    const auto all = model::names::blockLinearPrefixes(c);
    std::vector<std::string> kept;
    for (const auto& p : all)
        if (std::regex_search(p, re)) {
            if (p.find(".experts.") != std::string::npos)
                throw RunRefused("--keep '" + pattern + "' matches the expert linear " + p + ": an expert reads its rows of "
                                     "its layer's quantized gate/up input, so experts are quantized or not with their layer's "
                                     "attention; keep attention linears (self_attn) or none of a sparse layer",
                                 {{"keep", "self_attn", "e.g.", ""}});
            kept.push_back(p);
        }
    if (kept.empty())
        throw RunRefused("--keep '" + pattern + "' matches none of the " + std::to_string(all.size()) +
                             " block linears (names like " + all.front() + ")",
                         {{"keep", "layers\\.0\\.|down_proj", "e.g.", ""}});
    if (kept.size() == all.size())
        throw RunRefused("--keep '" + pattern + "' matches every block linear: nothing would be quantized",
                         {{"keep", "", "a narrower", ""}, {"method", "", "", "(or evaluate the model as it is: latmix eval)"}});
    return kept;
}

void checkExportable(const model::ModelConfig& c, const MethodSpec& m, const RunConfig& o) {
    if (!o.exportCheck) return;
    if (!m.transformed) return; // nothing folded: the model keeps the biases it came with
    // SPEC §4: T1 acts on the residual stream, read by q/k/v, gate/up and lm_head, so its bias
    // becomes q/k/v and gate/up biases (never lm_head's: no runtime loads one); T2's (value head
    // space) only reaches v and o_proj, which every family can hold.
    if (c.architecture == model::Architecture::Mixtral && transforms::kindHasBias(m.t2Kind) && o.t2Bias)
        throw RunRefused("method " + o.method + " folds its learned T2 bias into v_proj/o_proj biases, but Hugging "
                             "Face and vLLM Mixtral models have no attention biases: the run could not be exported (hf)",
                         {{"t2_bias", "off"},
                          {"skip_export_check", "", "", "to run anyway (the run model still loads and evaluates here)"}});
    const bool t1 = transforms::kindHasBias(m.t1Kind) && m.t1Bias;
    const std::string problem = model::hfBiasProblem(c, c.mlpBias || t1);
    if (problem.empty()) return;
    throw RunRefused("method " + o.method + " on this " + c.architectureName +
                         " model folds its learned T1 bias into gate_proj/up_proj biases, but " + problem +
                         ": the run could not be exported (hf, compressed-tensors)",
                     {{"t1_bias", "off", "", "(the deployable variant: T1 trained with v1 = 0)"},
                      {"skip_export_check", "", "", "to run anyway (the run model still loads and evaluates here)"}});
}

void checkMethodFits(const model::ModelConfig& c, const MethodSpec& m, const RunConfig& o) {
    const bool fullT1 = m.t1Kind == "hadamard" || (m.learned && m.init == "hadamard");
    const bool fullT2 = m.t2Kind == "hadamard" || (m.learned && m.init == "hadamard");
    const std::pair<bool, std::pair<std::int64_t, const char*>> widths[] = {
        {fullT1, {c.hiddenSize, "hidden_size (T1)"}}, {fullT2, {c.headDim, "head_dim (T2)"}}};
    for (const auto& [needed, w] : widths)
        if (needed && !transforms::hasHadamard(w.first))
            throw RunRefused("method " + o.method + " needs a full Hadamard matrix of " + w.second + " = " +
                                 std::to_string(w.first) + ", and no Hadamard construction here covers " +
                                 std::to_string(w.first),
                             {{"method", "mr-gptq", "", "(block Hadamard of the MX block)"},
                              {"method", "latmix-lu", "", "or latmix-qr (block-Hadamard start)"}});
}

} // namespace latmix::run
