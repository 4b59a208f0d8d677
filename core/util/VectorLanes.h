#pragma once
// Vectors of W float32 / int32 lanes with GCC's vector extensions, for the CPU kernels that pick
// an instruction set at run time (mx/MxKernelCpu, train/KlKernelCpu): W = 16 is one zmm register
// on the AVX-512 path, 8 one ymm on AVX2, 4 one xmm on baseline x86-64. The same source compiles
// to each path inside a function with that target attribute; lane-wise IEEE operations give the
// same bits at every width. No ATen here.
#include <cstdint>

namespace latmix::util::simd {

typedef float F4 __attribute__((vector_size(16)));
typedef float F8 __attribute__((vector_size(32)));
typedef float F16 __attribute__((vector_size(64)));
typedef std::int32_t I4 __attribute__((vector_size(16)));
typedef std::int32_t I8 __attribute__((vector_size(32)));
typedef std::int32_t I16 __attribute__((vector_size(64)));
// U: the float vector at float alignment, for loads and stores straight from memory (a memcpy
// into a vector variable goes through the stack in halves on some tunings).
typedef float U4 __attribute__((vector_size(16), aligned(4)));
typedef float U8 __attribute__((vector_size(32), aligned(4)));
typedef float U16 __attribute__((vector_size(64), aligned(4)));

// Lanes<W>::F (float lanes), ::I (int32 lanes of the same width), ::U (unaligned float lanes).
template <int W> struct Lanes;
template <> struct Lanes<4> { using F = F4; using I = I4; using U = U4; };
template <> struct Lanes<8> { using F = F8; using I = I8; using U = U8; };
template <> struct Lanes<16> { using F = F16; using I = I16; using U = U16; };

} // namespace latmix::util::simd
