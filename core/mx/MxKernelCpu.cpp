#include "mx/MxKernelCpu.h"

#include "mx/MxCodes.h"
#include "mx/MxReference.h"
#include "util/VectorLanes.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LATMIX_MX_X86_PATHS 1
#else
#define LATMIX_MX_X86_PATHS 0
#endif

namespace latmix::mx::cpu {
namespace {

constexpr std::uint32_t kAbsMask = 0x7fffffffu;
constexpr std::uint32_t kExpMask = 0x7f800000u;
constexpr std::uint32_t kMantMask = 0x007fffffu;

// Shared E8M0 exponent from the bits of a finite block maximum (SPEC §1).
struct ScaleRule {
    ElementFormat element;
    ScaleMode mode;
    int emax;
    std::uint32_t maxMantissa; // mantissa field of the element max as float32
    std::uint32_t evenAdd;     // half an ulp of an mbits-bit mantissa, in float32 bits

    ScaleRule(ElementFormat f, ScaleMode m) : element(f), mode(m) {
        const ElementSpec& s = elementSpec(f);
        emax = s.emax;
        maxMantissa = bitsOf(static_cast<float>(s.maxValue)) & kMantMask;
        evenAdd = 1u << (23 - s.mbits - 1);
    }

    int exponent(std::uint32_t amaxBits) const {
        if (amaxBits < 0x00800000u) // zero or subnormal maximum: rare, take the exact slow path
            return ref::sharedExponent(floatOf(amaxBits), element, mode);
        int fe = static_cast<int>(amaxBits >> 23) - 127;
        int e = fe - emax;
        if (mode == ScaleMode::Ceil) {
            // amax/max = (ma/mm) 2^(fe-emax) with ma, mm in [1,2): ceil(log2) adds one iff ma > mm.
            e += (amaxBits & kMantMask) > maxMantissa ? 1 : 0;
        } else if (mode == ScaleMode::Even) {
            // torchao EVEN: round the mantissa half up at mbits, carrying into the exponent.
            fe = static_cast<int>(((amaxBits + evenAdd) & kExpMask) >> 23) - 127;
            e = fe - emax;
        }
        return std::clamp(e, kScaleExpMin, kScaleExpMax);
    }
};

inline std::uint32_t blockAmaxBits(const float* x, std::int64_t n) {
    // For non-negative floats integer order is float order, and NaN/Inf bits exceed any
    // finite value's, so one integer max finds the maximum and flags non-finite blocks.
    std::uint32_t m = 0;
    for (std::int64_t i = 0; i < n; ++i) m = std::max(m, bitsOf(x[i]) & kAbsMask);
    return m;
}

void fillNan(const QuantizeOutputs& out, std::int64_t begin, std::int64_t n, std::uint8_t nanElementCode) {
    if (out.dequantized)
        std::fill_n(out.dequantized + begin, n, std::numeric_limits<float>::quiet_NaN());
    if (out.elementCodes) std::fill_n(out.elementCodes + begin, n, nanElementCode);
}

void storeCodes(const float* q, std::int64_t n, ElementFormat f, std::uint8_t* codes) {
    for (std::int64_t i = 0; i < n; ++i) codes[i] = encodeElement(q[i], f);
}

} // namespace

float nvfp4GlobalScale(const float* x, std::int64_t n) {
    const std::uint32_t amaxBits = at::parallel_reduce(
        0, n, 1 << 16, std::uint32_t{0},
        [&](std::int64_t b, std::int64_t e, std::uint32_t acc) {
            for (std::int64_t i = b; i < e; ++i) {
                const std::uint32_t v = bitsOf(x[i]) & kAbsMask;
                if (v < kExpMask) acc = std::max(acc, v); // finite values only
            }
            return acc;
        },
        [](std::uint32_t a, std::uint32_t b) { return std::max(a, b); });
    const float g = floatOf(amaxBits) / kNvfp4GlobalDivisor;
    return g > 0.0f ? g : 1.0f; // see ref::nvfp4GlobalScale
}

namespace {

// ---- The rotation of quantizeRowsAfterHadamard (ref::walshHadamard's arithmetic, vectorised).
constexpr std::int64_t kMaxHadamardBlock = 64;

// W lanes (util/VectorLanes.h): strides ≥ W pair whole registers; strides < W pair lanes of one
// register through a shuffle. Every lane does the reference's IEEE operation, so all widths give
// the same bits.
using util::simd::Lanes;

template <int W, int H, std::size_t... L>
__attribute__((always_inline)) inline typename Lanes<W>::F butterflyLanes(typename Lanes<W>::F v,
                                                                          std::index_sequence<L...>) {
    using F = typename Lanes<W>::F;
    using I = typename Lanes<W>::I;
    // Lane i pairs with lane i^H: lower lanes keep a+b (p + v), upper lanes a−b (p + (−v)), the
    // additions of the scalar butterfly (IEEE addition commutes, and x + (−y) is x − y exactly).
    const F p = __builtin_shuffle(v, I{static_cast<std::int32_t>(L ^ H)...});
    const I negateUpper = I{((L & H) ? std::int32_t(0x80000000u) : 0)...};
    return p + reinterpret_cast<F>(reinterpret_cast<I>(v) ^ negateUpper);
}

// 32 values in 32/W registers: strides 16..W between registers, then W/2..1 inside each; the
// rotated block stays in v.
template <int W>
__attribute__((always_inline)) inline void walshHadamard32(const float* x, const float* s, float scale,
                                                         typename Lanes<W>::F* v) {
    using F = typename Lanes<W>::F;
    using U = typename Lanes<W>::U;
    constexpr int R = 32 / W;
    for (int r = 0; r < R; ++r) v[r] = F(*reinterpret_cast<const U*>(x + r * W)) * F(*reinterpret_cast<const U*>(s + r * W));
    for (int h = R / 2; h >= 1; h /= 2)
        for (int r = 0; r < R; ++r)
            if ((r & h) == 0) {
                const F a = v[r], b = v[r + h];
                v[r] = a + b;
                v[r + h] = a - b;
            }
    const F sv = F{} + scale;
    for (int r = 0; r < R; ++r) {
        F t = v[r];
        if constexpr (W >= 16) t = butterflyLanes<W, 8>(t, std::make_index_sequence<W>{});
        if constexpr (W >= 8) t = butterflyLanes<W, 4>(t, std::make_index_sequence<W>{});
        t = butterflyLanes<W, 1>(butterflyLanes<W, 2>(t, std::make_index_sequence<W>{}), std::make_index_sequence<W>{});
        v[r] = t * sv;
    }
}

// Largest lane of an integer vector: W/2, W/4, ..., 1 apart, each lane against its partner.
template <int W, std::size_t... L>
__attribute__((always_inline)) inline std::int32_t maxLane(typename Lanes<W>::I m, std::index_sequence<L...>) {
    using I = typename Lanes<W>::I;
    for (int h = W / 2; h >= 1; h /= 2) {
        const I other = __builtin_shuffle(m, I{static_cast<std::int32_t>(L ^ static_cast<std::size_t>(h))...});
        m = m > other ? m : other;
    }
    return m[0];
}

// ElementGrid::quantize on W lanes, in fewer operations and to the same bits. The scalar form
// rounds |y|·2^−k to an integer with the 1.5·2^23 addition and multiplies by 2^k; here |y| + M_k,
// M_k = 1.5·2^(23+k), rounds |y| to a multiple of 2^k directly (the sum's ulp is 2^k) and
// subtracting M_k is exact: the same round-half-even to the same grid point, without the two
// products. M_k's bits are |y|'s exponent field, clamped to [emin, eHigh], plus 23 − mbits in the
// exponent and the 0.5 mantissa bit. The exponent is also kept ≤ 100: no block gets near it
// (|y| ≤ 2^(emax+2) after the shared scale), and above it both forms give maxValue.
template <int W> struct GridLanes {
    typename Lanes<W>::I lowExponent, highExponent, magicOffset; // float32 bit patterns
    typename Lanes<W>::F maxValue;
    explicit GridLanes(const ElementGrid& g)
        : lowExponent(typename Lanes<W>::I{} + ((g.emin + 127) << 23)),
          highExponent(typename Lanes<W>::I{} + ((std::min(g.eHigh, 100) + 127) << 23)),
          magicOffset(typename Lanes<W>::I{} + (((23 - g.mbits) << 23) | 0x400000)),
          maxValue(typename Lanes<W>::F{} + g.maxValue) {}
};

template <int W>
__attribute__((always_inline)) inline typename Lanes<W>::F quantizeLanes(typename Lanes<W>::F y, const GridLanes<W>& g) {
    using F = typename Lanes<W>::F;
    using I = typename Lanes<W>::I;
    const I bits = reinterpret_cast<I>(y);
    const I absBits = bits & static_cast<std::int32_t>(kAbsMask);
    I e = absBits & static_cast<std::int32_t>(kExpMask);
    e = e < g.lowExponent ? g.lowExponent : e;
    e = e > g.highExponent ? g.highExponent : e;
    const F magic = reinterpret_cast<F>(e + g.magicOffset);
    F q = (reinterpret_cast<F>(absBits) + magic) - magic;
    q = q < g.maxValue ? q : g.maxValue; // std::min(q, max): q unless max is smaller
    return reinterpret_cast<F>(reinterpret_cast<I>(q) | (bits & static_cast<std::int32_t>(0x80000000u)));
}

// One block of 32 values with a power-of-two scale, held in 32/W registers, dequantized into y:
// the scalar path's block maximum, shared exponent and rounding on whole registers. Returns the
// block maximum's bits (≥ kExpMask: NaN or Inf, nothing written) and sets the exponent.
template <int W>
__attribute__((always_inline)) inline std::uint32_t quantizeBlock32(const typename Lanes<W>::F* v, const GridLanes<W>& g,
                                                                    const ScaleRule& rule, float* y, int& exponent) {
    using F = typename Lanes<W>::F;
    using I = typename Lanes<W>::I;
    using U = typename Lanes<W>::U;
    constexpr int R = 32 / W;
    // Non-negative float bits order as the floats, NaN/Inf above every finite value.
    I m = reinterpret_cast<I>(v[0]) & static_cast<std::int32_t>(kAbsMask);
    for (int r = 1; r < R; ++r) {
        const I a = reinterpret_cast<I>(v[r]) & static_cast<std::int32_t>(kAbsMask);
        m = m > a ? m : a;
    }
    const auto amaxBits = static_cast<std::uint32_t>(maxLane<W>(m, std::make_index_sequence<W>{}));
    if (amaxBits >= kExpMask) return amaxBits;
    exponent = rule.exponent(amaxBits);
    const F inv = F{} + pow2f(-exponent), s = F{} + pow2f(exponent);
    for (int r = 0; r < R; ++r) *reinterpret_cast<U*>(y + r * W) = quantizeLanes<W>(v[r] * inv, g) * s;
    return amaxBits;
}

// Any power-of-two block, written as the reference writes it.
__attribute__((always_inline)) inline void walshHadamardAny(const float* x, const float* s, float scale, float* y,
                                                          std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] * s[i];
    for (std::int64_t h = n / 2; h >= 1; h /= 2)
        for (std::int64_t i = 0; i < n; ++i)
            if ((i & h) == 0) {
                const float a = y[i], b = y[i + h];
                y[i] = a + b;
                y[i + h] = a - b;
            }
    for (std::int64_t i = 0; i < n; ++i) y[i] *= scale;
}

struct KernelContext {
    const float* x;
    std::int64_t cols, B, blocksPerRow;
    ElementGrid grid{ElementFormat::E2M1};
    ElementGrid scaleGrid{ElementFormat::E4M3};
    ScaleRule rule{ElementFormat::E2M1, ScaleMode::Floor};
    ElementFormat element;
    bool nvfp4;
    bool fourOverSix; // NVFP4 only: each block's scale maps its maximum to 4 or 6 (SPEC §1)
    float nvfp4Global;
    std::uint8_t nanScale, nanElement;
    QuantizeOutputs out;
    const float* signs = nullptr; // quantizeRowsAfterHadamard: rotate each block first
    float hadamardScale = 1.0f;   // fl(1/√B)
};

// Power-of-two scaled block; FixedB > 0 lets the compiler unroll a full block completely.
template <int FixedB>
inline void scaleAndRound(const float* xb, float* yb, float* q, std::int64_t n, const ElementGrid& grid,
                          float inv, float s) {
    const std::int64_t len = FixedB > 0 ? FixedB : n;
    if (q == nullptr) {
        for (std::int64_t i = 0; i < len; ++i) yb[i] = grid.quantize(xb[i] * inv) * s;
    } else {
        for (std::int64_t i = 0; i < len; ++i) {
            q[i] = grid.quantize(xb[i] * inv);
            if (yb) yb[i] = q[i] * s;
        }
    }
}

// NVFP4's effective scale of a block whose maximum maps to mappedMax: E4M3 scale times g.
inline float nvfp4Effective(const KernelContext& k, std::uint32_t amaxBits, float mappedMax, float& e4m3) {
    float s = (floatOf(amaxBits) / mappedMax) / k.nvfp4Global;
    s = std::min(std::max(s, kNvfp4ScaleMin), kNvfp4ScaleMax);
    e4m3 = k.scaleGrid.quantize(s);
    return e4m3 * k.nvfp4Global;
}

// One block of NVFP4: FP32 throughout, as the format defines it; the scale is not a power of two.
// Four over six: the block's sum of squared errors under each candidate scale, in float64 and
// index order as ref::nvfp4PrefersFour sums it (same bits: -ffp-contract=off, no reassociation),
// the strictly smaller wins. Both sums run in one pass (two independent chains) that keeps each
// candidate's grid values, so the winner's are written without rounding the block a third time
// (issue 71: four over six cost 7.7x the standard scales in `latmix bench mx`, now 2x).
// A block whose two candidates round to the same scale (both clamped) keeps 6 at once: a tie.
inline std::uint8_t nvfp4Block(const KernelContext& k, const float* xb, float* yb, float* q, std::int64_t n,
                               std::uint32_t amaxBits) {
    float sq = 0.0f;
    float eff = nvfp4Effective(k, amaxBits, 6.0f, sq);
    float sq4 = 0.0f;
    const float eff4 = k.fourOverSix ? nvfp4Effective(k, amaxBits, 4.0f, sq4) : eff;
    // The grid values first (loops the compiler vectorises), then the sums in order, then the stores.
    float v6[16], v4[16]; // NVFP4's blocks are 16 (MxConfig::validate)
    for (std::int64_t i = 0; i < n; ++i) v6[i] = k.grid.quantize(xb[i] / eff);
    const float* v = v6;
    if (eff4 != eff) {
        for (std::int64_t i = 0; i < n; ++i) v4[i] = k.grid.quantize(xb[i] / eff4);
        double e6 = 0.0, e4 = 0.0;
        for (std::int64_t i = 0; i < n; ++i) {
            const double d6 = static_cast<double>(xb[i]) - static_cast<double>(v6[i] * eff);
            const double d4 = static_cast<double>(xb[i]) - static_cast<double>(v4[i] * eff4);
            e6 += d6 * d6;
            e4 += d4 * d4;
        }
        if (e4 < e6) v = v4, eff = eff4, sq = sq4;
    }
    if (yb)
        for (std::int64_t i = 0; i < n; ++i) yb[i] = v[i] * eff;
    if (q)
        for (std::int64_t i = 0; i < n; ++i) q[i] = v[i];
    return k.out.scaleCodes ? encodeElement(sq, ElementFormat::E4M3) : 0;
}

// Blocks [first, last) in row-major block order. Inlined into one function per instruction set
// below (the paths of kernelPath()), so the .deb runs on any x86-64 and still uses AVX2/AVX-512
// where present; every path gives the same bits (-ffp-contract=off, no reassociation).
// W: the vector width of the fused Hadamard's butterflies on this path.
template <int W>
__attribute__((always_inline)) inline void blockRange(const KernelContext& k, std::int64_t first, std::int64_t last) {
    std::vector<float> codesTmp(k.out.elementCodes ? static_cast<size_t>(k.B) : 0);
    float* q = k.out.elementCodes ? codesTmp.data() : nullptr;
    std::int64_t r = first / k.blocksPerRow, col = (first % k.blocksPerRow) * k.B;
    // Full 32-blocks with a power-of-two scale and only values wanted (every fake quantization
    // of a forward) stay in registers from the load (and T3's rotation) to the store.
    const bool registers = k.B == 32 && !k.nvfp4 && q == nullptr && k.out.dequantized != nullptr;
    using F = typename Lanes<W>::F;
    using U = typename Lanes<W>::U;
    // Local copies: the stores below could alias fields read through k, which the compiler
    // would then reload for every block.
    const GridLanes<W> gridLanes(k.grid);
    const ScaleRule rule = k.rule;
    float* const dequantized = k.out.dequantized;
    // A block with NaN or Inf is NaN throughout (its scale code too).
    auto markNan = [&k](std::int64_t blk, std::int64_t begin, std::int64_t n) {
        fillNan(k.out, begin, n, k.nanElement);
        if (k.out.scaleCodes) k.out.scaleCodes[blk] = k.nanScale;
    };
    for (std::int64_t blk = first; blk < last; ++blk) {
        const std::int64_t n = std::min(k.B, k.cols - col);
        const std::int64_t begin = r * k.cols + col;
        const float* xb = k.x + begin;
        const float* signs = k.signs ? k.signs + col : nullptr;
        col += k.B;
        if (col >= k.cols) col = 0, ++r;
        alignas(64) float rotated[kMaxHadamardBlock];
        if (registers && n == 32) {
            F v[32 / W];
            if (signs) walshHadamard32<W>(xb, signs, k.hadamardScale, v);
            else
                for (int i = 0; i < 32 / W; ++i) v[i] = F(*reinterpret_cast<const U*>(xb + i * W));
            int e = 0;
            if (quantizeBlock32<W>(v, gridLanes, rule, dequantized + begin, e) >= kExpMask) markNan(blk, begin, n);
            else if (k.out.scaleCodes) k.out.scaleCodes[blk] = encodeE8M0(e);
            continue;
        }
        if (signs) { // n == B here: quantizeRowsAfterHadamard checked that B divides cols
            if (n == 32) {
                F v[32 / W];
                walshHadamard32<W>(xb, signs, k.hadamardScale, v);
                for (int i = 0; i < 32 / W; ++i) *reinterpret_cast<U*>(rotated + i * W) = v[i];
            } else {
                walshHadamardAny(xb, signs, k.hadamardScale, rotated, n);
            }
            xb = rotated;
        }
        float* yb = k.out.dequantized ? k.out.dequantized + begin : nullptr;
        const std::uint32_t amaxBits = n == 32 ? blockAmaxBits(xb, 32) : blockAmaxBits(xb, n); // 32: unrolled
        if (amaxBits >= kExpMask) {
            markNan(blk, begin, n);
            continue;
        }
        std::uint8_t scaleCode;
        if (k.nvfp4) {
            scaleCode = nvfp4Block(k, xb, yb, q, n, amaxBits);
        } else {
            const int e = k.rule.exponent(amaxBits);
            const float s = pow2f(e), inv = pow2f(-e);
            if (n == 32) scaleAndRound<32>(xb, yb, q, n, k.grid, inv, s);
            else if (n == 16) scaleAndRound<16>(xb, yb, q, n, k.grid, inv, s);
            else scaleAndRound<0>(xb, yb, q, n, k.grid, inv, s);
            scaleCode = encodeE8M0(e);
        }
        if (k.out.scaleCodes) k.out.scaleCodes[blk] = scaleCode;
        if (q) storeCodes(q, n, k.element, k.out.elementCodes + begin);
    }
}

void blockRangeBaseline(const KernelContext& k, std::int64_t first, std::int64_t last) { blockRange<4>(k, first, last); }
#if LATMIX_MX_X86_PATHS
__attribute__((target("avx2"))) void blockRangeAvx2(const KernelContext& k, std::int64_t first, std::int64_t last) {
    blockRange<8>(k, first, last);
}
__attribute__((target("avx512f"))) void blockRangeAvx512(const KernelContext& k, std::int64_t first, std::int64_t last) {
    blockRange<16>(k, first, last);
}
#endif

bool cpuSupports(KernelPath p) {
#if LATMIX_MX_X86_PATHS
    if (p == KernelPath::Avx512) return __builtin_cpu_supports("avx512f");
    if (p == KernelPath::Avx2) return __builtin_cpu_supports("avx2");
#endif
    return p == KernelPath::Baseline;
}

KernelPath choosePath() {
    const char* env = std::getenv("LATMIX_MX_KERNEL");
    const std::string want = env ? env : "";
    if (want.empty() || want == "auto") {
        for (KernelPath p : {KernelPath::Avx512, KernelPath::Avx2})
            if (cpuSupports(p)) return p;
        return KernelPath::Baseline;
    }
    for (KernelPath p : {KernelPath::Baseline, KernelPath::Avx2, KernelPath::Avx512}) {
        if (want != kernelPathName(p) && !(p == KernelPath::Baseline && want == "default")) continue;
        if (!cpuSupports(p))
            throw std::runtime_error("LATMIX_MX_KERNEL=" + want + ": this CPU (or build) has no " + want +
                                     " path; use one of baseline, avx2, avx512 that it supports, or unset it");
        return p;
    }
    throw std::runtime_error("LATMIX_MX_KERNEL='" + want + "' is not a kernel path: use auto, baseline, avx2 or avx512");
}

} // namespace

