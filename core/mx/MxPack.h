#pragma once
// Packed storage of MX-quantized tensors for export (SPEC §1, §8): element codes and shared
// scale bytes. 4-bit formats hold two codes per byte, the even column in the low nibble;
// 6- and 8-bit formats one code per byte. Scales are E8M0 bytes (NVFP4: E4M3 bytes plus an
// FP32 per-tensor scale).
#include "mx/MxFormat.h"

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace latmix::mx {

struct PackedTensor {
    MxConfig config;
    at::Tensor codes;   // uint8 [..., ceil(n/2)] for 4-bit formats, [..., n] otherwise
    at::Tensor scales;  // uint8 [..., ceil(n/B)]
    float globalScale = 1.0f; // NVFP4 per-tensor scale; 1 for MX formats
    std::int64_t lastDim = 0; // n, the unpacked length of the last dimension
};

// Quantize a CPU tensor and pack it. unpack(pack(x, c)) equals fakeQuantize(x, c) bit for bit.
PackedTensor pack(const at::Tensor& x, const MxConfig& c);

// Dequantize packed codes back to float32 values.
at::Tensor unpack(const PackedTensor& p);

// Nibble packing alone: [..., n] codes (low 4 bits used) -> [..., ceil(n/2)] bytes and back.
at::Tensor packNibbles(const at::Tensor& codes);
at::Tensor unpackNibbles(const at::Tensor& packed, std::int64_t n);

} // namespace latmix::mx
