#pragma once
// Fusion groups (docs/spec.md, "Mixed precision"): the linears a runtime fuses into one kernel or
// that read one quantized input, and so take one format together. Per layer: q/k/v (one qkv input;
// vLLM's QKVParallelLinear, llama.cpp's fused QKV), o_proj, gate/up (one input; vLLM's
// MergedColumnParallelLinear) and down_proj; in a sparse layer its experts all together (vLLM's
// FusedMoE holds one quantization method for every expert of a layer, and they share the gate/up
// input). No tensors here.
#include "model/ModelConfig.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace latmix::model {

struct FusionGroup {
    // "layers.3.self_attn.qkv", "layers.3.self_attn.o_proj", "layers.3.mlp.gate_up",
    // "layers.3.mlp.down_proj", a sparse layer's "layers.3.mlp.experts"
    std::string name;
    int layer = 0;
    std::vector<std::string> linears; // module names, "model.layers.3.self_attn.q_proj", in the model's order
    // The activation quantization points whose format is the group's (QuantizationPoints.h names):
    // its input point, and in a sparse layer each expert's own down_proj input too.
    std::vector<std::string> points;
    std::int64_t weights = 0; // weight elements of its linears (biases not counted)
};

// Every fusion group of the model, layer by layer in the order above. Together their linears are
// names::blockLinearPrefixes(config), each once.
std::vector<FusionGroup> fusionGroups(const ModelConfig& config);

// The groups a run gives another format (LatmixQuantization::groupFormats: group name → format)
// by their linears' module names, and by their activation points (ForwardOptions::pointQuant).
// Throws std::runtime_error naming a group the model does not have.
using GroupFormats = std::map<std::string, mx::MxConfig>;
std::map<std::string, mx::MxConfig> groupLinearFormats(const ModelConfig& config, const GroupFormats& groupFormats);
std::map<std::string, std::optional<mx::MxConfig>> groupPointFormats(const ModelConfig& config, const GroupFormats& groupFormats);

} // namespace latmix::model
