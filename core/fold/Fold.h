#pragma once
// Folding transforms into the weights of a Llama-family decoder (SPEC §4). Every function here
// is made of differentiable tensor operations: training (core/train) folds the learned T1/T2 into
// the student's weights at every step, the pipeline folds the final ones once (in float64).
//
//   RMSNorm γ  → W·diag(γ) of the following linears (q,k,v / gate,up / lm_head), norms set to 1
//   T1 (d_model, x ↦ A1 x + v1, one per model): embedding rows A1 w + v1; q,k,v,gate,up
//              W A1⁻¹ with bias b − W A1⁻¹ v1; o_proj and down_proj A1 W, A1 b; lm_head W A1⁻¹
//              with bias −W A1⁻¹ v1
//   T2 (head_dim, one per layer, shared by all heads): value rows per kv head A2 W_v,h with
//              bias A2 b_v,h + v2; o_proj columns per attention head W_o blockdiag(A2⁻¹) and
//              bias b_o − W_o blockdiag(A2⁻¹) v2 (exact: attention rows sum to 1)
//   T3 (intermediate, orthogonal, online): W_down T3ᵀ; the forward pass applies x ↦ x T3ᵀ to
//              the down_proj input (model::ForwardOptions::t3)
//   Sparse (mixture-of-experts) layers: the post-attention γ and T1's A⁻¹ go into the router and
//   every expert's gate/up, T1's A into every expert's down_proj, T3 onto every expert's
//   down_proj; T1 must have no bias there (neither router nor experts hold one).
#include "model/LlamaModel.h"

#include <ATen/core/Tensor.h>

#include <vector>

namespace latmix::fold {

// A, A⁻¹ (computed by the transform with triangular solves / transposes) and v (undefined: no bias).
struct AffineMatrices {
    at::Tensor a, aInv, v;
    // d where A = H_n·diag(d), A orthogonal and aInv = Aᵀ (AffineTransform::hadamardDiagonal):
    // the folds then multiply by H_n's construction (transforms::hadamardRows: butterflies, and
    // a small dense Paley factor where n is not a power of two), the same product in about
    // n·log2(n) instead of n² operations per row (a Llama-3 embedding: seconds, not a minute).
    at::Tensor hadamardDiagonal;
    bool defined() const { return a.defined(); }
};

// γ of input_layernorm into q/k/v, of post_attention_layernorm into gate/up, of the final norm
// into lm_head; the norms become ones and lm_head is untied from the embedding.
model::LlamaWeights foldNorms(const model::ModelConfig& config, const model::LlamaWeights& w);

// T1 on weights whose norms are folded (foldNorms). Exact for orthogonal A1 with v1 = 0; otherwise
// RMSNorm sees the transformed residual and the result only approximates the original model.
model::LlamaWeights applyT1(const model::ModelConfig& config, const model::LlamaWeights& w, const AffineMatrices& t1);

// T2 of every layer (t2.size() == layers; an undefined entry leaves that layer alone). Exact.
model::LlamaWeights applyT2(const model::ModelConfig& config, const model::LlamaWeights& w,
                            const std::vector<AffineMatrices>& t2);

// W_down ← W_down T3ᵀ for every layer (t3 orthogonal [intermediate, intermediate]); the forward
// pass must then apply T3 online (ForwardOptions::t3 = t3).
model::LlamaWeights applyT3(const model::LlamaWeights& w, const transforms::BlockDiagonal& t3);
// W_down ← W_down T3: undoes applyT3, for runtimes without the online Hadamard (export hf).
model::LlamaWeights unfoldT3(const model::LlamaWeights& w, const transforms::BlockDiagonal& t3);

// The config of folded weights: bias groups (q/k/v, o_proj, gate/up/down) exactly as the
// tensors present make them, for any family (Qwen2 with an o_proj bias, Qwen3 with MLP biases:
// the run model holds them; the export decides what a runtime can load), lm_head untied, lm_head
// bias. Zero biases are added to w where one member of a group has a bias and another has none.
// The same folds a layer or the top-level tensors at a time (embed, final norm, lm_head of a
// LlamaWeights whose layers are not touched), for folding a model layer by layer without a
// float64 copy of the whole (run/QuantizeRun). The whole-model functions above are made of these.
void foldLayerNorms(model::LayerWeights& y);
void foldTopLevelNorm(model::LlamaWeights& w);
void applyT1ToLayer(const model::ModelConfig& config, model::LayerWeights& y, const AffineMatrices& t1);
void applyT1ToTopLevel(const model::ModelConfig& config, model::LlamaWeights& w, const AffineMatrices& t1);
void applyT2ToLayer(const model::ModelConfig& config, model::LayerWeights& y, const AffineMatrices& t2, int layer);
void applyT3ToLayer(model::LayerWeights& y, const transforms::BlockDiagonal& t3);

// One decoder layer folded as a run computes it (SPEC §4): γ into the linears after each norm,
// T3 on W_down, then T1 and T2 (undefined t3 / matrices: absent). y: the layer already in the
// dtype and device the fold runs in. The one fold of a layer: the training's student
// (differentiable in t1 and t2), the run's folded spill and the analysis views all call it.
void foldLayer(const model::ModelConfig& config, model::LayerWeights& y, int layer, const transforms::BlockDiagonal& t3,
               const AffineMatrices& t1, const AffineMatrices& t2);
// One expert of a sparse layer as foldLayer folds it: γ of the post-attention norm (postNorm, the
// layer's before folding) into gate and up, T3 on down, then T1 (refused with a bias v). foldLayer
// calls it for each expert; fold::foldedLayer an expert at a time from the checkpoint, so that a
// layer of a mixture of experts is never whole in float64.
void foldExpert(model::ExpertWeights& x, const at::Tensor& postNorm, const transforms::BlockDiagonal& t3,
                const AffineMatrices& t1);

model::ModelConfig foldedConfig(const model::ModelConfig& config, model::LlamaWeights& w);

} // namespace latmix::fold
