#include "metrics/ActivationProfile.h"

#include "metrics/TransformMetrics.h"
#include "mx/MxQuantizer.h"
#include "transforms/AffineTransform.h"
#include "transforms/LearnedTransforms.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace latmix::metrics {
namespace {

// Rows per pass: the float64 copies of a big point (d = 14336, thousands of tokens) stay bounded.
constexpr std::int64_t kChunkRows = 1024;

ActivationSide profileSide(const at::Tensor& x, const transforms::AffineTransform& t, const ActivationProfileOptions& o) {
    const std::int64_t n = x.size(0), d = x.size(1);
    ActivationSide s;
    // First pass: channel maxima, token norms and the range of y for the histogram.
    s.channelAbsMax = at::zeros({d}, at::kDouble);
    s.tokenNorm = at::empty({n}, at::kDouble);
    double range = 0;
    for (std::int64_t r0 = 0; r0 < n; r0 += kChunkRows) {
        const auto y = t.forward(x.narrow(0, r0, std::min(kChunkRows, n - r0)).to(at::kDouble)).to(at::kDouble).cpu();
        s.channelAbsMax = at::maximum(s.channelAbsMax, std::get<0>(y.abs().max(0)));
        s.tokenNorm.narrow(0, r0, y.size(0)).copy_(y.pow(2).sum(1).sqrt());
        range = std::max(range, y.abs().max().item<double>());
    }
    if (range == 0) range = 1; // all zero: one bin in the middle holds everything
    // Second pass: the histogram over [-range, range], bins of equal width; the last edge
    // closes the last bin (a value equal to +range counts there).
    const int bins = o.histogramBins;
    s.histogramEdges = at::linspace(-range, range, bins + 1, at::kDouble);
    s.histogramCounts = at::zeros({bins}, at::kDouble);
    for (std::int64_t r0 = 0; r0 < n; r0 += kChunkRows) {
        const auto y = t.forward(x.narrow(0, r0, std::min(kChunkRows, n - r0)).to(at::kDouble)).to(at::kDouble).cpu();
        auto idx = ((y.reshape({-1}) + range) / (2 * range) * bins).floor().to(at::kLong).clamp(0, bins - 1);
        s.histogramCounts.index_add_(0, idx, at::ones({idx.size(0)}, at::kDouble));
    }
    // The largest per-channel maxima, descending; a stable sort keeps the lower index first on ties.
    std::vector<std::int64_t> order(static_cast<std::size_t>(d));
    std::iota(order.begin(), order.end(), 0);
    const auto m = s.channelAbsMax.contiguous();
    const double* mp = m.data_ptr<double>();
    std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return mp[a] > mp[b]; });
    order.resize(static_cast<std::size_t>(std::min<std::int64_t>(o.topChannels, d)));
    s.topChannels = order;
    // The chosen token's MX blocks, and the SPEC §3 errors.
    const auto xt = x.narrow(0, o.token, 1).to(at::kDouble);
    const auto yt = t.forward(xt).to(at::kDouble);
    s.tokenValues = yt.reshape({d}).cpu();
    s.tokenQuantized = mx::fakeQuantize(yt, o.format).reshape({d}).to(at::kDouble).cpu();
    s.tokenScaleLog2 = mx::blockScales(yt.to(at::kFloat), o.format).reshape({-1}).to(at::kDouble).log2().cpu();
    s.tokenBlockError = perBlockError(xt, t, o.format).cpu();
    s.blockError = perBlockError(x, t, o.format).cpu();
    s.mse = transformationMse(x, t, o.format);
    return s;
}

} // namespace

namespace {

void requireOptions(const at::Tensor& x, const ActivationProfileOptions& o, const std::string& point) {
    requireFiniteActivations(x, point);
    o.format.validate();
    if (o.token < 0 || o.token >= x.size(0))
        throw std::invalid_argument(point + ": token " + std::to_string(o.token) + " is not one of the " +
                                    std::to_string(x.size(0)) + " captured tokens (0.." + std::to_string(x.size(0) - 1) + ")");
    if (o.histogramBins < 1) throw std::invalid_argument("the histogram needs at least one bin");
}

// The profile's header (what was measured, and how) for rows x [n, d].
ActivationProfile header(const at::Tensor& x, const std::string& transform, const ActivationProfileOptions& o) {
    ActivationProfile p;
    p.transform = transform;
    p.rows = x.size(0);
    p.dim = x.size(1);
    p.token = o.token;
    p.format = o.format;
    return p;
}

} // namespace

ActivationProfile profileActivationPair(const at::Tensor& before, const at::Tensor& after, const std::string& transform,
                                        const ActivationProfileOptions& o, const std::string& point) {
    requireOptions(before, o, point);
    requireFiniteActivations(after, point + " (transformed)");
    if (!before.sizes().equals(after.sizes()))
        throw std::invalid_argument(point + ": the two captures differ in shape ([" + std::to_string(before.size(0)) + ", " +
                                    std::to_string(before.size(1)) + "] and [" + std::to_string(after.size(0)) + ", " +
                                    std::to_string(after.size(1)) + "]); capture both with the same windows");
    at::NoGradGuard noGrad;
    ActivationProfile p = header(before, transform, o);
    const auto identity = transforms::makeTransform("none", before.size(1), transforms::TransformOptions{});
    p.before = profileSide(before, *identity, o);
    p.after = profileSide(after, *identity, o);
    return p;
}

ActivationProfile profileActivations(const at::Tensor& x, const transforms::AffineTransform& t,
                                     const ActivationProfileOptions& o, const std::string& point) {
    requireOptions(x, o, point);
    if (x.size(1) != t.dim())
        throw std::invalid_argument(point + ": " + std::to_string(x.size(1)) + " channels but transform '" + t.name() +
                                    "' is " + std::to_string(t.dim()) + "-dimensional");
    at::NoGradGuard noGrad;
    ActivationProfile p = header(x, t.name(), o);
    const auto identity = transforms::makeTransform("none", x.size(1), transforms::TransformOptions{});
    p.before = profileSide(x, *identity, o);
    p.after = profileSide(x, t, o);
    return p;
}

} // namespace latmix::metrics
