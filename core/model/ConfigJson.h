#pragma once
// JSON of the "latmix" config.json object and of an MX format, written in one place for
// config.json (ModelConfig), the run model (run/RunModel) and latmix.json (run/QuantizeRun), and
// the bias flags of a folded model's config (run/RunModel, export/Export).
// Internal to latmix_core: nlohmann_json is a private dependency, include only from .cpp files.
#include "model/ModelConfig.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace latmix::model {

// {"format": "mxfp4", "block": 32, "scale_mode": "floor"}, or null for no format.
nlohmann::ordered_json mxConfigJson(const std::optional<mx::MxConfig>& f);

// {"method", "weight_format", "activation_format", "t3", "lm_head_bias"}; read back
// by ModelConfig::fromJsonText.
nlohmann::ordered_json latmixJson(const LatmixQuantization& q, bool lmHeadBias);

// What adapting a config to the tensors of a folded model changed.
struct BiasFix {
    std::vector<std::pair<std::string, std::vector<std::int64_t>>> zeroBiases; // to add, float32 zeros
    std::string relabeledFrom; // architecture name when the config was rewritten as LlamaForCausalLM
};

// Sets, in the Hugging Face config j, what the tensors present (has(name)) determine:
// attention_bias / mlp_bias (one flag per group: q,k,v,o and gate,up,down), tie_word_embeddings
// false when lm_head.weight exists. Architectures whose Hugging Face class cannot hold the
// biases are rewritten as the equivalent LlamaForCausalLM: Qwen2 with o_proj or MLP biases, and,
// for Hugging Face runtimes (forHfRuntime), Mistral with any bias (MistralForCausalLM ignores
// attention_bias / mlp_bias; this workbench's decoder reads them). Qwen3 with MLP biases throws
// (Qwen3 needs its q/k norms, Llama has none). Returns the zero biases the group flags now
// require and that are missing.
BiasFix fixBiasFlags(nlohmann::ordered_json& j, const std::function<bool(const std::string&)>& has,
                     bool forHfRuntime, const std::string& source);

} // namespace latmix::model
