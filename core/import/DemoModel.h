#pragma once
// A small deterministic LlamaForCausalLM folder for demos and tests that must run without
// ../shared/data: config.json, model.safetensors (F32) and tokenizer.json (+ tokenizer_config.json).
// hidden 128, intermediate 384, 4 layers, 4 heads of head_dim 32, 2 KV heads, vocab 300,
// max positions 512, untied lm_head. The residual stream carries massive outlier channels
// (demoModelOutlierChannels()) as trained LLMs do, so MX quantization visibly suffers on it.
#include <cstdint>
#include <string>
#include <vector>

namespace latmix::importing {

// Writes the demo model into dir (created when missing; existing files of the same names are
// replaced atomically). Same seed -> byte-identical files, on any machine.
void writeDemoModel(const std::string& dir, std::uint64_t seed = 0);

// The residual channels that carry the planted outliers (fixed, independent of the seed).
const std::vector<int>& demoModelOutlierChannels();

} // namespace latmix::importing
