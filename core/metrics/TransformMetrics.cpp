#include "metrics/TransformMetrics.h"

#include "mx/MxQuantizer.h"
#include "transforms/AffineTransform.h"
#include "transforms/BlockDiagonal.h"
#include "transforms/Hadamard.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <tuple>
#include <vector>
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
        if (blocks->blockSize() == 1 && !blocks->tail().defined()) return summaryOf(blocks->blocks().to(at::kDouble).abs().reshape({-1}));
        std::vector<at::Tensor> sv;
        if (blocks->blocks().defined()) sv.push_back(at::linalg_svdvals(blocks->blocks().to(at::kDouble)).reshape({-1}));
        if (blocks->tail().defined()) sv.push_back(at::linalg_svdvals(blocks->tail().to(at::kDouble)));
        return summaryOf(at::cat(sv));
    }
    // A = H_n·diag(d) with H_nᵀH_n = n·I: AᵀA = n·diag(d)², σ_j = √n·|d_j| for every construction.
    const at::Tensor d = t.hadamardDiagonal();
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

namespace {

// Up to this order the off-block norm is the largest value of a dense float64 SVD (exact to its
// rounding, under a second); beyond it the SVD is d³ (minutes at 8192, an hour at 14336) and the
// norm comes from Lanczos iterations on PᵀP instead.
constexpr std::int64_t kDenseSvdMaxOrder = 1024;

using RowMap = std::function<at::Tensor(const at::Tensor&)>;

// σ_max(P) for P given by its products with rows (p: v ↦ P v, pT: v ↦ Pᵀ v, v float64 [1, n]):
// Lanczos on the symmetric PᵀP with full reorthogonalisation from a fixed Gaussian start, the
// largest Ritz value θ of the tridiagonal T_k accepted once its residual ‖PᵀP y − θ y‖ =
// β_k·|last entry of T_k's eigenvector| is below 1e-10·θ (a symmetric matrix then has an
// eigenvalue within that of θ, and θ ≤ λ_max; ARPACK's criterion). At k = n the Krylov space is
// everything and θ = λ_max up to rounding. What scipy.sparse.linalg.svds(P, k=1) asks ARPACK for.
double largestSingularValue(const RowMap& p, const RowMap& pT, std::int64_t n) {
    const auto options = at::TensorOptions().dtype(at::kDouble);
    std::mt19937_64 rng(0x1a7c0ffee);
    std::normal_distribution<double> gauss;
    std::vector<double> start(static_cast<std::size_t>(n));
    for (double& v : start) v = gauss(rng);
    at::Tensor q = at::tensor(start, options).view({1, n});
    q = q / q.norm();
    std::vector<double> alpha, beta;
    const std::int64_t maxSteps = std::min<std::int64_t>(n, 600);
    const at::Tensor basis = at::empty({maxSteps, n}, options);
    double theta = 0, residual = 0;
    for (std::int64_t k = 0; k < maxSteps; ++k) {
        basis[k].copy_(q.view({n}));
        at::Tensor w = pT(p(q));
        alpha.push_back(at::dot(w.view({n}), q.view({n})).item<double>());
        const auto qs = basis.narrow(0, 0, k + 1);
        for (int pass = 0; pass < 2; ++pass) w = w - at::matmul(at::matmul(w, qs.t()), qs);
        const double b = w.norm().item<double>();
        const std::int64_t m = k + 1;
        // T_k's eigenproblem costs k³: looked at every 8 steps, at the end and on breakdown.
        if (m % 8 == 0 || m == maxSteps || b == 0) {
            auto t = at::diag(at::tensor(alpha, options));
            if (m > 1) {
                const auto off = at::tensor(beta, options);
                t = t + at::diag(off, 1) + at::diag(off, -1);
            }
            at::Tensor values, vectors;
            std::tie(values, vectors) = at::linalg_eigh(t);
            theta = values[m - 1].item<double>();
            residual = b * std::fabs(vectors[m - 1][m - 1].item<double>());
            if (theta <= 0) return 0.0; // PᵀP q = 0 for a Gaussian q: P = 0
            if (residual <= 1e-10 * theta || m == n) return std::sqrt(theta);
        }
        beta.push_back(b);
        q = w / b;
    }
    throw std::runtime_error("off-block norm: Lanczos did not converge in " + std::to_string(maxSteps) +
                             " steps (residual " + std::to_string(residual / theta) + " of the estimate)");
}

} // namespace

double offBlockNorm(const at::Tensor& a, int blockSize) {
    const at::Tensor p = offBlockPart(a, blockSize);
    if (!p.ne(0).any().item<bool>()) return 0.0; // block-diagonal at this block size: no SVD needed
    if (p.size(0) <= kDenseSvdMaxOrder) return singularValues(p).max().item<double>();
    return largestSingularValue([&](const at::Tensor& v) { return at::matmul(v, p.t()); },
                                [&](const at::Tensor& v) { return at::matmul(v, p); }, p.size(0));
}

double offBlockNorm(const transforms::AffineTransform& t, int blockSize) {
    requireBlock(blockSize);
    // Blocks of bt with B a multiple of bt: every block (and the smaller last one, which starts
    // on a multiple of bt) lies inside one MX block, so nothing couples two of them.
    if (const auto* blocks = t.blockStructure(); blocks && blockSize % blocks->blockSize() == 0) return 0.0;
    const at::Tensor d = t.hadamardDiagonal();
    const std::int64_t n = d.defined() ? d.numel() : 0, b = blockSize;
    if (n == 0) return offBlockNorm(t.matrix(), blockSize);
    at::NoGradGuard noGrad;
    const auto mag = d.detach().to(at::kDouble).abs();
    const double c = mag.max().item<double>();
    // Sylvester H_n = H_m ⊗ H_B for B a power of two: the diagonal blocks are Diag(H_m) ⊗ H_B, so
    // with every |d_j| the same the off-block part is c·(H_m − Diag(H_m)) ⊗ H_B (exact, no iteration).
    if (n > b && (n & (n - 1)) == 0 && (b & (b - 1)) == 0 && mag.min().item<double>() == c) {
        const auto h = transforms::hadamardMatrix(n / b);
        const auto small = h - at::diag(h.diagonal()); // H_m minus its diagonal ((-1)^popcount(i))
        return c * std::sqrt(static_cast<double>(b)) * at::linalg_svdvals(small).max().item<double>();
    }
    if (n <= kDenseSvdMaxOrder) return offBlockNorm(t.matrix(), blockSize);
    // Any other Hadamard order (14336 = 512·28): P = H_n·diag(d) − blockdiag_B, the first term by
    // its construction (hadamardRows), the diagonal blocks from its entries, n·(B + log n + b) per
    // product instead of n², and no n×n matrix.
    const auto dd = d.detach().to(at::kDouble);
    const auto h = transforms::hadamardDiagonalBlocks(n, b); // blockdiag_B(H_n·diag(d)): H's blocks, columns scaled
    const std::int64_t full = n / b;
    const auto onBlocks = transforms::BlockDiagonal(
        h.blocks().defined() ? h.blocks() * dd.narrow(0, 0, full * b).view({full, 1, b}) : at::Tensor(),
        h.tail().defined() ? h.tail() * dd.narrow(0, full * b, n - full * b).view({1, -1}) : at::Tensor());
    const auto onBlocksT = onBlocks.transposed();
    return largestSingularValue([&](const at::Tensor& v) { return transforms::hadamardRows(v, dd) - onBlocks.apply(v); },
                                [&](const at::Tensor& v) { return transforms::hadamardRowsTransposed(v, dd) - onBlocksT.apply(v); },
                                n);
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
