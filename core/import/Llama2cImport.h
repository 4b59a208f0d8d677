#pragma once
// Import of a llama2.c "legacy v0" checkpoint (.bin) into a Hugging Face model folder (SPEC §8:
// "A llama2.c .bin + tokenizer imports to the same form"). The tokenizer is converted separately
// (latmix::tokenizer::convertLlama2cTokenizer).
#include "import/Llama2cHeader.h"

#include <string>

namespace latmix::importing {

// Reads and validates the header of `binPath` (parseLlama2cHeader); throws std::runtime_error
// saying what is wrong.
Llama2cHeader readLlama2cHeader(const std::string& binPath);

// Writes config.json (LlamaForCausalLM) and model.safetensors (F32, Hugging Face names, q/k rows
// permuted from llama2.c's interleaved RoPE pairs to the rotate-half layout) into outDir. The
// folder is built under a temporary name beside outDir and renamed into place at the end, so a
// failed import leaves nothing that looks complete. outDir must not exist or be empty. With a
// tokenizerBin (llama2.c tokenizer.bin), its tokenizer.json is converted into the same folder
// before the rename (tokenizer::convertLlama2cTokenizer).
void importLlama2cWeights(const std::string& binPath, const std::string& outDir, const std::string& tokenizerBin = "");

} // namespace latmix::importing
