#include "model/LlamaModel.h"

#include "io/SafeTensors.h"
#include "model/TensorNames.h"

#include "model/Checkpoint.h"
#include "model/FusionGroups.h"
#include "model/MixtureOfExperts.h"
#include "mx/MxQuantizer.h"
#include "transforms/FixedTransforms.h"

#include <ATen/ATen.h>

#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>

namespace latmix::model {

namespace {

at::Tensor rotateHalf(const at::Tensor& x) {
    const int64_t half = x.size(-1) / 2;
    return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

// Inverse RoPE frequencies theta^(-2i/d); llama3 scaling per Llama 3.1's recipe: long
// wavelengths divided by the factor, short ones kept, a smooth blend in between. Computed in
// float64 (Hugging Face uses float32): at position p the angle p*f then carries float32's
// relative error times p, ~3e-5 rad at p = 500, which is noise the model did not train on.
at::Tensor scaledInverseFrequencies(const ModelConfig& c) {
    const int hd = c.headDim;
    auto exponents = at::arange(0, hd, 2, at::kDouble) / static_cast<double>(hd);
    auto inv = 1.0 / at::pow(c.ropeTheta, exponents);
    if (!c.ropeScaling) return inv;
    const RopeScaling& s = *c.ropeScaling;
    auto wavelen = 2.0 * M_PI / inv;
    const double lowWavelen = s.originalMaxPositions / s.lowFreqFactor;
    const double highWavelen = s.originalMaxPositions / s.highFreqFactor;
    auto scaled = at::where(wavelen > lowWavelen, inv / s.factor, inv);
    auto smooth = (s.originalMaxPositions / wavelen - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor);
    auto blended = (1.0 - smooth) * scaled / s.factor + smooth * scaled;
    auto medium = (wavelen >= highWavelen).logical_and(wavelen <= lowWavelen);
    return at::where(medium, blended, scaled);
}

at::Tensor optionalLinear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
    return b.defined() ? at::linear(x, w, b) : at::linear(x, w);
}

} // namespace

std::int64_t attentionQueryBlock(std::int64_t T) { return T <= 512 ? T : 256; }

at::Tensor ropeInverseFrequencies(const ModelConfig& c) { return scaledInverseFrequencies(c); }

// RMSNorm as Hugging Face computes it: statistics in float32, the result cast back to the
// activation dtype before the weight multiplies it.
at::Tensor rmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
    // A float64 computation (a test's reference path) keeps its precision.
    auto x32 = x.scalar_type() == at::kDouble ? x : x.to(at::kFloat);
    auto normed = x32 * at::rsqrt(x32.pow(2).mean(-1, true) + eps);
    return weight * normed.to(x.scalar_type());
}


ForwardOptions forwardOptionsFor(const ModelConfig& c, at::ScalarType dtype, c10::Device device, bool quantizeActivations) {
    ForwardOptions o;
    if (!c.latmix) return o;
    if (c.latmix->t3Block > 0) {
        o.t3 = transforms::blockHadamard(c.downProjWidth(), c.latmix->t3Block,
                                                         c.latmix->t3Seed)
                                   .to(at::TensorOptions().dtype(dtype).device(device));
    }
    if (quantizeActivations) {
        o.activationQuant = c.latmix->activationFormat;
        o.pointQuant = groupPointFormats(c, c.latmix->groupFormats); // a mixed-precision scheme's groups in their formats
    }
    o.keptLinears = std::set<std::string>(c.latmix->keptLinears.begin(), c.latmix->keptLinears.end());
    return o;
}

at::Tensor pointWeights(const ModelConfig& c, const LayerWeights& y, int layer, PointKind kind, const std::set<std::string>& kept) {
    if (c.isSparseLayer(layer) && (kind == PointKind::GateUpInput || kind == PointKind::DownProjInput))
        throw std::invalid_argument("layer " + std::to_string(layer) + " is sparse: its experts read their own inputs");
    const std::string prefix = names::layerPrefix(layer);
    std::vector<at::Tensor> parts;
    auto add = [&](const char* module, const at::Tensor& w) {
        if (!kept.count(prefix + module)) parts.push_back(w);
    };
    switch (kind) {
    case PointKind::QkvInput: add(names::kQProj, y.wq), add(names::kKProj, y.wk), add(names::kVProj, y.wv); break;
    case PointKind::OProjInput: add(names::kOProj, y.wo); break;
    case PointKind::GateUpInput: add(names::kGateProj, y.wGate), add(names::kUpProj, y.wUp); break;
    case PointKind::DownProjInput: add(names::kDownProj, y.wDown); break;
    }
    if (parts.empty()) return {};
    return parts.size() == 1 ? parts.front() : at::cat(parts, 0);
}

