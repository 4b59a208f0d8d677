#include "fold/Fold.h"

#include "transforms/Hadamard.h"

#include <ATen/ATen.h>

#include <functional>
#include <stdexcept>
#include <string>

namespace latmix::fold {
namespace {

at::Tensor scaleColumns(const at::Tensor& w, const at::Tensor& gamma) { return w * gamma.to(w.scalar_type()).unsqueeze(0); }

at::Tensor cast(const at::Tensor& t, const at::Tensor& like) { return t.to(like.scalar_type()).to(like.device()); }

// Rows x ↦ A x, i.e. x·Aᵀ (for an orthogonal A also x·A⁻¹).
at::Tensor rowsTimesAT(const at::Tensor& x, const AffineMatrices& t) {
    if (t.hadamardDiagonal.defined()) return transforms::hadamardRows(x, t.hadamardDiagonal);
    return at::matmul(x, cast(t.a, x).t());
}

// Input side of a linear: W A⁻¹ and b − W A⁻¹ v.
void foldInput(at::Tensor& w, at::Tensor& b, const AffineMatrices& t) {
    w = t.hadamardDiagonal.defined() ? rowsTimesAT(w, t) : at::matmul(w, cast(t.aInv, w)); // A⁻¹ = Aᵀ there
    if (t.v.defined()) {
        auto shift = at::matmul(w, cast(t.v, w));
        b = b.defined() ? b - shift : -shift;
    }
}

// Output side of a linear writing the residual: A W and A b.
void foldOutput(at::Tensor& w, at::Tensor& b, const AffineMatrices& t) {
    if (t.hadamardDiagonal.defined()) { // A W = (Wᵀ Aᵀ)ᵀ
        w = rowsTimesAT(w.t(), t).t().contiguous();
        if (b.defined()) b = rowsTimesAT(b, t);
        return;
    }
    const auto a = cast(t.a, w);
    w = at::matmul(a, w);
    if (b.defined()) b = at::matmul(a, b);
}

void checkSquare(const AffineMatrices& t, std::int64_t d, const std::string& what) {
    if (!t.a.defined() || !t.aInv.defined()) throw std::invalid_argument(what + ": A and A⁻¹ are needed");
    if (t.a.dim() != 2 || t.a.size(0) != d || t.a.size(1) != d || !t.aInv.sizes().equals(t.a.sizes()))
        throw std::invalid_argument(what + ": A must be [" + std::to_string(d) + ", " + std::to_string(d) + "]");
    if (t.v.defined() && (t.v.dim() != 1 || t.v.size(0) != d))
        throw std::invalid_argument(what + ": v must have " + std::to_string(d) + " elements");
}

// A sparse layer's experts read the post-attention norm's output: γ into gate and up.
void scaleExpertInputs(model::ExpertWeights& x, const at::Tensor& postNorm) {
    x.wGate = scaleColumns(x.wGate, postNorm);
    x.wUp = scaleColumns(x.wUp, postNorm);
}

// Rows of W_down: W T3ᵀ.
at::Tensor withT3(const at::Tensor& w, const transforms::BlockDiagonal& t3) { return t3.to(w.options()).apply(w); }

// Neither the router nor the experts hold biases, so T1's v must be 0 (the preflight sees to it).
void refuseT1BiasOnExperts(const AffineMatrices& t) {
    if (t.v.defined())
        throw std::invalid_argument("T1 with a bias on a mixture-of-experts layer: the router and experts have no "
                                    "biases to take it; train T1 without bias (--t1-bias off)");
}

void applyT1ToExpert(model::ExpertWeights& x, const AffineMatrices& t) {
    at::Tensor none;
    foldInput(x.wGate, none, t);
    foldInput(x.wUp, none, t);
    foldOutput(x.wDown, none, t);
}

} // namespace

void foldLayerNorms(model::LayerWeights& y) {
    y.wq = scaleColumns(y.wq, y.inputNorm);
    y.wk = scaleColumns(y.wk, y.inputNorm);
    y.wv = scaleColumns(y.wv, y.inputNorm);
    if (y.router.defined()) { // a sparse layer: the router and every expert read the normed input
        y.router = scaleColumns(y.router, y.postNorm);
        for (auto& x : y.experts) scaleExpertInputs(x, y.postNorm);
    } else {
        y.wGate = scaleColumns(y.wGate, y.postNorm);
        y.wUp = scaleColumns(y.wUp, y.postNorm);
    }
    y.inputNorm = at::ones_like(y.inputNorm);
    y.postNorm = at::ones_like(y.postNorm);
}

void foldTopLevelNorm(model::LlamaWeights& w) {
    w.lmHead = scaleColumns(w.lmHead, w.finalNorm); // a new tensor: untied from the embedding
    w.finalNorm = at::ones_like(w.finalNorm);
}

model::LlamaWeights foldNorms(const model::ModelConfig&, const model::LlamaWeights& w) {
    model::LlamaWeights r = w;
    for (auto& y : r.layers) foldLayerNorms(y);
    foldTopLevelNorm(r);
    return r;
}

void applyT1ToLayer(const model::ModelConfig& c, model::LayerWeights& y, const AffineMatrices& t) {
    checkSquare(t, c.hiddenSize, "T1");
    foldInput(y.wq, y.bq, t);
    foldInput(y.wk, y.bk, t);
    foldInput(y.wv, y.bv, t);
    foldOutput(y.wo, y.bo, t);
    if (!y.router.defined()) {
        foldInput(y.wGate, y.bGate, t);
        foldInput(y.wUp, y.bUp, t);
        foldOutput(y.wDown, y.bDown, t);
        return;
    }
    // A sparse layer: the router reads the same transformed residual as the experts, so it gets
    // W A⁻¹ too, and routing is unchanged (the rule of SpinQuant's MoE mapping in llm-compressor).
    refuseT1BiasOnExperts(t);
    at::Tensor none;
    foldInput(y.router, none, t);
    for (auto& x : y.experts) applyT1ToExpert(x, t);
}

void applyT1ToTopLevel(const model::ModelConfig& c, model::LlamaWeights& w, const AffineMatrices& t) {
    checkSquare(t, c.hiddenSize, "T1");
    // Embedding rows e ↦ A e + v: E Aᵀ + v.
    at::Tensor e = rowsTimesAT(w.embed, t);
    if (t.v.defined()) e = e + cast(t.v, w.embed);
    w.embed = e;
    // lm_head reads the transformed residual through W A⁻¹ and no bias −W A⁻¹ v: no runtime's
    // Llama-family head loads a bias (transformers' LlamaForCausalLM, vLLM, llama.cpp), so a folded
    // one would be dropped by every export; the paper folds v into the blocks' readers only. The
    // training computes the head the same way (train/DistillationStep.cpp), so the run's function
    // is what the exports compute (docs/spec.md §4, issue 71).
    AffineMatrices headSide = t;
    headSide.v = at::Tensor();
    foldInput(w.lmHead, w.lmHeadBias, headSide);
}

model::LlamaWeights applyT1(const model::ModelConfig& c, const model::LlamaWeights& w, const AffineMatrices& t) {
    model::LlamaWeights r = w;
    applyT1ToTopLevel(c, r, t);
    for (auto& y : r.layers) applyT1ToLayer(c, y, t);
    return r;
}

void applyT2ToLayer(const model::ModelConfig& c, model::LayerWeights& y, const AffineMatrices& t, int layer) {
    if (!t.defined()) return;
    const std::int64_t hd = c.headDim, H = c.numHeads, KV = c.numKvHeads, d = c.hiddenSize;
    checkSquare(t, hd, "T2 of layer " + std::to_string(layer));
    const auto a = cast(t.a, y.wv), ai = cast(t.aInv, y.wv);
    // Values of each kv head: rows A2 W_v,h, bias A2 b_v,h + v2.
    y.wv = at::matmul(a, y.wv.reshape({KV, hd, y.wv.size(1)})).reshape({KV * hd, y.wv.size(1)});
    if (y.bv.defined()) y.bv = at::matmul(y.bv.reshape({KV, hd}), a.t()).reshape({KV * hd});
    if (t.v.defined()) {
        auto v = cast(t.v, y.wv).repeat({KV});
        y.bv = y.bv.defined() ? y.bv + v : v;
    }
    // o_proj input columns per attention head: W_o,h A2⁻¹; bias − W_o blockdiag(A2⁻¹) v2.
    y.wo = at::matmul(y.wo.reshape({d, H, hd}), ai).reshape({d, H * hd});
    if (t.v.defined()) {
        auto shift = at::matmul(y.wo, cast(t.v, y.wo).repeat({H}));
        y.bo = y.bo.defined() ? y.bo - shift : -shift;
    }
}

model::LlamaWeights applyT2(const model::ModelConfig& c, const model::LlamaWeights& w, const std::vector<AffineMatrices>& t2) {
    if (t2.size() != w.layers.size())
        throw std::invalid_argument("T2: " + std::to_string(t2.size()) + " transforms for " + std::to_string(w.layers.size()) +
                                    " layers");
    model::LlamaWeights r = w;
    for (size_t l = 0; l < t2.size(); ++l) applyT2ToLayer(c, r.layers[l], t2[l], static_cast<int>(l));
    return r;
}

namespace {
// Every down_proj of the layer (the dense one, or each expert's).
void forEachDown(model::LayerWeights& y, const std::function<void(at::Tensor&)>& f) {
    if (y.wDown.defined()) f(y.wDown);
    for (auto& e : y.experts) f(e.wDown);
}
} // namespace

void applyT3ToLayer(model::LayerWeights& y, const transforms::BlockDiagonal& t3) {
    forEachDown(y, [&](at::Tensor& w) { w = withT3(w, t3); });
}

void foldExpert(model::ExpertWeights& x, const at::Tensor& postNorm, const transforms::BlockDiagonal& t3,
                const AffineMatrices& t1) {
    scaleExpertInputs(x, postNorm);
    if (t3.defined()) x.wDown = withT3(x.wDown, t3);
    if (!t1.defined()) return;
    checkSquare(t1, x.wGate.size(1), "T1");
    refuseT1BiasOnExperts(t1);
    applyT1ToExpert(x, t1);
}

void foldLayer(const model::ModelConfig& config, model::LayerWeights& y, int layer, const transforms::BlockDiagonal& t3,
               const AffineMatrices& t1, const AffineMatrices& t2) {
    // The experts apart, each folded whole (foldExpert: the same steps in the same order on
    // each tensor, so the same values and graph); the rest step by step.
    std::vector<model::ExpertWeights> experts = std::move(y.experts);
    y.experts.clear();
    const at::Tensor postNorm = y.postNorm; // before foldLayerNorms sets it to ones
    foldLayerNorms(y);
    if (t3.defined()) applyT3ToLayer(y, t3);
    if (t1.defined()) applyT1ToLayer(config, y, t1);
    if (t2.defined()) applyT2ToLayer(config, y, t2, layer);
    for (auto& x : experts) foldExpert(x, postNorm, t3, t1);
    y.experts = std::move(experts);
}

model::LlamaWeights applyT3(const model::LlamaWeights& w, const transforms::BlockDiagonal& t3) {
    model::LlamaWeights r = w;
    for (auto& y : r.layers) applyT3ToLayer(y, t3);
    return r;
}

model::LlamaWeights unfoldT3(const model::LlamaWeights& w, const transforms::BlockDiagonal& t3) {
    model::LlamaWeights r = w;
    for (auto& y : r.layers) forEachDown(y, [&](at::Tensor& d) { d = t3.transposed().to(d.options()).apply(d); }); // W T3
    return r;
}

model::ModelConfig foldedConfig(const model::ModelConfig& config, model::LlamaWeights& w) {
    model::ModelConfig c = config;
    // The bias groups folding created, stated exactly: q/k/v (any of them makes all three),
    // o_proj, gate/up/down. The run model holds them for any family (model/ConfigJson.h); which
    // runtime can load them is the export's question.
    bool qkv = false, o = false, mlp = false;
    for (const auto& y : w.layers) {
        qkv = qkv || y.bq.defined() || y.bk.defined() || y.bv.defined();
        o = o || y.bo.defined();
        mlp = mlp || y.bGate.defined() || y.bUp.defined() || y.bDown.defined();
    }
    auto fill = [](at::Tensor& b, const at::Tensor& weight) {
        if (!b.defined()) b = at::zeros({weight.size(0)}, weight.options());
    };
    c.qkvBias = qkv;
    c.oProjBias = o;
    c.mlpBias = mlp;
    for (auto& y : w.layers) {
        if (qkv) {
            fill(y.bq, y.wq);
            fill(y.bk, y.wk);
            fill(y.bv, y.wv);
        }
        if (o) fill(y.bo, y.wo);
        if (mlp) {
            fill(y.bGate, y.wGate);
            fill(y.bUp, y.wUp);
            fill(y.bDown, y.wDown);
        }
    }
    c.tieWordEmbeddings = w.lmHead.is_same(w.embed) && c.tieWordEmbeddings;
    c.lmHeadBias = w.lmHeadBias.defined();
    return c;
}

} // namespace latmix::fold
