#pragma once
// Per-MX-block quantization error (SPEC §3 with T = identity): for block i,
// E_B^i = (1/|I_i|) sum_{j in I_i} (x - xq)_j^2, averaged over all leading dimensions.
#include <ATen/core/Tensor.h>

namespace latmix::metrics {

// x and xq of the same shape [..., n]; returns float64 [ceil(n/B)].
at::Tensor perBlockError(const at::Tensor& x, const at::Tensor& xq, int blockSize);

// Whole-tensor error of xq against x (same shape), in float64: mean squared error and
// SQNR = 10 log10(Σx² / Σ(x − xq)²) in dB (+inf when xq == x, NaN when x is all zero).
struct ErrorSummary {
    double mse = 0;
    double sqnrDb = 0;
};
ErrorSummary errorSummary(const at::Tensor& x, const at::Tensor& xq);

} // namespace latmix::metrics