std::vector<std::array<transforms::BlockDiagonal, 4>> loadInputTransforms(const std::string& modelDir, const ModelConfig& c,
                                                                          const at::TensorOptions& options) {
    const std::string path = modelDir + "/" + kInputTransformsFile;
    const auto file = io::SafeTensorsFile::open(path);
    std::vector<std::array<transforms::BlockDiagonal, 4>> r(static_cast<std::size_t>(c.numLayers));
    for (int l = 0; l < c.numLayers; ++l)
        for (int k = 0; k < 4; ++k) {
            const auto kind = static_cast<PointKind>(k);
            if (c.isSparseLayer(l) && kind == PointKind::DownProjInput) continue;
            const std::string name = pointName(l, kind) + ".transform", tail = pointName(l, kind) + ".transform_tail";
            if (!file->contains(name) && !file->contains(tail)) continue; // a point without one
            const at::Tensor b = file->contains(name) ? file->tensor(name) : at::Tensor(), t = file->contains(tail) ? file->tensor(tail) : at::Tensor();
            const std::int64_t width = (b.defined() ? b.size(0) * b.size(1) : 0) + (t.defined() ? t.size(0) : 0);
            if ((b.defined() && (b.dim() != 3 || b.size(1) != b.size(2))) || width != pointWidth(c, kind))
                throw std::runtime_error(path + ": " + name + " does not cover the " + std::to_string(pointWidth(c, kind)) +
                                         " channels of its point; export the run again");
            r[static_cast<std::size_t>(l)][static_cast<std::size_t>(k)] =
                transforms::BlockDiagonal(b.defined() ? b.to(options) : b, t.defined() ? t.to(options) : t);
        }
    return r;
}

RopeTables ropeTables(const ModelConfig& c, std::int64_t T, at::ScalarType dtype, c10::Device device) {
    auto freqs = at::outer(at::arange(T, at::kDouble), scaledInverseFrequencies(c));
    auto angles = at::cat({freqs, freqs}, -1); // [T, hd], rotate-half layout
    const auto opts = at::TensorOptions().dtype(dtype).device(device);
    return {angles.cos().to(opts), angles.sin().to(opts)};
}

