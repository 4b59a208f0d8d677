#pragma once
// Small HDF5 files of named tensors and string attributes: transforms.h5, training state and
// per-step series of a run (SPEC §8 "Run files (HDF5)"). Names are paths ("T1/A",
// "layers/3/T2/v"); groups are created as needed. float64, float32 and int64 tensors of any
// shape (CPU copies are written). Writes are atomic: a temporary file renamed over the target.
#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace latmix::io {

struct TensorFileContents {
    std::map<std::string, at::Tensor> tensors;
    std::map<std::string, std::string> attributes; // on the root group
};

void writeTensorFile(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                     const std::map<std::string, std::string>& attributes = {});
// Throws std::runtime_error naming the file when it cannot be read.
TensorFileContents readTensorFile(const std::string& path);

} // namespace latmix::io
