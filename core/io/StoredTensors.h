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

// The seal of a tensor file: its first kTensorFileSealBytes bytes (an HDF5 user block, which
// libhdf5 leaves alone) hold "LATMiX tensor file 1", the file's size and the CRC-32 of every byte
// after the seal. readStoredTensors checks it before libhdf5 reads anything, so a damaged file
// (truncated, bit flips) is refused whole: Debian 12's libhdf5 1.10 crashes on some damaged
// files, even of its checksummed format (fuzz_tensorfile: SEGVs in H5A__close and while freeing
// dense link storage). An integrity check, not a signature: a file crafted to match still
// reaches libhdf5. sealTensorFile writes it into a file created with that user block.
inline constexpr std::size_t kTensorFileSealBytes = 512;
void sealTensorFile(const std::string& path);
// The check readStoredTensors makes first, for the other sealed files (io/StoredActivations):
// the seal, the size, the CRC-32 and an HDF5 file of the checksummed 1.8 format behind them.
// Throws std::runtime_error naming path and what to do.
void checkTensorFileSeal(const std::string& path);

} // namespace latmix::io
