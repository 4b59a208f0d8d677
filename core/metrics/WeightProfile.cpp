#include "metrics/WeightProfile.h"

#include "mx/MxQuantizer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace latmix::metrics {
namespace {

// Output rows per pass: a float64 copy of an 8B model's down_proj is 0.9 GB; chunks keep it small.
constexpr std::int64_t kChunkRows = 512;

void requireWeight(const at::Tensor& w, const std::string& name, const char* which) {
    if (!w.defined() || w.dim() != 2 || w.size(0) < 1 || w.size(1) < 1)
        throw std::invalid_argument(name + ": the " + std::string(which) + " weight must be a non-empty [out, in] matrix");
    if (!at::isfinite(w).all().item<bool>())
        throw std::invalid_argument(name + ": the " + std::string(which) +
                                    " weight holds NaN or infinite values; check the checkpoint (or the run's transforms)");
}

WeightSide profileSide(const at::Tensor& w, const WeightProfileOptions& o, std::int64_t groups) {
    const std::int64_t out = w.size(0), in = w.size(1), B = o.format.blockSize;
    const std::int64_t bands = std::min<std::int64_t>(std::max(o.heatmapRows, 1), out);
    WeightSide s;
    // Bands of output rows as equal as integers allow: band k covers [k·out/bands, (k+1)·out/bands).
    s.bandStart.resize(static_cast<std::size_t>(bands + 1));
    for (std::int64_t k = 0; k <= bands; ++k) s.bandStart[static_cast<std::size_t>(k)] = k * out / bands;
    at::Tensor sq = at::zeros({in}, at::kDouble), absMax = at::zeros({in}, at::kDouble);
    at::Tensor rowGroupError = at::empty({out, groups}, at::kDouble); // one row of doubles per output row
    // Group sizes: B, except a shorter last group when B does not divide in.
    at::Tensor groupSize = at::full({groups}, double(B), at::kDouble);
    groupSize[groups - 1] = double(in - (groups - 1) * B);
    // The quantizer runs on the whole weight in float32, as the runs quantize it (quant/ rounds the
    // float32 weight with the same element rounding; NVFP4's tensor scale needs all of it); the
    // errors are taken in float64, a band of rows at a time.
    const auto wq = mx::fakeQuantize(w.to(at::kFloat).cpu().contiguous(), o.format);
    double err = 0, norm = 0;
    for (std::int64_t r0 = 0; r0 < out; r0 += kChunkRows) {
        const std::int64_t n = std::min(kChunkRows, out - r0);
        const auto x = w.narrow(0, r0, n).to(at::kDouble).cpu();
        const auto q = wq.narrow(0, r0, n).to(at::kDouble);
        const auto d2 = (x - q).pow(2);
        sq += x.pow(2).sum(0);
        absMax = at::maximum(absMax, std::get<0>(x.abs().max(0)));
        err += d2.sum().item<double>();
        norm += x.pow(2).sum().item<double>();
        // Sum over each group's columns: pad to groups·B with zeros, then reshape.
        const auto padded = at::constant_pad_nd(d2, {0, groups * B - in});
        rowGroupError.narrow(0, r0, n).copy_(padded.reshape({n, groups, B}).sum(2) / groupSize.unsqueeze(0));
    }
    s.inputChannelNorm = sq.sqrt();
    s.inputChannelAbsMax = absMax;
    s.groupError = at::empty({bands, groups}, at::kDouble);
    for (std::int64_t k = 0; k < bands; ++k) {
        const auto a = s.bandStart[static_cast<std::size_t>(k)], b = s.bandStart[static_cast<std::size_t>(k + 1)];
        s.groupError[k].copy_(rowGroupError.narrow(0, a, b - a).mean(0));
    }
    s.columnGroupError = rowGroupError.mean(0);
    s.mse = err / double(out * in);
    s.relativeError = norm > 0 ? err / norm : std::numeric_limits<double>::quiet_NaN();
    std::vector<std::int64_t> order(static_cast<std::size_t>(in));
    std::iota(order.begin(), order.end(), 0);
    const auto m = s.inputChannelNorm.contiguous();
    const double* mp = m.data_ptr<double>();
    std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return mp[a] > mp[b]; });
    order.resize(static_cast<std::size_t>(std::min<std::int64_t>(std::max(o.topChannels, 0), in)));
    s.topChannels = order;
    return s;
}

} // namespace

WeightProfile profileWeights(const at::Tensor& before, const at::Tensor& after, const WeightProfileOptions& o,
                             const std::string& name) {
    at::NoGradGuard noGrad;
    o.format.validate();
    requireWeight(before, name, "original");
    if (after.defined()) {
        requireWeight(after, name, "folded");
        if (after.sizes() != before.sizes())
            throw std::invalid_argument(name + ": the folded weight is " + std::to_string(after.size(0)) + "x" +
                                        std::to_string(after.size(1)) + ", the original " + std::to_string(before.size(0)) +
                                        "x" + std::to_string(before.size(1)) + " (is the run of this model?)");
    }
    if (o.heatmapRows < 1) throw std::invalid_argument(name + ": the heat map needs at least one row band");
    WeightProfile p;
    p.name = name;
    p.rows = before.size(0);
    p.cols = before.size(1);
    p.groups = (p.cols + o.format.blockSize - 1) / o.format.blockSize;
    p.format = o.format;
    p.before = profileSide(before, o, p.groups);
    if (after.defined()) {
        p.hasAfter = true;
        p.after = profileSide(after, o, p.groups);
    }
    return p;
}

} // namespace latmix::metrics
