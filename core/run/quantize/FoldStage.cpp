// The fold stage of a quantize run (run/quantize/Stages.h): γ, T3, T1 and T2 folded into the
// weights, a layer at a time in float64 (fold::foldedLayer), and written (float32) to the spill
// folder as each layer is folded, so no more than one folded layer is in memory: the model never
// exists twice, in float64 or float32 (a Llama-3.1-8B in float32 is 32 GB). The spill is a model
// folder (config.json + model.safetensors) read back mapped. The methods without transforms
// quantize the original weights as they are.
#include "dist/ProcessGroup.h"
#include "io/SafeTensors.h"
#include "model/Checkpoint.h"
#include "model/TensorNames.h"
#include "run/quantize/Stages.h"
#include "util/AtomicFile.h"
#include "util/Runtime.h"
#include "util/Text.h"

#include <ATen/core/grad_mode.h>

#include <filesystem>
#include <map>
#include <random>
#include <unistd.h>

namespace fs = std::filesystem;

namespace latmix::run {
namespace names = model::names;
namespace {

// The top level (embedding, final norm, lm_head and the bias T1 may give it) folded in float64 a
// block of vocabulary rows at a time (every row folds on its own): a Llama-3 embedding in float64
// is 2 GiB at 1B, 4 GiB at 8B. The tensor the writer asks for is folded, with one row of the other
// table alongside (the fold needs both).
class TopLevelFold {
public:
    TopLevelFold(const RunContext& ctx, const model::LlamaWeights& original, const fold::ModelTransforms& transforms,
                 JobContext& job)
        : ctx(ctx), original(original), transforms(transforms), job(job), vocab(original.embed.size(0)) {}

    // Rows [a, a + n) of the embedding (embedRows) or of lm_head, folded; the other table one row.
    model::LlamaWeights rows(bool embedRows, std::int64_t a, std::int64_t n) const {
        model::LlamaWeights t;
        auto take = [&](const at::Tensor& w, bool wanted) {
            return w.defined() ? (wanted ? w.narrow(0, a, n) : w.narrow(0, 0, 1)).to(f64) : at::Tensor();
        };
        t.embed = take(original.embed, embedRows);
        t.lmHead = take(original.lmHead, !embedRows);
        t.lmHeadBias = take(original.lmHeadBias, !embedRows);
        t.finalNorm = original.finalNorm.to(f64);
        fold::foldTopLevelNorm(t);
        transforms.foldTopLevel(ctx.config(), t);
        return t;
    }

    // The folded tensor `name` of the top level, float32 on the CPU.
    at::Tensor tensor(const std::string& name) {
        if (name == names::kFinalNorm) return at::ones({ctx.config().hiddenSize}, cpu32); // γ went into lm_head
        if (name == names::kLmHeadBias) return std::move(lmHeadBias); // folded with lm_head, written after it
        const bool embedRows = name == names::kEmbed;
        at::Tensor out = at::empty({vocab, ctx.config().hiddenSize}, cpu32);
        for (std::int64_t a = 0; a < vocab; a += kRowBlock) {
            job.checkCancelled();
            const std::int64_t n = std::min(kRowBlock, vocab - a);
            const auto t = rows(embedRows, a, n);
            out.narrow(0, a, n).copy_(embedRows ? t.embed : t.lmHead);
            if (!embedRows && t.lmHeadBias.defined()) {
                if (!lmHeadBias.defined()) lmHeadBias = at::empty({vocab}, cpu32);
                lmHeadBias.narrow(0, a, n).copy_(t.lmHeadBias);
            }
        }
        io::releaseMappedPages(original.embed); // the original table was read through once
        io::releaseMappedPages(original.lmHead);
        return out;
    }

