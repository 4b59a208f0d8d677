#pragma once
// An independent float64 Llama-family forward pass for tests: explicit loops for norms, RoPE
// and attention, plain matrix products for the linear layers, nothing shared with
// core/model/LlamaModel.cpp (only the weights come through Checkpoint).
#include "model/Checkpoint.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <string>
#include <vector>

namespace latmix::test {

struct ReferenceLlama {
    const model::Checkpoint& ck;
    const model::ModelConfig& c;
    explicit ReferenceLlama(const model::Checkpoint& k) : ck(k), c(k.config()) {}

    // Optional T1 of the "transformed student" (SPEC §4/§5): the residual stream is A h + v, so
    // every RMSNorm sees A h + v with γ = 1 and the linear layers get γ ⊙ A⁻¹(norm − v), except
    // lm_head, which gets γ ⊙ A⁻¹ norm (no bias: docs/spec.md §4). Set t1A (float64 [d, d]) and
    // t1v ([d] or undefined) to use it; A⁻¹ is a plain inverse here.
    at::Tensor t1A, t1v;

    // Weights used instead of the checkpoint's (float64), by name.
    std::map<std::string, at::Tensor> replaced;
    // Optional: what a runtime does to a linear layer's input before its product with the named
    // weight (tst_gguf_runtime: llama.cpp's Q8_0 rounding of activations that meet MXFP4 weights).
    std::function<at::Tensor(const at::Tensor& x, const std::string& weight)> linearInput;

    at::Tensor w(const std::string& name) const {
        const auto it = replaced.find(name);
        return it != replaced.end() ? it->second.to(at::kDouble) : ck.weight(name).to(at::kDouble);
    }
    at::Tensor in(const at::Tensor& x, const std::string& weight) const { return linearInput ? linearInput(x, weight) : x; }
    at::Tensor lin(const at::Tensor& x, const std::string& weight, bool hasBias) const {
        return linear(in(x, weight + ".weight"), w(weight + ".weight"), wIf(hasBias, weight + ".bias"));
    }
    at::Tensor wIf(bool present, const std::string& name) const { return present ? w(name) : at::Tensor(); }

    // x: [n] -> x / sqrt(mean(x^2) + eps) * g
    static void rmsNormRow(double* x, const double* g, int n, double eps) {
        double ss = 0;
        for (int i = 0; i < n; ++i) ss += x[i] * x[i];
        const double inv = 1.0 / std::sqrt(ss / n + eps);
        for (int i = 0; i < n; ++i) x[i] = x[i] * inv * g[i];
    }
    at::Tensor rmsNorm(at::Tensor x, const at::Tensor& g, bool beforeHead = false) const { // rows of the last dim
        if (t1A.defined() && x.size(-1) == t1A.size(0) && g.size(0) == c.hiddenSize) {
            auto z = at::matmul(x, t1A.t());
            if (t1v.defined()) z = z + t1v;
            z = plainNorm(z, at::ones_like(g));
            if (t1v.defined() && !beforeHead) z = z - t1v;
            return at::matmul(z, at::linalg_inv(t1A).t()) * g;
        }
        return plainNorm(x, g);
    }
    at::Tensor plainNorm(at::Tensor x, const at::Tensor& g) const {
        x = x.clone().contiguous();
        const int n = static_cast<int>(x.size(-1));
        double* p = x.data_ptr<double>();
        auto gc = g.contiguous();
        for (int64_t r = 0; r < x.numel() / n; ++r) rmsNormRow(p + r * n, gc.data_ptr<double>(), n, c.rmsNormEps);
        return x;
    }
    static at::Tensor linear(const at::Tensor& x, const at::Tensor& W, const at::Tensor& b) {
        auto y = at::matmul(x, W.t());
        return b.defined() ? y + b : y;
    }
    double invFreq(int i) const { // i-th of head_dim/2 frequencies, llama3 scaling written out
        double f = std::pow(c.ropeTheta, -2.0 * i / c.headDim);
        if (!c.ropeScaling) return f;
        const auto& s = *c.ropeScaling;
        const double wl = 2 * M_PI / f, lo = s.originalMaxPositions / s.lowFreqFactor,
                     hi = s.originalMaxPositions / s.highFreqFactor;
        if (wl < hi) return f;
        if (wl > lo) return f / s.factor;
        const double t = (s.originalMaxPositions / wl - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor);
        return (1 - t) * f / s.factor + t * f;
    }
    // head vector v of length hd at position p, rotate-half pairs (i, i + hd/2)
    void rope(double* v, int p) const {
        const int half = c.headDim / 2;
        for (int i = 0; i < half; ++i) {
            const double a = p * invFreq(i), x1 = v[i], x2 = v[i + half];
            v[i] = x1 * std::cos(a) - x2 * std::sin(a);
            v[i + half] = x2 * std::cos(a) + x1 * std::sin(a);
        }
    }

