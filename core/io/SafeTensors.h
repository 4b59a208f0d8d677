#pragma once
// safetensors files (SPEC §8): read through a read-only memory map, validated before any data
// is touched; written atomically (temporary name, then rename).
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace latmix::io {

struct SafeTensorEntry {
    std::string name;
    std::string dtype;          // "F32", "F16", "BF16", "I64", ... as in the header
    std::vector<int64_t> shape;
    std::uint64_t begin = 0;    // byte offsets into the data section
    std::uint64_t end = 0;
};

class SafeTensorsFile {
public:
    // Maps the file and validates the header: length, JSON, dtypes, shape vs byte size,
    // offsets inside the file, no overlaps. Throws std::runtime_error naming the file, the
    // tensor and the problem.
    static std::shared_ptr<SafeTensorsFile> open(const std::string& path);
    ~SafeTensorsFile();
    SafeTensorsFile(const SafeTensorsFile&) = delete;
    SafeTensorsFile& operator=(const SafeTensorsFile&) = delete;

    const std::string& path() const { return m_path; }
    const std::vector<SafeTensorEntry>& entries() const { return m_entries; }
    const std::map<std::string, std::string>& metadata() const { return m_metadata; }
    bool contains(const std::string& name) const;
    const SafeTensorEntry& entry(const std::string& name) const; // throws naming file + tensor

    // A CPU tensor of the stored dtype viewing the mapped bytes (no copy when aligned); it
    // keeps the mapping alive. Read-only memory: clone before writing into it.
    at::Tensor tensor(const std::string& name) const;

private:
    SafeTensorsFile() = default;
    struct Mapping;
    std::shared_ptr<Mapping> m_map;
    std::string m_path;
    std::uint64_t m_dataStart = 0;
    std::vector<SafeTensorEntry> m_entries;
    std::map<std::string, size_t> m_index;
    std::map<std::string, std::string> m_metadata;
};

// Writes CPU tensors (F32, F16, BF16, I8, U8, I32, I64, BOOL) in the given order, header padded
// to 8 bytes, to a temporary name in the same folder, then renames it over `path`.
void writeSafeTensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

} // namespace latmix::io
