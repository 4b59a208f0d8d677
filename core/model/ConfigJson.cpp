#include "model/ConfigJson.h"

#include "model/TensorNames.h"

#include <stdexcept>

namespace latmix::model {

std::string hfBiasProblem(const ModelConfig& c, bool mlpBias) {
    // transformers' Qwen3MLP (and vLLM's Qwen3 model) build gate/up/down without bias, and the
    // Llama classes that have mlp_bias lack Qwen3's per-head q/k RMSNorm. Every other
    // combination loads as the family itself or as LlamaForCausalLM (fixBiasFlags).
    if (c.moe && mlpBias)
        return "Hugging Face and vLLM " + c.architectureName +
               " models have no biases on the router or the experts (the mixture-of-experts MLP is bias-free)";
    if (c.architecture == Architecture::Qwen3 && mlpBias)
        return "Hugging Face and vLLM Qwen3 models have no MLP biases (Qwen3MLP is bias-free), and a Qwen3 model "
               "cannot be rewritten as Llama (its per-head q/k norms)";
    return {};
}

BiasFix fixBiasFlags(nlohmann::ordered_json& j, const std::function<bool(const std::string&)>& has, BiasTarget target,
                     const std::string& source) {
    BiasFix fix;
    const ModelConfig c = ModelConfig::fromJsonText(j.dump(), source);
    std::string firstMlpBias;
    for (int i = 0; i < c.numLayers; ++i) {
        const std::string p = names::layerPrefix(i);
        for (const char* n : {names::kQProj, names::kKProj, names::kVProj})
            if (has(p + n + ".bias")) fix.qkvBias = true;
        if (has(p + names::kOProj + ".bias")) fix.oProjBias = true;
        for (const char* n : {names::kGateProj, names::kUpProj, names::kDownProj})
            if (has(p + n + ".bias")) {
                fix.mlpBias = true;
                if (firstMlpBias.empty()) firstMlpBias = p + n + ".bias";
            }
    }
    // Qwen2's class always has q/k/v biases; a Qwen2 checkpoint without them is not one.
    if (c.architecture == Architecture::Qwen2) fix.qkvBias = true;
    const bool attnAny = fix.qkvBias || fix.oProjBias;
    auto relabel = [&] {
        fix.relabeledFrom = c.architectureName;
        j["architectures"] = nlohmann::ordered_json::array({"LlamaForCausalLM"});
        j["model_type"] = "llama";
    };
    const bool hf = target == BiasTarget::HfRuntime;
    if (hf) {
        const std::string problem = hfBiasProblem(c, fix.mlpBias);
        if (!problem.empty())
            throw std::runtime_error(source + ": '" + firstMlpBias + "' exists, but " + problem +
                                     "; quantize this model with a T1 without bias (latmix quantize --t1-bias off, "
                                     "v1 = 0) to export it");
    }
    switch (c.architecture) {
    case Architecture::Qwen2:
        // Hugging Face Qwen2: q/k/v always biased, o_proj and the MLP never. Qwen2 is the Llama
        // decoder with q/k/v biases, so LlamaForCausalLM with attention_bias computes the same.
        if (hf && (fix.oProjBias || fix.mlpBias)) {
            relabel();
            j["attention_bias"] = true;
            j["mlp_bias"] = fix.mlpBias;
        }
        break;
    case Architecture::Qwen3:
    case Architecture::Qwen3Moe:
        j["attention_bias"] = attnAny;
        break;
    case Architecture::Mixtral:
        // MixtralAttention is bias-free, and a Mixtral cannot be rewritten as Llama (its experts).
        if (hf && attnAny)
            throw std::runtime_error(source + ": the folded model has attention biases, which Hugging Face and vLLM "
                                              "Mixtral models do not have; quantize it with --t2-bias off (and a T1 "
                                              "without bias) to export it");
        break;
    case Architecture::Mistral:
        if (hf && (attnAny || fix.mlpBias)) relabel();
        j["attention_bias"] = attnAny;
        j["mlp_bias"] = fix.mlpBias;
        break;
    case Architecture::Llama:
        j["attention_bias"] = attnAny;
        j["mlp_bias"] = fix.mlpBias;
        break;
    }
    if (has(names::kLmHead)) j["tie_word_embeddings"] = false;

    ModelConfig c2 = ModelConfig::fromJsonText(j.dump(), source);
    if (hf) {
        // What the runtime's flags imply: one flag per group pair (q,k,v,o / gate,up,down).
        fix.qkvBias = c2.qkvBias;
        fix.oProjBias = c2.oProjBias;
        fix.mlpBias = c2.mlpBias;
    } else {
        c2.qkvBias = fix.qkvBias;
        c2.oProjBias = fix.oProjBias;
        c2.mlpBias = fix.mlpBias;
    }
    for (const auto& [name, shape] : requiredTensors(c2)) {
        const bool bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
        if (bias && name != names::kLmHeadBias && !has(name)) fix.zeroBiases.emplace_back(name, shape);
    }
    return fix;
}

} // namespace latmix::model
