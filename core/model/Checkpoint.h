#pragma once
// A Hugging Face model folder (SPEC §8): config.json plus model.safetensors or shards listed in
// model.safetensors.index.json. Weights stay memory-mapped, in their stored dtype.
#include "model/ModelConfig.h"
#include "model/TensorNames.h"
#include "util/Job.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace latmix::io {
class SafeTensorsFile;
}

namespace latmix::model {

class Checkpoint {
public:
    // Throws std::runtime_error naming the folder/file and what to do (missing config.json,
    // no safetensors, missing shard, missing tensor, unsupported architecture).
    static Checkpoint load(const std::string& dir);

    const std::string& dir() const { return m_dir; }
    const ModelConfig& config() const { return m_config; }
    bool has(const std::string& name) const;
    // The tensor with its Hugging Face name; throws naming the tensor and the folder.
    at::Tensor weight(const std::string& name) const;
    std::vector<std::string> names() const;
    std::int64_t parameterCount() const;
    std::int64_t weightBytes() const;

private:
    friend void checkWeightsFinite(const Checkpoint& checkpoint, JobContext& job);
    friend std::string checkedKey(const Checkpoint& checkpoint);
    std::string m_dir;
    ModelConfig m_config;
    std::map<std::string, std::shared_ptr<io::SafeTensorsFile>> m_fileOf; // tensor name -> file
};

// NaN/Inf in the weights: every floating-point tensor of the checkpoint is read once, as mapped,
// one tensor at a time (util::findNonFinite; progress by bytes, cancellable). Throws
// std::runtime_error naming the folder, the tensor, its file, the first NaN/Inf's index and value
// and what to do. Commands that compute with a model call it after Checkpoint::load, before they
// write anything: a single NaN weight otherwise turns into "perplexity nan" or a training that
// looks diverged. A checkpoint whose files are unchanged (names, sizes, times) since a check
// passed in this process is not read again.
void checkWeightsFinite(const Checkpoint& checkpoint, JobContext& job = silentJob());

// requiredTensors (the tensors a config calls for, with their shapes): model/TensorNames.h.

// The memory model::LlamaModel takes for a checkpoint's weights in dtype (activations come on
// top, they depend on the batch). On the CPU the stored tensors are used in place
// (mappedInPlace: the memory-mapped file, no copy) plus one decoder layer converted to dtype when
// the file holds another; on a device every tensor is converted once into new memory.
struct WeightMemory {
    std::int64_t bytes = 0;
    bool mappedInPlace = false;
};
WeightMemory weightMemory(const Checkpoint& checkpoint, at::ScalarType dtype, bool onCpu);

} // namespace latmix::model
