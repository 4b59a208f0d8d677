#pragma once
// A random checkpoint of any supported config (Llama, Mistral, Qwen2, Qwen3 at any size): the way
// to dry-run a model's memory and time before downloading it, and to test scale on this machine
// (`latmix demo-model --config config.json OUT`). Weights follow transformers' initialisation
// (normal, std = initializer_range 0.02, here drawn uniform with that std; norms 1), so
// activations have the scale a freshly initialised Hugging Face model has; nothing is learned.
#include "model/ModelConfig.h"
#include "util/Job.h"

#include <cstdint>
#include <string>

namespace latmix::importing {

struct RandomModelOptions {
    std::string dtype = "bfloat16"; // stored dtype: "bfloat16" or "float32"
    std::string tokenizerDir;       // its tokenizer files are copied in ("" = none)
    std::uint64_t seed = 0;         // same seed, config and dtype -> byte-identical weights
};

// Writes config.json (config as given, torch_dtype set), model.safetensors (streamed: one
// tensor in memory at a time) and the tokenizer files into dir, built in a temporary sibling
// folder that replaces dir when complete. Throws std::runtime_error when the tokenizer's vocabulary
// is larger than the config's vocab_size or naming the file that failed, std::invalid_argument
// for an unknown dtype;
// progress per tensor, cancel between tensors (nothing is left behind).
void writeRandomModel(const model::ModelConfig& config, const std::string& dir, const RandomModelOptions& options = {},
                      JobContext& job = silentJob());

} // namespace latmix::importing
