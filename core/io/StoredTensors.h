#pragma once
// The read side of the HDF5 tensor files (io/TensorFile: transforms.h5, train.h5), without
// libtorch: the part that reads untrusted bytes, kept apart from tensor creation so that it builds
// alone into the fuzz harness (tests/fuzz/fuzz_tensorfile.cpp).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace latmix::io {

// One dataset of a tensor file: its path ("layers/3/T2/v"), shape and the type it is read as.
struct StoredTensor {
    enum class Type { F64, F32, I64 };
    std::string name;
    std::vector<std::int64_t> shape;
    Type type = Type::F64;
    std::uint64_t numel = 0;
    std::size_t itemSize() const { return type == Type::F32 ? 4 : 8; }
};

// Reads every dataset of the HDF5 file at path, groups depth first (at most 32 levels): target(t)
// returns memory for t.numel * t.itemSize() bytes, which the data is read into (nothing is
// called for a dataset that fails its checks). Returns the root group's string attributes.
// Checks before any allocation: numeric type, a shape whose byte size does not overflow, and
// storage in the file for every byte the shape declares (a file of a few bytes cannot announce
// terabytes of fill values). Throws std::runtime_error naming path, the dataset and what to do.
std::map<std::string, std::string> readStoredTensors(const std::string& path,
                                                     const std::function<void*(const StoredTensor&)>& target);

} // namespace latmix::io
