#include "metrics/TransformMetrics.h"

#include "mx/MxQuantizer.h"
#include "transforms/AffineTransform.h"
#include "transforms/BlockDiagonal.h"
#include "transforms/Hadamard.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace latmix::metrics {
namespace {

// Rows per evaluation chunk: keeps the float64 temporaries of big models (d = 4096+) bounded.
constexpr std::int64_t kChunkRows = 2048;

void requireRows(const at::Tensor& x, const transforms::AffineTransform& t) {
    if (x.dim() != 2 || x.size(0) < 1)
        throw std::invalid_argument("transform metrics need activations as rows [n, d] with n >= 1");
    if (x.size(1) != t.dim())
        throw std::invalid_argument("activations have " + std::to_string(x.size(1)) + " channels but transform '" +
                                    t.name() + "' is " + std::to_string(t.dim()) + "-dimensional");
}

void requireBlock(int blockSize) {
    if (blockSize < 1) throw std::invalid_argument("block size must be positive, got " + std::to_string(blockSize));
}

// Column sums of the squared round-trip error and of the squared block maxima of T(x), one
// pass over the rows in chunks (everything of SPEC §3 that depends on x follows from these).
struct ErrorSums {
    at::Tensor squaredError;    // float64 [d], summed over rows
    at::Tensor blockMaxSquared; // float64 [N_B], summed over rows
    std::int64_t rows = 0;
};

at::Tensor blockMaxima(const at::Tensor& y, int blockSize) {
    const std::int64_t d = y.size(1), nb = (d + blockSize - 1) / blockSize;
    auto a = y.abs();
    if (nb * blockSize != d) a = at::constant_pad_nd(a, {0, nb * blockSize - d}, 0); // |.| >= 0: pad is neutral
    return std::get<0>(a.reshape({y.size(0), nb, blockSize}).max(2));
}

ErrorSums errorSums(const at::Tensor& x, const transforms::AffineTransform& t, const mx::MxConfig& c) {
    requireRows(x, t);
    c.validate();
    at::NoGradGuard noGrad;
    ErrorSums s;
    const std::int64_t d = x.size(1), nb = (d + c.blockSize - 1) / c.blockSize;
    s.squaredError = at::zeros({d}, at::kDouble);
    s.blockMaxSquared = at::zeros({nb}, at::kDouble);
    for (std::int64_t r0 = 0; r0 < x.size(0); r0 += kChunkRows) {
        auto xc = x.narrow(0, r0, std::min(kChunkRows, x.size(0) - r0)).to(at::kDouble);
        auto y = t.forward(xc).to(at::kDouble);
        auto back = t.inverse(mx::fakeQuantize(y, c)).to(at::kDouble);
        s.squaredError += (xc - back).pow(2).sum(0).to(at::kCPU);
        s.blockMaxSquared += blockMaxima(y, c.blockSize).pow(2).sum(0).to(at::kCPU);
        s.rows += xc.size(0);
    }
    return s;
}

// Mean of v [d] over consecutive blocks of blockSize; a partial trailing block divides by its
// own length (the same convention as BlockError).
at::Tensor blockMeans(const at::Tensor& v, int blockSize) {
    const std::int64_t d = v.size(0), nb = (d + blockSize - 1) / blockSize;
    auto padded = nb * blockSize == d ? v : at::constant_pad_nd(v, {0, nb * blockSize - d}, 0);
    auto lengths = at::full({nb}, static_cast<double>(blockSize), at::kDouble);
    lengths[nb - 1] = static_cast<double>(d - (nb - 1) * blockSize);
    return padded.reshape({nb, blockSize}).sum(1) / lengths;
}

at::Tensor singularValues(const at::Tensor& a) {
    if (a.dim() != 2 || a.size(0) != a.size(1) || a.size(0) < 1)
        throw std::invalid_argument("transform matrix must be square [d, d]");
    at::NoGradGuard noGrad;
    // Where the matrix is (no device round trip of a d×d matrix during training), float64.
    return at::linalg_svdvals(a.detach().to(at::kDouble)); // descending
}

} // namespace

