#include "run/QuantizeRun.h"

#include "dist/ProcessGroup.h"
#include "eval/Perplexity.h"
#include "fold/Fold.h"
#include "model/Capture.h"
#include "model/Checkpoint.h"
#include "model/ConfigJson.h"
#include "model/LlamaModel.h"
#include "model/TensorNames.h"
#include "mx/MxKernelCpu.h"
#include "io/SafeTensors.h"
#include "quant/WeightQuantizer.h"
#include "run/MemoryEstimate.h"
#include "run/RunModel.h"
#include "run/UnfinishedRun.h"
#include "tokenizer/Tokenizer.h"
#include "transforms/Hadamard.h"
#include "transforms/LearnedTransforms.h"
#include "train/ModelTransforms.h"
#include "util/AtomicFile.h"
#include "util/FolderLock.h"
#include "util/OutOfMemory.h"
#include "util/Runtime.h"
#include "util/Text.h"
#include "util/TorchCompat.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <sys/resource.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace latmix::run {
namespace names = model::names;
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double peakRssMb() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_maxrss) / 1024.0;
}

} // namespace

const std::vector<MethodSpec>& methods() {
    // SPEC §6. QuaRot and MR-GPTQ also rotate the value/o_proj head space (QuaRot's head-wise
    // Hadamard on W_v / W_o): T2 is the Hadamard of head_dim for them, as T1 is for d_model.
    // SpinQuant-like learns rotations (QR, rotation-only) from a Hadamard start as SpinQuant
    // does, with this workbench's KL objective instead of SpinQuant's Cayley-SGD on CE.
    static const std::vector<MethodSpec> m = {
        {"rtn", "none", "none", "default", false, false, false, "round-to-nearest weights, no transform"},
        {"quarot-rtn", "hadamard", "hadamard", "default", false, false, true, "full Hadamard T1/T2 + T3, RTN"},
        {"gptq", "none", "none", "default", false, true, false, "MX-aware GPTQ, no transform"},
        {"quarot", "hadamard", "hadamard", "default", false, true, true, "full Hadamard T1/T2 + T3, GPTQ"},
        {"mr-gptq", "block-hadamard", "block-hadamard", "default", false, true, true, "block Hadamard (B) T1/T2 + T3, GPTQ"},
        {"spinquant", "learned-rotation", "learned-rotation", "hadamard", true, true, true,
         "learned rotations (Hadamard start) + T3, GPTQ"},
        {"latmix-lu", "learned-affine-lu", "learned-affine-lu", "default", true, true, true,
         "learned affine T1/T2 (LU) + T3, GPTQ"},
        {"latmix-qr", "learned-affine-qr", "learned-affine-qr", "default", true, true, true,
         "learned affine T1/T2 (QR) + T3, GPTQ"},
    };
    return m;
}

int t3BlockOf(const std::string& t3) {
    if (t3 == "none") return 0;
    if (t3 == "block-hadamard") return 32; // SPEC §4
    throw std::invalid_argument("unknown --t3 '" + t3 + "'; use none or block-hadamard");
}

MethodSpec runMethod(const QuantizeOptions& o) {
    MethodSpec m = methodSpec(o.method);
    train::objectiveOf(o.loss); // throws naming the valid losses
    const bool ablation = !o.t1Kind.empty() || !o.t2Kind.empty() || !o.init.empty() || o.t3Block >= 0 || o.initNoise >= 0 ||
                          !o.granularity.empty();
    if (!ablation) return m;
    auto oneOf = [](const std::string& what, const std::string& value, const std::vector<std::string>& valid) {
        if (std::find(valid.begin(), valid.end(), value) != valid.end()) return;
        throw std::invalid_argument("unknown " + what + " '" + value + "'; use one of " + util::joinList(valid));
    };
    std::string changed;
    auto note = [&](const std::string& s) { changed += (changed.empty() ? "" : ", ") + s; };
    if (!o.t1Kind.empty()) {
        oneOf("--t1 transform kind", o.t1Kind, transforms::transformKinds());
        m.t1Kind = o.t1Kind;
        note("T1 " + o.t1Kind);
    }
    if (!o.t2Kind.empty()) {
        oneOf("--t2 transform kind", o.t2Kind, transforms::transformKinds());
        m.t2Kind = o.t2Kind;
        note("T2 " + o.t2Kind);
    }
    if (!o.init.empty()) {
        oneOf("--init initialisation", o.init, transforms::initKinds());
        m.init = o.init;
        note("init " + o.init);
    }
    if (o.t3Block >= 0) {
        m.t3Block = o.t3Block;
        note(o.t3Block == 0 ? std::string("no T3") : "T3 block " + std::to_string(o.t3Block));
    }
    if (o.initNoise >= 0) {
        m.initNoise = o.initNoise;
        note("init noise " + std::to_string(o.initNoise));
    }
    m.learned = transforms::isLearnedKind(m.t1Kind) || transforms::isLearnedKind(m.t2Kind);
    m.transformed = m.t1Kind != "none" || m.t2Kind != "none" || m.t3Block > 0;
    if (!o.granularity.empty()) {
        oneOf("--granularity", o.granularity, {"full", "block"});
        if (o.granularity == "block" && !m.learned)
            throw std::invalid_argument("--granularity block applies to learned T1/T2 and " + o.method +
                                        " learns none here; for fixed transforms pick block-hadamard or block-orthogonal with --t1/--t2");
        // Checked here, before the run folder exists, not when the masked matrix is built.
        if (o.granularity == "block" && (m.init == "hadamard" || m.init == "orthogonal"))
            throw std::invalid_argument("--granularity block keeps T1/T2 block-diagonal and --init " + m.init +
                                        " is a full matrix; use --init block-hadamard, block-orthogonal or identity, or --granularity full");
        m.granularity = o.granularity;
        note("granularity " + o.granularity);
    }
    m.description += " (ablation: " + changed + ")";
    return m;
}

std::string methodNameList() {
    std::string s;
    for (const auto& m : methods()) s += (s.empty() ? "" : ", ") + m.name;
    return s;
}

const MethodSpec& methodSpec(const std::string& name) {
    for (const auto& m : methods())
        if (m.name == name) return m;
    throw std::invalid_argument("unknown method '" + name + "'; use one of " + methodNameList());
}

// Out of memory while quantizing a layer: the layer's activations of all calibration windows are
// on the device at once (GPTQ's Hessians need them); the run folder has no latmix.json yet.
static const char* const kLayerAdvice =
    "rerun with --offload (one layer on the device at a time) or fewer calibration windows (--calib-samples)";

RunTokens tokenizeRunInputs(const std::string& modelDir, const std::string& calibText, const std::string& wikiTestPath,
                            int seqLen) {
    const auto tok = tokenizer::Tokenizer::loadFromDir(modelDir);
    RunTokens t;
    t.calibIds = tok->encode(calibText, false);
    if (t.calibIds.size() < static_cast<std::size_t>(seqLen) + 1)
        throw std::runtime_error("the calibration text has " + std::to_string(t.calibIds.size()) +
                                 " tokens, fewer than one window of " + std::to_string(seqLen) +
                                 "; choose a longer text or a shorter window length");
    if (!wikiTestPath.empty()) t.evalIds = eval::tokenizeForEvaluation(*tok, eval::wikiText2TestText(wikiTestPath));
    return t;
}

