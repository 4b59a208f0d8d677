// safetensors header + reader: the input is a whole file. Whatever the header accepts must lie
// inside the file: every accepted tensor's bytes are read (ASan reports a read past the input).
#include "FuzzSupport.h"

#include "io/SafeTensorsHeader.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace latmix;
    fuzz::expectResultOrClearError("fuzz.safetensors", [&] {
        const io::SafeTensorsHeader h = io::parseSafeTensorsHeader("fuzz.safetensors", data, size);
        if (h.dataStart < 8 || h.dataStart > size) fuzz::finding("data section starts outside the file");
        unsigned sum = 0;
        for (const auto& e : h.entries) {
            const io::SafeTensorsDtypeSpec* dt = io::safeTensorsDtypeSpec(e.dtype);
            if (!dt) fuzz::finding("accepted unknown dtype " + e.dtype);
            if (e.begin > e.end || e.end > size - h.dataStart) fuzz::finding("accepted offsets outside the data");
            std::uint64_t n = dt->itemSize;
            for (auto d : e.shape) n *= static_cast<std::uint64_t>(d);
            if (n != e.end - e.begin) fuzz::finding("accepted a shape that does not match its bytes");
            for (std::uint64_t i = e.begin; i < e.end; ++i) sum += data[h.dataStart + i]; // the reader's access
        }
        (void)sum;
    });
    return 0;
}
