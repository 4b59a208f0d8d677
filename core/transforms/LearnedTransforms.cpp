#include "transforms/LearnedTransforms.h"

#include "transforms/BlockDiagonal.h"
#include "transforms/FixedTransforms.h"
#include "util/Text.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>

namespace latmix::transforms {
namespace {

bool contains(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// The noise draw gets its own stream, decorrelated from the matrix draw of the same seed
// (splitmix64 finaliser of seed + constant).
std::uint64_t noiseSeed(std::uint64_t seed) {
    std::uint64_t z = seed + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

bool isLuKind(const std::string& kind) { return kind == "learned-invertible" || kind == "learned-affine-lu"; }

} // namespace

std::vector<std::string> transformKinds() {
    return {"none", "hadamard", "block-hadamard", "orthogonal", "block-orthogonal",
            "learned-rotation", "learned-rotation-bias", "learned-invertible", "learned-affine-lu", "learned-affine-qr"};
}

std::vector<std::string> initKinds() {
    return {"default", "identity", "identity+noise", "orthogonal", "block-orthogonal", "block-orthogonal+noise",
            "hadamard", "block-hadamard", "block-hadamard+noise"};
}

bool isLearnedKind(const std::string& kind) { return kind.rfind("learned-", 0) == 0 && contains(transformKinds(), kind); }

bool kindHasBias(const std::string& kind) {
    return kind == "learned-rotation-bias" || kind == "learned-affine-lu" || kind == "learned-affine-qr";
}

std::string resolveInit(const std::string& kind, const std::string& init) {
    if (init != "default") return init;
    // Paper, Appendix "Training details": block-diagonal (B = 32) random Hadamard for LU, random
    // orthogonal for QR, small Gaussian noise off the block diagonal (best rows of Table 10).
    return isLuKind(kind) ? "block-hadamard+noise" : "block-orthogonal+noise";
}

at::Tensor addOffBlockNoise(const at::Tensor& a, std::int64_t block, double std, std::uint64_t seed) {
    if (block < 1) throw std::invalid_argument("addOffBlockNoise: block size must be positive");
    const std::int64_t d = a.size(0);
    const auto off = 1.0 - sameBlockMask(d, block, at::kDouble);
    return a.to(at::kDouble) + seededGaussian(d, a.size(1), seed) * std * off;
}

at::Tensor initialMatrix(const std::string& init, std::int64_t dim, std::int64_t blockSize, std::uint64_t seed,
                         double noiseStd, std::string* note) {
    if (dim < 1) throw std::invalid_argument("initialMatrix: dimension must be positive");
    if (note) note->clear();
    const bool noisy = init.size() > 6 && init.compare(init.size() - 6, 6, "+noise") == 0;
    const std::string base = noisy ? init.substr(0, init.size() - 6) : init;
    at::Tensor a;
    std::int64_t noiseBlock = blockSize;
    if (base == "identity") {
        a = at::eye(dim, at::kDouble);
        noiseBlock = 1; // Table 10 "Identity + Noise": noise off the diagonal
    } else if (base == "orthogonal" && !noisy) {
        a = randomOrthogonalMatrix(dim, seed);
    } else if (base == "hadamard" && !noisy) {
        a = randomHadamardMatrix(dim, seed);
    } else if (base == "block-orthogonal") {
        a = blockOrthogonalMatrix(dim, blockSize, seed, note);
    } else if (base == "block-hadamard") {
        a = blockHadamardMatrix(dim, blockSize, seed, note);
    } else {
        throw std::invalid_argument("unknown transform initialisation '" + init + "'; valid: " + util::joinList(initKinds()));
    }
    return noisy ? addOffBlockNoise(a, noiseBlock, noiseStd, noiseSeed(seed)) : a;
}

std::unique_ptr<AffineTransform> makeTransform(const std::string& kind, std::int64_t dim, const TransformOptions& o) {
    if (!contains(transformKinds(), kind))
        throw std::invalid_argument("unknown transform kind '" + kind + "'; valid kinds: " + util::joinList(transformKinds()));
    if (dim < 1) throw std::invalid_argument(kind + ": dimension must be positive, got " + std::to_string(dim));
    if (o.blockSize < 1) throw std::invalid_argument(kind + ": block size must be positive, got " + std::to_string(o.blockSize));
    if (!(o.noiseStd >= 0)) throw std::invalid_argument(kind + ": noise std must be non-negative");
    if (o.dtype != at::kFloat && o.dtype != at::kDouble) throw std::invalid_argument(kind + ": dtype must be float32 or float64");

    if (kind == "none") return makeIdentity(dim, o.dtype);
    if (kind == "hadamard") return makeRandomHadamard(dim, o.seed, o.dtype);
    if (kind == "block-hadamard") return makeBlockHadamard(dim, o.blockSize, o.seed, o.dtype);
    if (kind == "orthogonal") return makeRandomOrthogonal(dim, o.seed, o.dtype);
    if (kind == "block-orthogonal") return makeBlockOrthogonal(dim, o.blockSize, o.seed, o.dtype);

    const std::string init = resolveInit(kind, o.init);
    if (!contains(initKinds(), init))
        throw std::invalid_argument(kind + ": unknown initialisation '" + o.init + "'; valid: " + util::joinList(initKinds()));
    if (o.blockDiagonal && (init == "orthogonal" || init == "hadamard"))
        throw std::invalid_argument(kind + ": block granularity needs a block-diagonal initialisation (identity, block-orthogonal, "
                                           "block-hadamard, with or without +noise), not '" + init + "'");
    std::string note;
    auto a0 = initialMatrix(init, dim, o.blockSize, o.seed, o.noiseStd, &note);
    std::int64_t block = 0;
    if (o.blockDiagonal) {
        block = o.blockSize;
        a0 = a0 * sameBlockMask(dim, block, at::kDouble); // the "+noise" lies off the blocks
    }
    if (kind == "learned-rotation") return std::make_unique<QrTransform>(a0, true, false, o.dtype, kind, note, block);
    if (kind == "learned-rotation-bias") return std::make_unique<QrTransform>(a0, true, o.bias, o.dtype, kind, note, block);
    if (kind == "learned-invertible") return std::make_unique<LuTransform>(a0, false, o.dtype, kind, note, block);
    if (kind == "learned-affine-lu") return std::make_unique<LuTransform>(a0, o.bias, o.dtype, kind, note, block);
    return std::make_unique<QrTransform>(a0, false, o.bias, o.dtype, kind, note, block); // learned-affine-qr
}

} // namespace latmix::transforms
