#pragma once
// The distillation loss's vocabulary work on the CPU in one kernel (train/DistillationStep.cpp):
// for each token, the teacher's logits a and the student's b over the whole vocabulary (both
// already divided by the temperature), p = softmax(a), q = softmax(b), the terms of KL(p‖q) and
// the gradient of the mean KL w.r.t. b. Written with ATen's ops these were some twenty passes
// over [tokens, vocabulary] tensors per step (exp, sums, differences, each a separate sweep of
// memory); here a row is read three times while it sits in the core's cache: its maxima; the
// exponentials and their sums; then p, q and the sums below. Vectorised with GCC's vector
// extensions on the MX kernel's instruction-set path (mx::cpu::kernelPath: AVX-512, AVX2 or
// baseline); exp and expm1 by range reduction and Cephes' polynomials (about 1 ulp), the sums
// of a row in float lanes over 256 values, then in double.
#include <cstdint>

namespace latmix::train::cpu {

struct KlRowOutputs {
    float* lseA = nullptr;  // [rows] log Σ exp a
    float* lseB = nullptr;  // [rows] log Σ exp b
    float* mass = nullptr;  // [rows] Σ p (1 up to rounding; the KL divides by it)
    float* meanD = nullptr; // [rows] Σ p·d, d = a − b
    float* expD = nullptr;  // [rows] Σ p·expm1(−d); KL = meanD/mass + log1p(expD/mass)
};

// a, b: [rows, vocab] float32, rows `stride` floats apart. On return a holds
// gradScale·(q − p) (the gradient w.r.t. b of gradScale·KL summed over the rows); b is
// overwritten. Rows run in parallel on libtorch's intra-op pool.
void klRows(float* a, float* b, std::int64_t rows, std::int64_t vocab, std::int64_t stride, float gradScale,
            const KlRowOutputs& out);

// Vectorised exp and expm1 of n values (the kernel's own, for tests against libm).
void expValues(const float* x, float* y, std::int64_t n);
void expm1Values(const float* x, float* y, std::int64_t n);

} // namespace latmix::train::cpu
