#include "model/LlamaWeights.h"

#include "io/SafeTensors.h"
#include "model/Checkpoint.h"
#include "model/TensorNames.h"

#include <ATen/ATen.h>

#include <functional>
#include <stdexcept>

namespace latmix::model {

namespace {
// Every tensor of the checkpoint, each passed through cv.
LlamaWeights loadWith(const Checkpoint& ckpt, const std::function<at::Tensor(const at::Tensor&)>& cv) {
    const ModelConfig& c = ckpt.config();
    auto load = [&](const std::string& name) { return cv(ckpt.weight(name)); };
    auto loadIf = [&](bool present, const std::string& name) { return present ? load(name) : at::Tensor(); };
    LlamaWeights w;
    w.embed = load(names::kEmbed);
    w.finalNorm = load(names::kFinalNorm);
    w.lmHead = c.tieWordEmbeddings && !ckpt.has(names::kLmHead) ? w.embed : load(names::kLmHead);
    w.lmHeadBias = loadIf(c.lmHeadBias, names::kLmHeadBias);
    for (int l = 0; l < c.numLayers; ++l) {
        const std::string p = names::layerPrefix(l);
        LayerWeights y;
        y.inputNorm = load(p + names::kInputNorm + ".weight");
        y.postNorm = load(p + names::kPostAttentionNorm + ".weight");
        y.qNorm = loadIf(c.qkNorm, p + names::kQNorm + ".weight");
        y.kNorm = loadIf(c.qkNorm, p + names::kKNorm + ".weight");
        y.wq = load(p + names::kQProj + ".weight");
        y.wk = load(p + names::kKProj + ".weight");
        y.wv = load(p + names::kVProj + ".weight");
        y.wo = load(p + names::kOProj + ".weight");
        y.bq = loadIf(c.qkvBias, p + names::kQProj + ".bias");
        y.bk = loadIf(c.qkvBias, p + names::kKProj + ".bias");
        y.bv = loadIf(c.qkvBias, p + names::kVProj + ".bias");
        y.bo = loadIf(c.oProjBias, p + names::kOProj + ".bias");
        if (c.isSparseLayer(l)) {
            y.router = load(p + names::routerModule(c) + ".weight");
            for (int e = 0; e < c.moe->numExperts; ++e)
                y.experts.push_back({load(p + names::expertModule(c, e, names::ExpertLinear::Gate) + ".weight"),
                                     load(p + names::expertModule(c, e, names::ExpertLinear::Up) + ".weight"),
                                     load(p + names::expertModule(c, e, names::ExpertLinear::Down) + ".weight")});
            w.layers.push_back(std::move(y));
            continue;
        }
        y.wGate = load(p + names::kGateProj + ".weight");
        y.wUp = load(p + names::kUpProj + ".weight");
        y.wDown = load(p + names::kDownProj + ".weight");
        y.bGate = loadIf(c.mlpBias, p + names::kGateProj + ".bias");
        y.bUp = loadIf(c.mlpBias, p + names::kUpProj + ".bias");
        y.bDown = loadIf(c.mlpBias, p + names::kDownProj + ".bias");
        w.layers.push_back(std::move(y));
    }
    return w;
}
} // namespace

LlamaWeights loadWeights(const Checkpoint& ckpt, at::ScalarType dtype, c10::Device device) {
    const auto opts = at::TensorOptions().dtype(dtype).device(device);
    return loadWith(ckpt, [&](const at::Tensor& t) { return t.to(opts); });
}

LlamaWeights loadStoredWeights(const Checkpoint& ckpt, at::ScalarType dtype, c10::Device device) {
    const auto vectors = at::TensorOptions().dtype(dtype).device(device);
    return loadWith(ckpt, [&](const at::Tensor& t) { return t.dim() >= 2 ? t.to(device) : t.to(vectors); });
}

std::vector<std::pair<std::string, at::Tensor>> namedLayerTensors(const ModelConfig& c, const LayerWeights& y, int layer) {
    std::vector<std::pair<std::string, at::Tensor>> r;
    const std::string p = names::layerPrefix(layer);
    auto add = [&](const char* module, const char* kind, const at::Tensor& t) {
        if (t.defined()) r.emplace_back(p + module + kind, t);
    };
    add(names::kInputNorm, ".weight", y.inputNorm);
    add(names::kPostAttentionNorm, ".weight", y.postNorm);
    add(names::kQNorm, ".weight", y.qNorm);
    add(names::kKNorm, ".weight", y.kNorm);
    add(names::kQProj, ".weight", y.wq);
    add(names::kKProj, ".weight", y.wk);
    add(names::kVProj, ".weight", y.wv);
    add(names::kOProj, ".weight", y.wo);
    add(names::kQProj, ".bias", y.bq);
    add(names::kKProj, ".bias", y.bk);
    add(names::kVProj, ".bias", y.bv);
    add(names::kOProj, ".bias", y.bo);
    add(names::kGateProj, ".weight", y.wGate);
    add(names::kUpProj, ".weight", y.wUp);
    add(names::kDownProj, ".weight", y.wDown);
    add(names::kGateProj, ".bias", y.bGate);
    add(names::kUpProj, ".bias", y.bUp);
    add(names::kDownProj, ".bias", y.bDown);
    if (y.router.defined()) add(names::routerModule(c).c_str(), ".weight", y.router);
    for (size_t e = 0; e < y.experts.size(); ++e) {
        const ExpertWeights& x = y.experts[e];
        const int i = static_cast<int>(e);
        add(names::expertModule(c, i, names::ExpertLinear::Gate).c_str(), ".weight", x.wGate);
        add(names::expertModule(c, i, names::ExpertLinear::Up).c_str(), ".weight", x.wUp);
        add(names::expertModule(c, i, names::ExpertLinear::Down).c_str(), ".weight", x.wDown);
    }
    return r;
}

std::vector<std::pair<std::string, at::Tensor>> namedTensors(const ModelConfig& c, const LlamaWeights& w) {
    std::vector<std::pair<std::string, at::Tensor>> r;
    auto add = [&](const std::string& name, const at::Tensor& t) {
        if (t.defined()) r.emplace_back(name, t);
    };
    add(names::kEmbed, w.embed);
    for (size_t l = 0; l < w.layers.size(); ++l)
        for (auto& nt : namedLayerTensors(c, w.layers[l], static_cast<int>(l))) r.push_back(std::move(nt));
    add(names::kFinalNorm, w.finalNorm);
    if (!c.tieWordEmbeddings || !w.lmHead.is_same(w.embed)) add(names::kLmHead, w.lmHead);
    add(names::kLmHeadBias, w.lmHeadBias);
    return r;
}

LayerWeights convertLayer(const LayerWeights& y, const at::TensorOptions& options) {
    auto cv = [&](const at::Tensor& t) { return t.defined() ? t.to(options) : t; };
    LayerWeights z;
    for (auto [dst, src] : {std::pair{&z.inputNorm, &y.inputNorm}, {&z.postNorm, &y.postNorm}, {&z.qNorm, &y.qNorm},
                            {&z.kNorm, &y.kNorm}, {&z.wq, &y.wq}, {&z.wk, &y.wk}, {&z.wv, &y.wv}, {&z.wo, &y.wo},
                            {&z.bq, &y.bq}, {&z.bk, &y.bk}, {&z.bv, &y.bv}, {&z.bo, &y.bo}, {&z.wGate, &y.wGate},
                            {&z.wUp, &y.wUp}, {&z.wDown, &y.wDown}, {&z.bGate, &y.bGate}, {&z.bUp, &y.bUp},
                            {&z.bDown, &y.bDown}, {&z.router, &y.router}})
        *dst = cv(*src);
    for (const ExpertWeights& x : y.experts) z.experts.push_back(convertExpert(x, options));
    return z;
}

ExpertWeights convertExpert(const ExpertWeights& x, const at::TensorOptions& options) {
    return {x.wGate.to(options), x.wUp.to(options), x.wDown.to(options)};
}

namespace {
LlamaWeights convertTopLevel(const LlamaWeights& w, const at::TensorOptions& options) {
    auto cv = [&](const at::Tensor& t) { return t.defined() ? t.to(options) : t; };
    LlamaWeights r;
    r.embed = cv(w.embed);
    r.finalNorm = cv(w.finalNorm);
    r.lmHead = w.lmHead.is_same(w.embed) ? r.embed : cv(w.lmHead);
    r.lmHeadBias = cv(w.lmHeadBias);
    return r;
}
} // namespace

LlamaWeights convertWeights(const LlamaWeights& w, const at::TensorOptions& options) {
    LlamaWeights r = convertTopLevel(w, options);
    for (const LayerWeights& y : w.layers) r.layers.push_back(convertLayer(y, options));
    return r;
}

LlamaWeights offloadLayers(const LlamaWeights& w, const at::TensorOptions& compute) {
    LlamaWeights r = convertTopLevel(w, compute);
    const auto home = compute.device(c10::kCPU);
    for (const LayerWeights& y : w.layers) r.layers.push_back(convertLayer(y, home));
    return r;
}

c10::Device layerComputeDevice(const LayerWeights& y, c10::Device home) {
    return y.wq.defined() && !y.wq.device().is_cpu() ? y.wq.device() : home;
}

void releaseMappedLayer(const LayerWeights& y) {
    for (const at::Tensor* t : {&y.inputNorm, &y.postNorm, &y.qNorm, &y.kNorm, &y.wq, &y.wk, &y.wv, &y.wo, &y.bq, &y.bk,
                                &y.bv, &y.bo, &y.wGate, &y.wUp, &y.wDown, &y.bGate, &y.bUp, &y.bDown, &y.router})
        if (t->defined()) io::releaseMappedPages(*t);
    for (const ExpertWeights& x : y.experts)
        for (const at::Tensor* t : {&x.wGate, &x.wUp, &x.wDown}) io::releaseMappedPages(*t);
}

} // namespace latmix::model
