#pragma once
// Fused CPU kernel for MX quantization of float32 rows: one pass per block, branch-free
// per element, parallel over blocks. Tested bit for bit against mx/MxReference.
#include "mx/MxFormat.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace latmix::mx::cpu {

inline std::uint32_t bitsOf(float f) {
    std::uint32_t b;
    std::memcpy(&b, &f, sizeof b);
    return b;
}
inline float floatOf(std::uint32_t b) {
    float f;
    std::memcpy(&f, &b, sizeof f);
    return f;
}

constexpr float kRoundMagic = 12582912.0f; // 1.5 * 2^23: (z + M) - M == rint(z) for |z| < 2^22

// Element grid of one format in the form an inner loop wants (this kernel's, and GPTQ's column
// loop in quant/GptqKernelCpu). Bit for bit mx::roundToElement of one float32.
struct ElementGrid {
    int emin;   // smallest binade exponent
    int eHigh;  // largest exponent the spacing may take (INT: 0, a fixed spacing)
    int mbits;  // mantissa (INT: fractional) bits
    float maxValue;

    explicit ElementGrid(ElementFormat f) {
        const ElementSpec& s = elementSpec(f);
        emin = s.emin;
        eHigh = s.isInteger ? 0 : 127;
        mbits = s.mbits;
        maxValue = static_cast<float>(s.maxValue);
    }

    // Round half to even onto the grid, then saturate. Exact: every product and quotient
    // below is by a power of two and stays in the normal range.
    inline float quantize(float y) const {
        const float a = std::fabs(y);
        int e = static_cast<int>(bitsOf(a) >> 23) - 127;
        e = std::min(std::max(e, emin), eHigh);
        const int k = e - mbits;
        const float invStep = floatOf(static_cast<std::uint32_t>(127 - k) << 23);
        const float step = floatOf(static_cast<std::uint32_t>(127 + k) << 23);
        const float r = (a * invStep + kRoundMagic) - kRoundMagic;
        const float q = std::min(r * step, maxValue);
        return std::copysign(q, y);
    }
};

struct QuantizeOutputs {
    float* dequantized = nullptr;       // [rows, cols] fake-quantized values, or null
    std::uint8_t* scaleCodes = nullptr; // [rows, ceil(cols/B)] E8M0 (NVFP4: E4M3) bytes, or null
    std::uint8_t* elementCodes = nullptr; // [rows, cols] one code per byte, or null
};

// The instruction-set path quantizeRows runs: the widest this CPU has (AVX-512F, AVX2, else
// baseline x86-64), or the one LATMIX_MX_KERNEL names (auto, baseline, avx2, avx512; for checks
// across CPU paths). All paths give the same bits. Chosen once per process; an unknown or
// unsupported LATMIX_MX_KERNEL throws std::runtime_error naming it.
enum class KernelPath { Baseline, Avx2, Avx512 };
KernelPath kernelPath();
const char* kernelPathName(KernelPath p); // "baseline", "avx2", "avx512"

// NVFP4 per-tensor scale over the finite values of x (SPEC §1), parallel.
float nvfp4GlobalScale(const float* x, std::int64_t n);

// Quantize a row-major [rows, cols] float32 matrix along its rows. nvfp4Global is used for
// NVFP4 only (pass nvfp4GlobalScale(x)). Runs on libtorch's intra-op thread pool.
void quantizeRows(const float* x, std::int64_t rows, std::int64_t cols, const MxConfig& c,
                  float nvfp4Global, const QuantizeOutputs& out);

// T3 fused with the quantization that follows it (SPEC §4: the down_proj input is rotated by
// the online block Hadamard, then MX-quantized), in one pass over x. Each B-wide block x_b of a
// row (B = c.blockSize) becomes y_b = fwht(s_b ⊙ x_b) · fl(1/√B): the Sylvester Walsh–Hadamard
// transform in natural order, i.e. H_B with H(i,j) = (-1)^popcount(i&j), computed by butterflies
// with strides B/2, …, 2, 1 (a+b kept above, a−b below, as ref::walshHadamard), then quantized
// as quantizeRows does. That is x_b ↦ (H_B/√B)·diag(s_b)·x_b, the block of
// transforms::blockHadamard, with float32 rounding in place of a dot product's. signs: [cols]
// of ±1. Throws std::invalid_argument unless B is a power of two ≤ 64 dividing cols and the
// format has power-of-two scales (not NVFP4). Same bits on every path.
void quantizeRowsAfterHadamard(const float* x, const float* signs, std::int64_t rows, std::int64_t cols,
                               const MxConfig& c, const QuantizeOutputs& out);

} // namespace latmix::mx::cpu
