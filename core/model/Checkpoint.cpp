// A Hugging Face model folder (SPEC §8): config.json + model.safetensors, or shards listed in
// model.safetensors.index.json. Every file stays memory-mapped; tensors are views in their stored
// dtype. load() checks up front that every tensor the decoder needs is there with the shape the
// config implies, so a mismatched folder fails at load with a message instead of deep in a
// forward pass.
#include "model/Checkpoint.h"

#include "util/NonFinite.h"

#include "io/SafeTensors.h"
#include "model/TensorNames.h"
#include "util/Text.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace fs = std::filesystem;

namespace latmix::model {
using util::shapeText;

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

Checkpoint Checkpoint::load(const std::string& dir) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
        throw std::runtime_error("model folder '" + dir + "' does not exist or is not a folder; give the path of a "
                                 "Hugging Face model folder (config.json + model.safetensors)");
    const fs::path root(dir);
    const fs::path configPath = root / "config.json";
    if (!fs::is_regular_file(configPath, ec))
        throw std::runtime_error("model folder '" + dir + "' has no config.json; a Hugging Face model folder needs "
                                 "config.json next to its weights");
    Checkpoint ck;
    ck.m_dir = dir;
    ck.m_config = ModelConfig::fromFile(configPath.string());

    const fs::path single = root / "model.safetensors";
    const fs::path index = root / "model.safetensors.index.json";
    if (fs::is_regular_file(single, ec)) {
        auto f = io::SafeTensorsFile::open(single.string());
        for (const auto& e : f->entries()) ck.m_fileOf[e.name] = f;
    } else if (fs::is_regular_file(index, ec)) {
        std::ifstream in(index, std::ios::binary);
        if (!in) throw std::runtime_error("cannot read '" + index.string() + "'");
        std::ostringstream ss;
        ss << in.rdbuf();
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(ss.str());
        } catch (const nlohmann::json::exception& e) {
            throw std::runtime_error("'" + index.string() + "' is not valid JSON (" + e.what() +
                                     "); download the checkpoint again");
        }
        if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
            throw std::runtime_error("'" + index.string() + "' has no 'weight_map' object (tensor name -> shard file)");
        std::map<std::string, std::shared_ptr<io::SafeTensorsFile>> shards;
        for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
            if (!it.value().is_string())
                throw std::runtime_error("'" + index.string() + "': weight_map entry '" + it.key() +
                                         "' is not a file name");
            const std::string shard = it.value().get<std::string>();
            auto s = shards.find(shard);
            if (s == shards.end()) {
                const fs::path sp = root / shard;
                bool escapes = shard.empty() || fs::path(shard).is_absolute();
                for (const auto& part : fs::path(shard)) escapes = escapes || part == "..";
                if (escapes)
                    throw std::runtime_error("'" + index.string() + "' names shard '" + shard +
                                             "', which is not a file inside the folder");
                if (!fs::is_regular_file(sp, ec))
                    throw std::runtime_error("model folder '" + dir + "': shard '" + shard +
                                             "' is listed in model.safetensors.index.json but missing; download "
                                             "all shards of the checkpoint");
                s = shards.emplace(shard, io::SafeTensorsFile::open(sp.string())).first;
            }
            if (!s->second->contains(it.key()))
                throw std::runtime_error("model folder '" + dir + "': tensor '" + it.key() + "' is listed in "
                                         "model.safetensors.index.json under shard '" + shard +
                                         "' but that shard does not contain it; the index and the shards do not "
                                         "belong together");
            ck.m_fileOf[it.key()] = s->second;
        }
    } else {
        throw std::runtime_error("model folder '" + dir + "' has no weights: expected model.safetensors or "
                                 "model.safetensors.index.json (other formats, e.g. pytorch_model.bin, must be "
                                 "converted to safetensors first)");
    }

    // Every tensor the decoder reads (SPEC §4), with the shape config.json implies. A folder in
    // the compressed-tensors export form (SPEC §8) stores X.weight_packed instead of X.weight.
    for (const auto& [name, shape] : requiredTensors(ck.m_config)) {
        auto it = ck.m_fileOf.find(name);
        if (it == ck.m_fileOf.end()) {
            const std::string base = name.size() > 7 ? name.substr(0, name.size() - 7) : name; // strip ".weight"
            if (name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0 &&
                ck.m_fileOf.count(base + ".weight_packed"))
                continue;
            throw std::runtime_error("model folder '" + dir + "': required tensor '" + name + "' " + shapeText(shape) +
                                     " is missing; the weights do not match config.json (" +
                                     ck.m_config.architectureName + ", " + std::to_string(ck.m_config.numLayers) +
                                     " layers)");
        }
        const auto& e = it->second->entry(name);
        if (e.dtype != "F32" && e.dtype != "BF16" && e.dtype != "F16" && e.dtype != "F64")
            throw std::runtime_error("model folder '" + dir + "': tensor '" + name + "' is " + e.dtype +
                                     "; the decoder reads F32, BF16 or F16 weights (SPEC §8): convert the "
                                     "checkpoint, or load a quantized export through its run folder");
        if (e.shape != shape)
            throw std::runtime_error("model folder '" + dir + "': tensor '" + name + "' has shape " +
                                     shapeText(e.shape) + " but config.json implies " + shapeText(shape) +
                                     "; the weights do not match config.json");
    }
    return ck;
}

