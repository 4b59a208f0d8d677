#pragma once
// Learned transforms (SPEC §2): the LU and QR parametrisations (LuTransform.h, QrTransform.h),
// their initialisations (paper Appendix "Initialization", Table 10) and the factory that builds
// every transform kind by name, fixed ones included.
//
// Kinds (the paper's ablation variants, §4 / Table "ablation"):
//   none, hadamard, block-hadamard, orthogonal, block-orthogonal       fixed (FixedTransforms.h)
//   learned-rotation        QR rotation-only (R = 0, s = 1), no bias
//   learned-rotation-bias   QR rotation-only + learned bias
//   learned-invertible      LU, no bias
//   learned-affine-lu       LU + learned bias (LATMiX-LU)
//   learned-affine-qr       QR + learned bias (LATMiX-QR)
//
// Initialisations (paper Table 10) of the learned kinds:
//   identity, identity+noise, orthogonal, block-orthogonal, block-orthogonal+noise,
//   hadamard, block-hadamard, block-hadamard+noise, and "default": what the paper trains with
//   (Appendix: "block-diagonal ... random Hadamard for LU or random orthogonal for QR", block 32,
//   small Gaussian noise off the block diagonal) = block-hadamard+noise for the LU kinds and
//   block-orthogonal+noise for the QR kinds. "+noise" adds N(0, noiseStd²) to every entry off
//   the block diagonal (off the diagonal for identity+noise); the full matrices get none.
#include "transforms/AffineTransform.h"
#include "transforms/LuTransform.h"
#include "transforms/QrTransform.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace latmix::transforms {

struct TransformOptions {
    std::int64_t blockSize = 32;        // block-* kinds and block-diagonal initialisations
    std::uint64_t seed = 0;             // random signs / Gaussians (never at::randn's stream)
    std::string init = "default";       // one of initKinds(), learned kinds only
    double noiseStd = 1e-3;             // "+noise" initialisations
    at::ScalarType dtype = at::kFloat;  // float32 or float64 (matrix / parameters)
    // false: a kind with a learned bias is built without it (v = 0 throughout): the deployable
    // variant for runtimes that cannot hold the biases its folding creates (Qwen3's MLP).
    bool bias = true;
    // Learned kinds only: keep A block-diagonal with blocks of blockSize (paper Table 1's "Block"
    // granularity, against "Full"). The initialisation's off-block part (its "+noise") is
    // dropped; a full initialisation (orthogonal, hadamard) is refused.
    bool blockDiagonal = false;
};

std::vector<std::string> transformKinds(); // the ten kinds above, in that order
std::vector<std::string> initKinds();      // "default" then the eight initialisations above

// Builds a transform of the given kind acting on dim channels. Throws std::invalid_argument for
// an unknown kind or init (the message lists the valid ones) and for bad options; a full
// "hadamard" (kind or init) on a size without a Hadamard matrix throws with the size named.
std::unique_ptr<AffineTransform> makeTransform(const std::string& kind, std::int64_t dim, const TransformOptions& o = {});

// Whether kind is a learned kind (has parameters()).
bool isLearnedKind(const std::string& kind);
// Whether kind carries a learned bias v (learned-rotation-bias, learned-affine-lu/-qr).
bool kindHasBias(const std::string& kind);

// The initial matrix A0 (float64, [dim, dim]) of an initialisation; "default" must have been
// resolved (resolveInit). *note receives the remainder note of block-diagonal inits.
at::Tensor initialMatrix(const std::string& init, std::int64_t dim, std::int64_t blockSize, std::uint64_t seed,
                         double noiseStd, std::string* note = nullptr);
// "default" → the paper's choice for the kind (see above); anything else is returned unchanged.
std::string resolveInit(const std::string& kind, const std::string& init);

// a + N(0, std²) on every entry (i, j) with i/block ≠ j/block (float64, seeded).
at::Tensor addOffBlockNoise(const at::Tensor& a, std::int64_t block, double std, std::uint64_t seed);

} // namespace latmix::transforms
