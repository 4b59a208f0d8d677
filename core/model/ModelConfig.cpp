// Hugging Face config.json for the Llama family (SPEC §4: Llama, Qwen2 with q/k/v bias, Qwen3
// with per-head q_norm/k_norm; Mistral is the Llama decoder under another name). Defaults follow
// the transformers configuration classes (LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config,
// Qwen3MoeConfig, MixtralConfig), as SPEC's preamble asks where it is silent.
#include "model/ModelConfig.h"
#include "model/ConfigJson.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace latmix::model {
namespace {

using nlohmann::json;

struct ArchInfo {
    const char* name;
    const char* modelType;
    Architecture arch;
};

const ArchInfo kArchs[] = {
    {"LlamaForCausalLM", "llama", Architecture::Llama},
    {"MistralForCausalLM", "mistral", Architecture::Mistral},
    {"Qwen2ForCausalLM", "qwen2", Architecture::Qwen2},
    {"Qwen3ForCausalLM", "qwen3", Architecture::Qwen3},
    {"Qwen3MoeForCausalLM", "qwen3_moe", Architecture::Qwen3Moe},
    {"MixtralForCausalLM", "mixtral", Architecture::Mixtral},
};

std::string supportedList() {
    std::string s;
    for (const auto& a : kArchs) s += (s.empty() ? "" : ", ") + std::string(a.name);
    return s;
}

[[noreturn]] void fail(const std::string& source, const std::string& what) {
    throw std::runtime_error(source + ": " + what);
}

bool present(const json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

int getInt(const json& j, const char* key, const std::string& source) {
    if (!present(j, key)) fail(source, std::string("required field '") + key + "' is missing");
    const auto& v = j[key];
    if (!v.is_number_integer()) fail(source, std::string("field '") + key + "' must be an integer, got " + v.dump());
    const auto x = v.get<long long>();
    if (x < 0 || x > 0x7fffffff) fail(source, std::string("field '") + key + "' is out of range: " + v.dump());
    return static_cast<int>(x);
}

int getInt(const json& j, const char* key, int def, const std::string& source) {
    return present(j, key) ? getInt(j, key, source) : def;
}

double getDouble(const json& j, const char* key, double def, const std::string& source) {
    if (!present(j, key)) return def;
    const auto& v = j[key];
    if (!v.is_number()) fail(source, std::string("field '") + key + "' must be a number, got " + v.dump());
    return v.get<double>();
}

bool getBool(const json& j, const char* key, bool def, const std::string& source) {
    if (!present(j, key)) return def;
    const auto& v = j[key];
    if (!v.is_boolean()) fail(source, std::string("field '") + key + "' must be true or false, got " + v.dump());
    return v.get<bool>();
}

// bos/eos may be an integer, a list (Llama 3.1 lists several eos ids; the first is the one the
// chat template ends with) or null.
int getTokenId(const json& j, const char* key, const std::string& source) {
    if (!present(j, key)) return -1;
    const auto& v = j[key];
    if (v.is_array() && v.empty()) return -1;
    const json& id = v.is_array() ? v[0] : v;
    // In range before the conversion: get<int>() would wrap a larger id into another token.
    if (id.is_number_integer() && !(id.is_number_unsigned() && id.get<std::uint64_t>() > 0x7fffffffu)) {
        const auto x = id.get<long long>();
        if (x >= -1 && x <= 0x7fffffff) return static_cast<int>(x); // -1: none, as null
    }
    fail(source, std::string("field '") + key + "' must be a token id or a list of ids, got " + v.dump());
}

RopeScaling parseRopeScaling(const json& r, const std::string& source) {
    if (!r.is_object()) fail(source, "field 'rope_scaling' must be an object or null, got " + r.dump());
    // transformers writes "rope_type"; older configs "type".
    std::string type;
    if (r.contains("rope_type") && r["rope_type"].is_string()) type = r["rope_type"].get<std::string>();
    else if (r.contains("type") && r["type"].is_string()) type = r["type"].get<std::string>();
    if (type != "llama3")
        fail(source, "rope_scaling type '" + type +
                         "' is not supported (supported: 'llama3', or no rope_scaling); this workbench "
                         "implements plain RoPE and the Llama 3.1 frequency scaling only");
    RopeScaling s;
    s.type = type;
    s.factor = getDouble(r, "factor", s.factor, source);
    s.lowFreqFactor = getDouble(r, "low_freq_factor", s.lowFreqFactor, source);
    s.highFreqFactor = getDouble(r, "high_freq_factor", s.highFreqFactor, source);
    s.originalMaxPositions = getInt(r, "original_max_position_embeddings", s.originalMaxPositions, source);
    if (!(s.factor > 0) || !(s.highFreqFactor > s.lowFreqFactor) || s.originalMaxPositions <= 0)
        fail(source, "rope_scaling " + r.dump() +
                         " is inconsistent (need factor > 0, high_freq_factor > low_freq_factor, "
                         "original_max_position_embeddings > 0)");
    return s;
}

const ArchInfo& archOf(Architecture a) {
    for (const auto& i : kArchs)
        if (i.arch == a) return i;
    throw std::logic_error("ModelConfig: unknown Architecture value");
}

// The architecture: "architectures"[0] as transformers' AutoModelForCausalLM uses it; a config
// without it falls back to model_type.
const ArchInfo& architectureOf(const json& j, const std::string& source) {
    const ArchInfo* arch = nullptr;
    std::string archName;
    if (present(j, "architectures")) {
        const auto& a = j["architectures"];
        if (!a.is_array() || a.empty() || !a[0].is_string())
            fail(source, "field 'architectures' must be a non-empty list of names, got " + a.dump());
        archName = a[0].get<std::string>();
        for (const auto& i : kArchs)
            if (archName == i.name) arch = &i;
    } else if (present(j, "model_type") && j["model_type"].is_string()) {
        archName = j["model_type"].get<std::string>();
        for (const auto& i : kArchs)
            if (archName == i.modelType) arch = &i;
    } else {
        fail(source, "neither 'architectures' nor 'model_type' is set; supported: " + supportedList());
    }
    if (!arch)
        throw std::runtime_error("unsupported architecture '" + archName + "' in " + source +
                                 "; supported: " + supportedList());
    return *arch;
}

// Widths, depth, heads and vocabulary, each checked.
void readShape(const json& j, ModelConfig& c, const std::string& source) {
    c.hiddenSize = getInt(j, "hidden_size", source);
    c.intermediateSize = getInt(j, "intermediate_size", source);
    c.numLayers = getInt(j, "num_hidden_layers", source);
    c.numHeads = getInt(j, "num_attention_heads", source);
    c.vocabSize = getInt(j, "vocab_size", source);
    if (c.hiddenSize <= 0 || c.intermediateSize <= 0 || c.numLayers <= 0 || c.numHeads <= 0 || c.vocabSize <= 0)
        fail(source, "hidden_size, intermediate_size, num_hidden_layers, num_attention_heads and vocab_size "
                     "must all be positive");
    c.numKvHeads = getInt(j, "num_key_value_heads", c.numHeads, source);
    if (c.numKvHeads <= 0 || c.numHeads % c.numKvHeads != 0)
        fail(source, "num_key_value_heads " + std::to_string(c.numKvHeads) + " must divide num_attention_heads " +
                         std::to_string(c.numHeads));
    if (present(j, "head_dim")) {
        c.headDim = getInt(j, "head_dim", source);
    } else if (c.architecture == Architecture::Qwen3) {
        c.headDim = 128; // Qwen3Config's default; every released Qwen3 config states it anyway
        // (Qwen3MoeAttention falls back to hidden / heads like Llama: the branch below)
    } else {
        if (c.hiddenSize % c.numHeads != 0)
            fail(source, "hidden_size " + std::to_string(c.hiddenSize) + " is not divisible by num_attention_heads " +
                             std::to_string(c.numHeads) + " and no head_dim is given");
        c.headDim = c.hiddenSize / c.numHeads;
    }
    if (c.headDim <= 0 || c.headDim % 2 != 0)
        fail(source, "head_dim " + std::to_string(c.headDim) + " must be positive and even (RoPE rotates pairs)");
}

// Positions, RoPE's base and scaling. rope_theta is top-level in transformers 4.x; 5.x moves it
// (and the scaling) into "rope_parameters".
void readRope(const json& j, ModelConfig& c, const std::string& source) {
    c.maxPositions = getInt(j, "max_position_embeddings", c.maxPositions, source);
    if (present(j, "rope_theta")) c.ropeTheta = getDouble(j, "rope_theta", c.ropeTheta, source);
    else if (present(j, "rope_parameters") && j["rope_parameters"].is_object())
        c.ropeTheta = getDouble(j["rope_parameters"], "rope_theta", c.ropeTheta, source);
    const json* rope = nullptr;
    if (present(j, "rope_scaling")) rope = &j["rope_scaling"];
    else if (present(j, "rope_parameters") && j["rope_parameters"].is_object()) rope = &j["rope_parameters"];
    if (!rope) return;
    const json& r = *rope;
    const std::string t = r.is_object() && r.contains("rope_type") && r["rope_type"].is_string()
                              ? r["rope_type"].get<std::string>()
                              : (r.is_object() && r.contains("type") && r["type"].is_string() ? r["type"].get<std::string>()
                                                                                                : std::string());
    if (t != "default") c.ropeScaling = parseRopeScaling(r, source); // "default" = no scaling
}

// Which linears carry biases and whether q/k are normed, by family.
void readBiases(const json& j, ModelConfig& c, const std::string& source) {
    switch (c.architecture) {
    case Architecture::Llama:
    case Architecture::Mistral: {
        // LlamaAttention: attention_bias applies to q, k, v and o alike. MistralConfig has no such
        // field (Mistral has no biases); reading it anyway lets a folded export (SPEC §8: "config
        // gets attention_bias / mlp_bias") of a Mistral model load.
        const bool attn = getBool(j, "attention_bias", false, source);
        c.qkvBias = c.oProjBias = attn;
        c.mlpBias = getBool(j, "mlp_bias", false, source);
        break;
    }
    case Architecture::Qwen2:
        c.qkvBias = true; // Qwen2Attention: q/k/v always biased, o_proj never
        c.oProjBias = false;
        c.mlpBias = false;
        break;
    case Architecture::Mixtral: // MixtralAttention and its experts are bias-free
        c.qkvBias = c.oProjBias = c.mlpBias = false;
        break;
    case Architecture::Qwen3:
    case Architecture::Qwen3Moe: {
        c.qkNorm = true;
        const bool attn = getBool(j, "attention_bias", false, source);
        c.qkvBias = c.oProjBias = attn;
        c.mlpBias = false;
        break;
    }
    }
}

// A run model's "latmix" object: its formats, T3, lm_head bias and exact bias groups.
void readLatmix(const json& l, ModelConfig& c, const std::string& source) {
    if (!l.is_object()) fail(source, "\"latmix\" must be an object");
    LatmixQuantization q;
    if (present(l, "method") && l["method"].is_string()) q.method = l["method"].get<std::string>();
    auto formatOf = [&](const json& f, const std::string& key) -> std::optional<mx::MxConfig> {
        if (!f.is_object() || !present(f, "format") || !f["format"].is_string())
            fail(source, "latmix." + key + " needs a \"format\" string");
        try {
            mx::MxConfig m = mx::makeConfig(mx::parseFormat(f["format"].get<std::string>()));
            if (present(f, "block")) m.blockSize = getInt(f, "block", source);
            if (present(f, "scale_mode")) m.scaleMode = mx::parseScaleMode(f["scale_mode"].get<std::string>());
            m.validate();
            return m;
        } catch (const std::invalid_argument& e) {
            fail(source, "latmix." + key + ": " + e.what());
        }
        return std::nullopt;
    };
    auto format = [&](const char* key) -> std::optional<mx::MxConfig> {
        return present(l, key) ? formatOf(l[key], key) : std::nullopt;
    };
    q.weightFormat = format("weight_format");
    q.activationFormat = format("activation_format");
    if (present(l, "t3")) {
        const auto& h = l["t3"];
        q.t3Block = getInt(h, "block", source);
        if (q.t3Block < 1) fail(source, "latmix.t3.block must be positive");
        if (present(h, "seed")) q.t3Seed = h["seed"].get<std::uint64_t>();
    }
    if (present(l, "input_transforms")) {
        const auto& t = l["input_transforms"];
        if (!t.is_object() || !present(t, "kind") || !t["kind"].is_string() || t["kind"].get<std::string>() != "wush")
            fail(source, "latmix.input_transforms must be {\"kind\": \"wush\", ...} (the only online input transform)");
        q.inputTransforms = "wush";
    }
    if (present(l, "kept_linears")) {
        const auto& k = l["kept_linears"];
        if (!k.is_array()) fail(source, "latmix.kept_linears must be a list of module names");
        for (const auto& n : k) {
            if (!n.is_string()) fail(source, "latmix.kept_linears must be a list of module names");
            q.keptLinears.push_back(n.get<std::string>());
        }
    }
    if (present(l, "group_formats")) {
        const auto& g = l["group_formats"];
        if (!g.is_object()) fail(source, "latmix.group_formats must be an object {fusion group name: format}");
        for (const auto& [name, f] : g.items())
            if (const auto m = formatOf(f, "group_formats." + name)) q.groupFormats[name] = *m;
    }
    c.lmHeadBias = getBool(l, "lm_head_bias", false, source);
    // The run model states its bias groups exactly (ConfigJson.h latmixJson): they override
    // what the family's Hugging Face fields imply.
    if (present(l, "biases")) {
        const auto& b = l["biases"];
        if (!b.is_object()) fail(source, "latmix.biases must be an object {\"q_k_v\", \"o_proj\", \"mlp\"}");
        c.qkvBias = getBool(b, "q_k_v", c.qkvBias, source);
        c.oProjBias = getBool(b, "o_proj", c.oProjBias, source);
        c.mlpBias = getBool(b, "mlp", c.mlpBias, source);
    }
    c.latmix = q;
}

// Sliding-window attention is not implemented: accept it only where it cannot take effect.
// Mistral: sliding_window set (not null) and shorter than the context; Qwen2/3: only when
// use_sliding_window is true.
void checkSlidingWindow(const json& j, const ModelConfig& c, const std::string& source) {
    const bool mistralLike = c.architecture == Architecture::Mistral || c.architecture == Architecture::Mixtral;
    const bool qwen = c.architecture == Architecture::Qwen2 || c.architecture == Architecture::Qwen3 ||
                      c.architecture == Architecture::Qwen3Moe;
    const bool sliding = mistralLike ? present(j, "sliding_window")
                                     : qwen && getBool(j, "use_sliding_window", false, source) &&
                                           present(j, "sliding_window");
    if (!sliding) return;
    const int w = getInt(j, "sliding_window", source);
    if (w < c.maxPositions)
        fail(source, "sliding_window " + std::to_string(w) + " is shorter than max_position_embeddings " +
                         std::to_string(c.maxPositions) +
                         "; sliding-window attention is unsupported (only full causal attention is implemented)");
}

// The sparse MLP's keys, checked before any weight is read. transformers 5 writes Qwen3-MoE's
// expert count as num_local_experts (its attribute_map), so both spellings are read, as
// llama.cpp's converter does.
void readMoe(const json& j, ModelConfig& c, const std::string& source) {
    MoeConfig m;
    const bool mixtral = c.architecture == Architecture::Mixtral;
    const char* countKey = present(j, "num_experts") ? "num_experts" : "num_local_experts";
    m.numExperts = getInt(j, countKey, mixtral ? 8 : 128, source); // the classes' defaults
    m.expertsPerToken = getInt(j, "num_experts_per_tok", mixtral ? 2 : 8, source);
    if (m.numExperts < 1) fail(source, std::string("'") + countKey + "' must be at least 1");
    if (m.expertsPerToken < 1 || m.expertsPerToken > m.numExperts)
        fail(source, "'num_experts_per_tok' " + std::to_string(m.expertsPerToken) + " must be between 1 and '" +
                         countKey + "' " + std::to_string(m.numExperts) + " (the router picks that many of them)");
    if (mixtral) {
        m.expertWidth = c.intermediateSize; // MixtralConfig: every MLP is sparse, intermediate_size wide
        m.normTopK = true;                  // MixtralSparseMoeBlock always renormalises
    } else {
        m.expertWidth = getInt(j, "moe_intermediate_size", 768, source);
        m.normTopK = getBool(j, "norm_topk_prob", false, source);
        m.sparseStep = getInt(j, "decoder_sparse_step", 1, source);
        if (m.expertWidth < 1) fail(source, "'moe_intermediate_size' must be positive");
        if (m.sparseStep < 1) fail(source, "'decoder_sparse_step' must be at least 1");
        if (present(j, "mlp_only_layers")) {
            const auto& d = j["mlp_only_layers"];
            if (!d.is_array()) fail(source, "'mlp_only_layers' must be a list of layer indices, got " + d.dump());
            for (const auto& v : d) {
                if (!v.is_number_integer() || v.get<long long>() < 0 || v.get<long long>() >= c.numLayers)
                    fail(source, "'mlp_only_layers' entry " + v.dump() + " is not a layer index 0.." +
                                     std::to_string(c.numLayers - 1));
                m.denseLayers.push_back(v.get<int>());
            }
        }
    }
    c.moe = m;
}

} // namespace

std::vector<std::string> ModelConfig::supportedArchitectures() {
    std::vector<std::string> v;
    for (const auto& a : kArchs) v.emplace_back(a.name);
    return v;
}

ModelConfig ModelConfig::fromJsonText(const std::string& text, const std::string& source) {
    json j;
    try {
        j = json::parse(text);
    } catch (const json::exception& e) {
        fail(source, std::string("not valid JSON (") + e.what() + ")");
    }
    if (!j.is_object()) fail(source, "not a JSON object");

    ModelConfig c;
    const ArchInfo& arch = architectureOf(j, source);
    c.architecture = arch.arch;
    c.architectureName = arch.name;
    if (present(j, "hidden_act") && j["hidden_act"] != "silu")
        fail(source, "hidden_act " + j["hidden_act"].dump() + " is not supported (the Llama family uses 'silu')");
    readShape(j, c, source);
    c.rmsNormEps = getDouble(j, "rms_norm_eps", c.rmsNormEps, source);
    readRope(j, c, source);
    c.tieWordEmbeddings = getBool(j, "tie_word_embeddings", false, source);
    c.bosTokenId = getTokenId(j, "bos_token_id", source);
    c.eosTokenId = getTokenId(j, "eos_token_id", source);
    if (present(j, "torch_dtype") && j["torch_dtype"].is_string()) c.torchDtype = j["torch_dtype"].get<std::string>();
    else if (present(j, "dtype") && j["dtype"].is_string()) c.torchDtype = j["dtype"].get<std::string>();
    readBiases(j, c, source);
    if (c.architecture == Architecture::Qwen3Moe || c.architecture == Architecture::Mixtral) readMoe(j, c, source);
    if (present(j, "latmix")) readLatmix(j["latmix"], c, source);
    checkSlidingWindow(j, c, source);
    return c;
}

ModelConfig ModelConfig::fromFile(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read model config '" + path + "'; check that the file exists");
    std::ostringstream ss;
    ss << in.rdbuf();
    return fromJsonText(ss.str(), path);
}

std::string ModelConfig::toJsonText() const {
    const ArchInfo& a = archOf(architecture);
    nlohmann::ordered_json j;
    j["architectures"] = {a.name};
    j["model_type"] = a.modelType;
    j["hidden_size"] = hiddenSize;
    j["intermediate_size"] = intermediateSize;
    j["num_hidden_layers"] = numLayers;
    j["num_attention_heads"] = numHeads;
    j["num_key_value_heads"] = numKvHeads;
    j["head_dim"] = headDim;
    j["vocab_size"] = vocabSize;
    j["max_position_embeddings"] = maxPositions;
    j["rms_norm_eps"] = rmsNormEps;
    j["rope_theta"] = ropeTheta;
    if (ropeScaling) {
        nlohmann::ordered_json r;
        r["rope_type"] = ropeScaling->type;
        r["factor"] = ropeScaling->factor;
        r["low_freq_factor"] = ropeScaling->lowFreqFactor;
        r["high_freq_factor"] = ropeScaling->highFreqFactor;
        r["original_max_position_embeddings"] = ropeScaling->originalMaxPositions;
        j["rope_scaling"] = r;
    } else {
        j["rope_scaling"] = nullptr;
    }
    j["hidden_act"] = "silu";
    j["tie_word_embeddings"] = tieWordEmbeddings;
    // Hugging Face has one attention_bias flag for q/k/v/o (Llama, Mistral, Qwen3); Qwen2's q/k/v
    // bias is implied by the architecture. A config with qkvBias != oProjBias on a Llama-type
    // model cannot be expressed: the flag is set when either is, and loaders then expect zero
    // biases to be present where the model had none (the exporter writes them, SPEC §8).
    if (architecture != Architecture::Qwen2 && !moe) {
        j["attention_bias"] = qkvBias || oProjBias;
        j["mlp_bias"] = mlpBias;
    }
    if (moe && architecture == Architecture::Mixtral) {
        j["num_local_experts"] = moe->numExperts;
        j["num_experts_per_tok"] = moe->expertsPerToken;
    } else if (moe) {
        j["attention_bias"] = qkvBias || oProjBias;
        j["num_experts"] = moe->numExperts;
        j["num_experts_per_tok"] = moe->expertsPerToken;
        j["moe_intermediate_size"] = moe->expertWidth;
        j["norm_topk_prob"] = moe->normTopK;
        j["decoder_sparse_step"] = moe->sparseStep;
        j["mlp_only_layers"] = moe->denseLayers;
    }
    if (bosTokenId >= 0) j["bos_token_id"] = bosTokenId;
    else j["bos_token_id"] = nullptr;
    if (eosTokenId >= 0) j["eos_token_id"] = eosTokenId;
    else j["eos_token_id"] = nullptr;
    j["torch_dtype"] = torchDtype;
    // Bias groups the family's fields cannot state (Qwen2 o_proj, Qwen3 MLP, q/k/v without o on
    // Llama) go into latmix.biases, which fromJsonText reads back.
    const ModelConfig hfView = fromJsonText(j.dump(), "config.json");
    const bool exact = hfView.qkvBias == qkvBias && hfView.oProjBias == oProjBias && hfView.mlpBias == mlpBias;
    if (latmix || lmHeadBias || !exact) {
        j["latmix"] = latmixJson(latmix.value_or(LatmixQuantization{}), *this);
    }
    return j.dump(2) + "\n";
}

nlohmann::ordered_json mxConfigJson(const std::optional<mx::MxConfig>& f) {
    if (!f) return nullptr;
    nlohmann::ordered_json o;
    o["format"] = mx::formatName(f->format);
    o["block"] = f->blockSize;
    o["scale_mode"] = mx::scaleModeName(f->scaleMode);
    return o;
}

nlohmann::ordered_json latmixJson(const LatmixQuantization& q, const ModelConfig& c) {
    nlohmann::ordered_json l;
    l["method"] = q.method;
    l["weight_format"] = mxConfigJson(q.weightFormat);
    l["activation_format"] = mxConfigJson(q.activationFormat);
    if (q.t3Block > 0)
        l["t3"] = {{"point", "mlp.down_proj.input"}, {"block", q.t3Block},
                                {"seed", q.t3Seed}};
    else
        l["t3"] = nullptr;
    if (!q.inputTransforms.empty())
        l["input_transforms"] = {{"kind", q.inputTransforms}, {"file", "input_transforms.safetensors"},
                                 {"points", "every block linear's input, online before its quantization"}};
    if (!q.keptLinears.empty()) l["kept_linears"] = q.keptLinears;
    if (!q.groupFormats.empty()) {
        nlohmann::ordered_json g;
        for (const auto& [name, f] : q.groupFormats) g[name] = mxConfigJson(f);
        l["group_formats"] = g;
    }
    l["biases"] = {{"q_k_v", c.qkvBias}, {"o_proj", c.oProjBias}, {"mlp", c.mlpBias}};
    l["lm_head_bias"] = c.lmHeadBias;
    return l;
}

bool ModelConfig::isSparseLayer(int layer) const {
    // Qwen3MoeDecoderLayer's rule (Mixtral: step 1, no dense layers, so every layer).
    if (!moe) return false;
    for (int d : moe->denseLayers)
        if (d == layer) return false;
    return (layer + 1) % moe->sparseStep == 0;
}

int ModelConfig::downProjWidth() const {
    if (!moe) return intermediateSize;
    for (int l = 0; l < numLayers; ++l)
        if (!isSparseLayer(l) && intermediateSize != moe->expertWidth)
            throw std::invalid_argument("layer " + std::to_string(l) + " has a dense MLP of intermediate_size " +
                                        std::to_string(intermediateSize) + " and the experts are " +
                                        std::to_string(moe->expertWidth) +
                                        " wide (moe_intermediate_size): one online T3 cannot cover both");
    return moe->expertWidth;
}

namespace {
std::int64_t attentionWeights(const ModelConfig& c) {
    const std::int64_t h = c.hiddenSize, q = std::int64_t(c.numHeads) * c.headDim, kv = std::int64_t(c.numKvHeads) * c.headDim;
    return 2 * h * q + 2 * h * kv;
}
// Router and `experts` experts of a sparse layer.
std::int64_t sparseMlpWeights(const ModelConfig& c, int experts) {
    const std::int64_t h = c.hiddenSize;
    return h * c.moe->numExperts + std::int64_t(experts) * 3 * h * c.moe->expertWidth;
}
} // namespace

std::int64_t ModelConfig::layerLinearWeights() const {
    const std::int64_t dense = 3 * std::int64_t(hiddenSize) * intermediateSize;
    return attentionWeights(*this) + (moe ? std::max(dense, sparseMlpWeights(*this, moe->numExperts)) : dense);
}

std::int64_t ModelConfig::layerActiveWeights() const {
    if (!moe) return layerLinearWeights();
    return attentionWeights(*this) + sparseMlpWeights(*this, moe->expertsPerToken);
}

} // namespace latmix::model
