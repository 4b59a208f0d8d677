// A Hugging Face model folder (SPEC §8): config.json + model.safetensors, or shards listed in
// model.safetensors.index.json. Every file stays memory-mapped; tensors are views in their stored
// dtype. load() checks up front that every tensor the decoder needs is there with the shape the
// config implies, so a mismatched folder fails at load with a message instead of deep in a
// forward pass.
#include "model/Checkpoint.h"

#include "util/NonFinite.h"

#include "io/SafeTensors.h"
#include "model/ShardIndex.h"
#include "model/TensorNames.h"
#include "util/Text.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <set>
#include <mutex>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace fs = std::filesystem;

namespace latmix::model {
using util::shapeText;

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
        std::map<std::string, std::shared_ptr<io::SafeTensorsFile>> shards;
        for (const auto& [name, shard] : parseShardIndex(ss.str(), index.string())) {
            auto s = shards.find(shard);
            if (s == shards.end()) {
                const fs::path sp = root / shard;
                if (!fs::is_regular_file(sp, ec))
                    throw std::runtime_error("model folder '" + dir + "': shard '" + shard +
                                             "' is listed in model.safetensors.index.json but missing; download "
                                             "all shards of the checkpoint");
                s = shards.emplace(shard, io::SafeTensorsFile::open(sp.string())).first;
            }
            if (!s->second->contains(name))
                throw std::runtime_error("model folder '" + dir + "': tensor '" + name + "' is listed in "
                                         "model.safetensors.index.json under shard '" + shard +
                                         "' but that shard does not contain it; the index and the shards do not "
                                         "belong together");
            ck.m_fileOf[name] = s->second;
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

// The files a check read, as they were (name, size, modification time): a checkpoint whose files
// are unchanged since one passed need not be read again in this process (issue 71: the workbench
// checks a model when it opens it, and its calibration then spent 54 s on a 1B checkpoint doing it
// again before its first step).
std::string checkedKey(const Checkpoint& ck) {
    std::set<std::string> files;
    for (const auto& [name, f] : ck.m_fileOf) files.insert(f->path());
    std::string key = fs::weakly_canonical(ck.dir()).string();
    for (const auto& path : files) {
        std::error_code ec;
        const auto size = fs::file_size(path, ec);
        const auto time = fs::last_write_time(path, ec).time_since_epoch().count();
        key += "\n" + path + " " + std::to_string(size) + " " + std::to_string(time);
    }
    return key;
}

namespace {
std::mutex g_checkedMutex;
std::set<std::string> g_checked;
} // namespace

void checkWeightsFinite(const Checkpoint& ck, JobContext& job) {
    const std::string key = checkedKey(ck);
    {
        const std::lock_guard<std::mutex> lock(g_checkedMutex);
        if (g_checked.count(key)) {
            job.progress(1.0, "the weights were checked already: no NaN/Inf");
            return;
        }
    }
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
    const std::lock_guard<std::mutex> lock(g_checkedMutex);
    g_checked.insert(key);
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
