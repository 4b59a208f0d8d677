#pragma once
// Bitwise comparison of tensors, for checks that a written file reads back exactly.
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace latmix::util {

// The index and the two values of the first element where a and b (same shape and dtype) differ
// bitwise, NaN matching NaN; index -1 when they are equal, 0 when dtype or shape differ.
struct Mismatch {
    std::int64_t index = -1;
    double a = 0, b = 0;
};
Mismatch firstBitMismatch(const at::Tensor& a, const at::Tensor& b);

} // namespace latmix::util
