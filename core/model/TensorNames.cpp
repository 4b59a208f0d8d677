#include "model/TensorNames.h"

namespace latmix::model::names {

std::string layerPrefix(int layer) { return "model.layers." + std::to_string(layer) + "."; }

int layerOf(const std::string& name) {
    static const std::string kLayers = "model.layers.";
    if (name.rfind(kLayers, 0) != 0) return -1;
    std::size_t i = kLayers.size();
    int layer = 0;
    bool digits = false;
    for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i, digits = true) layer = layer * 10 + (name[i] - '0');
    return digits && i < name.size() && name[i] == '.' ? layer : -1;
}

std::string shortName(const std::string& module) {
    const auto dot = module.rfind('.');
    return dot == std::string::npos ? module : module.substr(dot + 1);
}

std::string blockLinearOfWeight(const std::string& name) {
    static const std::string kLayers = "model.layers.", kWeight = ".weight";
    if (name.rfind(kLayers, 0) != 0) return "";
    for (const char* m : kBlockLinears) {
        const std::string suffix = "." + std::string(m) + kWeight;
        if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
            return name.substr(0, name.size() - kWeight.size());
    }
    return "";
}

std::vector<std::string> blockLinearPrefixes(int numLayers) {
    std::vector<std::string> r;
    for (int i = 0; i < numLayers; ++i)
        for (const char* m : kBlockLinears) r.push_back(layerPrefix(i) + m);
    return r;
}

} // namespace latmix::model::names

namespace latmix::model {

std::vector<std::pair<std::string, std::vector<int64_t>>> requiredTensors(const ModelConfig& c) {
    const int64_t h = c.hiddenSize, inter = c.intermediateSize, hd = c.headDim;
    const int64_t q = int64_t(c.numHeads) * hd, kv = int64_t(c.numKvHeads) * hd;
    std::vector<std::pair<std::string, std::vector<int64_t>>> r;
    r.push_back({names::kEmbed, {c.vocabSize, h}});
    for (int i = 0; i < c.numLayers; ++i) {
        const std::string p = names::layerPrefix(i);
        r.push_back({p + names::kInputNorm + ".weight", {h}});
        r.push_back({p + names::kQProj + ".weight", {q, h}});
        r.push_back({p + names::kKProj + ".weight", {kv, h}});
        r.push_back({p + names::kVProj + ".weight", {kv, h}});
        r.push_back({p + names::kOProj + ".weight", {h, q}});
        if (c.qkvBias) {
            r.push_back({p + names::kQProj + ".bias", {q}});
            r.push_back({p + names::kKProj + ".bias", {kv}});
            r.push_back({p + names::kVProj + ".bias", {kv}});
        }
        if (c.oProjBias) r.push_back({p + names::kOProj + ".bias", {h}});
        if (c.qkNorm) {
            r.push_back({p + names::kQNorm + ".weight", {hd}});
            r.push_back({p + names::kKNorm + ".weight", {hd}});
        }
        r.push_back({p + names::kPostAttentionNorm + ".weight", {h}});
        r.push_back({p + names::kGateProj + ".weight", {inter, h}});
        r.push_back({p + names::kUpProj + ".weight", {inter, h}});
        r.push_back({p + names::kDownProj + ".weight", {h, inter}});
        if (c.mlpBias) {
            r.push_back({p + names::kGateProj + ".bias", {inter}});
            r.push_back({p + names::kUpProj + ".bias", {inter}});
            r.push_back({p + names::kDownProj + ".bias", {h}});
        }
    }
    r.push_back({names::kFinalNorm, {h}});
    if (!c.tieWordEmbeddings) r.push_back({names::kLmHead, {c.vocabSize, h}});
    if (c.lmHeadBias) r.push_back({names::kLmHeadBias, {c.vocabSize}});
    return r;
}

} // namespace latmix::model
