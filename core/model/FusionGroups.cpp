#include "model/FusionGroups.h"

#include "model/QuantizationPoints.h"
#include "model/TensorNames.h"

#include <map>
#include <stdexcept>

namespace latmix::model {

namespace {

std::int64_t elements(const std::vector<std::int64_t>& shape) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
}

} // namespace

std::vector<FusionGroup> fusionGroups(const ModelConfig& c) {
    std::map<std::string, std::int64_t> sizes;
    for (const auto& [name, shape] : requiredTensors(c)) sizes[name] = elements(shape);
    const auto weightsOf = [&](const std::string& linear) { return sizes.at(linear + ".weight"); };
    std::vector<FusionGroup> r;
    for (int l = 0; l < c.numLayers; ++l) {
        const std::string prefix = names::layerPrefix(l), at = "layers." + std::to_string(l) + ".";
        auto add = [&](const std::string& name, std::vector<std::string> linears, std::vector<std::string> points) {
            FusionGroup g{at + name, l, std::move(linears), std::move(points), 0};
            for (const auto& m : g.linears) g.weights += weightsOf(m);
            r.push_back(std::move(g));
        };
        add("self_attn.qkv", {prefix + names::kQProj, prefix + names::kKProj, prefix + names::kVProj},
            {pointName(l, PointKind::QkvInput)});
        add("self_attn.o_proj", {prefix + names::kOProj}, {pointName(l, PointKind::OProjInput)});
        if (!c.isSparseLayer(l)) {
            add("mlp.gate_up", {prefix + names::kGateProj, prefix + names::kUpProj}, {pointName(l, PointKind::GateUpInput)});
            add("mlp.down_proj", {prefix + names::kDownProj}, {pointName(l, PointKind::DownProjInput)});
            continue;
        }
        std::vector<std::string> linears, points{pointName(l, PointKind::GateUpInput)};
        for (int e = 0; e < c.moe->numExperts; ++e) {
            for (auto k : {names::ExpertLinear::Gate, names::ExpertLinear::Up, names::ExpertLinear::Down})
                linears.push_back(prefix + names::expertModule(c, e, k));
            points.push_back(expertPointName(l, e, PointKind::DownProjInput));
        }
        add("mlp.experts", std::move(linears), std::move(points));
    }
    return r;
}

namespace {

// Each group of the run's groupFormats with its format, checked against the model's groups.
std::vector<std::pair<FusionGroup, mx::MxConfig>> formattedGroups(const ModelConfig& c, const GroupFormats& formats) {
    std::vector<std::pair<FusionGroup, mx::MxConfig>> r;
    if (formats.empty()) return r;
    std::size_t found = 0;
    for (auto& g : fusionGroups(c)) {
        const auto it = formats.find(g.name);
        if (it == formats.end()) continue;
        ++found;
        r.emplace_back(std::move(g), it->second);
    }
    if (found != formats.size())
        for (const auto& [name, f] : formats) {
            bool known = false;
            for (const auto& [g, gf] : r) known = known || g.name == name;
            if (!known)
                throw std::runtime_error("latmix.group_formats names " + name + ", which is not a fusion group of this " +
                                         c.architectureName + " model (names like layers.0.self_attn.qkv)");
        }
    return r;
}

} // namespace

std::map<std::string, mx::MxConfig> groupLinearFormats(const ModelConfig& c, const GroupFormats& formats) {
    std::map<std::string, mx::MxConfig> r;
    for (const auto& [g, f] : formattedGroups(c, formats))
        for (const auto& m : g.linears) r.emplace(m, f);
    return r;
}

std::map<std::string, std::optional<mx::MxConfig>> groupPointFormats(const ModelConfig& c, const GroupFormats& formats) {
    std::map<std::string, std::optional<mx::MxConfig>> r;
    for (const auto& [g, f] : formattedGroups(c, formats))
        for (const auto& p : g.points) r.emplace(p, f);
    return r;
}

} // namespace latmix::model