namespace {

// The online input transform of a point (WUSH), or null.
const transforms::BlockDiagonal* inputTransform(const ForwardOptions& o, int layer, PointKind kind) {
    if (layer < 0 || static_cast<std::size_t>(layer) >= o.inputTransforms.size()) return nullptr;
    const auto& t = o.inputTransforms[static_cast<std::size_t>(layer)][static_cast<std::size_t>(kind)];
    return t.defined() ? &t : nullptr;
}

// What the linear(s) of a point get: T3 first (down_proj) or the point's input transform, MX
// quantization, then the hook. expert >= 0: that expert's down_proj input in a sparse layer
// (kind DownProjInput).
at::Tensor atPoint(const ForwardOptions& o, const at::Tensor& x, int layer, PointKind kind, const ActivationHook& hook,
                   int expert = -1) {
    at::Tensor y = x;
    if (const auto* t = expert < 0 ? inputTransform(o, layer, kind) : nullptr) y = t->apply(y);
    const bool t3 = kind == PointKind::DownProjInput && o.t3.defined();
    const bool named = hook || !o.pointQuant.empty();
    const std::string name = !named ? std::string() : expert >= 0 ? expertPointName(layer, expert, kind) : pointName(layer, kind);
    const auto own = o.pointQuant.empty() ? o.pointQuant.end() : o.pointQuant.find(name);
    const std::optional<mx::MxConfig>& quant = own != o.pointQuant.end() ? own->second : o.activationQuant;
    if (t3 && quant && o.t3.hadamardSigns().defined() && mx::fusedHadamardApplies(y, *quant, o.t3.blockSize())) {
        // One pass instead of a batched matmul and a quantization (CPU float32, no gradient):
        // the same rotation with float32 butterflies in place of 32-term dot products.
        y = mx::fakeQuantizeAfterHadamard(y, o.t3.hadamardSigns(), *quant);
    } else {
        if (t3) y = o.t3.apply(y);
        if (quant) y = mx::fakeQuantize(y, *quant);
    }
    if (hook) y = hook(name, y);
    return y;
}

// The inputs of a point's linears: what atPoint makes of x, and for the linears kept in full
// precision (ForwardOptions::keptLinears) x itself, after T3 only (its inverse is in W_down).
class PointInputs {
public:
    PointInputs(const ForwardOptions& o, const at::Tensor& x, int layer, PointKind kind, const ActivationHook& hook)
        : m_o(o), m_x(x), m_kind(kind), m_prefix(o.keptLinears.empty() ? std::string() : names::layerPrefix(layer)),
          m_in(atPoint(o, x, layer, kind, hook)) {}
    const at::Tensor& operator()(const char* module) {
        if (m_prefix.empty() || !m_o.keptLinears.count(m_prefix + module)) return m_in;
        if (!m_raw.defined()) m_raw = m_kind == PointKind::DownProjInput && m_o.t3.defined() ? m_o.t3.apply(m_x) : m_x;
        return m_raw;
    }

private:
    const ForwardOptions& m_o;
    at::Tensor m_x;
    PointKind m_kind;
    std::string m_prefix;
    at::Tensor m_in, m_raw;
};

at::Tensor attention(const ModelConfig& c, const LayerWeights& w, const ForwardOptions& o, const at::Tensor& x,
                     const RopeTables& rope, int layer, const ActivationHook& hook) {
    const int64_t B = x.size(0), T = x.size(1), H = c.numHeads, KV = c.numKvHeads, hd = c.headDim;
    PointInputs in(o, x, layer, PointKind::QkvInput, hook);
    auto q = optionalLinear(in(names::kQProj), w.wq, w.bq).view({B, T, H, hd});
    auto k = optionalLinear(in(names::kKProj), w.wk, w.bk).view({B, T, KV, hd});
    auto v = optionalLinear(in(names::kVProj), w.wv, w.bv).view({B, T, KV, hd});
    if (c.qkNorm) { // Qwen3: per-head RMSNorm before RoPE
        q = rmsNorm(q, w.qNorm, c.rmsNormEps);
        k = rmsNorm(k, w.kNorm, c.rmsNormEps);
    }
    q = q.transpose(1, 2); // [B, H, T, hd]
    k = k.transpose(1, 2);
    v = v.transpose(1, 2);
    at::Tensor cos, sin;
    if (o.positions.defined()) { // packed sequences: each token at its own position, [B, 1, T, hd]
        const auto pos = o.positions.to(rope.cos.device(), at::kLong).reshape({-1});
        cos = rope.cos.index_select(0, pos).view({B, 1, T, hd});
        sin = rope.sin.index_select(0, pos).view({B, 1, T, hd});
    } else {
        cos = rope.cos.narrow(0, 0, T), sin = rope.sin.narrow(0, 0, T);
    }
    q = q * cos + rotateHalf(q) * sin;
    k = k * cos + rotateHalf(k) * sin;
    if (KV != H) { // GQA: each key/value head serves H/KV consecutive query heads
        k = k.repeat_interleave(H / KV, 1);
        v = v.repeat_interleave(H / KV, 1);
    }
    // Causal attention over blocks of queries: block [q0, q0 + n) sees keys [0, q0 + n), so the
    // scores are [B, H, n, q0 + n] instead of [B, H, T, T] (1.5 GiB in float32 for 32 heads at
    // T = 2048 before the mask and softmax copies). Each row's softmax is the same as unblocked.
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    const int64_t block = attentionQueryBlock(T);
    std::vector<at::Tensor> outs;
    for (int64_t q0 = 0; q0 < T; q0 += block) {
        const int64_t n = std::min(block, T - q0), keys = q0 + n;
        auto kb = k.narrow(2, 0, keys), vb = v.narrow(2, 0, keys);
        auto scores = at::matmul(q.narrow(2, q0, n), kb.transpose(-2, -1)) * scale;
        // Hidden keys: the later ones, or those `visible` hides ([B, 1, n, keys]; it never shows a
        // later key, so keys [0, q0 + n) still hold every visible one).
        auto hidden = o.visible.defined()
                          ? o.visible.to(x.device()).narrow(1, q0, n).narrow(2, 0, keys).logical_not().unsqueeze(1)
                          : at::ones({n, keys}, at::TensorOptions().dtype(at::kBool).device(x.device())).triu(q0 + 1);
        scores = scores.masked_fill(hidden, -std::numeric_limits<double>::infinity());
        auto probs = at::softmax(scores, -1, at::kFloat).to(q.scalar_type()); // float32 softmax, as HF
        outs.push_back(at::matmul(probs, vb));
    }
    auto attn = outs.size() == 1 ? outs.front() : at::cat(outs, 2);
    auto out = attn.transpose(1, 2).reshape({B, T, H * hd});
    PointInputs oIn(o, out, layer, PointKind::OProjInput, hook);
    return optionalLinear(oIn(names::kOProj), w.wo, w.bo);
}

at::Tensor mlp(const ModelConfig& c, const LayerWeights& w, const ForwardOptions& o, const at::Tensor& x, int layer,
               const ActivationHook& hook) {
    PointInputs gateUp(o, x, layer, PointKind::GateUpInput, hook);
    if (w.router.defined()) {
        const at::Tensor& in = gateUp(names::kGateProj); // experts are never kept (run::resolveKeptLinears)
        // The shared gate/up input is quantized once; the router reads it unquantized (its
        // weight stays in full precision too: docs/spec.md "Mixture of experts").
        const auto shape = x.sizes().vec();
        const auto flat = [&](const at::Tensor& t) { return t.reshape({-1, t.size(-1)}); };
        auto expertPoint = [&](int e, PointKind kind, const at::Tensor& rows) {
            if (kind == PointKind::DownProjInput)
                return atPoint(o, rows.unsqueeze(0), layer, kind, hook, e).squeeze(0);
            return hook ? hook(expertPointName(layer, e, kind), rows.unsqueeze(0)).squeeze(0) : rows;
        };
        return sparseMlp(*c.moe, w.router, w.experts, flat(x), flat(in), expertPoint).view(shape);
    }
    auto g = at::silu(optionalLinear(gateUp(names::kGateProj), w.wGate, w.bGate)) * optionalLinear(gateUp(names::kUpProj), w.wUp, w.bUp);
    PointInputs down(o, g, layer, PointKind::DownProjInput, hook);
    return optionalLinear(down(names::kDownProj), w.wDown, w.bDown);
}

void checkTokens(const ModelConfig& c, const at::Tensor& tokens) {
    if (tokens.dim() != 2) throw std::invalid_argument("forward: tokens must be [batch, sequence]");
    if (tokens.size(1) > c.maxPositions)
        throw std::invalid_argument("sequence of " + std::to_string(tokens.size(1)) + " tokens exceeds the model's " +
                                    std::to_string(c.maxPositions) + " positions");
    if (tokens.numel() > 0 && (tokens.min().item<int64_t>() < 0 || tokens.max().item<int64_t>() >= c.vocabSize))
        throw std::invalid_argument("token id outside the vocabulary of " + std::to_string(c.vocabSize));
}

} // namespace

