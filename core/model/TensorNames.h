#pragma once
// The Hugging Face Llama tensor names (Llama, Mistral, Qwen2, Qwen3 share them), spelled once.
// A decoder layer's tensors are layerPrefix(i) + module + ".weight" / ".bias".
#include "model/ModelConfig.h"

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace latmix::model::names {

inline constexpr const char* kEmbed = "model.embed_tokens.weight";
inline constexpr const char* kFinalNorm = "model.norm.weight";
inline constexpr const char* kLmHead = "lm_head.weight";
inline constexpr const char* kLmHeadBias = "lm_head.bias";

// Modules of a decoder layer (after layerPrefix).
inline constexpr const char* kInputNorm = "input_layernorm";
inline constexpr const char* kPostAttentionNorm = "post_attention_layernorm";
inline constexpr const char* kQNorm = "self_attn.q_norm"; // Qwen3
inline constexpr const char* kKNorm = "self_attn.k_norm"; // Qwen3
inline constexpr const char* kQProj = "self_attn.q_proj";
inline constexpr const char* kKProj = "self_attn.k_proj";
inline constexpr const char* kVProj = "self_attn.v_proj";
inline constexpr const char* kOProj = "self_attn.o_proj";
inline constexpr const char* kGateProj = "mlp.gate_proj";
inline constexpr const char* kUpProj = "mlp.up_proj";
inline constexpr const char* kDownProj = "mlp.down_proj";

// The seven block linears in layer order: q, k, v, o, gate, up, down.
inline constexpr std::array<const char*, 7> kBlockLinears = {kQProj, kKProj, kVProj, kOProj, kGateProj, kUpProj, kDownProj};

// "model.layers.<i>."
std::string layerPrefix(int layer);

// The sparse MLP of a mixture-of-experts layer, as the Hub checkpoints store it (one 2-D tensor
// per expert and linear; transformers 5 fuses them in memory only and splits them again on save):
// Qwen3-MoE "mlp.gate", "mlp.experts.<e>.{gate,up,down}_proj"; Mixtral "block_sparse_moe.gate",
// "block_sparse_moe.experts.<e>.{w1,w3,w2}" (w1 gate, w3 up, w2 down).
enum class ExpertLinear { Gate, Up, Down };
std::string routerModule(const ModelConfig& config);
std::string expertModule(const ModelConfig& config, int expert, ExpertLinear linear);

// The layer index of a decoder layer's tensor name ("model.layers.12.mlp.up_proj.weight" → 12), -1
// for any other name.
int layerOf(const std::string& name);

// "self_attn.q_proj" → "q_proj".
std::string shortName(const std::string& module);

// Prefix of a block linear weight name ("model.layers.3.self_attn.q_proj.weight" →
// "model.layers.3.self_attn.q_proj"; an expert's "model.layers.3.mlp.experts.5.up_proj.weight" →
// "model.layers.3.mlp.experts.5.up_proj"), or "" when the name is not the weight of a block linear
// (a router is not: it stays unquantized).
std::string blockLinearOfWeight(const std::string& name);

// An expert's linear under the name of its kind, for tables over experts:
// "mlp.experts.5.up_proj" → "mlp.experts.up_proj"; any other name as it is.
std::string linearKind(const std::string& linear);

// Whether a block linear prefix is a down_proj (the dense one or an expert's: "…mlp.down_proj",
// "…mlp.experts.5.down_proj", "…block_sparse_moe.experts.5.w2"): the linears T3 acts on.
bool isDownProj(const std::string& linearPrefix);

// Every block linear prefix of the model, layer-major: q, k, v, o, then gate, up, down of the dense
// MLP or of each expert in turn.
std::vector<std::string> blockLinearPrefixes(const ModelConfig& config);

} // namespace latmix::model::names

namespace latmix::model {

// The tensors (Hugging Face names) the Llama-family decoder reads for this config and the
// shape each must have (SPEC §4); Checkpoint::load checks them. Biases, q_norm/k_norm and lm_head appear
// only when the config calls for them.
std::vector<std::pair<std::string, std::vector<std::int64_t>>> requiredTensors(const ModelConfig& config);

} // namespace latmix::model
