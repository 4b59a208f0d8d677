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
