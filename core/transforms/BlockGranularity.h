#pragma once
// Block granularity of the learned transforms (paper Table 1's "Block"): the mask their factors
// are multiplied with so that A stays block-diagonal (LuTransform, QrTransform).
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace latmix::transforms {

// Undefined for block 0 (full matrices); else sameBlockMask(d, block) in dtype, after checking
// that init ([d, d]) is block-diagonal with that block. Throws std::invalid_argument naming
// `who` otherwise, or for a negative block.
at::Tensor learnedBlockMask(const at::Tensor& init, std::int64_t block, at::ScalarType dtype, const std::string& who);

} // namespace latmix::transforms
