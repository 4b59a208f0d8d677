// llama2.c legacy checkpoint header: bytes 0..27 are the header, bytes 28..35 (when present) the
// file size to check it against (else the input's size). An accepted header must imply exactly
// that file size with every dimension inside the documented limits.
#include "FuzzSupport.h"

#include "import/Llama2cHeader.h"

#include <cstring>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace latmix;
    unsigned char raw[28] = {};
    std::memcpy(raw, data, size < 28 ? size : 28);
    std::uint64_t fileSize = size;
    if (size >= 36) std::memcpy(&fileSize, data + 28, 8);
    fuzz::expectResultOrClearError("model.bin", [&] {
        const importing::Llama2cHeader h = importing::parseLlama2cHeader("model.bin", raw, fileSize);
        if (h.dim <= 0 || h.dim > 65536 || h.numHeads <= 0 || h.dim % h.numHeads || h.numKvHeads <= 0 ||
            h.numHeads % h.numKvHeads || h.vocabSize <= 0 || h.seqLen <= 0)
            fuzz::finding("accepted impossible sizes");
        if (28 + 4 * importing::llama2cFloatCount(h) != fileSize) fuzz::finding("accepted a file of the wrong size");
    });
    return 0;
}