void requireFiniteActivations(const at::Tensor& x, const std::string& point) {
    if (x.dim() != 2 || x.size(0) < 1 || x.size(1) < 1)
        throw std::invalid_argument("activations of point '" + point + "' must be rows [n, d] with n, d >= 1");
    at::NoGradGuard noGrad;
    const auto bad = (~at::isfinite(x)).sum().item<std::int64_t>();
    if (bad > 0)
        throw std::invalid_argument("activations of point '" + point + "' hold " + std::to_string(bad) +
                                    " NaN/Inf values of " + std::to_string(x.numel()) +
                                    "; the model or its captured run file is broken (re-capture, or check the "
                                    "weights with latmix eval)");
}

at::Tensor quantizationRoundTrip(const at::Tensor& x, const transforms::AffineTransform& t, const mx::MxConfig& c) {
    requireRows(x, t);
    return t.inverse(mx::fakeQuantize(t.forward(x), c));
}

at::Tensor transformationMseLoss(const at::Tensor& x, const transforms::AffineTransform& t, const mx::MxConfig& c) {
    // (1/d) E‖·‖² over rows = mean over all n·d entries (paper eq. q_error).
    return (x - quantizationRoundTrip(x, t, c)).pow(2).mean();
}

double transformationMse(const at::Tensor& x, const transforms::AffineTransform& t, const mx::MxConfig& c) {
    const ErrorSums s = errorSums(x, t, c);
    return s.squaredError.sum().item<double>() / (static_cast<double>(s.rows) * static_cast<double>(x.size(1)));
}

at::Tensor perBlockError(const at::Tensor& x, const transforms::AffineTransform& t, const mx::MxConfig& c) {
    const ErrorSums s = errorSums(x, t, c);
    return blockMeans(s.squaredError / static_cast<double>(s.rows), c.blockSize);
}

at::Tensor blockMaxSquared(const at::Tensor& x, const transforms::AffineTransform& t, int blockSize) {
    requireRows(x, t);
    requireBlock(blockSize);
    at::NoGradGuard noGrad;
    at::Tensor sum;
    for (std::int64_t r0 = 0; r0 < x.size(0); r0 += kChunkRows) {
        auto y = t.forward(x.narrow(0, r0, std::min(kChunkRows, x.size(0) - r0)).to(at::kDouble)).to(at::kDouble);
        auto part = blockMaxima(y, blockSize).pow(2).sum(0).to(at::kCPU);
        sum = sum.defined() ? sum + part : part;
    }
    return sum / static_cast<double>(x.size(0));
}

namespace {
SpectralSummary summaryOf(const at::Tensor& sv);
} // namespace

SpectralSummary spectralSummary(const at::Tensor& a) { return summaryOf(singularValues(a)); }

SpectralSummary spectralSummary(const transforms::AffineTransform& t) {
    at::NoGradGuard noGrad;
    if (const auto* blocks = t.blockStructure()) { // the union of the blocks' singular values
        std::vector<at::Tensor> sv;
        if (blocks->blocks().defined()) sv.push_back(at::linalg_svdvals(blocks->blocks().to(at::kDouble)).reshape({-1}));
        if (blocks->tail().defined()) sv.push_back(at::linalg_svdvals(blocks->tail().to(at::kDouble)));
        return summaryOf(at::cat(sv));
    }
    const at::Tensor d = t.sylvesterDiagonal();
    if (d.defined()) return summaryOf(d.detach().to(at::kDouble).abs() * std::sqrt(static_cast<double>(d.numel())));
    return spectralSummary(t.matrix());
}

namespace {
SpectralSummary summaryOf(const at::Tensor& sv) {
    SpectralSummary s;
    s.sigmaMax = sv.max().item<double>();
    s.sigmaMin = sv.min().item<double>();
    const double inf = std::numeric_limits<double>::infinity();
    s.inverseNormSquared = s.sigmaMin > 0 ? 1.0 / (s.sigmaMin * s.sigmaMin) : inf;
    s.conditionNumber = s.sigmaMin > 0 ? s.sigmaMax / s.sigmaMin : inf;
    // Eigenvalues of AᵀA − I are σ_i² − 1; its spectral norm is the largest in magnitude.
    s.orthogonalityDeviation = (sv.pow(2) - 1.0).abs().max().item<double>();
    return s;
}
} // namespace

double inverseSpectralNormSquared(const at::Tensor& a) { return spectralSummary(a).inverseNormSquared; }
double conditionNumber(const at::Tensor& a) { return spectralSummary(a).conditionNumber; }
double orthogonalityDeviation(const at::Tensor& a) { return spectralSummary(a).orthogonalityDeviation; }

