#pragma once
// Import of a llama2.c "legacy v0" checkpoint (.bin) into a Hugging Face model folder (SPEC §8:
// "A llama2.c .bin + tokenizer imports to the same form"). The tokenizer is converted separately
// (latmix::tokenizer::convertLlama2cTokenizer).
#include <string>

namespace latmix::importing {

// Header of a llama2.c legacy file: 7 little-endian int32. A negative vocab_size marks an
// untied classifier (wcls), stored after the RoPE tables.
struct Llama2cHeader {
    int dim = 0;
    int hiddenDim = 0;
    int numLayers = 0;
    int numHeads = 0;
    int numKvHeads = 0;
    int vocabSize = 0;  // absolute value
    int seqLen = 0;
    bool sharedClassifier = true;
};

// Reads and validates the header of `binPath` (sizes positive and consistent, file size equal to
// what the header implies); throws std::runtime_error saying what is wrong.
Llama2cHeader readLlama2cHeader(const std::string& binPath);

// Writes config.json (LlamaForCausalLM) and model.safetensors (F32, Hugging Face names, q/k rows
// permuted from llama2.c's interleaved RoPE pairs to the rotate-half layout) into outDir. The
// folder is built under a temporary name beside outDir and renamed into place at the end, so a
// failed import leaves nothing that looks complete. outDir must not exist or be empty. With a
// tokenizerBin (llama2.c tokenizer.bin), its tokenizer.json is converted into the same folder
// before the rename (tokenizer::convertLlama2cTokenizer).
void importLlama2cWeights(const std::string& binPath, const std::string& outDir, const std::string& tokenizerBin = "");

} // namespace latmix::importing
