#pragma once
// Where a tensor holds NaN or ±Inf, for errors that name the first such value and count them.
// Contiguous float32 / bfloat16 / float16 / float64 CPU tensors (mapped checkpoints) are scanned
// in one pass over their bits, with no temporaries; others (CUDA, strided) through at::isfinite
// in bounded chunks. Integer and boolean tensors are always finite.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace latmix::util {

struct NonFinite {
    std::int64_t count = 0;                // NaN/Inf values; 0: every value is finite
    std::int64_t numel = 0;                // values looked at
    std::vector<std::int64_t> firstIndex;  // the first one, in row-major order
    double firstValue = 0;                 // NaN, +inf or -inf
    explicit operator bool() const { return count > 0; }
    // "first at [12, 40] (nan), 1 of 65536 values"
    std::string describe() const;
};

// On the at::isfinite path, chunks of at most chunkElements values bound the temporary memory
// (the boolean mask of a chunk) whatever the tensor's size.
// bitScan false takes the at::isfinite path for every tensor (the tests compare the two paths).
NonFinite findNonFinite(const at::Tensor& t, std::int64_t chunkElements = std::int64_t(1) << 24, bool bitScan = true);

} // namespace latmix::util
