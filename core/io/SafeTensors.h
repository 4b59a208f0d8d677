#pragma once
// safetensors files (SPEC §8), the one reader and writer: read through a read-only memory map,
// validated before any data is touched; written one tensor at a time (so an export never holds a
// second copy of a model) and atomically (util/AtomicFile).
#include "io/SafeTensorsHeader.h"

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace latmix::io {

// A safetensors dtype: its name, bytes per element and, when libtorch 1.13 and 2.x both have it,
// the libtorch type. F8_E4M3 / F8_E5M2 (NVFP4 block scales) and U16/U32/U64 have none here.
struct SafeTensorsDtype {
    const char* name;
    std::size_t itemSize;
    bool inLibtorch;
    at::ScalarType type; // when inLibtorch
};
// nullptr for a name the format does not define / a type no safetensors dtype holds.
const SafeTensorsDtype* safeTensorsDtype(const std::string& name);
const SafeTensorsDtype* safeTensorsDtype(at::ScalarType type);

class SafeTensorsFile {
public:
    // Maps the file and validates the header (parseSafeTensorsHeader): length, JSON, dtypes,
    // shape vs byte size, offsets inside the file, no overlaps. Throws std::runtime_error naming the file, the
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
    // keeps the mapping alive. Read-only memory: clone before writing into it. F8_E4M3 and
    // F8_E5M2 come back as uint8 codes of the stored shape; U16/U32/U64 throw (read bytes()).
    at::Tensor tensor(const std::string& name) const;
    // The stored bytes of a tensor, uint8 [nbytes], viewing the mapping.
    at::Tensor bytes(const std::string& name) const;

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

// Drops the resident pages of a CPU tensor that views a mapped safetensors file (tensor()), so a
// pass over a model larger than memory keeps one layer resident, not the file: the pages stay in
// the page cache and are read again on the next access. No-op for any other tensor.
void releaseMappedPages(const at::Tensor& t);

// One tensor of a file to write: the header entry.
struct TensorSpec {
    std::string name;
    std::string dtype; // safetensors dtype name
    std::vector<std::int64_t> shape;
};

// A safetensors file written a tensor at a time, in the order of its header (validated before
// the file is created): write(t) takes the data of specs[next()] (any device) whose byte size
// equals numel(shape) * itemSize(dtype); its bytes are written as they are, so a uint8 tensor can
// carry F8_E4M3 codes. Header padded to 8 bytes. Everything goes to a temporary name that
// finish() renames over `path` once every tensor is written; destroyed before finish() (an
// exception, a cancel) the writer removes it. Several writers may be open at once, e.g. a model
// and its packed weights, each written as its tensors are produced. Throws naming the file and
// tensor.
class SafeTensorsWriter {
public:
    SafeTensorsWriter(const std::string& path, const std::vector<TensorSpec>& specs,
                      const std::map<std::string, std::string>& metadata = {});
    ~SafeTensorsWriter();
    SafeTensorsWriter(const SafeTensorsWriter&) = delete;
    SafeTensorsWriter& operator=(const SafeTensorsWriter&) = delete;
    std::size_t next() const; // index of the spec the next write() fills
    void write(const at::Tensor& t);
    void finish();

private:
    struct State;
    std::unique_ptr<State> m;
};

// Writes the tensors in the order given (a SafeTensorsWriter): produce(i) returns the data of specs[i] (any device)
// whose byte size equals numel(shape) * itemSize(dtype); its bytes are written as they are, so
// a uint8 tensor can carry F8_E4M3 codes. Header padded to 8 bytes; written under a temporary
// name and renamed over `path` at the end. Throws naming the file and tensor.
void writeSafeTensorsStreamed(const std::string& path, const std::vector<TensorSpec>& specs,
                              const std::function<at::Tensor(std::size_t)>& produce,
                              const std::map<std::string, std::string>& metadata = {});

// Writes tensors (F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL) in the given order through
// writeSafeTensorsStreamed.
void writeSafeTensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

} // namespace latmix::io
