// compressed-tensors' quantization_config of a run (ExportPlan.h; docs/developer/
// compressed-tensors.md has the rules and the sources they were read from).
//
// A mixed-precision run (docs/spec.md, "Mixed precision") gets one config group per weight format:
// group_0 targets "Linear" in the run's --format; each other format's group lists its fusion
// groups as regexes. Both readers give a name or regex match precedence over the class target:
// compressed-tensors sorts exact names, then regexes, then classes (utils/match.py); vLLM tries
// names and regexes, then fused shards, then the class (compressed_tensors/utils.py,
// find_matched_target). Each regex also matches vLLM's fused names (qkv_proj, gate_up_proj), which
// older vLLM tried against the class before the shards, and a sparse layer's
// experts.N.{gate,up,down}_proj, the names vLLM's MoE method looks the scheme up under. The
// top-level format is "mixed-precision" where the groups' formats differ (compressed-tensors'
// CompressionFormat.mixed_precision: a summary, each group carries its own "format").
#include "export/ExportPlan.h"

#include "model/FusionGroups.h"
#include "model/TensorNames.h"
#include "util/Text.h"

#include <algorithm>
#include <map>
#include <regex>
#include <stdexcept>

namespace latmix::exporting {
namespace {

using json = nlohmann::ordered_json;

// QuantizationArgs of compressed-tensors for an MX format (values of its MXFP4 / NVFP4 / MXFP8
// presets). staticGlobal: NVFP4 activations with a calibrated input_global_scale per linear
// (compressed-tensors' NVFP4 preset: dynamic "local", block scales on the fly, the per-tensor
// scale static from its static_minmax observer).
json quantArgs(const mx::MxConfig& f, bool activation, bool staticGlobal = false) {
    const auto& e = mx::elementSpec(f.element());
    json o;
    o["num_bits"] = e.bits;
    o["type"] = e.isInteger ? "int" : "float";
    o["symmetric"] = true;
    o["group_size"] = f.blockSize;
    o["strategy"] = f.isNvfp4() ? "tensor_group" : "group";
    o["block_structure"] = nullptr;
    // Activations: scales computed on the fly per block (and NVFP4's per-tensor scale per
    // tensor), as this workbench's fake quantization does; weights: static.
    o["dynamic"] = activation && staticGlobal ? json("local") : json(activation);
    o["actorder"] = nullptr;
    o["scale_dtype"] = f.isNvfp4() ? "torch.float8_e4m3fn" : "torch.uint8";
    o["zp_dtype"] = nullptr;
    o["observer"] = !activation ? json("minmax") : staticGlobal ? json("static_minmax") : json(nullptr);
    o["observer_kwargs"] = json::object();
    return o;
}

// `text` as a regex that matches it literally (Python's re and ECMAScript alike).
std::string regexLiteral(const std::string& text) {
    static const std::string special = "\\^$.|?*+()[]{}";
    std::string r;
    for (char ch : text) {
        if (special.find(ch) != std::string::npos) r += '\\';
        r += ch;
    }
    return r;
}

// A fusion group as one "re:" target: the common module prefix of its linears, then the
// alternatives after it (expert indices as \d+), vLLM's fused names, end of name.
std::string groupTarget(const model::FusionGroup& g) {
    const bool sparse = g.name.size() > 8 && g.name.compare(g.name.size() - 8, 8, ".experts") == 0;
    std::string prefix = g.linears.front().substr(0, g.linears.front().rfind('.') + 1);
    for (const auto& l : g.linears)
        while (l.compare(0, prefix.size(), prefix) != 0) prefix = prefix.substr(0, prefix.rfind('.', prefix.size() - 2) + 1);
    // Experts: the prefix ends before "experts.", so that their indices are in the alternatives.
    if (const auto at = prefix.rfind("experts."); sparse && at != std::string::npos) prefix.resize(at);
    std::vector<std::string> alternatives;
    auto add = [&](const std::string& a) {
        if (std::find(alternatives.begin(), alternatives.end(), a) == alternatives.end()) alternatives.push_back(a);
    };
    static const std::regex index("\\\\\\.[0-9]+\\\\\\."); // "\.12\." in an escaped name
    for (const auto& l : g.linears) add(std::regex_replace(regexLiteral(l.substr(prefix.size())), index, "\\.\\d+\\."));
    if (sparse) add("experts\\.\\d+\\.(gate|up|down)_proj"); // vLLM's MoE lookup (Mixtral's w1/w2/w3 too)
    for (const auto& [shard, fused] : {std::pair{"q_proj", "qkv_proj"}, {"gate_proj", "gate_up_proj"}})
        if (!sparse && std::find(alternatives.begin(), alternatives.end(), shard) != alternatives.end()) add(fused);
    return "re:" + regexLiteral(prefix) + "(" + util::joinList(alternatives, "|") + ")$";
}

json schemeGroup(const mx::MxConfig& weights, const std::optional<mx::MxConfig>& activations, const std::string& format,
                 json targets, bool staticGlobal) {
    json g;
    g["targets"] = std::move(targets);
    g["weights"] = quantArgs(weights, false);
    g["input_activations"] = activations ? quantArgs(*activations, true, staticGlobal && activations->isNvfp4()) : json(nullptr);
    g["output_activations"] = nullptr;
    g["format"] = format;
    return g;
}

} // namespace

std::optional<std::string> ctFormatName(const mx::MxConfig& f) {
    switch (f.format) {
    case mx::Format::MxFp4: return "mxfp4-pack-quantized";
    case mx::Format::NvFp4: return "nvfp4-pack-quantized";
    // compressed-tensors has no MX integer format. The tensors have the same structure as
    // mxfp4-pack-quantized (nibbles, E8M0 bytes) but the codes are sign-magnitude INT4
    // (step 0.25, SPEC §1): a name of its own keeps every loader from reading them as E2M1.
    case mx::Format::MxInt4: return "mxint4-pack-quantized";
    // compressed-tensors' MXFP8 preset: float8_e4m3fn weights, E8M0 scale bytes per 32.
    case mx::Format::MxFp8E4M3: return f.blockSize == 32 ? std::optional<std::string>("mxfp8-quantized") : std::nullopt;
    default: return std::nullopt;
    }
}

std::string compressionFormat(const std::optional<mx::MxConfig>& weights, const std::string& runDir) {
    // Worded for both faces: the export's target is not an option of the run (util/Remedy.h).
    const std::string what = "cannot export " + runDir + " as compressed-tensors: ";
    if (!weights)
        throw std::runtime_error(what + "it has unquantized weights (latmix.weight_format null), and compressed-tensors "
                                        "holds quantized weights; export it as hf instead");
    if (const auto name = ctFormatName(*weights)) return *name;
    throw std::runtime_error(what + "its weights are " + weights->describe() +
                             ", and compressed-tensors holds mxfp4, nvfp4, mxint4 and mxfp8 (E4M3, block 32) weights; "
                             "export it as hf instead");
}

bool nvfp4InputsCalibrated(const RunModel& run, const std::set<std::string>& bf16Linears) {
    for (const auto& [linear, p] : run.packed)
        if (p.config.isNvfp4() && !bf16Linears.count(linear) && !run.inputAmax.count(linear)) return false;
    return true;
}

std::set<std::string> ctBf16Linears(const RunModel& run) {
    std::set<std::string> out(run.quant.keptLinears.begin(), run.quant.keptLinears.end());
    for (const auto& [linear, p] : run.packed)
        if (!ctFormatName(p.config)) out.insert(linear);
    return out;
}

json compressedTensorsConfig(const model::ModelConfig& c, const RunModel& run, const std::set<std::string>& bf16Linears,
                             bool plainT3) {
    const auto& q = run.quant;
    const mx::MxConfig& wf = *q.weightFormat;
    const std::string defaultName = *ctFormatName(wf); // buildPlan checked it (compressionFormat)
    // The scheme's other formats: their fusion groups, in the model's order.
    std::map<std::string, std::pair<mx::MxConfig, json>> others; // format name → (format, targets)
    for (const auto& g : model::fusionGroups(c)) {
        const auto p = run.packed.find(g.linears.front());
        if (p == run.packed.end() || bf16Linears.count(g.linears.front())) continue;
        const std::string name = *ctFormatName(p->second.config);
        if (p->second.config.describe() == wf.describe()) continue;
        auto& [format, targets] = others.try_emplace(name, p->second.config, json::array()).first->second;
        if (format.describe() != p->second.config.describe())
            throw std::runtime_error("cannot export as compressed-tensors: fusion group " + g.name + " is " +
                                     p->second.config.describe() + " and another is " + format.describe() +
                                     ", both '" + name + "'; export it as hf or gguf");
        targets.push_back(groupTarget(g));
    }
    // Activations take the format of their linear (docs/spec.md, "Mixed precision").
    auto activations = [&](const mx::MxConfig& f) { return q.activationFormat ? std::optional<mx::MxConfig>(f) : std::nullopt; };
    const bool calibrated = nvfp4InputsCalibrated(run, bf16Linears);
    json groups;
    groups["group_0"] = schemeGroup(wf, q.activationFormat, defaultName, json::array({"Linear"}), calibrated);
    for (const auto& [name, ft] : others)
        groups["group_" + std::to_string(groups.size())] = schemeGroup(ft.first, activations(ft.first), name, ft.second, calibrated);

    std::vector<std::string> keptDown; // T3 folded back into these: no online transform (addPlanItems)
    for (const auto& k : bf16Linears)
        if (model::names::isDownProj(k)) keptDown.push_back(k);
    json qc;
    qc["quant_method"] = "compressed-tensors";
    qc["format"] = others.empty() ? defaultName : "mixed-precision";
    qc["quantization_status"] = "compressed";
    qc["config_groups"] = groups;
    qc["ignore"] = json::array({"lm_head"});
    // bf16 weights, unquantized input: --keep, and a scheme's formats compressed-tensors has no name for
    for (const auto& k : bf16Linears) qc["ignore"].push_back(k);
    // The router stays in full precision (llm-compressor's MoE examples ignore it the same way).
    if (c.moe)
        qc["ignore"].push_back(c.architecture == model::Architecture::Mixtral ? "re:.*block_sparse_moe\\.gate$"
                                                                             : "re:.*mlp\\.gate$");
    qc["kv_cache_scheme"] = nullptr;
    qc["global_compression_ratio"] = nullptr;
    qc["sparsity_config"] = json::object();
    json tc = json::object();
    if (q.t3Block > 0) {
        json args;
        args["targets"] = json::array({"re:.*mlp\\.down_proj$"});
        args["location"] = "input";
        args["inverse"] = false;
        args["ignore"] = keptDown;
        json scheme;
        // "hadamard": compressed-tensors' and vLLM's Sylvester matrix, the run's T3 once its signs
        // are in up_proj (Plan::t3Signs). "random-hadamard" draws signs compressed-tensors does
        // not record: declared only where no sign fold applies, with a note.
        scheme["type"] = plainT3 ? "hadamard" : "random-hadamard";
        scheme["apply"] = json::array({args});
        scheme["randomize"] = false; // one T3 shared by every layer
        scheme["requires_grad"] = false;
        scheme["head_dim"] = q.t3Block;
        scheme["precision"] = "torch.float32";
        tc["config_groups"] = {{"latmix_t3", scheme}};
    }
    qc["transform_config"] = tc;
    return qc;
}

} // namespace latmix::exporting
