#pragma once
// How well an affine transform T(x) = A x + v suits MX quantization of one quantization point
// (SPEC §3; paper §3, Definition "Transformation Mean Squared Error" and Theorem 1, eq.
// bound_mx). Every function takes the captured activations x as rows [n, d] of that point;
// Q is latmix::mx::fakeQuantize along the last dimension. Results are float64.
#include "mx/MxFormat.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace latmix::transforms {
class AffineTransform;
}

namespace latmix::metrics {

// Throws std::invalid_argument naming the point when x is not [n, d] with n >= 1 or holds
// NaN/Inf (a broken model or capture; quantizing it would only spread NaN blocks).
void requireFiniteActivations(const at::Tensor& x, const std::string& point);

// x̂ = T⁻¹(Q(T(x))) in x's dtype. Differentiable w.r.t. the transform's parameters: Q passes
// gradients with the straight-through estimator (SPEC §1), so this is the training path.
at::Tensor quantizationRoundTrip(const at::Tensor& x, const transforms::AffineTransform& t, const mx::MxConfig& c);

// E(T) = (1/d) mean over rows of ‖x − T⁻¹(Q(T(x)))‖² as a 0-d tensor that carries gradients
// (the layer-local training loss).
at::Tensor transformationMseLoss(const at::Tensor& x, const transforms::AffineTransform& t, const mx::MxConfig& c);

// E(T), evaluated in float64 without gradients.
double transformationMse(const at::Tensor& x, const transforms::AffineTransform& t, const mx::MxConfig& c);

// E_B^i(T) = (1/B) Σ_{j∈I_i} (x − T⁻¹Q(Tx))_j², averaged over rows, for the MX blocks I_i of
// c.blockSize along d (a partial trailing block divides by its own length). float64 [N_B].
at::Tensor perBlockError(const at::Tensor& x, const transforms::AffineTransform& t, const mx::MxConfig& c);

// M_i = mean over rows of (max_{j∈I_i} |T(x)_j|)², for the blocks of blockSize. float64 [N_B].
at::Tensor blockMaxSquared(const at::Tensor& x, const transforms::AffineTransform& t, int blockSize);

// Spectral quantities of A [d, d], all from one set of singular values.
struct SpectralSummary {
    double sigmaMin = 0, sigmaMax = 0;
    double inverseNormSquared = 0;     // ‖A⁻¹‖σ² = 1/σmin²
    double conditionNumber = 0;        // κ(A) = σmax/σmin
    double orthogonalityDeviation = 0; // ‖AᵀA − I‖σ = max_i |σ_i² − 1| (AᵀA − I is symmetric)
};
SpectralSummary spectralSummary(const at::Tensor& a);
// The same for t.matrix(), read off its structure where it has one (the SVD of a d×d matrix is
// d³: minutes at d = 8192): a block-diagonal A from its blocks' singular values, A = H_n·diag(d)
// (any Hadamard construction) from √n·|d_j| (H_n/√n is orthogonal); any other A through
// spectralSummary.
SpectralSummary spectralSummary(const transforms::AffineTransform& t);

double inverseSpectralNormSquared(const at::Tensor& a);
double conditionNumber(const at::Tensor& a);
double orthogonalityDeviation(const at::Tensor& a);
// ‖A − blockdiag_B(A)‖σ: the spectral norm of what couples different blocks of B channels
// (paper Fig. 5b). A trailing partial block is a smaller diagonal block. Up to d = 1024 the largest
// value of a dense SVD; beyond, Lanczos iterations on PᵀP to 1e-10 of ‖P‖² (an SVD is d³).
double offBlockNorm(const at::Tensor& a, int blockSize);
// The same for t.matrix(): 0 when t's blocks divide B (or nothing lies outside the blocks); for
// A = H_n·diag(d) with n and B powers of two and |d_j| = c, c·√B·‖H_m − Diag(H_m)‖σ, m = n/B
// (Sylvester order makes H_n = H_m ⊗ H_B, whose diagonal blocks are Diag(H_m) ⊗ H_B); for another
// Hadamard order above 1024, the Lanczos iterations with H_n applied by its construction;
// otherwise offBlockNorm(A).
double offBlockNorm(const transforms::AffineTransform& t, int blockSize);
// A − blockdiag_B(A): a with its B×B diagonal blocks zeroed, float64 on a's device (what offBlockNorm
// measures; the training dashboard draws it).
at::Tensor offBlockPart(const at::Tensor& a, int blockSize);

// The bound of Theorem 1 without its constant: ‖A⁻¹‖σ²/N_B · Σ_i M_i.
double errorBound(double inverseNormSquared, const at::Tensor& blockMaxSquared);
double errorBound(const at::Tensor& x, const transforms::AffineTransform& t, const mx::MxConfig& c);

// Block-size sweep (paper Fig. 2a): E(T) with the MX block size set to each of sizes; sizes
// above d are skipped, and so is every size but 16 for NVFP4 (its block is fixed).
struct SweepPoint {
    int blockSize = 0;
    double mse = 0;
};
const std::vector<int>& defaultSweepBlockSizes(); // 8, 16, 32, 64, 128, 256
std::vector<SweepPoint> blockSizeSweep(const at::Tensor& x, const transforms::AffineTransform& t,
                                       const mx::MxConfig& c, const std::vector<int>& sizes = defaultSweepBlockSizes());

// Everything above for one point and one transform.
struct TransformReport {
    std::string point, transform; // transform: its name(), e.g. "block-hadamard(32)"
    std::int64_t rows = 0, dim = 0;
    mx::MxConfig config;
    double mse = 0;
    at::Tensor perBlock; // float64 [N_B]
    double perBlockMean = 0, perBlockMax = 0;
    at::Tensor blockMaxSquared; // M_i, float64 [N_B]
    SpectralSummary spectral;
    double bound = 0;
    double offBlockNorm = 0; // for config.blockSize
    std::vector<SweepPoint> sweep;
    std::string remainderNote; // from the transform
};

TransformReport analyzeTransform(const std::string& point, const at::Tensor& x, const transforms::AffineTransform& t,
                                 const mx::MxConfig& c, const std::vector<int>& sweepSizes = defaultSweepBlockSizes());

} // namespace latmix::metrics