at::Tensor embedTokens(const ModelConfig& c, const LlamaWeights& w, const at::Tensor& tokens) {
    checkTokens(c, tokens);
    auto ids = tokens.to(w.embed.device(), at::kLong);
    auto rows = w.embed.index_select(0, ids.reshape({-1})).view({tokens.size(0), tokens.size(1), c.hiddenSize});
    // The rows are copies. A table mapped from a file would otherwise keep resident what the
    // kernel read around each looked-up row (measured: 270 MiB of a 1187 MiB float32 table for
    // 1024 tokens), through every later stage of a run.
    io::releaseMappedPages(w.embed);
    return rows;
}

at::Tensor decoderLayer(const ModelConfig& c, const LayerWeights& w, const ForwardOptions& o, const at::Tensor& h,
                        const RopeTables& rope, int layer, const ActivationHook& hook) {
    auto x = h + attention(c, w, o, rmsNorm(h, w.inputNorm, c.rmsNormEps), rope, layer, hook);
    return x + mlp(c, w, o, rmsNorm(x, w.postNorm, c.rmsNormEps), layer, hook);
}

namespace {
// t in the dtype and on the device of like (a no-op when it already is).
at::Tensor as(const at::Tensor& t, const at::Tensor& like) {
    return t.defined() && (t.scalar_type() != like.scalar_type() || t.device() != like.device()) ? t.to(like.options()) : t;
}
} // namespace

