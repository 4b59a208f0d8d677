#pragma once
// safetensors files as the exporter writes and verifies them (SPEC §8). Two things io/SafeTensors
// does not do: dtypes libtorch 1.13 cannot represent (the F8_E4M3 block scales of an NVFP4
// compressed-tensors export are written and read back as their raw bytes), and streaming: the
// writer asks for one tensor at a time, so that exporting a large model never holds a second
// copy of all its weights in memory. The reader reads one tensor at a time with pread().
#include "io/SafeTensors.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace latmix::exporting {

// Bytes per element of a safetensors dtype name ("F32", "BF16", "U8", "F8_E4M3", ...); 0 for an
// unknown name.
std::size_t safetensorsItemSize(const std::string& dtype);

struct RawTensorSpec {
    std::string name;
    std::string dtype;          // safetensors dtype name
    std::vector<std::int64_t> shape;
};

// Writes the tensors in the order given: produce(i) returns the data of specs[i] as a CPU tensor
// whose byte size equals numel(shape) * itemSize(dtype) (any element type: its bytes are written
// as they are, so a uint8 tensor can carry F8_E4M3 codes). Header padded to 8 bytes, written
// under a temporary name and renamed to `path` at the end. Throws naming the file and tensor.
void writeSafeTensorsStreamed(const std::string& path, const std::vector<RawTensorSpec>& specs,
                              const std::function<at::Tensor(std::size_t)>& produce,
                              const std::map<std::string, std::string>& metadata = {});

class RawSafeTensorsReader {
public:
    // Reads and validates the header (lengths, JSON, known dtypes, sizes, offsets inside the
    // file, no overlaps). Throws std::runtime_error naming the file and the problem.
    explicit RawSafeTensorsReader(const std::string& path);
    ~RawSafeTensorsReader();
    RawSafeTensorsReader(const RawSafeTensorsReader&) = delete;
    RawSafeTensorsReader& operator=(const RawSafeTensorsReader&) = delete;

    const std::string& path() const { return m_path; }
    const std::vector<io::SafeTensorEntry>& entries() const { return m_entries; } // header order
    const std::map<std::string, std::string>& metadata() const { return m_metadata; }
    bool contains(const std::string& name) const { return m_index.count(name) != 0; }
    const io::SafeTensorEntry& entry(const std::string& name) const; // throws naming file + tensor

    // The stored bytes, uint8 [nbytes].
    at::Tensor bytes(const std::string& name) const;
    // The tensor in its stored dtype (F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL); F8_E4M3
    // and F8_E5M2 come back as uint8 codes of the stored shape.
    at::Tensor tensor(const std::string& name) const;

private:
    std::string m_path;
    int m_fd = -1;
    std::uint64_t m_dataStart = 0;
    std::vector<io::SafeTensorEntry> m_entries;
    std::map<std::string, std::size_t> m_index;
    std::map<std::string, std::string> m_metadata;
};

} // namespace latmix::exporting
