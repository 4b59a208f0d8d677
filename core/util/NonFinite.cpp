#include "util/NonFinite.h"

#include "util/Text.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

namespace latmix::util {

std::string NonFinite::describe() const {
    if (count == 0) return "no NaN/Inf among " + std::to_string(numel) + " values";
    const std::string value = std::isnan(firstValue) ? "nan" : firstValue > 0 ? "inf" : "-inf";
    return "first at " + shapeText(firstIndex) + " (" + value + "), " + std::to_string(count) + " of " +
           std::to_string(numel) + " values";
}

namespace {

// IEEE types: a value is NaN or ±Inf exactly when all its exponent bits are set. One pass over
// the stored bits (the loop vectorises; no temporaries), memory-bound: this is what makes the
// check of a whole checkpoint cost about as much as reading it (float32, bfloat16, float16,
// float64 on the CPU, contiguous). Returns the count of such values and the first one's index.
template <typename Bits>
std::pair<std::int64_t, std::int64_t> scanBits(const void* data, std::int64_t n, Bits mask) {
    const auto* v = static_cast<const Bits*>(data);
    constexpr std::int64_t kBlock = 1 << 14;
    std::int64_t count = 0, first = -1;
    for (std::int64_t start = 0; start < n; start += kBlock) {
        const std::int64_t end = std::min(n, start + kBlock);
        std::int64_t bad = 0;
        for (std::int64_t i = start; i < end; ++i) bad += (v[i] & mask) == mask;
        if (bad == 0) continue;
        if (first < 0)
            for (std::int64_t i = start; i < end && first < 0; ++i)
                if ((v[i] & mask) == mask) first = i;
        count += bad;
    }
    return {count, first};
}

} // namespace

NonFinite findNonFinite(const at::Tensor& t, std::int64_t chunkElements, bool bitScan) {
    NonFinite r;
    if (!t.defined()) return r;
    r.numel = t.numel();
    if (!at::isFloatingType(t.scalar_type()) && !at::isComplexType(t.scalar_type())) return r;
    at::NoGradGuard noGrad;
    const at::Tensor flat = t.detach().reshape({-1}); // a view for contiguous (mapped) tensors
    std::int64_t first = -1;
    if (bitScan && flat.device().is_cpu() && flat.is_contiguous() &&
        (flat.scalar_type() == at::kFloat || flat.scalar_type() == at::kBFloat16 || flat.scalar_type() == at::kHalf ||
         flat.scalar_type() == at::kDouble)) {
        const void* data = flat.data_ptr();
        std::pair<std::int64_t, std::int64_t> found;
        switch (flat.scalar_type()) {
        case at::kFloat: found = scanBits<std::uint32_t>(data, r.numel, 0x7F800000u); break;
        case at::kBFloat16: found = scanBits<std::uint16_t>(data, r.numel, 0x7F80u); break;
        case at::kHalf: found = scanBits<std::uint16_t>(data, r.numel, 0x7C00u); break;
        default: found = scanBits<std::uint64_t>(data, r.numel, 0x7FF0000000000000ull); break;
        }
        r.count = found.first;
        first = found.second;
    } else { // other devices and layouts: libtorch's isfinite, a chunk at a time
        const std::int64_t chunk = std::max<std::int64_t>(1, chunkElements);
        for (std::int64_t start = 0; start < r.numel; start += chunk) {
            const at::Tensor part = flat.slice(0, start, std::min(start + chunk, r.numel));
            if (first < 0 && at::isfinite(part).all().item<bool>()) continue;
            const at::Tensor bad = at::logical_not(at::isfinite(part));
            const std::int64_t n = bad.sum().item<std::int64_t>();
            if (n > 0 && first < 0) first = start + at::nonzero(bad)[0][0].item<std::int64_t>();
            r.count += n;
        }
    }
    if (first >= 0) r.firstValue = flat[first].item<double>();
    if (first >= 0) { // row-major unravel of the flat index
        const auto sizes = t.sizes().vec();
        r.firstIndex.assign(sizes.size(), 0);
        std::int64_t rest = first;
        for (std::size_t d = sizes.size(); d-- > 0;) {
            r.firstIndex[d] = rest % sizes[d];
            rest /= sizes[d];
        }
    }
    return r;
}

} // namespace latmix::util
