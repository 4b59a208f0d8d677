#pragma once
// Small random mixture-of-experts checkpoints (Qwen3-MoE, Mixtral) for tst_moe and tst_moerouting:
// a config text with the family's keys, a checkpoint written from it with its routers made
// decisive, and a checkpoint copied with its tensors edited.
#include "import/RandomModel.h"
#include "io/SafeTensors.h"
#include "model/ModelConfig.h"

#include <ATen/ATen.h>

#include <QDir>
#include <QFile>
#include <QString>
#include <QStringList>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace latmix::test {

// A small MoE config: hidden and head_dim multiples of the MX block, GQA, `extra` the family's keys.
inline std::string moeConfigText(const std::string& arch, const std::string& extra, int layers = 3) {
    const bool mixtral = arch == "MixtralForCausalLM";
    return R"({"architectures": [")" + arch + R"("], "model_type": ")" + (mixtral ? "mixtral" : "qwen3_moe") +
           R"(", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": )" + std::to_string(layers) +
           R"(, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 300,
        "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu",
        "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": false)" +
           (extra.empty() ? "" : ", " + extra) + "}";
}

// The models of the small end-to-end runs (tst_moe, tst_moerouting): 2 layers, 4 experts, top 2.
inline std::string moeRunConfigText(const QString& family) {
    return family == QLatin1String("mixtral")
               ? moeConfigText("MixtralForCausalLM", R"("num_local_experts": 4, "num_experts_per_tok": 2)", 2)
               : moeConfigText("Qwen3MoeForCausalLM",
                               R"("num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64, "norm_topk_prob": true)", 2);
}

// dst: src's config and tokenizer files, its tensors passed through edit (an undefined result
// drops the tensor).
inline void rewriteModel(const QString& src, const QString& dst,
                         const std::function<at::Tensor(const std::string&, const at::Tensor&)>& edit) {
    QDir().mkpath(dst);
    for (const QString& f : QDir(src).entryList(QDir::Files))
        if (f != QLatin1String("model.safetensors")) QFile::copy(src + "/" + f, dst + "/" + f);
    const auto file = io::SafeTensorsFile::open((src + "/model.safetensors").toStdString());
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (const auto& e : file->entries()) {
        const at::Tensor t = edit(e.name, file->tensor(e.name).clone());
        if (t.defined()) tensors.emplace_back(e.name, t);
    }
    io::writeSafeTensors((dst + "/model.safetensors").toStdString(), tensors, {{"format", "pt"}});
}

inline bool isRouter(const std::string& name) {
    const auto ends = [&](const std::string& s) {
        return name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
    };
    return ends(".mlp.gate.weight") || ends(".block_sparse_moe.gate.weight");
}

// dir (written once, reused when it exists): a random float32 checkpoint of the config, its
// routers scaled so that the top-k choice is decisive (random routers of std 0.02 give
// near-uniform probabilities; float32 and float64, or two devices, would then disagree on
// near-ties, which says nothing about the code).
inline QString moeModel(const QString& dir, const std::string& configText, const std::string& name) {
    if (QFile::exists(dir + "/config.json")) return dir;
    const QString raw = dir + "-raw";
    importing::RandomModelOptions r;
    r.dtype = "float32";
    r.seed = 5;
    importing::writeRandomModel(model::ModelConfig::fromJsonText(configText, name), raw.toStdString(), r);
    rewriteModel(raw, dir, [](const std::string& n, const at::Tensor& t) { return isRouter(n) ? t * 10 : t; });
    return dir;
}

} // namespace latmix::test