namespace {

// The share of the run's progress bar each stage gets (rough shares of the time at 1B on a CPU:
// training dominates the learned methods, folding the fixed-transform ones), so the ETA means
// something from the first stage on.
struct StageShares {
    double train, fold, foldedEval, quantize; // ends; evaluation runs from 0.9 to 1
};
StageShares stageShares(const MethodSpec& m) {
    if (m.learned) return {0.7, 0.75, 0.77, 0.9};
    if (m.transformed) return {0.0, 0.2, 0.25, 0.9};
    return {0.0, 0.0, 0.0, 0.9};
}

// What every stage of a run reads: the options, the method, the model and where things live.
struct RunContext {
    const QuantizeOptions& o;
    const MethodSpec& method;
    const std::string& modelDir;
    const std::string& runDir;
    const model::Checkpoint& ck;
    const model::ModelConfig& c;
    c10::Device device;
    c10::Device home; // where the decoder layers live: the device, or the CPU with offload
    at::TensorOptions fopts;
    int seqLen;
};

// The model after stage 2: the weights to quantize and what the forward pass must do online
// (T3). The layers stay where they are read from (the original as stored, or the folded model
// spilled to RUN_DIR/folded.partial, memory-mapped) and are brought to the device one at a time;
// the embedding, final norm and lm_head are in the compute options. The tensor names are those
// of the run model before quantization (zero biases completing a group included).
struct ModelToQuantize {
    model::ModelConfig config; // bias groups as folding made them
    model::LlamaWeights weights;
    std::set<std::string> names;
    model::ForwardOptions options;
};

eval::PerplexityOptions perplexityOptions(const QuantizeOptions& o) {
    eval::PerplexityOptions p;
    p.seqLen = o.evalSeqLen;
    p.maxWindows = o.evalWindows;
    return p;
}

} // namespace

int weightQuantizationWindows(const MethodSpec& m, const QuantizeOptions& o) {
    return m.gptq ? o.calibSamples : std::min(o.calibSamples, std::max(0, o.rtnErrorWindows));
}

train::TransformSpec transformSpecOf(const MethodSpec& m, const QuantizeOptions& o) {
    train::TransformSpec spec;
    spec.t1Kind = m.t1Kind;
    spec.t2Kind = m.t2Kind;
    spec.init = m.init;
    spec.noiseStd = m.initNoise;
    spec.blockSize = o.format.blockSize;
    spec.blockDiagonal = m.granularity == "block";
    spec.seed = o.seed;
    spec.t3Block = m.t3Block; // SPEC §4: online block Hadamard of 32 on the down_proj input
    spec.t3Seed = o.seed + 7919;
    spec.t1Bias = o.t1Bias;
    spec.t2Bias = o.t2Bias;
    return spec;
}

