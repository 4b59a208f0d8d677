#pragma once
// The Llama-family decoder in libtorch (Llama, Mistral, Qwen2, Qwen3; GQA; tied embeddings;
// llama3 RoPE scaling), float32 or bfloat16, CPU or CUDA, with named hooks at every
// activation quantization point of SPEC §4. The weights it runs are model/LlamaWeights.h's, the
// device names it takes model/Device.h's.
#include "model/Device.h"
#include "model/LlamaWeights.h"
#include "model/ModelConfig.h"
#include "model/QuantizationPoints.h"
#include "mx/MxFormat.h"
#include "transforms/BlockDiagonal.h"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <array>
#include <functional>
#include <map>
#include <set>
#include <optional>
#include <string>
#include <vector>

namespace latmix::model {

class Checkpoint;

// Called with the activation entering the linear layer(s) of a point, shape [B, T, width];
// returns what the linear layers get (return x unchanged to observe only).
using ActivationHook = std::function<at::Tensor(const std::string& point, const at::Tensor& x)>;

// What the forward pass does besides the weights: the online block Hadamard T3 on the down_proj
// input (x → x T3ᵀ, SPEC §4) and MX fake quantization of the activations at the four points.
// Order at a point: T3 (down_proj only), then quantization, then the hook, then the linear: the
// hook sees exactly what the linear gets.
struct ForwardOptions {
    transforms::BlockDiagonal t3; // T3: [intermediate]² block-diagonal orthogonal, or undefined
    // Online transforms of a point's input before its quantization (WUSH, SPEC §4), indexed
    // [layer][PointKind]: x → T x (the linears hold W T⁻¹); undefined entries and layers beyond
    // the vector: none.
    std::vector<std::array<transforms::BlockDiagonal, 4>> inputTransforms;
    // Linears kept in full precision (SPEC §4 "Kept linears"), by module name
    // ("model.layers.0.self_attn.q_proj"): they read their point's input unquantized and untransformed
    // (T3 stays: its inverse is in W_down).
    std::set<std::string> keptLinears;
    std::optional<mx::MxConfig> activationQuant;
    // The activation format of single points by name (pointName, expertPointName), in place of
    // activationQuant there: a mixed-precision scheme's groups (docs/spec.md, "Mixed precision"),
    // a sensitivity measurement's one quantized group. A nullopt entry leaves the point unquantized.
    std::map<std::string, std::optional<mx::MxConfig>> pointQuant;
    // The dtype activations are computed in; unset: the embedding table's. Weights stored in
    // another dtype are converted one layer at a time as the pass reaches them.
    std::optional<at::ScalarType> dtype;
    // Several sequences packed in one row (zero-shot scoring: one context followed by each
    // choice's tokens, the context computed once). positions: int64 [B, T], each token's RoPE
    // position; visible: bool [B, T, T], which keys each query attends to (true: visible),
    // never a later token. Undefined (the default): positions 0..T-1 and the causal mask.
    at::Tensor positions, visible;
};

// The forward options a quantized run's config asks for (its "latmix" object): T3 built from
// the block and seed, activation quantization from the activation format.
ForwardOptions forwardOptionsFor(const ModelConfig& config, at::ScalarType dtype, c10::Device device,
                                 bool quantizeActivations = true);

// The weights of the linears that read a point of a dense layer, stacked along their outputs:
// [q; k; v] for the qkv input, [gate; up] for the gate/up input, o_proj's and down_proj's alone
// ([out, width]; WUSH's fused form, SPEC §2). Linears named in `kept` are left out (undefined
// when every one is). Sparse layers have no such stack for the MLP (throws std::invalid_argument).
at::Tensor pointWeights(const ModelConfig& config, const LayerWeights& y, int layer, PointKind kind,
                        const std::set<std::string>& kept = {});

// The online input transforms of a run model folder (ForwardOptions::inputTransforms) from its
// input_transforms.safetensors: one [nb, B, B] tensor "<point name>.transform" per transformed
// point (and "<point name>.transform_tail" [r, r] where B does not divide the width). Throws
// naming the file and the tensor when one is missing or misshapen.
std::vector<std::array<transforms::BlockDiagonal, 4>> loadInputTransforms(const std::string& modelDir, const ModelConfig& config,
                                                                          const at::TensorOptions& options);
inline constexpr const char* kInputTransformsFile = "input_transforms.safetensors";

// Cos/sin tables of RoPE for positions 0..T-1 ([T, head_dim], rotate-half layout).
struct RopeTables {
    at::Tensor cos, sin;
};
RopeTables ropeTables(const ModelConfig& config, std::int64_t T, at::ScalarType dtype, c10::Device device);

// The pieces of a forward pass, for layer-by-layer work (GPTQ) and differentiable weights
// (training): they work with whatever tensors w holds, autograd included.
at::Tensor embedTokens(const ModelConfig& config, const LlamaWeights& w, const at::Tensor& tokens);
// RMSNorm as Hugging Face computes it: statistics in float32 (float64 for float64 input), cast
// back, then the weight.
at::Tensor rmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);
// Causal attention over T tokens takes its queries in blocks of this many (all of them up to 512):
// the scores are [B, heads, block, keys], not [B, heads, T, T]. The memory estimates count one block.
std::int64_t attentionQueryBlock(std::int64_t T);

