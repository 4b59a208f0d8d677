#include "model/QuantizationPoints.h"

namespace latmix::model {
namespace {

const char* kPointSuffix[] = {"self_attn.qkv.input", "self_attn.o_proj.input", "mlp.gate_up.input", "mlp.down_proj.input"};

} // namespace

std::string pointName(int layer, PointKind kind) {
    return "layers." + std::to_string(layer) + "." + kPointSuffix[static_cast<int>(kind)];
}

std::string expertPointName(int layer, int expert, PointKind kind) {
    return "layers." + std::to_string(layer) + ".mlp.experts." + std::to_string(expert) +
           (kind == PointKind::DownProjInput ? ".down_proj.input" : ".gate_up.input");
}

std::vector<std::string> quantizationPointNames(const ModelConfig& config) {
    std::vector<std::string> names;
    // A sparse layer's down_proj inputs are its experts' (expertPointName), each over the tokens
    // routed to it rather than every token: they are not among these [B, T, width] points.
    for (int l = 0; l < config.numLayers; ++l)
        for (int k = 0; k < 4; ++k)
            if (!(config.isSparseLayer(l) && static_cast<PointKind>(k) == PointKind::DownProjInput))
                names.push_back(pointName(l, static_cast<PointKind>(k)));
    return names;
}

int pointWidth(const ModelConfig& c, PointKind kind) {
    switch (kind) {
    case PointKind::OProjInput: return c.numHeads * c.headDim;
    case PointKind::DownProjInput: return c.moe ? c.moe->expertWidth : c.intermediateSize;
    default: return c.hiddenSize;
    }
}

std::vector<std::string> pointNamesWithExperts(const ModelConfig& config) {
    const auto fixed = quantizationPointNames(config);
    std::vector<std::string> names;
    for (int l = 0; l < config.numLayers; ++l) {
        const std::string layer = "layers." + std::to_string(l) + ".";
        for (const auto& n : fixed)
            if (n.rfind(layer, 0) == 0) names.push_back(n);
        if (config.isSparseLayer(l))
            for (int e = 0; e < config.moe->numExperts; ++e) names.push_back(expertPointName(l, e, PointKind::DownProjInput));
    }
    return names;
}

bool isExpertPoint(const std::string& point) { return point.find(".mlp.experts.") != std::string::npos; }

} // namespace latmix::model