namespace {

// Stage 1: the method's transforms, trained by distillation for the learned methods (resumable
// from train.h5), saved to transforms.h5. Null for the methods without transforms.
std::unique_ptr<train::ModelTransforms> buildTransforms(const RunContext& x, const model::LlamaWeights& original,
                                                        const at::Tensor& calib, const std::vector<int>& evalIds,
                                                        QuantizeResult& r, JobContext& job,
                                                        const std::function<void(const train::DistillStep&)>& onStep) {
    if (!x.method.transformed) return nullptr;
    const QuantizeOptions& o = x.o;
    auto transforms = std::make_unique<train::ModelTransforms>(x.c, transformSpecOf(x.method, o));
    transforms->to(x.device);
    if (x.method.learned) {
        const auto t0 = Clock::now();
        train::DistillOptions d;
        d.activation = o.format;
        d.steps = o.steps;
        d.batch = o.batch;
        d.lr = o.lr;
        d.temperature = o.temperature;
        d.volumeWeight = o.volumeWeight;
        d.weightDecay = o.weightDecay;
        d.objective = train::objectiveOf(o.loss);
        d.warmupSteps = o.warmupSteps;
        d.metricsEvery = o.metricsEvery;
        d.checkpointEvery = o.checkpointEvery;
        d.seed = o.seed;
        d.runFile = (fs::path(x.runDir) / "train.h5").string();
        // An unfinished run stopped before its first checkpoint has no train.h5: it starts afresh.
        d.resume = o.resume && fs::exists(d.runFile);
        d.group = o.group;
        d.onStep = onStep;
        d.onMatrices = o.onMatrices;
        d.trackedLayer = o.trackedLayer;
        if (o.foldedEvalEvery > 0) {
            d.foldedEvalEvery = o.foldedEvalEvery;
            // The whole model folded in float32 with the current transforms (γ, T3 on W_down, T1,
            // T2), evaluated without quantization on the run's evaluation windows.
            d.foldedEval = [&x, &original, &evalIds](const train::ModelTransforms& t) {
                at::NoGradGuard g;
                return eval::evaluatePerplexity(train::foldedModel(x.c, original, t, x.fopts), evalIds, perplexityOptions(x.o))
                    .perplexity;
            };
        }
        SubJob sub(job, 0.0, stageShares(x.method).train, "training: ");
        // The teacher and student run in float32 on the device, a layer converted at a time from
        // the weights as they are (mapped as stored on the CPU; host memory with --offload).
        r.training = train::distill(x.c, original, calib, *transforms, d, sub);
        r.trainSeconds = since(t0);
    }
    if (!o.group || o.group->isRoot())
        transforms->save((fs::path(x.runDir) / "transforms.h5").string(), {{"method", x.method.name}});
    return transforms;
}

// Stage 2: γ, T3, T1 and T2 folded into the weights, a layer at a time in float64, and written
// (float32) to the spill folder as each layer is folded, so no more than one folded layer is in
// memory: the model never exists twice, in float64 or float32 (a Llama-3.1-8B in float32 is
// 32 GB). The spill is a model folder (config.json + model.safetensors) read back mapped.
// The methods without transforms quantize the original weights as they are.
void writeFoldedSpill(const RunContext& x, const model::LlamaWeights& original, train::ModelTransforms* transforms,
                      const std::string& spillDir, JobContext& job) {
    at::NoGradGuard g;
    if (x.o.offload) transforms->to(x.home); // fold in host memory
    const auto f64 = at::TensorOptions().dtype(at::kDouble).device(x.home);
    const auto cpu32 = at::TensorOptions().dtype(at::kFloat).device(at::kCPU);
    const auto& t3 = transforms->t3();
    // One layer of the original, folded, back in float32 on the CPU, its bias groups completed
    // (the same groups for every layer: the transforms are the model's).
    auto foldOne = [&](int l, model::ModelConfig* config) {
        model::LayerWeights y = model::convertLayer(original.layers[static_cast<size_t>(l)], f64);
        fold::foldLayerNorms(y);
        fold::applyT3ToLayer(y, t3);
        transforms->foldLayer(x.c, y, l);
        model::LlamaWeights one;
        one.layers.push_back(model::convertLayer(y, cpu32));
        const model::ModelConfig c = fold::foldedConfig(x.c, one);
        if (config) *config = c;
        model::releaseMappedLayer(original.layers[static_cast<size_t>(l)]);
        return std::move(one.layers.front());
    };
    // The top level (embedding, final norm, lm_head and the bias T1 may give it) folded in
    // float64 a block of vocabulary rows at a time (every row folds on its own): a Llama-3
    // embedding in float64 is 2 GiB at 1B, 4 GiB at 8B. The tensor the writer asks for is
    // folded, with one row of the other table alongside (the fold needs both).
    const std::int64_t vocab = original.embed.size(0), rowBlock = 8192;
    auto foldTopRows = [&](bool embedRows, std::int64_t a, std::int64_t n) {
        model::LlamaWeights t;
        auto rows = [&](const at::Tensor& w, bool wanted) {
            return w.defined() ? (wanted ? w.narrow(0, a, n) : w.narrow(0, 0, 1)).to(f64) : at::Tensor();
        };
        t.embed = rows(original.embed, embedRows);
        t.lmHead = rows(original.lmHead, !embedRows);
        t.lmHeadBias = rows(original.lmHeadBias, !embedRows);
        t.finalNorm = original.finalNorm.to(f64);
        fold::foldTopLevelNorm(t);
        transforms->foldTopLevel(x.c, t);
        return t;
    };
    std::map<std::string, at::Tensor> lmHeadBias; // folded with lm_head, written after it
    auto foldTop = [&](const std::string& name) -> at::Tensor {
        if (name == model::names::kFinalNorm) return at::ones({x.c.hiddenSize}, cpu32); // γ went into lm_head
        if (name == model::names::kLmHeadBias) return lmHeadBias.at(name);
        const bool embedRows = name == model::names::kEmbed;
        at::Tensor out = at::empty({vocab, x.c.hiddenSize}, cpu32), bias;
        for (std::int64_t a = 0; a < vocab; a += rowBlock) {
            job.checkCancelled();
            const std::int64_t n = std::min(rowBlock, vocab - a);
            const auto t = foldTopRows(embedRows, a, n);
            out.narrow(0, a, n).copy_(embedRows ? t.embed : t.lmHead);
            if (!embedRows && t.lmHeadBias.defined()) {
                if (!bias.defined()) bias = at::empty({vocab}, cpu32);
                bias.narrow(0, a, n).copy_(t.lmHeadBias);
            }
        }
        if (bias.defined()) lmHeadBias[model::names::kLmHeadBias] = bias;
        io::releaseMappedPages(original.embed); // the original table was read through once
        io::releaseMappedPages(original.lmHead);
        return out;
    };
    model::LlamaWeights top = model::convertWeights(foldTopRows(true, 0, 1), cpu32); // shapes and names only
    // The file's entries: layer 0's names and shapes for every layer, then the top level.
    model::ModelConfig fc;
    model::LayerWeights current = foldOne(0, &fc);
    int currentLayer = 0;
    const auto layer0 = model::namedLayerTensors(current, 0);
    const std::string prefix0 = model::names::layerPrefix(0);
    std::vector<io::TensorSpec> specs;
    for (int l = 0; l < x.c.numLayers; ++l)
        for (const auto& [name, t] : layer0)
            specs.push_back({model::names::layerPrefix(l) + name.substr(prefix0.size()), "F32", t.sizes().vec()});
    fc.tieWordEmbeddings = false; // the final norm's γ went into lm_head
    fc.lmHeadBias = top.lmHeadBias.defined();
    for (const auto& [name, t] : model::namedTensors(fc, top)) {
        auto shape = t.sizes().vec();
        if (name != model::names::kFinalNorm) shape[0] = vocab;
        specs.push_back({name, "F32", shape});
    }
    std::map<std::string, at::Tensor> named;
    const StageShares shares = stageShares(x.method);
    SubJob fj(job, shares.train, shares.fold, "folding: ");
    fs::create_directories(spillDir);
    io::writeSafeTensorsStreamed((fs::path(spillDir) / "model.safetensors").string(), specs, [&](std::size_t i) {
        const std::string& name = specs[i].name;
        const int l = model::names::layerOf(name);
        if (l < 0) {
            current = {}; // the layers are written: only the top level is alive from here
            named.clear();
            at::Tensor t = foldTop(name);
            if (name == model::names::kEmbed || name == model::names::kLmHead)
                fj.progress(double(x.c.numLayers + (name == model::names::kEmbed ? 1 : 2)) / (x.c.numLayers + 2),
                            name == model::names::kEmbed ? "embedding" : "lm_head");
            return t;
        }
        if (l != currentLayer || named.empty()) {
            job.checkCancelled();
            if (l != currentLayer) current = foldOne(l, nullptr);
            currentLayer = l;
            named.clear();
            for (auto& [n, t] : model::namedLayerTensors(current, l)) named[n] = t;
            fj.progress(double(l + 1) / (x.c.numLayers + 2), // + the embedding and lm_head
                        "layer " + std::to_string(l + 1) + "/" + std::to_string(x.c.numLayers));
        }
        return named.at(name);
    });
    current = {};
    named.clear();
    lmHeadBias.clear();
    util::writeFileAtomically((fs::path(spillDir) / "config.json").string(), fc.toJsonText());
}

// The folded model read back from a spill folder (mapped float32 layers; the top level in the
// compute options).
ModelToQuantize foldedToQuantize(const RunContext& x, const train::ModelTransforms& transforms, const std::string& spillDir) {
    ModelToQuantize f;
    const auto spill = model::Checkpoint::load(spillDir);
    f.config = spill.config();
    f.weights = model::loadStoredWeights(spill, at::kFloat); // mapped float32
    const auto computeTop = x.fopts; // the top level where the computation runs
    f.weights.embed = f.weights.embed.to(computeTop);
    f.weights.finalNorm = f.weights.finalNorm.to(computeTop);
    f.weights.lmHead = f.weights.lmHead.to(computeTop);
    if (f.weights.lmHeadBias.defined()) f.weights.lmHeadBias = f.weights.lmHeadBias.to(computeTop);
    for (const auto& [name, t] : model::namedTensors(f.config, f.weights)) f.names.insert(name);
    f.options.t3 = transforms.t3().to(x.fopts);
    return f;
}

// The model the weight quantization reads: the original as it is for the methods without
// transforms (foldedConfig only adds zero biases), else the folded spill.
ModelToQuantize originalToQuantize(const RunContext& x, const model::LlamaWeights& original) {
    ModelToQuantize f;
    model::LlamaWeights filled = original; // shallow
    f.config = fold::foldedConfig(x.c, filled);
    for (const auto& [name, t] : model::namedTensors(x.c, original)) f.names.insert(name);
    f.weights = original;
    return f;
}

// One process folds into runSpill (RUN_DIR/folded.partial). Data parallel: every rank runs its
// share of the calibration windows through the folded layers (GPTQ's Hessians are summed over
// the ranks), so every rank reads the folded model. Rank 0 folds into runSpill and leaves a
// random token in it; a rank that finds that token there (the same machine, or a file system
// shared with rank 0) reads rank 0's spill, any other folds its own copy into `ownSpill` on its
// machine. The other ranks wait for rank 0's fold in a broadcast, so the collective timeout
// (--dist-timeout) must cover the fold.
ModelToQuantize foldModel(const RunContext& x, const model::LlamaWeights& original, train::ModelTransforms* transforms,
                      const std::string& runSpill, const std::string& ownSpill, JobContext& job) {
    if (!transforms) return originalToQuantize(x, original);
    if (!x.o.group || x.o.group->size() == 1) {
        writeFoldedSpill(x, original, transforms, runSpill, job);
        return foldedToQuantize(x, *transforms, runSpill);
    }
    dist::Group& group = *x.o.group;
    const std::string tokenFile = (fs::path(runSpill) / "rank0.token").string();
    at::Tensor token = at::zeros({1}, at::kDouble);
    if (group.isRoot()) {
        writeFoldedSpill(x, original, transforms, runSpill, job);
        std::random_device rd; // 52 random bits: exact in the float64 broadcast
        const std::uint64_t t = ((std::uint64_t(rd()) << 32) ^ rd()) & ((std::uint64_t(1) << 52) - 1);
        util::writeFileAtomically(tokenFile, std::to_string(t) + "\n");
        token.fill_(static_cast<double>(t));
    }
    group.broadcast({token});
    if (group.isRoot()) return foldedToQuantize(x, *transforms, runSpill);
    std::error_code ec;
    if (fs::exists(tokenFile, ec)) {
        std::string seen;
        try {
            seen = util::readTextFile(tokenFile, "rank 0's fold token");
        } catch (const std::exception&) {
        }
        const std::string expected = std::to_string(static_cast<std::uint64_t>(token.item<double>()));
        if (seen.substr(0, seen.find('\n')) == expected) return foldedToQuantize(x, *transforms, runSpill);
    }
    writeFoldedSpill(x, original, transforms, ownSpill, job);
    return foldedToQuantize(x, *transforms, ownSpill);
}

// --devices: the weights (mapped as stored) copied in their dtype onto the plan's devices, a
// layer at a time: the embedding on the first, the layers on theirs, final norm and lm_head on
// the last (a tied lm_head is a copy there unless that is the first device too).
model::LlamaWeights placeLayers(const model::LlamaWeights& stored, const std::vector<DeviceShare>& plan) {
    model::LlamaWeights w = stored; // shallow; every tensor is replaced below
    const auto on = [](const std::string& d) { return at::TensorOptions().device(model::parseDevice(d)); }; // dtype kept
    w.embed = stored.embed.to(on(plan.front().device));
    for (const auto& p : plan)
        for (int l = p.firstLayer; l < p.firstLayer + p.layers; ++l) {
            w.layers[static_cast<size_t>(l)] = model::convertLayer(stored.layers[static_cast<size_t>(l)], on(p.device));
            model::releaseMappedLayer(stored.layers[static_cast<size_t>(l)]);
        }
    const auto last = on(plan.back().device);
    w.finalNorm = stored.finalNorm.to(last);
    const bool tiedHere = stored.lmHead.is_same(stored.embed) && w.embed.device() == last.device();
    w.lmHead = tiedHere ? w.embed : stored.lmHead.to(last);
    if (stored.lmHeadBias.defined()) w.lmHeadBias = stored.lmHeadBias.to(last);
    return w;
}

// Paper Table 3's check: the folded full-precision model (T1/T2/T3 in, nothing quantized).
double foldedPerplexity(const RunContext& x, const ModelToQuantize& f, const std::vector<int>& evalIds, JobContext& job) {
    const StageShares shares = stageShares(x.method);
    SubJob e0(job, shares.fold, shares.foldedEval, "perplexity folded FP: ");
    return eval::evaluatePerplexity(model::LlamaModel(f.config, f.weights, f.options), evalIds, perplexityOptions(x.o), e0)
        .perplexity;
}

// Stages 3 and 4: weight quantization, layer by layer, written into RUN_DIR/model as each layer
// is done (run/RunModel.h's streaming writer pulls the layers in order and writes their packed
// codes to quantized.safetensors at the same time). Inputs come from the already quantized layers with
// the activations quantized as the deployed W4A4 model computes them. The Hessian of a linear
// is taken from exactly what it receives there (after T3 and activation quantization). All
// linears of a layer are collected in one pass before any of them is quantized (GPTQ's
// default, not "true-sequential"). Only one layer's activations and weights live at a time.
//
// Data parallel (QuantizeOptions::group of several ranks): each rank runs its share of the
// calibration windows through the layer, the Hessians' sums x x^T and row counts are summed over
// the ranks (an all-reduce: the Hessian of all windows, as one process computes it up to the
// order of float64 additions), and each linear is quantized once, by the rank it is assigned to
// (linearOwners: the layer's GPTQ work balanced over the ranks); its owner broadcasts the packed
// codes and every rank unpacks them (mx::unpack gives the quantized weight bit for bit) to carry
// its windows on to the next layer. Rank 0 writes the run model; the others call quantizeAll().
class LayerQuantizer {
public:
    LayerQuantizer(const RunContext& x, const ModelToQuantize& f, const at::Tensor& calib, QuantizeResult& r, JobContext& job)
        : x(x), f(f), r(r), job(job), qjob(job, stageShares(x.method).foldedEval, stageShares(x.method).quantize, "quantizing: "),
          rope(model::ropeTables(x.c, x.seqLen, at::kFloat, x.device)) {
        options = f.options;
        options.activationQuant = x.o.format;
        group = x.o.group && x.o.group->size() > 1 ? x.o.group.get() : nullptr;
        // GPTQ needs every window's Hessians; RTN none (its error then in weight space) unless
        // --rtn-error-windows asks for the output-space error over the first windows.
        const int64_t n = std::min<int64_t>(calib.size(0), weightQuantizationWindows(x.method, x.o));
        calibrated = n > 0;
        if (!calibrated) return;
        // This rank's windows: a contiguous share of the calibration windows (all of them alone).
        const int64_t world = group ? group->size() : 1, rank = group ? group->rank() : 0;
        const at::Tensor mine = calib.narrow(0, n * rank / world, n * (rank + 1) / world - n * rank / world);
        h = model::embedTokens(x.c, f.weights, mine.to(f.weights.embed.device())).to(x.fopts).detach();
    }

