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

// {"method", "weight_format", "activation_format", "t3", "biases", "lm_head_bias"}; read back
// by ModelConfig::fromJsonText. "biases" {"q_k_v", "o_proj", "mlp"} states c's bias groups
// exactly: the run model (our format) holds whatever biases folding creates, also those its
// family's Hugging Face class has no flag for (Qwen2 o_proj, Qwen3 MLP).
nlohmann::ordered_json latmixJson(const LatmixQuantization& q, const ModelConfig& c);

// Why Hugging Face / vLLM runtimes cannot load a model of c's family with these bias groups, even
// rewritten as another architecture; empty when they can (possibly relabeled, see fixBiasFlags).
// Only MLP biases can be unloadable (Qwen3): every family holds attention biases, as itself or
// as LlamaForCausalLM.
std::string hfBiasProblem(const ModelConfig& c, bool mlpBias);

// Who reads the config fixBiasFlags adapts.
enum class BiasTarget {
    RunModel,  // this workbench (the run model): exact groups, any family, nothing relabeled
    HfRuntime, // Hugging Face / vLLM: the family's own flags, relabeled or refused where it has none
};

// What adapting a config to the tensors of a folded model changed.
struct BiasFix {
    std::vector<std::pair<std::string, std::vector<std::int64_t>>> zeroBiases; // to add, float32 zeros
    std::string relabeledFrom; // architecture name when the config was rewritten as LlamaForCausalLM
    bool qkvBias = false, oProjBias = false, mlpBias = false; // the groups the config now declares
};

// Sets, in the Hugging Face config j, what the tensors present (has(name)) determine, and
// tie_word_embeddings false when lm_head.weight exists. Bias groups: q/k/v (any of the three
// makes all three), o_proj, gate/up/down. For BiasTarget::RunModel the groups are kept exactly
// (the caller records them in latmix.biases); Hugging Face's attention_bias / mlp_bias are set
// where the family has them. For BiasTarget::HfRuntime the family's flags must hold the biases:
// attention_bias covers q,k,v,o and mlp_bias gate,up,down (Llama, Mistral, Qwen3 attention);
// architectures whose class cannot hold them are rewritten as the equivalent LlamaForCausalLM:
// Qwen2 with o_proj or MLP biases, Mistral with any bias (MistralForCausalLM ignores the flags);
// Qwen3 with MLP biases throws (hfBiasProblem). Returns the zero biases the flags now require and
// that are missing.
BiasFix fixBiasFlags(nlohmann::ordered_json& j, const std::function<bool(const std::string&)>& has, BiasTarget target,
                     const std::string& source);

} // namespace latmix::model
