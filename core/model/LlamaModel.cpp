#include "model/LlamaModel.h"

#include "model/Checkpoint.h"

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <cmath>
#include <stdexcept>

namespace latmix::model {

struct LlamaModel::Layer {
    at::Tensor inputNorm, postNorm, qNorm, kNorm;
    at::Tensor wq, wk, wv, wo, bq, bk, bv, bo;
    at::Tensor wGate, wUp, wDown, bGate, bUp, bDown;
};

namespace {

const char* kPointSuffix[] = {"self_attn.qkv.input", "self_attn.o_proj.input", "mlp.gate_up.input",
                              "mlp.down_proj.input"};

// RMSNorm as Hugging Face computes it: statistics in float32, the result cast back to the
// activation dtype before the weight multiplies it.
at::Tensor rmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
    auto x32 = x.to(at::kFloat);
    auto normed = x32 * at::rsqrt(x32.pow(2).mean(-1, true) + eps);
    return weight * normed.to(x.scalar_type());
}

at::Tensor rotateHalf(const at::Tensor& x) {
    const int64_t half = x.size(-1) / 2;
    return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

// Inverse RoPE frequencies theta^(-2i/d); llama3 scaling per Llama 3.1's recipe: long
// wavelengths divided by the factor, short ones kept, a smooth blend in between. Computed in
// float64 (Hugging Face uses float32): at position p the angle p*f then carries float32's
// relative error times p, ~3e-5 rad at p = 500, which is noise the model did not train on.
at::Tensor inverseFrequencies(const ModelConfig& c) {
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

std::string pointName(int layer, PointKind kind) {
    return "layers." + std::to_string(layer) + "." + kPointSuffix[static_cast<int>(kind)];
}

std::vector<std::string> quantizationPointNames(const ModelConfig& config) {
    std::vector<std::string> names;
    for (int l = 0; l < config.numLayers; ++l)
        for (int k = 0; k < 4; ++k) names.push_back(pointName(l, static_cast<PointKind>(k)));
    return names;
}

int pointWidth(const ModelConfig& c, PointKind kind) {
    switch (kind) {
    case PointKind::OProjInput: return c.numHeads * c.headDim;
    case PointKind::DownProjInput: return c.intermediateSize;
    default: return c.hiddenSize;
    }
}

LlamaModel::LlamaModel(const Checkpoint& ckpt, at::ScalarType dtype, c10::Device device)
    : m_config(ckpt.config()), m_dtype(dtype), m_device(device) {
    if (dtype != at::kFloat && dtype != at::kBFloat16)
        throw std::invalid_argument("the forward pass runs in float32 or bfloat16");
    const auto opts = at::TensorOptions().dtype(dtype).device(device);
    auto load = [&](const std::string& name) { return ckpt.weight(name).to(opts); };
    auto loadIf = [&](bool present, const std::string& name) { return present ? load(name) : at::Tensor(); };
    m_embed = load("model.embed_tokens.weight");
    m_finalNorm = load("model.norm.weight");
    m_lmHead = m_config.tieWordEmbeddings && !ckpt.has("lm_head.weight") ? m_embed : load("lm_head.weight");
    m_invFreq = inverseFrequencies(m_config); // float64, on the CPU
    const ModelConfig& c = m_config;
    for (int l = 0; l < c.numLayers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        Layer w;
        w.inputNorm = load(p + "input_layernorm.weight");
        w.postNorm = load(p + "post_attention_layernorm.weight");
        w.qNorm = loadIf(c.qkNorm, p + "self_attn.q_norm.weight");
        w.kNorm = loadIf(c.qkNorm, p + "self_attn.k_norm.weight");
        w.wq = load(p + "self_attn.q_proj.weight");
        w.wk = load(p + "self_attn.k_proj.weight");
        w.wv = load(p + "self_attn.v_proj.weight");
        w.wo = load(p + "self_attn.o_proj.weight");
        w.bq = loadIf(c.qkvBias, p + "self_attn.q_proj.bias");
        w.bk = loadIf(c.qkvBias, p + "self_attn.k_proj.bias");
        w.bv = loadIf(c.qkvBias, p + "self_attn.v_proj.bias");
        w.bo = loadIf(c.oProjBias, p + "self_attn.o_proj.bias");
        w.wGate = load(p + "mlp.gate_proj.weight");
        w.wUp = load(p + "mlp.up_proj.weight");
        w.wDown = load(p + "mlp.down_proj.weight");
        w.bGate = loadIf(c.mlpBias, p + "mlp.gate_proj.bias");
        w.bUp = loadIf(c.mlpBias, p + "mlp.up_proj.bias");
        w.bDown = loadIf(c.mlpBias, p + "mlp.down_proj.bias");
        m_layers.push_back(std::move(w));
    }
}

LlamaModel::~LlamaModel() = default;
LlamaModel::LlamaModel(LlamaModel&&) noexcept = default;

at::Tensor LlamaModel::attention(const Layer& w, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                 int layer, const ActivationHook& hook) const {
    const ModelConfig& c = m_config;
    const int64_t B = x.size(0), T = x.size(1), H = c.numHeads, KV = c.numKvHeads, hd = c.headDim;
    auto in = hook ? hook(pointName(layer, PointKind::QkvInput), x) : x;
    auto q = optionalLinear(in, w.wq, w.bq).view({B, T, H, hd});
    auto k = optionalLinear(in, w.wk, w.bk).view({B, T, KV, hd});
    auto v = optionalLinear(in, w.wv, w.bv).view({B, T, KV, hd});
    if (c.qkNorm) { // Qwen3: per-head RMSNorm before RoPE
        q = rmsNorm(q, w.qNorm, c.rmsNormEps);
        k = rmsNorm(k, w.kNorm, c.rmsNormEps);
    }
    q = q.transpose(1, 2); // [B, H, T, hd]
    k = k.transpose(1, 2);
    v = v.transpose(1, 2);
    q = q * cos + rotateHalf(q) * sin;
    k = k * cos + rotateHalf(k) * sin;
    if (KV != H) { // GQA: each key/value head serves H/KV consecutive query heads
        k = k.repeat_interleave(H / KV, 1);
        v = v.repeat_interleave(H / KV, 1);
    }
    auto scores = at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hd)));
    auto causal = at::ones({T, T}, at::TensorOptions().dtype(at::kBool).device(x.device())).triu(1);
    scores = scores.masked_fill(causal, -std::numeric_limits<double>::infinity());
    auto probs = at::softmax(scores, -1, at::kFloat).to(q.scalar_type()); // float32 softmax, as HF
    auto out = at::matmul(probs, v).transpose(1, 2).reshape({B, T, H * hd});
    if (hook) out = hook(pointName(layer, PointKind::OProjInput), out);
    return optionalLinear(out, w.wo, w.bo);
}

