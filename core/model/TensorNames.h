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

// The layer index of a decoder layer's tensor name ("model.layers.12.mlp.up_proj.weight" → 12), -1
// for any other name.
int layerOf(const std::string& name);

// "self_attn.q_proj" → "q_proj".
std::string shortName(const std::string& module);

// Prefix of a block linear weight name ("model.layers.3.self_attn.q_proj.weight" →
// "model.layers.3.self_attn.q_proj"), or "" when the name is not the weight of a block linear.
std::string blockLinearOfWeight(const std::string& name);

// Every block linear prefix of a model of numLayers layers, layer-major, kBlockLinears order.
std::vector<std::string> blockLinearPrefixes(int numLayers);

} // namespace latmix::model::names

namespace latmix::model {

// The tensors (Hugging Face names) the Llama-family decoder reads for this config and the
// shape each must have (SPEC §4); Checkpoint::load checks them. Biases, q_norm/k_norm and lm_head appear
// only when the config calls for them.
std::vector<std::pair<std::string, std::vector<std::int64_t>>> requiredTensors(const ModelConfig& config);

} // namespace latmix::model
