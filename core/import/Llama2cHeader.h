#pragma once
// The header of a llama2.c "legacy v0" checkpoint (.bin), validated without libtorch: the part of
// the import that reads untrusted bytes (tests/fuzz/fuzz_llama2c.cpp feeds it).
#include <cstdint>
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

// Validates the 28 header bytes of a file of fileSize bytes named path (sizes positive, within
// generous limits and consistent; the file size equal to what the header implies). Throws
// std::runtime_error "llama2.c checkpoint 'PATH': ..." saying what is wrong and what to do.
Llama2cHeader parseLlama2cHeader(const std::string& path, const unsigned char (&raw)[28], std::uint64_t fileSize);

// Number of float32 values the body of a file with this header holds.
std::uint64_t llama2cFloatCount(const Llama2cHeader& h);

} // namespace latmix::importing