bool Checkpoint::has(const std::string& name) const { return m_fileOf.count(name) != 0; }

at::Tensor Checkpoint::weight(const std::string& name) const {
    auto it = m_fileOf.find(name);
    if (it == m_fileOf.end()) {
        const bool tiedHead = name == names::kLmHead && m_config.tieWordEmbeddings;
        throw std::runtime_error("model folder '" + m_dir + "' has no tensor '" + name + "'" +
                                 (tiedHead ? " (tie_word_embeddings: use model.embed_tokens.weight)"
                                           : "; check has() or names() for what the checkpoint holds"));
    }
    return it->second->tensor(name);
}

std::vector<std::string> Checkpoint::names() const {
    std::vector<std::string> v;
    v.reserve(m_fileOf.size());
    for (const auto& kv : m_fileOf) v.push_back(kv.first);
    return v;
}

std::int64_t Checkpoint::parameterCount() const {
    std::int64_t n = 0;
    for (const auto& [name, f] : m_fileOf) {
        std::int64_t k = 1;
        for (auto d : f->entry(name).shape) k *= d;
        n += k;
    }
    return n;
}

std::int64_t Checkpoint::weightBytes() const {
    std::int64_t n = 0;
    for (const auto& [name, f] : m_fileOf) {
        const auto& e = f->entry(name);
        n += static_cast<std::int64_t>(e.end - e.begin);
    }
    return n;
}

void checkWeightsFinite(const Checkpoint& ck, JobContext& job) {
    const auto total = static_cast<double>(std::max<std::int64_t>(1, ck.weightBytes()));
    std::int64_t done = 0;
    for (const auto& [name, f] : ck.m_fileOf) {
        job.checkCancelled();
        const auto& e = f->entry(name);
        const auto bytes = static_cast<std::int64_t>(e.end - e.begin);
        job.progress(done / total, "checking the weights for NaN/Inf: " + name);
        const at::Tensor t = f->tensor(name);
        const auto bad = util::findNonFinite(t);
        io::releaseMappedPages(t); // one tensor resident at a time, whatever the model's size
        if (bad)
            throw std::runtime_error("model folder '" + ck.dir() + "': tensor '" + name + "' in " +
                                     fs::path(f->path()).filename().string() + " holds NaN/Inf (" + bad.describe() +
                                     "); the checkpoint is damaged: download or export it again");
        done += bytes;
    }
    job.progress(1.0, "checked the weights: no NaN/Inf");
}

WeightMemory weightMemory(const Checkpoint& ck, at::ScalarType dtype, bool onCpu) {
    WeightMemory m;
    const auto item = static_cast<std::int64_t>(c10::elementSize(dtype));
    if (!onCpu) {
        m.bytes = ck.parameterCount() * item;
        return m;
    }
    // model::LlamaModel on the CPU: the file's tensors in place, plus one decoder layer converted
    // when the stored dtype is another (forwardHidden converts a layer at a time).
    m.mappedInPlace = true;
    m.bytes = ck.weightBytes();
    const bool same = (dtype == at::kFloat && ck.config().torchDtype == "float32") ||
                      (dtype == at::kBFloat16 && ck.config().torchDtype == "bfloat16");
    if (!same) {
        const std::string first = names::layerPrefix(0);
        for (const auto& [name, shape] : requiredTensors(ck.config())) {
            if (name.rfind(first, 0) != 0) continue;
            std::int64_t n = 1;
            for (auto d : shape) n *= d;
            m.bytes += n * item;
        }
    }
    return m;
}

} // namespace latmix::model