at::Tensor offBlockPart(const at::Tensor& a, int blockSize) {
    requireBlock(blockSize);
    if (a.dim() != 2 || a.size(0) != a.size(1)) throw std::invalid_argument("transform matrix must be square [d, d]");
    at::NoGradGuard noGrad;
    const auto sameBlock = transforms::sameBlockMask(a.size(0), blockSize, at::TensorOptions().dtype(at::kBool).device(a.device()));
    return a.detach().to(at::kDouble).masked_fill(sameBlock, 0.0);
}

double offBlockNorm(const at::Tensor& a, int blockSize) {
    const at::Tensor p = offBlockPart(a, blockSize);
    if (!p.ne(0).any().item<bool>()) return 0.0; // block-diagonal at this block size: no SVD needed
    return singularValues(p).max().item<double>();
}

double offBlockNorm(const transforms::AffineTransform& t, int blockSize) {
    requireBlock(blockSize);
    // Blocks of bt with B a multiple of bt: every block (and the smaller last one, which starts
    // on a multiple of bt) lies inside one MX block, so nothing couples two of them.
    if (const auto* blocks = t.blockStructure(); blocks && blockSize % blocks->blockSize() == 0) return 0.0;
    const at::Tensor d = t.sylvesterDiagonal();
    const std::int64_t n = d.defined() ? d.numel() : 0, b = blockSize;
    if (n > b && (b & (b - 1)) == 0) {
        const auto mag = d.detach().to(at::kDouble).abs();
        const double c = mag.max().item<double>();
        if (mag.min().item<double>() == c) { // every |d_j| the same: the Kronecker identity holds
            at::NoGradGuard noGrad;
            const auto h = transforms::hadamardMatrix(n / b);
            const auto small = h - at::diag(h.diagonal()); // H_m minus its diagonal ((-1)^popcount(i))
            return c * std::sqrt(static_cast<double>(b)) * at::linalg_svdvals(small).max().item<double>();
        }
    }
    return offBlockNorm(t.matrix(), blockSize);
}

double errorBound(double inverseNormSquared, const at::Tensor& m) {
    return inverseNormSquared / static_cast<double>(m.numel()) * m.sum().item<double>();
}

double errorBound(const at::Tensor& x, const transforms::AffineTransform& t, const mx::MxConfig& c) {
    return errorBound(spectralSummary(t).inverseNormSquared, blockMaxSquared(x, t, c.blockSize));
}

const std::vector<int>& defaultSweepBlockSizes() {
    static const std::vector<int> sizes{8, 16, 32, 64, 128, 256};
    return sizes;
}

std::vector<SweepPoint> blockSizeSweep(const at::Tensor& x, const transforms::AffineTransform& t,
                                       const mx::MxConfig& c, const std::vector<int>& sizes) {
    requireRows(x, t);
    std::vector<SweepPoint> out;
    for (int b : sizes) {
        if (b > x.size(1)) continue;
        if (c.isNvfp4() && b != 16) continue;
        mx::MxConfig cb = c;
        cb.blockSize = b;
        out.push_back({b, transformationMse(x, t, cb)});
    }
    return out;
}

TransformReport analyzeTransform(const std::string& point, const at::Tensor& x, const transforms::AffineTransform& t,
                                 const mx::MxConfig& c, const std::vector<int>& sweepSizes) {
    requireFiniteActivations(x, point);
    requireRows(x, t);
    TransformReport r;
    r.point = point;
    r.transform = t.name();
    r.rows = x.size(0);
    r.dim = x.size(1);
    r.config = c;
    r.remainderNote = t.remainderNote();
    const ErrorSums s = errorSums(x, t, c);
    const double n = static_cast<double>(s.rows);
    r.mse = s.squaredError.sum().item<double>() / (n * static_cast<double>(r.dim));
    r.perBlock = blockMeans(s.squaredError / n, c.blockSize);
    r.perBlockMean = r.perBlock.mean().item<double>();
    r.perBlockMax = r.perBlock.max().item<double>();
    r.blockMaxSquared = s.blockMaxSquared / n;
    r.spectral = spectralSummary(t);
    r.bound = errorBound(r.spectral.inverseNormSquared, r.blockMaxSquared);
    r.offBlockNorm = offBlockNorm(t, c.blockSize);
    r.sweep = blockSizeSweep(x, t, c, sweepSizes);
    return r;
}

} // namespace latmix::metrics
