#pragma once
// model.safetensors.index.json of a sharded Hugging Face checkpoint, parsed without libtorch (the
// part of Checkpoint::load that reads untrusted text; tests/fuzz/fuzz_shardindex.cpp feeds it).
#include <string>
#include <utility>
#include <vector>

namespace latmix::model {

// The "weight_map" of the index: (tensor name, shard file name) pairs in name order. Every shard
// is a relative path inside the folder (no "..", not absolute, not empty). Throws
// std::runtime_error naming indexPath and what is wrong.
std::vector<std::pair<std::string, std::string>> parseShardIndex(const std::string& text, const std::string& indexPath);

} // namespace latmix::model
