#pragma once
// Scalar reference implementation of MX fake quantization (SPEC §1), one value at a time in
// double precision, written for clarity rather than speed. The fast paths are tested against
// it bit for bit (the ggml way: a plain reference per format, fast kernels checked against it).
#include "mx/MxFormat.h"

#include <cstdint>
#include <vector>

namespace latmix::mx::ref {

// Round an already scaled value onto the element grid: round half to even, keep the
// element format's subnormals, then saturate to +-max. NaN stays NaN.
double quantizeElement(double y, ElementFormat f);

// Unclamped-to-E8M0 exponent rule of SPEC §1 for a finite block maximum amax >= 0, then
// clamped to the E8M0 range [-127, 127]. An all-zero block gives -127.
int sharedExponent(double amax, ElementFormat f, ScaleMode mode);

// Per-tensor FP32 scale of NVFP4: amax/(448*6) over the finite values; 1 for an all-zero tensor.
float nvfp4GlobalScale(const std::vector<float>& x);

// E4M3 block scale of NVFP4 for one block: (amax/m)/g clamped to [2^-9, 448], rounded to E4M3;
// m = 6 maps the block's maximum to E2M1's largest value, four-over-six also tries m = 4.
float nvfp4BlockScale(float blockAmax, float globalScale, float mappedMax = 6.0f);

// Four over six (SPEC §1): whether the block x[0, n) takes the scale that maps its maximum to 4.
// Both candidates' dequantized values are formed in FP32 as fakeQuantize forms them; the sum of
// squared errors is taken in float64 over the block in index order, and 4 wins only when its sum
// is strictly smaller (a tie keeps the standard 6).
bool nvfp4PrefersFour(const float* x, int64_t n, double blockAmax, float globalScale);

// Fake quantization (quantize then dequantize) of x viewed as rows of rowLength values, blocks
// along each row, a trailing partial block quantized on its own. A block holding NaN or Inf
// becomes all NaN.
std::vector<float> fakeQuantize(const std::vector<float>& x, int64_t rowLength, const MxConfig& c);

// The rotation of cpu::quantizeRowsAfterHadamard, one block at a time in float32 as it defines
// it: every `block` values (a power of two) of x are multiplied by their signs, transformed by
// the butterflies of the Walsh–Hadamard transform (stride block/2 first; a+b kept at the lower
// index, a−b at the upper) and scaled by fl(1/√block). signs holds one ±1 per column.
std::vector<float> walshHadamard(const std::vector<float>& x, const std::vector<float>& signs, int64_t block);

} // namespace latmix::mx::ref
