#include "train/KlKernelCpu.h"

#include "mx/MxKernelCpu.h"
#include "util/VectorLanes.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LATMIX_KL_X86_PATHS 1
#else
#define LATMIX_KL_X86_PATHS 0
#endif

namespace latmix::train::cpu {
namespace {

template <int W> using Vec = util::simd::Lanes<W>; // util/VectorLanes.h

// exp(x): x = n·ln2 + r, |r| ≤ ln2/2, n by the 1.5·2^23 rounding trick, ln2 split in two
// (Cephes' expf: 0.693359375 + (−2.12194440e−4)); e^r by Cephes' degree-7 form, 2^n through the
// exponent bits. x is clamped to [−87.3, 88.3]: below, the result is ~1e−38 instead of a
// denormal or 0 (a softmax term that small changes no float32 sum it is added to).
template <int W>
__attribute__((always_inline)) inline typename Vec<W>::F vexp(typename Vec<W>::F x) {
    using F = typename Vec<W>::F;
    using I = typename Vec<W>::I;
    const F lo = F{} - 87.3f, hi = F{} + 88.3f; // n = round(x/ln2) stays in [−126, 127]
    x = x < lo ? lo : x;
    x = x > hi ? hi : x;
    const F magic = F{} + 12582912.0f; // 1.5·2^23: adding it rounds to an integer in the low bits
    const F t = x * 1.44269504088896341f + magic;
    const F n = t - magic;
    const F r = x - n * 0.693359375f - n * -2.12194440e-4f;
    F p = F{} + 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    const I bits = (reinterpret_cast<const I&>(t) - 0x4B400000 + 127) << 23; // n + 127 in the exponent
    return p * reinterpret_cast<const F&>(bits);
}

// expm1(x): for |x| < 0.5 its Taylor series to x^9/9! (truncation below 2e−9 relative), else
// exp(x) − 1 (within 2.5 ulp there, since e^x − 1 ≥ 0.39·e^x).
template <int W>
__attribute__((always_inline)) inline typename Vec<W>::F vexpm1(typename Vec<W>::F x) {
    using F = typename Vec<W>::F;
    F s = F{} + 1.0f / 362880.0f;
    s = s * x + 1.0f / 40320.0f;
    s = s * x + 1.0f / 5040.0f;
    s = s * x + 1.0f / 720.0f;
    s = s * x + 1.0f / 120.0f;
    s = s * x + 1.0f / 24.0f;
    s = s * x + 1.0f / 6.0f;
    s = s * x + 0.5f;
    s = (s * x) * x + x;
    const F big = vexp<W>(x) - 1.0f;
    const F ax = x < 0.0f ? -x : x;
    return ax < 0.5f ? s : big;
}

template <int W>
__attribute__((always_inline)) inline float hsum(typename Vec<W>::F v) {
    float s = 0;
    for (int i = 0; i < W; ++i) s += v[i];
    return s;
}

template <int W>
__attribute__((always_inline)) inline void mapValues(const float* x, float* y, std::int64_t n, bool minus1) {
    using F = typename Vec<W>::F;
    using U = typename Vec<W>::U;
    std::int64_t i = 0;
    for (; i + W <= n; i += W) {
        const F v = *reinterpret_cast<const U*>(x + i);
        *reinterpret_cast<U*>(y + i) = minus1 ? vexpm1<W>(v) : vexp<W>(v);
    }
    if (i < n) { // the tail through a zero-padded register
        F v{};
        for (std::int64_t j = i; j < n; ++j) v[j - i] = x[j];
        const F r = minus1 ? vexpm1<W>(v) : vexp<W>(v);
        for (std::int64_t j = i; j < n; ++j) y[j] = r[j - i];
    }
}

// One row. The tail of a row (vocab not a multiple of W) goes through a register padded with
// −∞ for the maxima and with values whose terms are 0 (p = 0, d = 0) in the sums.
template <int W>
__attribute__((always_inline)) inline void klRow(float* a, float* b, float* d, std::int64_t V, float gradScale,
                                                 double* sums /* lseA, lseB, mass, meanD, expD */) {
    using F = typename Vec<W>::F;
    using U = typename Vec<W>::U;
    const std::int64_t full = V / W * W;
    // 1. the maxima
    const float ninf = -std::numeric_limits<float>::infinity();
    F ma = F{} + ninf, mb = ma;
    for (std::int64_t j = 0; j < full; j += W) {
        const F va = *reinterpret_cast<const U*>(a + j), vb = *reinterpret_cast<const U*>(b + j);
        ma = va > ma ? va : ma;
        mb = vb > mb ? vb : mb;
    }
    float maxA = ninf, maxB = ninf;
    for (int i = 0; i < W; ++i) maxA = std::max(maxA, ma[i]), maxB = std::max(maxB, mb[i]);
    for (std::int64_t j = full; j < V; ++j) maxA = std::max(maxA, a[j]), maxB = std::max(maxB, b[j]);
    // 2. d = a − b, a ← e^(a − maxA), b ← e^(b − maxB), and their sums (256 values per float
    // partial sum, then double)
    const F sa = F{} + maxA, sb = F{} + maxB;
    double sumA = 0, sumB = 0;
    for (std::int64_t j0 = 0; j0 < full; j0 += 256) {
        F accA{}, accB{};
        const std::int64_t j1 = std::min(full, j0 + 256);
        for (std::int64_t j = j0; j < j1; j += W) {
            const F va = *reinterpret_cast<const U*>(a + j), vb = *reinterpret_cast<const U*>(b + j);
            *reinterpret_cast<U*>(d + j) = va - vb;
            const F ea = vexp<W>(va - sa), eb = vexp<W>(vb - sb);
            *reinterpret_cast<U*>(a + j) = ea;
            *reinterpret_cast<U*>(b + j) = eb;
            accA += ea;
            accB += eb;
        }
        sumA += hsum<W>(accA);
        sumB += hsum<W>(accB);
    }
    for (std::int64_t j = full; j < V; ++j) {
        d[j] = a[j] - b[j];
        a[j] = std::exp(a[j] - maxA);
        b[j] = std::exp(b[j] - maxB);
        sumA += a[j];
        sumB += b[j];
    }
    sums[0] = double(maxA) + std::log(sumA);
    sums[1] = double(maxB) + std::log(sumB);
    // 3. p, q, the KL's sums, and a ← gradScale·(q − p)
    const float ia = static_cast<float>(1.0 / sumA), ib = static_cast<float>(1.0 / sumB);
    double mass = 0, meanD = 0, expD = 0;
    for (std::int64_t j0 = 0; j0 < full; j0 += 256) {
        F accM{}, accD{}, accE{};
        const std::int64_t j1 = std::min(full, j0 + 256);
        for (std::int64_t j = j0; j < j1; j += W) {
            const F p = *reinterpret_cast<const U*>(a + j) * ia, q = *reinterpret_cast<const U*>(b + j) * ib;
            const F dj = *reinterpret_cast<const U*>(d + j);
            accM += p;
            accD += p * dj;
            accE += p * vexpm1<W>(-dj);
            *reinterpret_cast<U*>(a + j) = (q - p) * gradScale;
        }
        mass += hsum<W>(accM);
        meanD += hsum<W>(accD);
        expD += hsum<W>(accE);
    }
    for (std::int64_t j = full; j < V; ++j) {
        const float p = a[j] * ia, q = b[j] * ib;
        mass += p;
        meanD += double(p) * d[j];
        expD += double(p) * std::expm1(-d[j]);
        a[j] = (q - p) * gradScale;
    }
    sums[2] = mass;
    sums[3] = meanD;
    sums[4] = expD;
}

template <int W>
__attribute__((always_inline)) inline void klRange(float* a, float* b, std::int64_t first, std::int64_t last,
                                                   std::int64_t V, std::int64_t stride, float gradScale,
                                                   const KlRowOutputs& out) {
    std::vector<float> d(static_cast<std::size_t>(V));
    for (std::int64_t r = first; r < last; ++r) {
        double s[5];
        klRow<W>(a + r * stride, b + r * stride, d.data(), V, gradScale, s);
        out.lseA[r] = static_cast<float>(s[0]);
        out.lseB[r] = static_cast<float>(s[1]);
        out.mass[r] = static_cast<float>(s[2]);
        out.meanD[r] = static_cast<float>(s[3]);
        out.expD[r] = static_cast<float>(s[4]);
    }
}

using RangeFn = void (*)(float*, float*, std::int64_t, std::int64_t, std::int64_t, std::int64_t, float,
                         const KlRowOutputs&);
using MapFn = void (*)(const float*, float*, std::int64_t, bool);

void klRangeBaseline(float* a, float* b, std::int64_t f, std::int64_t l, std::int64_t V, std::int64_t s, float g,
                     const KlRowOutputs& o) {
    klRange<4>(a, b, f, l, V, s, g, o);
}
void mapBaseline(const float* x, float* y, std::int64_t n, bool m) { mapValues<4>(x, y, n, m); }
#if LATMIX_KL_X86_PATHS
__attribute__((target("avx2,fma"))) void klRangeAvx2(float* a, float* b, std::int64_t f, std::int64_t l, std::int64_t V,
                                                     std::int64_t s, float g, const KlRowOutputs& o) {
    klRange<8>(a, b, f, l, V, s, g, o);
}
__attribute__((target("avx2,fma"))) void mapAvx2(const float* x, float* y, std::int64_t n, bool m) {
    mapValues<8>(x, y, n, m);
}
__attribute__((target("avx512f"))) void klRangeAvx512(float* a, float* b, std::int64_t f, std::int64_t l, std::int64_t V,
                                                      std::int64_t s, float g, const KlRowOutputs& o) {
    klRange<16>(a, b, f, l, V, s, g, o);
}
__attribute__((target("avx512f"))) void mapAvx512(const float* x, float* y, std::int64_t n, bool m) {
    mapValues<16>(x, y, n, m);
}
#endif

// The MX kernel's path (LATMIX_MX_KERNEL chooses both), so that a forced path covers both kernels.
// AVX2 here also asks for FMA, which every AVX2 CPU has.
template <class Fn>
Fn pick(Fn baseline, [[maybe_unused]] Fn avx2, [[maybe_unused]] Fn avx512) {
#if LATMIX_KL_X86_PATHS
    const auto p = mx::cpu::kernelPath();
    if (p == mx::cpu::KernelPath::Avx512) return avx512;
    if (p == mx::cpu::KernelPath::Avx2 && __builtin_cpu_supports("fma")) return avx2;
#endif
    return baseline;
}

} // namespace

void klRows(float* a, float* b, std::int64_t rows, std::int64_t vocab, std::int64_t stride, float gradScale,
            const KlRowOutputs& out) {
#if LATMIX_KL_X86_PATHS
    static const RangeFn range = pick<RangeFn>(klRangeBaseline, klRangeAvx2, klRangeAvx512);
#else
    static const RangeFn range = klRangeBaseline;
#endif
    at::parallel_for(0, rows, 1, [&](std::int64_t first, std::int64_t last) {
        range(a, b, first, last, vocab, stride, gradScale, out);
    });
}

namespace {
void mapAll(const float* x, float* y, std::int64_t n, bool minus1) {
#if LATMIX_KL_X86_PATHS
    static const MapFn map = pick<MapFn>(mapBaseline, mapAvx2, mapAvx512);
#else
    static const MapFn map = mapBaseline;
#endif
    map(x, y, n, minus1);
}
} // namespace

void expValues(const float* x, float* y, std::int64_t n) { mapAll(x, y, n, false); }
void expm1Values(const float* x, float* y, std::int64_t n) { mapAll(x, y, n, true); }

} // namespace latmix::train::cpu
