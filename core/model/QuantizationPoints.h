#pragma once
// The activation quantization points of SPEC §4 by name and width: what the views, the CLI and
// run files call a point. No tensors here; the decoder that computes them is model/LlamaModel.h.
#include "model/ModelConfig.h"

#include <string>
#include <vector>

namespace latmix::model {

// The four activation quantization points of a layer (SPEC §4).
enum class PointKind { QkvInput, OProjInput, GateUpInput, DownProjInput };

// "layers.3.self_attn.qkv.input", "layers.3.self_attn.o_proj.input",
// "layers.3.mlp.gate_up.input", "layers.3.mlp.down_proj.input"
std::string pointName(int layer, PointKind kind);
// The inputs of a sparse layer's expert: "layers.3.mlp.experts.5.gate_up.input" (kind GateUpInput:
// its rows of the shared, already quantized gate/up input, seen by hooks only) and
// "layers.3.mlp.experts.5.down_proj.input" (a quantization point of its own). Hooks get
// [1, tokens routed to the expert, width].
std::string expertPointName(int layer, int expert, PointKind kind);
std::vector<std::string> quantizationPointNames(const ModelConfig& config);
// Width of the activation at a point: hidden, heads*head_dim, hidden, intermediate.
int pointWidth(const ModelConfig& config, PointKind kind);

// quantizationPointNames and, after each sparse layer's, its experts' own down_proj input points
// (expertPointName, "layers.L.mlp.experts.E.down_proj.input", experts in order): every point an
// in-memory capture can reach. Unlike the [B, T, width] points, an expert's gets only the tokens
// routed to it: a different number of rows per expert and window, none for an idle expert.
std::vector<std::string> pointNamesWithExperts(const ModelConfig& config);
// Whether point is one of an expert's own points (expertPointName).
bool isExpertPoint(const std::string& point);

} // namespace latmix::model