at::Tensor lmHead(const ModelConfig& c, const LlamaWeights& w, const at::Tensor& h) {
    return optionalLinear(rmsNorm(h, as(w.finalNorm, h), c.rmsNormEps), as(w.lmHead, h), as(w.lmHeadBias, h))
        .to(at::kFloat);
}

at::Tensor forwardHidden(const ModelConfig& c, const LlamaWeights& w, const ForwardOptions& o, const at::Tensor& tokens,
                         const ActivationHook& hook, std::vector<at::Tensor>* layerOutputs) {
    const at::ScalarType dtype = o.dtype.value_or(w.embed.scalar_type());
    auto h = embedTokens(c, w, tokens).to(dtype); // rows looked up in the stored table, then converted
    auto rope = ropeTables(c, tokens.size(1), dtype, w.embed.device());
    for (size_t l = 0; l < w.layers.size(); ++l) {
        const LayerWeights& y = w.layers[l];
        const c10::Device at = layerComputeDevice(y, h.device());
        if (at != h.device()) { // a layer placed on another device: the hidden states go there
            h = h.to(at);
            rope = ropeTables(c, tokens.size(1), dtype, at);
        }
        // Offloaded (or differently typed) layers are brought to the hidden state one at a time.
        const bool resident = y.wq.device() == h.device() && y.wq.scalar_type() == h.scalar_type();
        h = decoderLayer(c, resident ? y : convertLayer(y, h.options()), o, h, rope, static_cast<int>(l), hook);
        if (layerOutputs) layerOutputs->push_back(h);
        releaseMappedLayer(y); // weights mapped from a file: one layer resident at a time
    }
    return h;
}

at::Tensor forwardWith(const ModelConfig& c, const LlamaWeights& w, const ForwardOptions& o, const at::Tensor& tokens,
                       const ActivationHook& hook) {
    return lmHead(c, w, forwardHidden(c, w, o, tokens, hook));
}

at::Tensor nextTokenNll(const ModelConfig& c, const LlamaWeights& w, const at::Tensor& hidden, const at::Tensor& targets,
                        std::int64_t vocabChunk) {
    return nextTokenScores(c, w, hidden, targets, vocabChunk).nll;
}

NextTokenScores nextTokenScores(const ModelConfig& c, const LlamaWeights& w, const at::Tensor& hidden,
                                const at::Tensor& targets, std::int64_t vocabChunk) {
    if (hidden.dim() != 2 || targets.dim() != 1 || targets.size(0) != hidden.size(0))
        throw std::invalid_argument("nextTokenScores: hidden must be [N, hidden] and targets [N]");
    const auto normed = rmsNorm(hidden, as(w.finalNorm, hidden), c.rmsNormEps);
    const auto tgt = targets.to(hidden.device(), at::kLong);
    const int64_t N = hidden.size(0), V = w.lmHead.size(0);
    const auto f32 = at::TensorOptions().dtype(at::kFloat).device(hidden.device());
    auto runMax = at::full({N}, -std::numeric_limits<float>::infinity(), f32);
    auto runSum = at::zeros({N}, f32);
    auto targetLogit = at::zeros({N}, f32);
    for (int64_t v0 = 0; v0 < V; v0 += vocabChunk) {
        const int64_t n = std::min(vocabChunk, V - v0);
        const auto bias = w.lmHeadBias.defined() ? as(w.lmHeadBias.narrow(0, v0, n), hidden) : at::Tensor();
        const auto logits = optionalLinear(normed, as(w.lmHead.narrow(0, v0, n), hidden), bias).to(at::kFloat); // [N, n]
        const auto chunkMax = std::get<0>(logits.max(1));
        const auto newMax = at::maximum(runMax, chunkMax);
        runSum = runSum * at::exp(runMax - newMax) + at::exp(logits - newMax.unsqueeze(1)).sum(1);
        runMax = newMax;
        const auto inChunk = (tgt >= v0).logical_and(tgt < v0 + n);
        const auto local = (tgt - v0).clamp(0, n - 1).unsqueeze(1);
        targetLogit = at::where(inChunk, logits.gather(1, local).squeeze(1), targetLogit);
    }
    io::releaseMappedPages(w.lmHead); // read through once per call: not kept resident
    return {runMax + at::log(runSum) - targetLogit, targetLogit >= runMax};
}