    // Mixture of experts (Qwen3-MoE, Mixtral), written from transformers' modeling files: layer l
    // is sparse when (l + 1) % decoder_sparse_step == 0 and l is not in mlp_only_layers.
    bool sparse(int l) const {
        if (!c.moe) return false;
        const auto& d = c.moe->denseLayers;
        return std::find(d.begin(), d.end(), l) == d.end() && (l + 1) % c.moe->sparseStep == 0;
    }
    std::string expert(const std::string& p, int e, const char* qwenName, const char* mixtralName) const {
        const bool mixtral = c.architectureName == "MixtralForCausalLM";
        return p + (mixtral ? "block_sparse_moe.experts." : "mlp.experts.") + std::to_string(e) + "." +
               (mixtral ? mixtralName : qwenName);
    }
    // Per token: softmax over the router's logits, the k largest (ties: the lower index), their
    // probabilities renormalised where the config says, the weighted sum of those experts' SwiGLU.
    // routed counts the tokens each expert gets; smallestGap is the least distance between the k-th
    // and (k+1)-th largest logit seen, to show that float32 routing cannot choose otherwise.
    mutable std::vector<int64_t> routed;
    mutable double smallestGap = 1e300;
    // What each expert's down_proj reads, SiLU(x W_gate^T) * (x W_up^T) of each token routed to
    // it, in token order (and call after call), by the point's name as docs/spec.md spells it:
    // "layers.L.mlp.experts.E.down_proj.input".
    mutable std::map<std::string, std::vector<at::Tensor>> expertInputs;
    at::Tensor mixture(const at::Tensor& x, const std::string& p) const {
        const int E = c.moe->numExperts, k = c.moe->expertsPerToken, T = static_cast<int>(x.size(0));
        const bool mixtral = c.architectureName == "MixtralForCausalLM";
        const auto logits = at::matmul(x, w(p + (mixtral ? "block_sparse_moe.gate.weight" : "mlp.gate.weight")).t()).contiguous();
        const double* lp = logits.data_ptr<double>();
        if (routed.size() != static_cast<size_t>(E)) routed.assign(static_cast<size_t>(E), 0);
        auto y = at::zeros_like(x);
        for (int t = 0; t < T; ++t) {
            std::vector<double> prob(E);
            const double m = *std::max_element(lp + t * E, lp + (t + 1) * E);
            double z = 0;
            for (int e = 0; e < E; ++e) z += (prob[e] = std::exp(lp[t * E + e] - m));
            for (auto& q : prob) q /= z;
            std::vector<int> order(E);
            std::iota(order.begin(), order.end(), 0);
            std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return prob[a] > prob[b]; });
            if (k < E) smallestGap = std::min(smallestGap, lp[t * E + order[k - 1]] - lp[t * E + order[k]]);
            double sum = 0;
            for (int i = 0; i < k; ++i) sum += prob[order[i]];
            for (int i = 0; i < k; ++i) {
                const int e = order[i];
                ++routed[e];
                const double weight = mixtral || c.moe->normTopK ? prob[e] / sum : prob[e];
                const auto xt = x.narrow(0, t, 1);
                const auto g = lin(xt, expert(p, e, "gate_proj", "w1"), false);
                const auto u = lin(xt, expert(p, e, "up_proj", "w3"), false);
                const auto a = g / (1 + at::exp(-g)) * u;
                expertInputs[p.substr(6) + "mlp.experts." + std::to_string(e) + ".down_proj.input"].push_back(a);
                y.narrow(0, t, 1) += weight * lin(a, expert(p, e, "down_proj", "w2"), false);
            }
        }
        return y;
    }

    at::Tensor logits(const std::vector<int64_t>& tokens) const {
        const int T = static_cast<int>(tokens.size()), H = c.numHeads, KV = c.numKvHeads, hd = c.headDim;
        auto embed = w("model.embed_tokens.weight");
        auto h = at::empty({T, c.hiddenSize}, at::kDouble);
        for (int t = 0; t < T; ++t) h[t] = embed[tokens[t]];
        for (int l = 0; l < c.numLayers; ++l) {
            const std::string p = "model.layers." + std::to_string(l) + ".";
            auto x = rmsNorm(h, w(p + "input_layernorm.weight"));
            auto q = lin(x, p + "self_attn.q_proj", c.qkvBias).contiguous();
            auto k = lin(x, p + "self_attn.k_proj", c.qkvBias).contiguous();
            auto v = lin(x, p + "self_attn.v_proj", c.qkvBias).contiguous();
            if (c.qkNorm) {
                q = rmsNorm(q.view({T, H, hd}), w(p + "self_attn.q_norm.weight")).view({T, H * hd});
                k = rmsNorm(k.view({T, KV, hd}), w(p + "self_attn.k_norm.weight")).view({T, KV * hd});
            }
            double* qp = q.data_ptr<double>();
            double* kp = k.data_ptr<double>();
            const double* vp = v.data_ptr<double>();
            for (int t = 0; t < T; ++t) {
                for (int hh = 0; hh < H; ++hh) rope(qp + t * H * hd + hh * hd, t);
                for (int hh = 0; hh < KV; ++hh) rope(kp + t * KV * hd + hh * hd, t);
            }
            auto attn = at::zeros({T, H * hd}, at::kDouble);
            double* ap = attn.data_ptr<double>();
            std::vector<double> s(T);
            for (int hh = 0; hh < H; ++hh) {
                const int kh = hh / (H / KV); // grouped-query: consecutive query heads share a kv head
                for (int t = 0; t < T; ++t) {
                    double m = -1e300;
                    for (int u = 0; u <= t; ++u) {
                        double dot = 0;
                        for (int i = 0; i < hd; ++i) dot += qp[t * H * hd + hh * hd + i] * kp[u * KV * hd + kh * hd + i];
                        s[u] = dot / std::sqrt(double(hd));
                        m = std::max(m, s[u]);
                    }
                    double z = 0;
                    for (int u = 0; u <= t; ++u) z += (s[u] = std::exp(s[u] - m));
                    for (int u = 0; u <= t; ++u)
                        for (int i = 0; i < hd; ++i) ap[t * H * hd + hh * hd + i] += s[u] / z * vp[u * KV * hd + kh * hd + i];
                }
            }
            h = h + lin(attn, p + "self_attn.o_proj", c.oProjBias);
            x = rmsNorm(h, w(p + "post_attention_layernorm.weight"));
            if (sparse(l)) {
                h = h + mixture(x, p);
                continue;
            }
            auto g = lin(x, p + "mlp.gate_proj", c.mlpBias);
            auto u = lin(x, p + "mlp.up_proj", c.mlpBias);
            auto act = g / (1 + at::exp(-g)) * u; // SiLU(g) * u
            h = h + lin(act, p + "mlp.down_proj", c.mlpBias);
        }
        h = rmsNorm(h, w("model.norm.weight"), true);
        auto head = ck.has("lm_head.weight") || replaced.count("lm_head.weight") ? w("lm_head.weight") : embed;
        return at::matmul(in(h, "lm_head.weight"), head.t());
    }
};

} // namespace latmix::test
