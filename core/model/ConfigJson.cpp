#include "model/ConfigJson.h"

#include "model/Checkpoint.h"
#include "model/TensorNames.h"

#include <stdexcept>

namespace latmix::model {

BiasFix fixBiasFlags(nlohmann::ordered_json& j, const std::function<bool(const std::string&)>& has,
                     bool forHfRuntime, const std::string& source) {
    BiasFix fix;
    const ModelConfig c = ModelConfig::fromJsonText(j.dump(), source);
    bool attnAny = false, oAny = false, mlpAny = false;
    std::string firstMlpBias;
    for (int i = 0; i < c.numLayers; ++i) {
        const std::string p = names::layerPrefix(i);
        for (const char* n : {names::kQProj, names::kKProj, names::kVProj, names::kOProj})
            if (has(p + n + ".bias")) {
                attnAny = true;
                if (std::string(n) == names::kOProj) oAny = true;
            }
        for (const char* n : {names::kGateProj, names::kUpProj, names::kDownProj})
            if (has(p + n + ".bias")) {
                mlpAny = true;
                if (firstMlpBias.empty()) firstMlpBias = p + n + ".bias";
            }
    }
    auto relabel = [&] {
        fix.relabeledFrom = c.architectureName;
        j["architectures"] = nlohmann::ordered_json::array({"LlamaForCausalLM"});
        j["model_type"] = "llama";
    };
    switch (c.architecture) {
    case Architecture::Qwen2:
        // Hugging Face Qwen2: q/k/v always biased, o_proj and the MLP never. Qwen2 is the Llama
        // decoder with q/k/v biases, so LlamaForCausalLM with attention_bias computes the same.
        if (oAny || mlpAny) {
            relabel();
            j["attention_bias"] = true;
            j["mlp_bias"] = mlpAny;
        }
        break;
    case Architecture::Qwen3:
        if (mlpAny)
            throw std::runtime_error(source + ": '" + firstMlpBias +
                                     "' exists, but Qwen3 models have no MLP biases (Hugging Face Qwen3MLP is "
                                     "bias-free) and cannot be rewritten as Llama (q/k norms); fold a T1 without "
                                     "bias (v1 = 0) for Qwen3");
        j["attention_bias"] = attnAny;
        break;
    case Architecture::Mistral:
        if (forHfRuntime && (attnAny || mlpAny)) relabel();
        j["attention_bias"] = attnAny;
        j["mlp_bias"] = mlpAny;
        break;
    case Architecture::Llama:
        j["attention_bias"] = attnAny;
        j["mlp_bias"] = mlpAny;
        break;
    }
    if (has(names::kLmHead)) j["tie_word_embeddings"] = false;

    const ModelConfig c2 = ModelConfig::fromJsonText(j.dump(), source);
    for (const auto& [name, shape] : requiredTensors(c2)) {
        const bool bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
        if (bias && name != names::kLmHeadBias && !has(name)) fix.zeroBiases.emplace_back(name, shape);
    }
    return fix;
}

} // namespace latmix::model