    std::int64_t vocabSize() const { return vocab; }

private:
    static constexpr std::int64_t kRowBlock = 8192;
    const RunContext& ctx;
    const model::LlamaWeights& original;
    const fold::ModelTransforms& transforms;
    JobContext& job;
    const std::int64_t vocab;
    const at::TensorOptions f64 = at::TensorOptions().dtype(at::kDouble).device(ctx.home);
    const at::TensorOptions cpu32 = at::TensorOptions().dtype(at::kFloat).device(at::kCPU);
    at::Tensor lmHeadBias;
};

// The spill file's entries: every layer's tensors as the folded config calls for them (a model with
// dense and sparse layers has different ones per layer), then the top level.
std::vector<io::TensorSpec> spillSpecs(const model::ModelConfig& foldedConfig, const model::LlamaWeights& top,
                                       std::int64_t vocab) {
    std::vector<io::TensorSpec> specs;
    for (const auto& [name, shape] : model::requiredTensors(foldedConfig))
        if (names::layerOf(name) >= 0) specs.push_back({name, "F32", shape});
    for (const auto& [name, t] : model::namedTensors(foldedConfig, top)) {
        auto shape = t.sizes().vec();
        if (name != names::kFinalNorm) shape[0] = vocab;
        specs.push_back({name, "F32", shape});
    }
    return specs;
}

void writeFoldedSpill(const RunContext& ctx, const model::LlamaWeights& original, fold::ModelTransforms& transforms,
                      const std::string& spillDir, JobContext& job) {
    at::NoGradGuard g;
    if (ctx.options.offload) transforms.to(ctx.home); // fold in host memory
    const model::ModelConfig& c = ctx.config();
    const auto f64 = at::TensorOptions().dtype(at::kDouble).device(ctx.home);
    const auto cpu32 = at::TensorOptions().dtype(at::kFloat).device(at::kCPU);
    // One layer of the original, folded, back in float32 on the CPU, its bias groups completed
    // with zeros (foldedConfig), its mapped pages released.
    auto foldOne = [&](int l, model::ModelConfig& config) {
        model::LlamaWeights one;
        one.layers.push_back(fold::foldedLayer(c, original.layers[size_t(l)], transforms, l, f64, cpu32));
        config = fold::foldedConfig(c, one);
        model::releaseMappedLayer(original.layers[static_cast<size_t>(l)]);
        return std::move(one.layers.front());
    };
    TopLevelFold top(ctx, original, transforms, job);
    // The bias groups folding makes are the same for every layer (the transforms are the model's).
    model::ModelConfig fc, unused;
    model::LayerWeights current = foldOne(0, fc);
    fc.tieWordEmbeddings = false; // the final norm's γ went into lm_head
    const model::LlamaWeights topShapes = model::convertWeights(top.rows(true, 0, 1), cpu32); // shapes and names only
    fc.lmHeadBias = topShapes.lmHeadBias.defined();
    const std::vector<io::TensorSpec> specs = spillSpecs(fc, topShapes, top.vocabSize());
    int currentLayer = 0;
    std::map<std::string, at::Tensor> named;
    const double steps = c.numLayers + 2; // + the embedding and lm_head
    fs::create_directories(spillDir);
    io::writeSafeTensorsStreamed((fs::path(spillDir) / "model.safetensors").string(), specs, [&](std::size_t i) {
        const std::string& name = specs[i].name;
        const int l = names::layerOf(name);
        if (l < 0) {
            if (!named.empty()) { // the layers are written: only the top level is alive from here,
                current = {};     // and the last layer's pages leave the heaps before the tables
                named.clear();    // are folded beside them (2.4 GiB at a Qwen3-MoE shape)
                releaseFreeHostMemory();
            }
            if (name == names::kEmbed) job.progress((c.numLayers + 1) / steps, "embedding");
            if (name == names::kLmHead) job.progress((c.numLayers + 2) / steps, "lm_head");
            return top.tensor(name);
        }
        if (l != currentLayer || named.empty()) {
            job.checkCancelled();
            if (l != currentLayer) {
                // The last layer is written: it goes, and the heaps' pages of its many small tensors
                // (a mixture of experts) with it, before the next is folded beside its float64 copy.
                named.clear();
                current = {};
                releaseFreeHostMemory();
                current = foldOne(l, unused);
            }
            currentLayer = l;
            named.clear();
            for (auto& [n, t] : model::namedLayerTensors(c, current, l)) named[n] = t;
            job.progress((l + 1) / steps, "layer " + std::to_string(l + 1) + "/" + std::to_string(c.numLayers));
        }
        return named.at(name);
    });
    util::writeFileAtomically((fs::path(spillDir) / "config.json").string(), fc.toJsonText());
}

// The folded model read back from a spill folder (mapped float32 layers; the top level in the
// compute options).
ModelToQuantize readFoldedSpill(const RunContext& ctx, const fold::ModelTransforms& transforms, const std::string& spillDir) {
    ModelToQuantize m;
    const auto spill = model::Checkpoint::load(spillDir);
    m.config = spill.config();
    m.weights = model::loadStoredWeights(spill, at::kFloat); // mapped float32
    m.weights.embed = m.weights.embed.to(ctx.fopts);
    m.weights.finalNorm = m.weights.finalNorm.to(ctx.fopts);
    m.weights.lmHead = m.weights.lmHead.to(ctx.fopts);
    if (m.weights.lmHeadBias.defined()) m.weights.lmHeadBias = m.weights.lmHeadBias.to(ctx.fopts);
    for (const auto& [name, t] : model::namedTensors(m.config, m.weights)) m.names.insert(name);
    m.options.t3 = transforms.t3().to(ctx.fopts);
    return m;
}

// The methods without transforms: the original as it is (foldedConfig only adds zero biases).
ModelToQuantize originalToQuantize(const RunContext& ctx, const model::LlamaWeights& original) {
    ModelToQuantize m;
    model::LlamaWeights filled = original; // shallow
    m.config = fold::foldedConfig(ctx.config(), filled);
    for (const auto& [name, t] : model::namedTensors(ctx.config(), original)) m.names.insert(name);
    m.weights = original;
    return m;
}

} // namespace

// One process folds into runSpill (RUN_DIR/folded.partial). Data parallel: every rank runs its
// share of the calibration windows through the folded layers (GPTQ's Hessians are summed over
// the ranks), so every rank reads the folded model. Rank 0 folds into runSpill and leaves a
// random token in it; a rank that finds that token there (the same machine, or a file system
// shared with rank 0) reads rank 0's spill, any other folds its own copy into `ownSpill` on its
// machine. The other ranks wait for rank 0's fold in a broadcast, so the collective timeout
// (--dist-timeout) must cover the fold.
ModelToQuantize foldModel(const RunContext& ctx, const model::LlamaWeights& original, fold::ModelTransforms* transforms,
                          const std::string& runSpill, const std::string& ownSpill, JobContext& job) {
    if (!transforms) return originalToQuantize(ctx, original);
    if (!ctx.parallel()) {
        writeFoldedSpill(ctx, original, *transforms, runSpill, job);
        return readFoldedSpill(ctx, *transforms, runSpill);
    }
    dist::Group& group = *ctx.hooks.group;
    const std::string tokenFile = (fs::path(runSpill) / "rank0.token").string();
    at::Tensor token = at::zeros({1}, at::kDouble);
    if (group.isRoot()) {
        writeFoldedSpill(ctx, original, *transforms, runSpill, job);
        std::random_device rd; // 52 random bits: exact in the float64 broadcast
        const std::uint64_t t = ((std::uint64_t(rd()) << 32) ^ rd()) & ((std::uint64_t(1) << 52) - 1);
        util::writeFileAtomically(tokenFile, std::to_string(t) + "\n");
        token.fill_(static_cast<double>(t));
    }
    group.broadcast({token});
    if (group.isRoot()) return readFoldedSpill(ctx, *transforms, runSpill);
    std::error_code ec;
    if (fs::exists(tokenFile, ec)) {
        std::string seen;
        try {
            seen = util::readTextFile(tokenFile, "rank 0's fold token");
        } catch (const std::exception&) {
        }
        const std::string expected = std::to_string(static_cast<std::uint64_t>(token.item<double>()));
        if (seen.substr(0, seen.find('\n')) == expected) return readFoldedSpill(ctx, *transforms, runSpill);
    }
    writeFoldedSpill(ctx, original, *transforms, ownSpill, job);
    return readFoldedSpill(ctx, *transforms, ownSpill);
}

} // namespace latmix::run