at::Tensor LlamaModel::mlp(const Layer& w, const at::Tensor& x, int layer, const ActivationHook& hook) const {
    auto in = hook ? hook(pointName(layer, PointKind::GateUpInput), x) : x;
    auto g = at::silu(optionalLinear(in, w.wGate, w.bGate)) * optionalLinear(in, w.wUp, w.bUp);
    if (hook) g = hook(pointName(layer, PointKind::DownProjInput), g);
    return optionalLinear(g, w.wDown, w.bDown);
}

at::Tensor LlamaModel::forward(const at::Tensor& tokens, const ActivationHook& hook) const {
    if (tokens.dim() != 2) throw std::invalid_argument("forward: tokens must be [batch, sequence]");
    const int64_t B = tokens.size(0), T = tokens.size(1);
    if (T > m_config.maxPositions)
        throw std::invalid_argument("sequence of " + std::to_string(T) + " tokens exceeds the model's " +
                                    std::to_string(m_config.maxPositions) + " positions");
    auto ids = tokens.to(m_device, at::kLong);
    if (ids.numel() > 0 && (ids.min().item<int64_t>() < 0 || ids.max().item<int64_t>() >= m_config.vocabSize))
        throw std::invalid_argument("token id outside the vocabulary of " + std::to_string(m_config.vocabSize));
    auto h = m_embed.index_select(0, ids.reshape({-1})).view({B, T, m_config.hiddenSize});
    auto freqs = at::outer(at::arange(T, at::kDouble), m_invFreq);
    auto angles = at::cat({freqs, freqs}, -1); // [T, hd], rotate-half layout
    const auto opts = at::TensorOptions().dtype(m_dtype).device(m_device);
    auto cos = angles.cos().to(opts), sin = angles.sin().to(opts);
    for (size_t l = 0; l < m_layers.size(); ++l) {
        const Layer& w = m_layers[l];
        const int layer = static_cast<int>(l);
        h = h + attention(w, rmsNorm(h, w.inputNorm, m_config.rmsNormEps), cos, sin, layer, hook);
        h = h + mlp(w, rmsNorm(h, w.postNorm, m_config.rmsNormEps), layer, hook);
    }
    h = rmsNorm(h, m_finalNorm, m_config.rmsNormEps);
    return at::linear(h, m_lmHead).to(at::kFloat);
}

double LlamaModel::forwardFlops(std::int64_t tokens) const {
    const ModelConfig& c = m_config;
    const double d = c.hiddenSize, a = double(c.numHeads) * c.headDim, kv = double(c.numKvHeads) * c.headDim;
    const double linear = d * a + 2 * d * kv + a * d + 3 * d * c.intermediateSize;
    const double attentionPerToken = 2.0 * tokens * a; // scores and weighted values, full T x T
    return 2.0 * tokens * (c.numLayers * (linear + attentionPerToken) + d * c.vocabSize);
}

c10::Device parseDevice(const std::string& name) {
    if (name == "auto") return torch::cuda::is_available() ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
    if (name != "cpu" && name.rfind("cuda", 0) != 0)
        throw std::invalid_argument("unknown device '" + name + "'; use cpu, cuda, cuda:N or auto");
    c10::Device d(name);
    if (d.is_cuda()) {
        const auto n = static_cast<int>(torch::cuda::device_count());
        if (n == 0) throw std::invalid_argument("device '" + name + "': this build or machine has no CUDA device; use --device cpu");
        if (d.has_index() && d.index() >= n)
            throw std::invalid_argument("device '" + name + "': only " + std::to_string(n) + " CUDA device(s)");
        if (!d.has_index()) d = c10::Device(c10::kCUDA, 0);
    }
    return d;
}

at::ScalarType parseDtype(const std::string& name) {
    if (name == "float32") return at::kFloat;
    if (name == "bfloat16") return at::kBFloat16;
    throw std::invalid_argument("unknown dtype '" + name + "'; use float32 or bfloat16");
}

} // namespace latmix::model