LlamaModel::LlamaModel(const Checkpoint& ckpt, at::ScalarType dtype, c10::Device device, bool quantizeActivations,
                       bool offload)
    : m_config(ckpt.config()), m_dtype(dtype), m_device(device) {
    if (dtype != at::kFloat && dtype != at::kBFloat16)
        throw std::invalid_argument("the forward pass runs in float32 or bfloat16");
    if (offload)
        m_w = offloadLayers(loadWeights(ckpt, dtype, c10::kCPU), at::TensorOptions().dtype(dtype).device(device));
    else if (device.is_cpu() && dtype == at::kBFloat16) {
        // bf16 compute: every tensor converted once, not at every forward (bf16 -> bf16 is no copy:
        // a bf16 checkpoint stays mapped); half a float32 checkpoint's size, for libtorch's own bf16
        // matrix products at every call (`latmix bench forward`: twice the tokens/s at seqlen 256).
        const auto bf16 = at::TensorOptions().dtype(dtype);
        const LlamaWeights stored = loadStoredWeights(ckpt, dtype);
        m_w = convertTopLevel(stored, bf16);
        for (const LayerWeights& y : stored.layers) {
            m_w.layers.push_back(convertLayer(y, bf16));
            releaseMappedLayer(y);
        }
    } else if (device.is_cpu() || dtype == at::kFloat) {
        // On the CPU mapped, on a GPU copied as stored (a bf16 checkpoint in half the memory of
        // its float32 form: an 8B evaluates in float32 on 16 GB of weights, a 32B fits an 80 GB
        // card); each layer converted when the pass reaches it (forwardHidden), as the training
        // keeps its frozen weights (run/QuantizeRun.cpp, loadOriginal).
        m_w = loadStoredWeights(ckpt, dtype, device);
    } else {
        m_w = loadWeights(ckpt, dtype, device); // bf16 compute on a GPU: converted once, never wider than stored
    }
    m_options = forwardOptionsFor(m_config, dtype, device, quantizeActivations);
    m_options.dtype = dtype;
    // WUSH's transforms stay with weight-only evaluation too: the weights hold W T⁻¹.
    if (m_config.latmix && !m_config.latmix->inputTransforms.empty())
        m_options.inputTransforms = loadInputTransforms(ckpt.dir(), m_config, at::TensorOptions().dtype(dtype).device(device));
}

LlamaModel::LlamaModel(ModelConfig config, LlamaWeights weights, ForwardOptions options)
    : m_config(std::move(config)), m_dtype(weights.embed.scalar_type()), m_device(weights.embed.device()),
      m_w(std::move(weights)), m_options(std::move(options)) {
    if (static_cast<int>(m_w.layers.size()) != m_config.numLayers)
        throw std::invalid_argument("LlamaModel: " + std::to_string(m_w.layers.size()) + " layers of weights for a config of " +
                                    std::to_string(m_config.numLayers));
}

LlamaModel::~LlamaModel() = default;
LlamaModel::LlamaModel(LlamaModel&&) noexcept = default;

at::Tensor LlamaModel::forward(const at::Tensor& tokens, const ActivationHook& hook) const {
    return forwardWith(m_config, m_w, m_options, tokens, hook);
}

double LlamaModel::sequenceNll(const at::Tensor& tokens) const {
    if (tokens.dim() != 2 || tokens.size(1) < 2) throw std::invalid_argument("sequenceNll: tokens must be [B, T>=2]");
    const auto h = forwardHidden(m_config, m_w, m_options, tokens);
    const int64_t B = tokens.size(0), T = tokens.size(1);
    const auto hidden = h.narrow(1, 0, T - 1).reshape({B * (T - 1), h.size(2)});
    const auto targets = tokens.narrow(1, 1, T - 1).reshape({B * (T - 1)});
    return nextTokenNll(m_config, m_w, hidden, targets).to(at::kDouble).sum().item<double>();
}

double LlamaModel::forwardFlops(std::int64_t tokens) const {
    const ModelConfig& c = m_config;
    const double d = c.hiddenSize, a = double(c.numHeads) * c.headDim;
    const double linear = double(c.layerActiveWeights());
    const double attentionPerToken = 2.0 * tokens * a; // scores and weighted values, full T x T
    return 2.0 * tokens * (c.numLayers * (linear + attentionPerToken) + d * c.vocabSize);
}

} // namespace latmix::model
