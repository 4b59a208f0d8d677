#include "mx/MxReference.h"

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace latmix::mx::ref {

double quantizeElement(double y, ElementFormat f) {
    const ElementSpec& spec = elementSpec(f);
    if (std::isnan(y)) return y;
    if (std::isinf(y)) return std::copysign(spec.maxValue, y); // saturate
    const double a = std::fabs(y);
    double step;
    if (spec.isInteger) {
        step = std::ldexp(1.0, -spec.mbits); // fixed point: 2^-fractional bits
    } else {
        // Spacing of the binade holding a; below the smallest normal binade the subnormal
        // spacing 2^(emin - mbits) applies.
        int e = a > 0.0 ? static_cast<int>(std::floor(std::log2(a))) : spec.emin;
        e = std::max(e, spec.emin);
        step = std::ldexp(1.0, e - spec.mbits);
    }
    // nearbyint rounds half to even in the default rounding mode, as cvt.rn does.
    double q = std::nearbyint(a / step) * step;
    q = std::min(q, spec.maxValue);
    return std::copysign(q, y);
}

int sharedExponent(double amax, ElementFormat f, ScaleMode mode) {
    const ElementSpec& spec = elementSpec(f);
    if (!(amax >= 0.0) || std::isinf(amax))
        throw std::invalid_argument("sharedExponent: block maximum must be finite and >= 0");
    if (amax == 0.0) return kScaleExpMin;
    int e = 0;
    switch (mode) {
    case ScaleMode::Floor: // OCP MX spec: 2^(floor(log2 amax) - emax)
        e = static_cast<int>(std::floor(std::log2(amax))) - spec.emax;
        break;
    case ScaleMode::Ceil: // never clips: 2^ceil(log2(amax / max))
        e = static_cast<int>(std::ceil(std::log2(amax / spec.maxValue)));
        break;
    case ScaleMode::FourOverSix:
        throw std::invalid_argument("sharedExponent: four-over-six chooses NVFP4's E4M3 scales, not an E8M0 exponent");
    case ScaleMode::Even: { // torchao EVEN: round amax to the element mantissa first (half up)
        int fe = static_cast<int>(std::floor(std::log2(amax)));
        const double m = amax / std::ldexp(1.0, fe); // in [1, 2)
        const double mr = std::floor(m * std::ldexp(1.0, spec.mbits) + 0.5) / std::ldexp(1.0, spec.mbits);
        if (mr >= 2.0) ++fe;
        e = fe - spec.emax;
        break;
    }
    }
    return std::clamp(e, kScaleExpMin, kScaleExpMax);
}

float nvfp4GlobalScale(const std::vector<float>& x) {
    float amax = 0.0f;
    for (float v : x)
        if (std::isfinite(v)) amax = std::max(amax, std::fabs(v));
    // SPEC §1: g = amax / (448 * 6), computed in FP32. An all-zero tensor would give g = 0 and
    // 0/0 downstream; any positive g quantizes it to zeros, so use 1.
    const float g = amax / kNvfp4GlobalDivisor;
    return g > 0.0f ? g : 1.0f;
}

float nvfp4BlockScale(float blockAmax, float globalScale, float mappedMax) {
    float s = (blockAmax / mappedMax) / globalScale; // FP32 arithmetic, as the format defines it
    s = std::clamp(s, kNvfp4ScaleMin, kNvfp4ScaleMax);
    return static_cast<float>(quantizeElement(s, ElementFormat::E4M3));
}

namespace {

// x[i] in FP32 under the effective scale eff = E4M3 scale · g: divided, rounded to E2M1, multiplied.
float nvfp4Element(float x, float eff) {
    const float y = x / eff;
    return static_cast<float>(quantizeElement(y, ElementFormat::E2M1) * eff);
}

double nvfp4BlockError(const float* x, int64_t n, float eff) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        const double e = static_cast<double>(x[i]) - static_cast<double>(nvfp4Element(x[i], eff));
        sum += e * e;
    }
    return sum;
}

} // namespace

bool nvfp4PrefersFour(const float* x, int64_t n, double blockAmax, float globalScale) {
    const float amax = static_cast<float>(blockAmax);
    const float eff6 = nvfp4BlockScale(amax, globalScale, 6.0f) * globalScale;
    const float eff4 = nvfp4BlockScale(amax, globalScale, 4.0f) * globalScale;
    return nvfp4BlockError(x, n, eff4) < nvfp4BlockError(x, n, eff6);
}

std::vector<float> fakeQuantize(const std::vector<float>& x, int64_t rowLength, const MxConfig& c) {
    c.validate();
    if (rowLength <= 0 || x.size() % static_cast<size_t>(rowLength) != 0)
        throw std::invalid_argument("fakeQuantize: row length does not divide the input");
    const ElementFormat elem = c.element();
    const float g = c.isNvfp4() ? nvfp4GlobalScale(x) : 1.0f;
    std::vector<float> out(x.size());
    const int64_t rows = static_cast<int64_t>(x.size()) / rowLength;
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t b = 0; b < rowLength; b += c.blockSize) {
            const int64_t begin = r * rowLength + b;
            const int64_t end = r * rowLength + std::min<int64_t>(b + c.blockSize, rowLength);
            double amax = 0.0;
            bool finite = true;
            for (int64_t i = begin; i < end; ++i) {
                finite = finite && std::isfinite(x[i]);
                amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
            }
            // FP32 throughout for NVFP4: the block scale times g is not a power of two, so the
            // division and product round exactly as an FP32 implementation rounds them.
            const bool four = finite && c.fourOverSix() && nvfp4PrefersFour(x.data() + begin, end - begin, amax, g);
            const float eff = c.isNvfp4() ? nvfp4BlockScale(static_cast<float>(amax), g, four ? 4.0f : 6.0f) * g : 0.0f;
            for (int64_t i = begin; i < end; ++i) {
                if (!finite) {
                    out[i] = std::numeric_limits<float>::quiet_NaN();
                } else if (c.isNvfp4()) {
                    out[i] = nvfp4Element(x[i], eff);
                } else {
                    const double s = std::ldexp(1.0, sharedExponent(amax, elem, c.scaleMode));
                    out[i] = static_cast<float>(quantizeElement(x[i] / s, elem) * s);
                }
            }
        }
    }
    return out;
}

std::vector<float> walshHadamard(const std::vector<float>& x, const std::vector<float>& signs, int64_t block) {
    const int64_t cols = static_cast<int64_t>(signs.size());
    std::vector<float> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * signs[i % static_cast<size_t>(cols)];
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(block)));
    for (size_t begin = 0; begin < y.size(); begin += static_cast<size_t>(block)) {
        float* v = y.data() + begin;
        for (int64_t h = block / 2; h >= 1; h /= 2)
            for (int64_t i = 0; i < block; ++i)
                if ((i & h) == 0) {
                    const float a = v[i], b = v[i + h];
                    v[i] = a + b;
                    v[i + h] = a - b;
                }
        for (int64_t i = 0; i < block; ++i) v[i] *= scale;
    }
    return y;
}

} // namespace latmix::mx::ref
