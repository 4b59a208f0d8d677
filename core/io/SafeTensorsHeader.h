#pragma once
// The safetensors header (SPEC §8), parsed and validated without libtorch: the part of the
// reader that sees untrusted bytes, kept apart from tensor creation (io/SafeTensors) so that it
// builds alone into the fuzz harness (tests/fuzz).
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace latmix::io {

// A dtype the safetensors format defines (huggingface/safetensors' Dtype): its name and bytes per
// element.
struct SafeTensorsDtypeSpec {
    const char* name;
    std::size_t itemSize;
};
// Every dtype the format defines, in one table.
const std::vector<SafeTensorsDtypeSpec>& safeTensorsDtypeSpecs();
// nullptr for a name the format does not define.
const SafeTensorsDtypeSpec* safeTensorsDtypeSpec(const std::string& name);

struct SafeTensorEntry {
    std::string name;
    std::string dtype;          // "F32", "F16", "BF16", "I64", ... as in the header
    std::vector<int64_t> shape;
    std::uint64_t begin = 0;    // byte offsets into the data section
    std::uint64_t end = 0;
};

struct SafeTensorsHeader {
    std::uint64_t dataStart = 0;          // 8 + header length: where the data section begins
    std::vector<SafeTensorEntry> entries; // by offset (file order)
    std::map<std::string, std::string> metadata;
};

// Validates the first bytes of a file of fileSize bytes (all of it, or at least the 8-byte length
// and the header it announces): length, JSON, dtypes, shape against byte size (no overflow),
// offsets inside the data section, no overlaps. Never reads past bytes + min(fileSize, 8 + header
// length). Throws std::runtime_error "safetensors file 'PATH': tensor 'NAME': ..." saying what is
// wrong and what to do.
SafeTensorsHeader parseSafeTensorsHeader(const std::string& path, const unsigned char* bytes, std::uint64_t fileSize);

} // namespace latmix::io
