#pragma once
// Fused CPU kernel for MX quantization of float32 rows: one pass per block, branch-free
// per element, parallel over blocks. Tested bit for bit against mx/MxReference.
#include "mx/MxFormat.h"

#include <cstdint>

namespace latmix::mx::cpu {

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

} // namespace latmix::mx::cpu