const char* kernelPathName(KernelPath p) {
    switch (p) {
    case KernelPath::Avx512: return "avx512";
    case KernelPath::Avx2: return "avx2";
    case KernelPath::Baseline: break;
    }
    return "baseline";
}

KernelPath kernelPath() {
    static const KernelPath path = choosePath(); // a bad LATMIX_MX_KERNEL throws on every call
    return path;
}

namespace {

KernelContext makeContext(const float* x, std::int64_t cols, const MxConfig& c, float nvfp4Global,
                          const QuantizeOutputs& out) {
    c.validate();
    KernelContext k;
    k.x = x;
    k.cols = cols;
    k.B = c.blockSize;
    k.blocksPerRow = (cols + k.B - 1) / k.B;
    k.element = c.element();
    k.grid = ElementGrid(k.element);
    k.rule = ScaleRule(k.element, c.isNvfp4() ? ScaleMode::Floor : c.scaleMode); // NVFP4: unused
    k.nvfp4 = c.isNvfp4();
    k.fourOverSix = c.fourOverSix();
    k.nvfp4Global = nvfp4Global;
    k.nanScale = k.nvfp4 ? 0x7F : kScaleNanCode;
    k.nanElement = (k.element == ElementFormat::E4M3 || k.element == ElementFormat::E5M2) ? 0x7F : 0;
    k.out = out;
    return k;
}

void run(const KernelContext& k, std::int64_t rows) {
    if (rows == 0 || k.cols == 0) return;
    auto range = blockRangeBaseline;
#if LATMIX_MX_X86_PATHS
    if (const KernelPath p = kernelPath(); p == KernelPath::Avx512) range = blockRangeAvx512;
    else if (p == KernelPath::Avx2) range = blockRangeAvx2;
#endif
    const std::int64_t grain = std::max<std::int64_t>(1, 16384 / k.B);
    at::parallel_for(0, rows * k.blocksPerRow, grain,
                     [&k, range](std::int64_t first, std::int64_t last) { range(k, first, last); });
}

} // namespace

void quantizeRows(const float* x, std::int64_t rows, std::int64_t cols, const MxConfig& c,
                  float nvfp4Global, const QuantizeOutputs& out) {
    run(makeContext(x, cols, c, nvfp4Global, out), rows);
}

void quantizeRowsAfterHadamard(const float* x, const float* signs, std::int64_t rows, std::int64_t cols,
                               const MxConfig& c, const QuantizeOutputs& out) {
    KernelContext k = makeContext(x, cols, c, 1.0f, out);
    if (k.nvfp4 || k.B > kMaxHadamardBlock || (k.B & (k.B - 1)) != 0 || cols % k.B != 0)
        throw std::invalid_argument("block Hadamard + MX quantization needs a power-of-two block of at most " +
                                    std::to_string(kMaxHadamardBlock) + " that divides the row (" +
                                    std::to_string(cols) + " values, block " + std::to_string(k.B) +
                                    ") and a power-of-two scale (not NVFP4)");
    k.signs = signs;
    k.hadamardScale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(k.B)));
    run(k, rows);
}

} // namespace latmix::mx::cpu