// RoPE's inverse frequencies theta^(-2i/d), i < head_dim/2, float64, with the config's llama3
// scaling applied (the GGUF export writes their ratio to the unscaled ones as rope_freqs).
at::Tensor ropeInverseFrequencies(const ModelConfig& c);
at::Tensor decoderLayer(const ModelConfig& config, const LayerWeights& w, const ForwardOptions& options,
                        const at::Tensor& h, const RopeTables& rope, int layer, const ActivationHook& hook = nullptr);
at::Tensor lmHead(const ModelConfig& config, const LlamaWeights& w, const at::Tensor& h); // float32 logits
// The hidden states after the last decoder layer, before the final norm ([B, T, hidden]).
// Layers whose tensors are in host memory or in another dtype than the computation are
// converted one at a time as the pass reaches them (layer-wise offload, weights kept as stored);
// for layers on another accelerator the hidden states move there (layerComputeDevice; the
// options' T3 must then be undefined or on that device).
// layerOutputs, when given, receives the hidden states after each decoder layer (the last one is
// the result), on the devices they were computed on.
at::Tensor forwardHidden(const ModelConfig& config, const LlamaWeights& w, const ForwardOptions& options,
                         const at::Tensor& tokens, const ActivationHook& hook = nullptr,
                         std::vector<at::Tensor>* layerOutputs = nullptr);
at::Tensor forwardWith(const ModelConfig& config, const LlamaWeights& w, const ForwardOptions& options,
                       const at::Tensor& tokens, const ActivationHook& hook = nullptr);
// -log p(targets[i] | hidden[i]) for hidden [N, hidden] (before the final norm) and int64 targets
// [N]: float32 [N]. The logits are never formed whole: lm_head is applied vocabChunk rows at a
// time (converted from its stored dtype chunk by chunk) with a running log-sum-exp, so memory
// is N x vocabChunk instead of N x vocab.
at::Tensor nextTokenNll(const ModelConfig& config, const LlamaWeights& w, const at::Tensor& hidden,
                        const at::Tensor& targets, std::int64_t vocabChunk = 16384);
// The same pass, also telling whether each target is the greedy (largest-logit) token: bool [N].
// A tie with another token counts as greedy.
struct NextTokenScores {
    at::Tensor nll, greedy;
};
NextTokenScores nextTokenScores(const ModelConfig& config, const LlamaWeights& w, const at::Tensor& hidden,
                                const at::Tensor& targets, std::int64_t vocabChunk = 16384);

class LlamaModel {
public:
    // The weights stay as stored (on the CPU memory-mapped, no copy; on a GPU copied in the
    // file's dtype) and each decoder layer is converted to dtype when the pass reaches it, so a
    // bf16 checkpoint evaluated in float32 needs its size plus one float32 layer; bf16 on a GPU
    // and on the CPU is converted once (never wider than the file).
    // A quantized run's model (config with a "latmix" object) gets its online Hadamard and
    // activation quantization from the config; quantizeActivations = false leaves them out
    // (weight-only evaluation; T3 stays: with exact arithmetic it changes nothing).
    // offload: the decoder layers stay in host memory and visit the device one at a time
    // (offloadLayers), for models larger than the device's memory.
    LlamaModel(const Checkpoint& checkpoint, at::ScalarType dtype = at::kFloat, c10::Device device = c10::kCPU,
               bool quantizeActivations = true, bool offload = false);
    // From tensors already in memory (folded or quantized weights); they must be in dtype on device.
    LlamaModel(ModelConfig config, LlamaWeights weights, ForwardOptions options = {});
    ~LlamaModel();
    LlamaModel(LlamaModel&&) noexcept;

    const ModelConfig& config() const { return m_config; }
    const LlamaWeights& weights() const { return m_w; }
    const ForwardOptions& options() const { return m_options; }
    at::ScalarType dtype() const { return m_dtype; }
    c10::Device device() const { return m_device; }

    // tokens: int64 [B, T] with T <= max positions. Returns float32 logits [B, T, vocab].
    at::Tensor forward(const at::Tensor& tokens, const ActivationHook& hook = nullptr) const;
    // Sum over positions t < T-1 of -log p(tokens[b, t+1] | tokens[b, ..t]), float64, without
    // forming [B, T, vocab] logits (nextTokenNll).
    double sequenceNll(const at::Tensor& tokens) const;

    // FLOPs of one forward pass over T tokens (2 per multiply-add, attention included).
    double forwardFlops(std::int64_t tokens) const;

private:
    ModelConfig m_config;
    at::ScalarType m_dtype;
    c10::Device m_device;
    LlamaWeights m_w;
    ForwardOptions m_options;
};

} // namespace latmix::model