    at::Tensor tensor(const std::string& name) {
        const int l = model::names::layerOf(name);
        if (l < 0) { // the top level, after every layer
            for (const auto& [n, t] : model::namedTensors(f.config, f.weights))
                if (n == name) return t;
            throw std::logic_error("quantize: no tensor " + name);
        }
        if (l < m_layer) throw std::logic_error("quantize: layer " + std::to_string(l) + " asked for again");
        while (m_layer < l) quantizeLayer(m_layer + 1);
        return m_named.at(name);
    }

    mx::PackedTensor packed(const std::string& prefix) { return m_packed.at(prefix); }

    // Every layer, for a rank that writes nothing (data parallel, rank > 0).
    void quantizeAll() {
        while (m_layer + 1 < f.config.numLayers) quantizeLayer(m_layer + 1);
    }

private:
    struct Linear {
        const char* name;
        at::Tensor* w;
        model::PointKind point;
    };

    // The rank that quantizes each linear: longest first to the least loaded rank, by GPTQ's
    // cost out*in^2 + in^3/3 (the column loop and the Cholesky factorisations); RTN the same.
    static std::vector<int> linearOwners(const std::vector<Linear>& linears, int world) {
        std::vector<int> owner(linears.size(), 0);
        if (world <= 1) return owner;
        std::vector<std::pair<double, std::size_t>> cost;
        for (std::size_t i = 0; i < linears.size(); ++i) {
            const double out = static_cast<double>(linears[i].w->size(0)), in = static_cast<double>(linears[i].w->size(1));
            cost.push_back({out * in * in + in * in * in / 3, i});
        }
        std::stable_sort(cost.begin(), cost.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
        std::vector<double> load(static_cast<std::size_t>(world), 0.0);
        for (const auto& [c, i] : cost) {
            const auto least = std::min_element(load.begin(), load.end()) - load.begin();
            owner[i] = static_cast<int>(least);
            load[static_cast<std::size_t>(least)] += c;
        }
        return owner;
    }

    // Data parallel: every rank stops at the same layer when any rank's job was cancelled.
    void agreeOnCancel() {
        if (!group) return job.checkCancelled();
        const at::Tensor stop = at::full({1}, job.cancelRequested() ? 1.0 : 0.0, at::TensorOptions().dtype(at::kDouble));
        group->allreduceSum({stop});
        if (stop.item<double>() > 0) throw JobCancelled();
    }

    void quantizeLayer(int l) {
        agreeOnCancel();
        const QuantizeOptions& o = x.o;
        const model::ModelConfig& c = f.config;
        const int chunk = 8;
        m_named.clear();
        m_packed.clear();
        // The layer on the device (float32) for this step; its mapped pages are released after.
        const model::LayerWeights& stored = f.weights.layers[static_cast<size_t>(l)];
        model::LayerWeights y = model::convertLayer(stored, x.fopts);
        std::map<model::PointKind, std::unique_ptr<quant::HessianAccumulator>> acc;
        const model::PointKind kinds[] = {model::PointKind::QkvInput, model::PointKind::OProjInput,
                                          model::PointKind::GateUpInput, model::PointKind::DownProjInput};
        if (calibrated) {
            for (auto k : kinds) acc[k] = std::make_unique<quant::HessianAccumulator>(model::pointWidth(c, k));
            guardMemory("the calibration forward of layer " + std::to_string(l) + " (GPTQ Hessians)", kLayerAdvice, [&] {
                at::NoGradGuard g;
                for (int64_t b = 0; b < h.size(0); b += chunk) {
                    const auto hb = h.narrow(0, b, std::min<int64_t>(chunk, h.size(0) - b));
                    model::decoderLayer(c, y, options, hb, rope, l, [&](const std::string& point, const at::Tensor& a) {
                        for (auto k : kinds)
                            if (point == model::pointName(l, k)) {
                                try {
                                    acc[k]->add(a); // refuses NaN/Inf, naming the first one
                                } catch (const std::invalid_argument& e) {
                                    // The weights were checked at load: NaN/Inf here comes from the
                                    // activations (an overflow, a broken transform), named by point.
                                    throw std::runtime_error(
                                        "calibration windows " + std::to_string(b) + ".." +
                                        std::to_string(b + hb.size(0) - 1) + " at " + point + ": " + e.what() +
                                        "; the folded model overflows there: try --device cpu (float32), or a method "
                                        "without learned transforms to see whether the transforms cause it");
                                }
                            }
                        return a;
                    });
                }
            });
            if (group)
                for (auto k : kinds) acc[k]->reduce([&](const at::Tensor& t) { group->allreduceSum({t}); });
        }
        const std::vector<Linear> linears = {{names::kQProj, &y.wq, model::PointKind::QkvInput},
                                             {names::kKProj, &y.wk, model::PointKind::QkvInput},
                                             {names::kVProj, &y.wv, model::PointKind::QkvInput},
                                             {names::kOProj, &y.wo, model::PointKind::OProjInput},
                                             {names::kGateProj, &y.wGate, model::PointKind::GateUpInput},
                                             {names::kUpProj, &y.wUp, model::PointKind::GateUpInput},
                                             {names::kDownProj, &y.wDown, model::PointKind::DownProjInput}};
        const int rank = group ? group->rank() : 0;
        const std::vector<int> owner = linearOwners(linears, group ? group->size() : 1);
        std::vector<quant::QuantizedWeight> done(linears.size());
        std::vector<double> seconds(linears.size(), 0.0);
        for (std::size_t li = 0; li < linears.size(); ++li) {
            const Linear& lin = linears[li];
            if (owner[li] != rank) continue;
            // The last linear of this rank reading a point takes its Hessian (no copy): at the
            // intermediate width a float64 Hessian is 0.5 GiB at 1B, 1.5 GiB at 8B.
            bool lastAtPoint = true;
            for (std::size_t lj = li + 1; lj < linears.size(); ++lj)
                if (linears[lj].point == lin.point && owner[lj] == rank) lastAtPoint = false;
            const auto t0 = Clock::now();
            const std::string prefix = names::layerPrefix(l) + lin.name;
            try {
                done[li] = guardMemory(std::string(x.method.gptq ? "GPTQ" : "RTN") + " of " + prefix + ".weight (layer " +
                                           std::to_string(l) + ")",
                                       kLayerAdvice, [&] {
                                           const auto hess = !calibrated ? at::Tensor()
                                                             : lastAtPoint ? acc[lin.point]->take()
                                                                           : acc[lin.point]->hessian();
                                           return x.method.gptq ? quant::quantizeGptq(*lin.w, hess, o.format, o.gptq)
                                                                : quant::quantizeRtn(*lin.w, o.format, hess);
                                       });
            } catch (const OutOfMemory&) {
                throw;
            } catch (const std::exception& e) {
                throw std::runtime_error(prefix + ".weight: " + e.what());
            }
            seconds[li] = since(t0);
        }
        acc.clear();
        for (std::size_t li = 0; li < linears.size(); ++li) {
            const Linear& lin = linears[li];
            const std::string prefix = names::layerPrefix(l) + lin.name;
            if (group) shareLinear(done[li], seconds[li], owner[li], *lin.w);
            *lin.w = done[li].dequantized.to(x.fopts);
            m_packed[prefix] = std::move(done[li].packed);
            r.linears.push_back({l, lin.name, done[li].relativeError, seconds[li]});
            done[li] = {};
        }
        if (calibrated) guardMemory("the quantized forward of layer " + std::to_string(l), kLayerAdvice, [&] {
            at::NoGradGuard g;
            std::vector<at::Tensor> next;
            for (int64_t b = 0; b < h.size(0); b += chunk)
                next.push_back(model::decoderLayer(c, y, options, h.narrow(0, b, std::min<int64_t>(chunk, h.size(0) - b)),
                                                   rope, l));
            if (!next.empty()) h = at::cat(next, 0); // a rank without windows keeps its empty h
        });
        model::releaseMappedLayer(stored);
        for (auto& [n, t] : model::namedLayerTensors(y, l)) m_named[n] = t;
        m_layer = l;
        qjob.progress(double(l + 1) / c.numLayers, "layer " + std::to_string(l + 1) + "/" + std::to_string(c.numLayers));
    }

    // Data parallel: the owner's quantized linear to every rank (its packed codes, from which
    // the others unpack the quantized weight, its error and time).
    void shareLinear(quant::QuantizedWeight& q, double& seconds, int owner, const at::Tensor& w) {
        const bool mine = group->rank() == owner;
        const at::Tensor head = at::zeros({7}, at::TensorOptions().dtype(at::kDouble));
        if (mine) {
            const auto cs = q.packed.codes.sizes(), ss = q.packed.scales.sizes();
            if (cs.size() != 2 || ss.size() != 2) throw std::logic_error("quantize: packed codes of a linear are not 2-D");
            const double v[] = {double(cs[0]), double(cs[1]), double(ss[0]), double(ss[1]), double(q.packed.globalScale),
                                q.relativeError, seconds};
            for (int i = 0; i < 7; ++i) head[i].fill_(v[i]);
        }
        group->broadcast({head}, owner);
        const auto size = [&](int i) { return static_cast<int64_t>(head[i].item<double>()); };
        if (!mine) {
            const auto u8 = at::TensorOptions().dtype(at::kByte);
            q.packed.config = x.o.format;
            q.packed.codes = at::empty({size(0), size(1)}, u8);
            q.packed.scales = at::empty({size(2), size(3)}, u8);
            q.packed.globalScale = static_cast<float>(head[4].item<double>());
            q.packed.lastDim = w.size(1);
            q.relativeError = head[5].item<double>();
            seconds = head[6].item<double>();
        }
        group->broadcast({q.packed.codes, q.packed.scales}, owner);
        if (!mine) q.dequantized = mx::unpack(q.packed);
    }

    const RunContext& x;
    const ModelToQuantize& f;
    QuantizeResult& r;
    JobContext& job;
    SubJob qjob;
    model::RopeTables rope;
    model::ForwardOptions options;
    dist::Group* group = nullptr; // several ranks, else null
    at::Tensor h;
    bool calibrated = false; // windows pass through the layers (GPTQ's Hessians, or RTN's output-space error)
    int m_layer = -1;
    std::map<std::string, at::Tensor> m_named;
    std::map<std::string, mx::PackedTensor> m_packed;
};

// Stages 3 and 4 together: RUN_DIR/model (run/RunModel.h) written while the layers are quantized.
// Returns its path.
std::string quantizeIntoModelFolder(const RunContext& x, const ModelToQuantize& f, const at::Tensor& calib,
                                    const train::ModelTransforms* transforms, QuantizeResult& r, JobContext& job) {
    LayerQuantizer quantizer(x, f, calib, r, job);
    RunModelSource src;
    src.configJson = x.c.toJsonText();
    src.quant.method = x.method.name;
    src.quant.weightFormat = x.o.format;
    src.quant.activationFormat = x.o.format;
    if (transforms) {
        src.quant.t3Block = transforms->spec().t3Block;
        src.quant.t3Seed = transforms->spec().t3Seed;
    }
    src.names = f.names;
    src.tensor = [&](const std::string& name) { return quantizer.tensor(name); };
    src.packed = [&](const std::string& prefix) { return quantizer.packed(prefix); };
    const std::string modelOut = (fs::path(x.runDir) / "model").string();
    writeRunModel(modelOut, src, x.modelDir);
    return modelOut;
}

// Stage 5: perplexity of the FP model, the reloaded quantized model (W4A4) and its weights alone
// (progress 0.9 to `end`), then the zero-shot tasks of the W4A4 model (`end` to 1).
void evaluate(const RunContext& x, const std::string& modelOut, const std::vector<int>& evalIds, QuantizeResult& r,
              JobContext& job) {
    const auto p = perplexityOptions(x.o);
    // After a --devices training the model may not fit the first device: a layer at a time.
    const bool offload = x.o.offload || !x.o.devices.empty();
    const auto qck = model::Checkpoint::load(modelOut);
    const double end = x.o.evalTasks.empty() ? 1.0 : 0.93, step = (end - 0.9) / 3;
    if (x.o.evalSeqLen > 0 && !evalIds.empty()) {
        SubJob e1(job, 0.9, 0.9 + step, "perplexity FP: ");
        r.fpPerplexity = x.o.knownFpPerplexity > 0
                             ? x.o.knownFpPerplexity
                             : eval::evaluatePerplexity(model::LlamaModel(x.ck, at::kFloat, x.device, true, offload),
                                                        evalIds, p, e1)
                                   .perplexity;
        SubJob e2(job, 0.9 + step, 0.9 + 2 * step, "perplexity W4A4: ");
        r.quantizedPerplexity =
            eval::evaluatePerplexity(model::LlamaModel(qck, at::kFloat, x.device, true, offload), evalIds, p, e2).perplexity;
        SubJob e3(job, 0.9 + 2 * step, end, "perplexity weights only: ");
        r.weightOnlyPerplexity =
            eval::evaluatePerplexity(model::LlamaModel(qck, at::kFloat, x.device, false, offload), evalIds, p, e3).perplexity;
    }
    if (!x.o.evalTasks.empty()) {
        SubJob e4(job, end, 1.0, "zero-shot W4A4: ");
        const auto tok = tokenizer::Tokenizer::loadFromDir(modelOut);
        r.zeroShot = eval::evaluateZeroShot(model::LlamaModel(qck, at::kFloat, x.device, true, offload), *tok,
                                            x.o.evalTasks, x.o.zeroShot, e4);
    }
}

// What a linear's relative_error measures: "outputs (N windows)" (tr(dW H dW^T) / tr(W H W^T)
// over the calibration windows) or "weights" (RTN without --rtn-error-windows).
std::string relativeErrorKind(const RunContext& x) {
    const int n = weightQuantizationWindows(x.method, x.o);
    return n > 0 ? "outputs (" + std::to_string(n) + " windows)" : "weights";
}

// Stage 6: latmix.json, enough to reproduce the run.
nlohmann::ordered_json runRecord(const RunContext& x, const QuantizeResult& r, const train::ModelTransforms* transforms) {
    const QuantizeOptions& o = x.o;
    nlohmann::ordered_json j;
    j["latmix_version"] = latmixVersion();
    j["libtorch_version"] = libtorchVersion();
    j["created"] = util::utcTimestamp();
    // What decides float32 summation order, and so whether a rerun gives the same bits
    // (docs/reproducibility.md): the build, the thread count and the CPU paths taken.
    j["runtime"] = {{"build", buildDescription()},
                    {"threads", threadCount()},
                    {"aten_cpu_capability", atenCpuCapability()},
                    {"blas", blasLibrary()},
                    {"blas_core", blasCoreName()},
                    {"mx_kernel", mx::cpu::kernelPathName(mx::cpu::kernelPath())}};
    j["command"] = o.commandLine;
    j["model"] = fs::absolute(x.modelDir).string();
    j["method"] = x.method.name;
    j["method_description"] = x.method.description;
    j["format"] = model::mxConfigJson(o.format);
    j["seed"] = o.seed;
    j["device"] = o.device;
    j["tf32"] = o.tf32 && x.device.is_cuda();
    j["world_size"] = o.group ? o.group->size() : 1; // data-parallel ranks (training and GPTQ)
    if (o.group && o.group->size() > 1) // what rank 0 sent, in MiB
        j["communicated_mib"] = {{"train", r.trainBytes / 1048576.0}, {"quantize", r.quantizeBytes / 1048576.0}};
    j["offload"] = o.offload;
    if (!o.devices.empty()) j["devices"] = o.devices; // the training's layers split over these
    j["calibration"] = {{"source", o.calibSource}, {"samples", o.calibSamples}, {"seqlen", x.seqLen}};
    if (transforms)
        j["transforms"] = {{"t1", x.method.t1Kind}, {"t2", x.method.t2Kind}, {"init", x.method.init},
                           {"init_noise", x.method.initNoise}, {"granularity", x.method.granularity},
                           {"t1_bias", transforms::kindHasBias(x.method.t1Kind) && o.t1Bias},
                           {"t2_bias", transforms::kindHasBias(x.method.t2Kind) && o.t2Bias},
                           {"block", o.format.blockSize}, {"t3_block", transforms->spec().t3Block},
                           {"t3_seed", transforms->spec().t3Seed}, {"file", "transforms.h5"}};
    if (x.method.learned) {
        nlohmann::ordered_json t = {{"steps", o.steps}, {"batch", o.batch}, {"lr", o.lr}, {"temperature", o.temperature},
                                    {"loss", o.loss}, {"volume_weight", o.volumeWeight}, {"weight_decay", o.weightDecay}, {"warmup_steps", o.warmupSteps},
                                    {"resumed_from_step", r.training.startStep}, {"file", "train.h5"}};
        if (!r.training.history.empty()) {
            t["first_kl"] = r.training.history.front().kl;
            t["final_kl"] = r.training.history.back().kl;
        }
        if (o.foldedEvalEvery > 0) { // [step, perplexity] pairs, step 0 = before training
            nlohmann::ordered_json f = nlohmann::ordered_json::array();
            if (std::isfinite(r.training.foldedPerplexityStart)) f.push_back({0, r.training.foldedPerplexityStart});
            for (const auto& s : r.training.history)
                if (std::isfinite(s.foldedPerplexity)) f.push_back({s.step, s.foldedPerplexity});
            t["folded_fp_perplexity"] = f;
        }
        j["training"] = t;
    }
    j["weight_quantization"] = {{"algorithm", x.method.gptq ? "gptq" : "rtn"}, {"damping", o.gptq.damping},
                                {"column_block", o.gptq.columnBlock}, {"act_order", o.gptq.actOrder},
                                {"relative_error", relativeErrorKind(x)}};
    nlohmann::ordered_json layers = nlohmann::ordered_json::array();
    for (const auto& L : r.linears)
        layers.push_back({{"layer", L.layer}, {"linear", L.linear}, {"relative_error", L.relativeError}, {"seconds", L.seconds}});
    j["linears"] = layers;
    if (r.fpPerplexity > 0)
        j["perplexity"] = {{"dataset", "wikitext-2 test"}, {"source", o.evalSource}, {"seqlen", o.evalSeqLen},
                           {"windows", o.evalWindows}, {"fp", r.fpPerplexity}, {"folded_fp", r.foldedPerplexity}, {"w4a4", r.quantizedPerplexity},
                           {"weights_only", r.weightOnlyPerplexity}};
    if (!r.zeroShot.tasks.empty()) {
        auto z = nlohmann::ordered_json::parse(eval::zeroShotJson(r.zeroShot).dump());
        z["model"] = "w4a4";
        z["bos"] = o.zeroShot.addBos;
        j["zeroshot"] = z;
    }
    j["seconds"] = {{"train", r.trainSeconds}, {"quantize", r.quantizeSeconds}, {"eval", r.evalSeconds},
                    {"total", r.totalSeconds}};
    j["peak_rss_mb"] = r.peakRssMb;
    if (x.device.is_cuda()) j["peak_gpu_mb"] = r.peakGpuMb;
    return j;
}

} // namespace

void checkExportable(const model::ModelConfig& c, const QuantizeOptions& o) {
    if (!o.exportCheck) return;
    const MethodSpec m = runMethod(o);
    if (!m.transformed) return; // nothing folded: the model keeps the biases it came with
    // SPEC §4: T1 acts on the residual stream, read by q/k/v, gate/up and lm_head, so its bias
    // becomes gate/up biases; T2's (value head space) only reaches v and o_proj, which every
    // family can hold.
    const bool t1 = transforms::kindHasBias(m.t1Kind) && o.t1Bias;
    const std::string problem = model::hfBiasProblem(c, c.mlpBias || t1);
    if (problem.empty()) return;
    throw std::invalid_argument(
        "method " + o.method + " on this " + c.architectureName + " model folds its learned T1 bias into " +
        "gate_proj/up_proj biases, but " + problem +
        ": the run could not be exported (hf, compressed-tensors). Use --t1-bias off (the deployable variant: T1 " +
        "trained with v1 = 0), or --skip-export-check to run anyway (the run model still loads and evaluates here)");
}

void checkMethodFits(const model::ModelConfig& c, const QuantizeOptions& o) {
    const MethodSpec m = runMethod(o);
    const bool fullT1 = m.t1Kind == "hadamard" || (m.learned && m.init == "hadamard");
    const bool fullT2 = m.t2Kind == "hadamard" || (m.learned && m.init == "hadamard");
    const std::pair<bool, std::pair<std::int64_t, const char*>> widths[] = {
        {fullT1, {c.hiddenSize, "hidden_size (T1)"}}, {fullT2, {c.headDim, "head_dim (T2)"}}};
    for (const auto& [needed, w] : widths)
        if (needed && !transforms::hasHadamard(w.first))
            throw std::invalid_argument("method " + o.method + " needs a full Hadamard matrix of " + w.second + " = " +
                                        std::to_string(w.first) + ", and no Hadamard construction here covers " +
                                        std::to_string(w.first) + "; use mr-gptq (block Hadamard of the MX block) " +
                                        "or latmix-lu / latmix-qr (block-Hadamard start)");
}

std::string runKey(const std::string& modelDir, const QuantizeOptions& o, const std::vector<int>& calibIds,
                   const std::vector<int>& evalIds) {
    auto fnv = [](const std::vector<int>& v) { // FNV-1a over the ids
        std::uint64_t h = 1469598103934665603ULL;
        for (int id : v) {
            h ^= static_cast<std::uint32_t>(id);
            h *= 1099511628211ULL;
        }
        return h;
    };
    std::ostringstream k;
    k << "model config " << util::readTextFile((fs::path(modelDir) / "config.json").string(), "model config") << "\n";
    std::vector<std::pair<std::string, std::uintmax_t>> files;
    for (const auto& e : fs::directory_iterator(modelDir))
        if (e.is_regular_file() && e.path().extension() == ".safetensors") files.emplace_back(e.path().filename().string(), e.file_size());
    std::sort(files.begin(), files.end());
    for (const auto& [name, size] : files) k << "weights " << name << " " << size << " bytes\n";
    const MethodSpec m = runMethod(o);
    k << "method " << o.method << "\ntransforms " << m.t1Kind << " " << m.t2Kind << " init " << m.init << " noise "
      << m.initNoise << " t3 " << m.t3Block << (m.granularity == "full" ? "" : " granularity " + m.granularity) << "\nformat " << o.format.describe() << "\nsteps " << o.steps << "\nbatch per rank "
      << o.batch << "\nlr " << o.lr << "\ntemperature " << o.temperature << "\nvolume weight " << o.volumeWeight << "\nweight decay " << o.weightDecay << "\nloss " << o.loss
      << "\nwarmup " << o.warmupSteps << "\ncalibration " << o.calibSamples << " x " << o.seqLen << "\nseed " << o.seed
      << "\nrtn error windows " << o.rtnErrorWindows << "\nt1 bias " << o.t1Bias << "\nt2 bias " << o.t2Bias << "\nresume " << o.resume << "\ncalibration ids "
      << calibIds.size() << " hash " << fnv(calibIds) << "\nevaluation ids " << evalIds.size() << " hash "
      << fnv(evalIds) << "\n";
    return k.str();
}

QuantizeResult runQuantize(const std::string& modelDir, const std::vector<int>& calibIds, const std::vector<int>& evalIds,
                           const std::string& runDir, const QuantizeOptions& o, JobContext& job,
                           std::function<void(const train::DistillStep&)> onStep) {
    const auto start = Clock::now();
    const MethodSpec method = runMethod(o);
    o.format.validate();
    if (o.calibSamples < 1 || o.seqLen < 2) throw std::invalid_argument("need at least one calibration window of 2+ tokens");
    const auto ck = model::Checkpoint::load(modelDir);
    const model::ModelConfig& c = ck.config();
    checkExportable(c, o);
    checkMethodFits(c, o);
    const int stored = storedElementBytes(ck.weightBytes(), ck.parameterCount()); // bytes per weight element
    if (o.memoryCheck) {
        const c10::Device device = model::parseDevice(o.device);
        std::string problem;
        if (device.is_cpu()) problem = memoryProblem(estimateQuantizeMemory(c, stored, o), availableHostMemory(), o);
        else if (device.is_cuda() && !o.offload && o.devices.empty())
            problem = memoryProblem(estimateDeviceMemory(c, stored, o), cudaTotalMemory(device.index()), o, device.str());
        if (!problem.empty()) throw std::invalid_argument(problem);
    }
    if (o.foldedEvalEvery > 0 && (!method.learned || o.evalSeqLen < 1))
        throw std::invalid_argument("--folded-eval-every tracks the folded model during training: it needs a method that "
                                    "trains (" + o.method + (method.learned ? "" : " trains nothing") +
                                    ") and the evaluation windows of --eval-seqlen");
    if (o.trackedLayer < 0 || o.trackedLayer >= c.numLayers)
        throw std::invalid_argument("tracked layer " + std::to_string(o.trackedLayer) + " is not a layer of " + modelDir +
                                    " (0.." + std::to_string(c.numLayers - 1) + ")");
    const bool root = !o.group || o.group->isRoot();
    const bool parallel = o.group && o.group->size() > 1; // data parallel over several ranks
    std::vector<DeviceShare> plan; // --devices: the training's layers over several devices
    if (!o.devices.empty()) {
        if (!method.learned)
            throw std::invalid_argument("--devices splits the training's layers over devices, and method " + o.method +
                                        " trains nothing; use --device (and --offload for a model larger than it)");
        if (o.offload) throw std::invalid_argument("--devices and --offload: use one or the other");
        plan = planLayerPlacement(c, stored, o.devices, o);
        for (const auto& p : plan) model::parseDevice(p.device); // an absent device is named before any work
    }
    const c10::Device device = model::parseDevice(plan.empty() ? o.device : plan.front().device);
    {
        // Before anything is written: a NaN weight would otherwise end as "perplexity nan" or a
        // distillation that looks diverged.
        SubJob check(job, 0.0, 0.0, "");
        model::checkWeightsFinite(ck, check);
    }
    // With offload the layers live on the CPU (memory-mapped float32) and visit the device one
    // at a time; the embeddings, final norm and lm_head stay on the device.
    const RunContext x{o, method, modelDir, runDir, ck, c, device, o.offload ? c10::Device(c10::kCPU) : device,
                       at::TensorOptions().dtype(at::kFloat).device(device), std::min(o.seqLen, c.maxPositions)};
    // One process writes a run folder at a time (the root rank of a data-parallel run): a second
    // `latmix quantize --out` of the same folder stops here, naming the first.
    std::unique_ptr<util::FolderLock> lock;
    if (root) lock = std::make_unique<util::FolderLock>(runDir, "run folder", o.commandLine);
    const bool folderExisted = fs::exists(runDir);
    if (root) fs::create_directories(runDir);
    QuantizeResult r;
    if (lock && !lock->staleNote().empty()) r.notes.push_back(lock->staleNote());
    // Kill safety (issue 17.4): from here until latmix.json the folder carries the unfinished-run
    // marker (run/UnfinishedRun.h), rewritten at each stage, so that a run stopped at any moment
    // reads as unfinished (and resumable) in the workbench, the runs catalog and --resume.
    UnfinishedRun marker{o.commandLine, o.method, modelDir, util::hostName(), util::utcTimestamp(),
                         static_cast<long long>(::getpid()), ""};
    if (root) {
        try {
            claimRunFolder(runDir, marker, o.resume);
        } catch (...) {
            std::error_code ec;
            if (!folderExisted) fs::remove(runDir, ec); // a refused run leaves nothing
            throw;
        }
    }
    const auto stage = [&](const std::string& what) {
        if (!root) return;
        marker.stage = what;
        writeUnfinishedMarker(runDir, marker);
    };
    stage(method.learned ? "training (" + std::to_string(o.steps) + " steps)" : "starting");
    if (device.is_cuda()) compat::resetCudaPeakMemory(device.index());
    compat::allowTf32Matmuls(o.tf32 && device.is_cuda()); // process-wide; every run sets it

    const auto windows = model::sampleCalibrationWindows(calibIds, o.calibSamples, x.seqLen, o.seed);
    std::vector<int64_t> flat;
    for (const auto& w : windows) flat.insert(flat.end(), w.begin(), w.end());
    const at::Tensor calib = at::tensor(flat, at::kLong).reshape({o.calibSamples, x.seqLen});
    // The frozen weights stay in the checkpoint's dtype (bf16 for most Hugging Face models):
    // mapped on the CPU, copied as they are onto a GPU (half the memory of float32) or onto the
    // devices of --devices; every stage converts the layer it works on to float32 (the teacher,
    // the student's folded layer, GPTQ's layer) and the lm_head a vocabulary chunk at a time.
    // Norms and biases are float32 from the start. Float64 is kept where precision decides the
    // result: the folding of the transforms into the weights, the GPTQ Hessians and their
    // factorisations, and the data-parallel gradient sums. With --offload the layers wait in
    // host memory in float32.
    model::LlamaWeights original =
        !plan.empty()     ? placeLayers(model::loadStoredWeights(ck, at::kFloat), plan)
        : o.offload       ? model::offloadLayers(model::loadWeights(ck, at::kFloat, x.home), x.fopts)
                          : model::loadStoredWeights(ck, at::kFloat, device);
    const bool perplexities = o.evalSeqLen > 0 && !evalIds.empty();
    const bool evaluating = perplexities || !o.evalTasks.empty(); // perplexities and/or zero-shot tasks

    // The stages: 1 transforms (trained for the learned methods), 2 folding, 3 weight quantization
    // layer by layer, 4 the run's model folder, 5 evaluation, 6 latmix.json.
    auto transforms = buildTransforms(x, original, calib, evalIds, r, job, onStep);
    const auto sentSoFar = [&] { return o.group ? o.group->bytesCommunicated() : std::uint64_t(0); };
    r.trainBytes = sentSoFar();
    // The folded model's spill folder: removed when the run ends, however it ends. A data-parallel
    // rank that cannot see rank 0's spill folds its own copy into a temporary folder.
    const std::string spillDir = (fs::path(runDir) / "folded.partial").string();
    const std::string ownSpill =
        (fs::temp_directory_path() / ("latmix-folded-" + std::to_string(::getpid()) + "-rank" +
                                      std::to_string(o.group ? o.group->rank() : 0)))
            .string();
    struct Cleanup {
        std::string dir;
        ~Cleanup() { util::removeTreeQuietly(dir); }
    } cleanup{root ? spillDir : ownSpill}; // never rank 0's spill from another rank
    std::string modelOut;
    stage("folding and quantizing");
    {
        const ModelToQuantize folded = foldModel(x, original, transforms.get(), spillDir, ownSpill, job);
        if (transforms) original = {}; // on a GPU: the float32 teacher weights leave the device
        // Paper Table 3's check, rank 0's. Data parallel: after the weight quantization, which
        // needs every rank (the others would wait for it in a collective).
        auto foldedCheck = [&] {
            if (!root || !perplexities || !transforms) return;
            const auto te = Clock::now();
            r.foldedPerplexity = foldedPerplexity(x, folded, evalIds, job);
            r.evalSeconds += since(te);
        };
        if (!parallel) foldedCheck();
        const auto tq = Clock::now();
        if (root)
            modelOut = quantizeIntoModelFolder(x, folded, calib, transforms.get(), r, job);
        else // data parallel: this rank's windows through every layer; rank 0 writes the model
            LayerQuantizer(x, folded, calib, r, job).quantizeAll();
        r.quantizeSeconds = since(tq);
        r.quantizeBytes = sentSoFar() - r.trainBytes;
        if (parallel) foldedCheck();
    }
    original = {}; // the evaluation loads its own models: the frozen weights leave the device
    if (!root) { // the run folder, its evaluation and latmix.json are rank 0's
        r.totalSeconds = since(start);
        r.peakRssMb = peakRssMb();
        return r;
    }
    util::removeTreeQuietly(spillDir);
    if (evaluating) {
        stage("evaluating");
        const auto te = Clock::now();
        evaluate(x, modelOut, evalIds, r, job);
        r.evalSeconds += since(te);
    }
    r.totalSeconds = since(start);
    r.peakRssMb = peakRssMb();
    if (device.is_cuda()) r.peakGpuMb = compat::cudaPeakAllocatedBytes(device.index()) / 1048576.0;
    util::writeFileAtomically((fs::path(runDir) / "latmix.json").string(), runRecord(x, r, transforms.get()).dump(2) + "\n");
    removeUnfinishedMarker(runDir); // latmix.json first: killed in between, the run is finished
    return r;
}

} // namespace latmix::run
