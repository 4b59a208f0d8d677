#pragma once
// The sparse MLP of Qwen3-MoE and Mixtral (docs/spec.md "Mixture of experts"): routing exactly as
// Hugging Face computes it and the weighted sum of the chosen experts' SwiGLU outputs.
#include "model/LlamaModel.h"

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

namespace latmix::model {

// Each token's chosen experts and their weights, as Qwen3MoeSparseMoeBlock / MixtralSparseMoeBlock
// compute them: the router's logits in the activation dtype, softmax over all experts in float32,
// the expertsPerToken largest probabilities (descending), divided by their sum where normTopK,
// cast back to the activation dtype.
struct Routing {
    at::Tensor experts; // int64 [N, k]
    at::Tensor weights; // [N, k], the activation dtype
};
Routing routeTokens(const MoeConfig& moe, const at::Tensor& router, const at::Tensor& x);

// What expert `expert`'s linears get, rows [tokens routed to it, width]: kind GateUpInput with its
// rows of the (already quantized) shared input x, kind DownProjInput with its activation
// SiLU(x W_gate^T) * (x W_up^T) (T3, activation quantization and hooks: LlamaModel's points).
using ExpertPoint = std::function<at::Tensor(int expert, PointKind kind, const at::Tensor& rows)>;

// y = sum over each token's chosen experts e of weight_e * Expert_e(x), for x [N, hidden];
// routerInput is what the router reads (the same tokens; the unquantized activations, see
// docs/spec.md). Only experts with routed tokens run, each on its own tokens in token order (an
// expert's point gets its rows in the order the tokens come); the sum is formed in the activation
// dtype as Hugging Face's index_add_ does.
at::Tensor sparseMlp(const MoeConfig& moe, const at::Tensor& router, const std::vector<ExpertWeights>& experts,
                     const at::Tensor& routerInput, const at::Tensor& x, const ExpertPoint& point);

} // namespace latmix::model
