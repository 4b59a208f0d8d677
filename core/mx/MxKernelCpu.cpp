#include "mx/MxKernelCpu.h"

#include "mx/MxCodes.h"
#include "mx/MxReference.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LATMIX_MX_X86_PATHS 1
#else
#define LATMIX_MX_X86_PATHS 0
#endif

namespace latmix::mx::cpu {
namespace {

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

constexpr std::uint32_t kAbsMask = 0x7fffffffu;
constexpr std::uint32_t kExpMask = 0x7f800000u;
constexpr std::uint32_t kMantMask = 0x007fffffu;
constexpr float kRoundMagic = 12582912.0f; // 1.5 * 2^23: (z + M) - M == rint(z) for |z| < 2^22

// Element grid of one format in the form the inner loop wants.
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

struct KernelContext {
    const float* x;
    std::int64_t cols, B, blocksPerRow;
    ElementGrid grid{ElementFormat::E2M1};
    ElementGrid scaleGrid{ElementFormat::E4M3};
    ScaleRule rule{ElementFormat::E2M1, ScaleMode::Floor};
    ElementFormat element;
    bool nvfp4;
    float nvfp4Global;
    std::uint8_t nanScale, nanElement;
    QuantizeOutputs out;
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

// One block of NVFP4: FP32 throughout, as the format defines it; the scale is not a power of two.
inline std::uint8_t nvfp4Block(const KernelContext& k, const float* xb, float* yb, float* q, std::int64_t n,
                               std::uint32_t amaxBits) {
    float s = (floatOf(amaxBits) / 6.0f) / k.nvfp4Global;
    s = std::min(std::max(s, kNvfp4ScaleMin), kNvfp4ScaleMax);
    const float sq = k.scaleGrid.quantize(s);
    const float eff = sq * k.nvfp4Global;
    for (std::int64_t i = 0; i < n; ++i) {
        const float v = k.grid.quantize(xb[i] / eff);
        if (yb) yb[i] = v * eff;
        if (q) q[i] = v;
    }
    return k.out.scaleCodes ? encodeElement(sq, ElementFormat::E4M3) : 0;
}

// Blocks [first, last) in row-major block order. Inlined into one function per instruction set
// below (the paths of kernelPath()), so the .deb runs on any x86-64 and still uses AVX2/AVX-512
// where present; every path gives the same bits (-ffp-contract=off, no reassociation).
__attribute__((always_inline)) inline void blockRange(const KernelContext& k, std::int64_t first, std::int64_t last) {
    std::vector<float> codesTmp(k.out.elementCodes ? static_cast<size_t>(k.B) : 0);
    float* q = k.out.elementCodes ? codesTmp.data() : nullptr;
    std::int64_t r = first / k.blocksPerRow, col = (first % k.blocksPerRow) * k.B;
    for (std::int64_t blk = first; blk < last; ++blk) {
        const std::int64_t n = std::min(k.B, k.cols - col);
        const std::int64_t begin = r * k.cols + col;
        col += k.B;
        if (col >= k.cols) col = 0, ++r;
        const float* xb = k.x + begin;
        float* yb = k.out.dequantized ? k.out.dequantized + begin : nullptr;
        const std::uint32_t amaxBits = blockAmaxBits(xb, n);
        if (amaxBits >= kExpMask) { // NaN or Inf in the block: the whole block is NaN
            fillNan(k.out, begin, n, k.nanElement);
            if (k.out.scaleCodes) k.out.scaleCodes[blk] = k.nanScale;
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

void blockRangeBaseline(const KernelContext& k, std::int64_t first, std::int64_t last) { blockRange(k, first, last); }
#if LATMIX_MX_X86_PATHS
__attribute__((target("avx2"))) void blockRangeAvx2(const KernelContext& k, std::int64_t first, std::int64_t last) {
    blockRange(k, first, last);
}
__attribute__((target("avx512f"))) void blockRangeAvx512(const KernelContext& k, std::int64_t first, std::int64_t last) {
    blockRange(k, first, last);
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

void quantizeRows(const float* x, std::int64_t rows, std::int64_t cols, const MxConfig& c,
                  float nvfp4Global, const QuantizeOutputs& out) {
    c.validate();
    KernelContext k;
    k.x = x;
    k.cols = cols;
    k.B = c.blockSize;
    k.blocksPerRow = (cols + k.B - 1) / k.B;
    k.element = c.element();
    k.grid = ElementGrid(k.element);
    k.rule = ScaleRule(k.element, c.scaleMode);
    k.nvfp4 = c.isNvfp4();
    k.nvfp4Global = nvfp4Global;
    k.nanScale = k.nvfp4 ? 0x7F : kScaleNanCode;
    k.nanElement = (k.element == ElementFormat::E4M3 || k.element == ElementFormat::E5M2) ? 0x7F : 0;
    k.out = out;
    if (rows == 0 || cols == 0) return;
    auto range = blockRangeBaseline;
#if LATMIX_MX_X86_PATHS
    if (const KernelPath p = kernelPath(); p == KernelPath::Avx512) range = blockRangeAvx512;
    else if (p == KernelPath::Avx2) range = blockRangeAvx2;
#endif
    const std::int64_t grain = std::max<std::int64_t>(1, 16384 / k.B);
    at::parallel_for(0, rows * k.blocksPerRow, grain,
                     [&k, range](std::int64_t first, std::int64_t last) { range(k, first, last); });
}

} // namespace latmix::mx::cpu
