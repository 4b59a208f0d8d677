#pragma once
// MX fake quantization of libtorch tensors over their last dimension (SPEC §1).
#include "mx/MxFormat.h"

#include <ATen/core/Tensor.h>

namespace latmix::mx {

enum class Backend {
    Auto,      // the CPU kernel for CPU tensors, tensor operations elsewhere (CUDA)
    CpuKernel, // fused float32 loop (mx/MxKernelCpu), CPU tensors only
    TensorOps, // libtorch tensor operations; runs on any device
};

// Quantize then dequantize x blockwise along its last dimension; a trailing partial block is
// quantized on its own; a block holding NaN/Inf becomes NaN. Returns x's dtype and device.
// Differentiable with the straight-through estimator: the gradient is the identity where
// |x| <= max_elem * block scale and 0 where the value saturated (SPEC §1).
at::Tensor fakeQuantize(const at::Tensor& x, const MxConfig& c, Backend backend = Backend::Auto);

// The online block Hadamard T3 then fakeQuantize, fused into one pass over x
// (cpu::quantizeRowsAfterHadamard): x [..., n] float32 on the CPU, signs [n] float32 ±1 such
// that every block of B = c.blockSize is (H_B/√B)·diag(signs). Not differentiable (call it with
// no gradient wanted; fusedHadamardApplies says so); throws std::invalid_argument otherwise.
at::Tensor fakeQuantizeAfterHadamard(const at::Tensor& x, const at::Tensor& signs, const MxConfig& c);
// Whether fakeQuantizeAfterHadamard takes x and c for a sign-Hadamard of block hadamardBlock.
bool fusedHadamardApplies(const at::Tensor& x, const MxConfig& c, std::int64_t hadamardBlock);

// Per-block scales actually used (E8M0 power of two; NVFP4: E4M3 scale times the tensor scale),
// shape [..., ceil(n/B)], float32, NaN for blocks holding NaN/Inf. nvfp4Global > 0 (NVFP4 only)
// is the tensor scale g to use instead of x's own: weights a runtime fuses share one g
// (quant::sharedGlobalScale); each row's scales are then those of x's rows stacked with the
// other weights of the group. 0 takes x's own.
at::Tensor blockScales(const at::Tensor& x, const MxConfig& c, Backend backend = Backend::Auto, float nvfp4Global = 0);

// The element rounding of SPEC §1 on a float32 tensor (any device), elementwise: the spacing of
// the binade holding |y| (at least the smallest normal binade's; INT formats: fixed), round half
// to even, saturate to +-max, keep the sign. Done as the nearest value of the format's grid by a
// binary search over the midpoints between its values (at::bucketize, ties placed as the scalar
// reference places them), then a gather: three passes, one int32 index tensor besides the
// result. y finite (a NaN gets some grid value: fakeQuantize masks non-finite blocks). The one
// tensor implementation: fakeQuantize and quant/'s GPTQ/RTN both round with it.
at::Tensor roundToElement(const at::Tensor& y, ElementFormat f);

} // namespace latmix::mx
