#include "model/TensorNames.h"

#include <algorithm>
#include <iterator>

namespace latmix::model::names {

std::string layerPrefix(int layer) { return "model.layers." + std::to_string(layer) + "."; }

std::string routerModule(const ModelConfig& c) {
    return c.architecture == Architecture::Mixtral ? "block_sparse_moe.gate" : "mlp.gate";
}

std::string expertModule(const ModelConfig& c, int expert, ExpertLinear linear) {
    const bool mixtral = c.architecture == Architecture::Mixtral;
    static const char* kQwen[] = {"gate_proj", "up_proj", "down_proj"};
    static const char* kMixtral[] = {"w1", "w3", "w2"};
    const int i = static_cast<int>(linear);
    return std::string(mixtral ? "block_sparse_moe" : "mlp") + ".experts." + std::to_string(expert) + "." +
           (mixtral ? kMixtral[i] : kQwen[i]);
}

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

namespace {
bool endsWith(const std::string& s, const std::string& suffix) {
    return s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "…(mlp|block_sparse_moe).experts.<digits>.<linear>" with linear one of an expert's three.
bool isExpertLinear(const std::string& prefix) {
    static const char* kLinears[] = {"gate_proj", "up_proj", "down_proj", "w1", "w2", "w3"};
    const auto dot = prefix.rfind('.');
    if (dot == std::string::npos) return false;
    const std::string linear = prefix.substr(dot + 1), head = prefix.substr(0, dot);
    if (std::find(std::begin(kLinears), std::end(kLinears), linear) == std::end(kLinears)) return false;
    const auto digits = head.find_last_not_of("0123456789");
    if (digits == std::string::npos || digits + 1 == head.size()) return false;
    const std::string block = head.substr(0, digits + 1);
    return endsWith(block, ".mlp.experts.") || endsWith(block, ".block_sparse_moe.experts.");
}
} // namespace

std::string blockLinearOfWeight(const std::string& name) {
    static const std::string kLayers = "model.layers.", kWeight = ".weight";
    if (name.rfind(kLayers, 0) != 0 || !endsWith(name, kWeight)) return "";
    const std::string prefix = name.substr(0, name.size() - kWeight.size());
    for (const char* m : kBlockLinears)
        if (endsWith(prefix, "." + std::string(m))) return prefix;
    return isExpertLinear(prefix) ? prefix : "";
}

std::string linearKind(const std::string& linear) {
    static const std::string kExperts = ".experts.";
    const auto at = linear.find(kExperts);
    if (at == std::string::npos) return linear;
    const auto digits = at + kExperts.size(), end = linear.find_first_not_of("0123456789", digits);
    if (end == digits || end == std::string::npos || linear[end] != '.') return linear;
    return linear.substr(0, digits) + linear.substr(end + 1);
}

bool isDownProj(const std::string& p) {
    return endsWith(p, ".mlp.down_proj") || (isExpertLinear(p) && (endsWith(p, ".down_proj") || endsWith(p, ".w2")));
}

std::vector<std::string> blockLinearPrefixes(const ModelConfig& c) {
    std::vector<std::string> r;
    for (int i = 0; i < c.numLayers; ++i) {
        const std::string p = layerPrefix(i);
        for (const char* m : {kQProj, kKProj, kVProj, kOProj}) r.push_back(p + m);
        if (!c.isSparseLayer(i)) {
            for (const char* m : {kGateProj, kUpProj, kDownProj}) r.push_back(p + m);
            continue;
        }
        for (int e = 0; e < c.moe->numExperts; ++e)
            for (auto k : {ExpertLinear::Gate, ExpertLinear::Up, ExpertLinear::Down}) r.push_back(p + expertModule(c, e, k));
    }
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
        if (c.isSparseLayer(i)) {
            const int64_t e = c.moe->numExperts, width = c.moe->expertWidth;
            r.push_back({p + names::routerModule(c) + ".weight", {e, h}});
            for (int x = 0; x < e; ++x) {
                r.push_back({p + names::expertModule(c, x, names::ExpertLinear::Gate) + ".weight", {width, h}});
                r.push_back({p + names::expertModule(c, x, names::ExpertLinear::Up) + ".weight", {width, h}});
                r.push_back({p + names::expertModule(c, x, names::ExpertLinear::Down) + ".weight", {h, width}});
            }
            continue;
        }
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
