#include "transforms/FixedTransforms.h"

#include "transforms/Hadamard.h"

#include <ATen/ATen.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <tuple>

namespace latmix::transforms {
namespace {

// mt19937_64 is fully specified by the standard; std::normal_distribution is not, so normals
// come from Box–Muller on raw 64-bit draws (as core/mx/SyntheticActivations.cpp).
class SeededStream {
public:
    explicit SeededStream(std::uint64_t seed) : m_rng(seed) {}
    double uniform() { return (static_cast<double>(m_rng() >> 11) + 0.5) * 0x1.0p-53; } // (0, 1)
    double normal() {
        if (m_haveSpare) {
            m_haveSpare = false;
            return m_spare;
        }
        const double u1 = uniform(), u2 = uniform();
        const double r = std::sqrt(-2.0 * std::log(u1));
        m_spare = r * std::sin(2.0 * M_PI * u2);
        m_haveSpare = true;
        return r * std::cos(2.0 * M_PI * u2);
    }
    double sign() { return (m_rng() >> 63) ? -1.0 : 1.0; }

    at::Tensor gaussian(std::int64_t rows, std::int64_t cols) {
        auto t = at::empty({rows, cols}, at::kDouble);
        double* d = t.data_ptr<double>();
        for (std::int64_t i = 0; i < rows * cols; ++i) d[i] = normal();
        return t;
    }
    at::Tensor signs(std::int64_t n) {
        auto t = at::empty({n}, at::kDouble);
        double* d = t.data_ptr<double>();
        for (std::int64_t i = 0; i < n; ++i) d[i] = sign();
        return t;
    }
    // H / √n · diag(±1): the signs flip the input's coordinates before the mixing, as QuaRot's
    // random Hadamard does (x·diag(s)·H in its row-vector convention). SPEC §2's wording
    // "±1 diagonal times normalized Hadamard" read literally with T(x) = A x puts the signs
    // after the mixing, where they only flip output signs: |A x| and so every quantization error
    // would not depend on the seed at all (the 2026-11-24 sweeps measured exactly that).
    at::Tensor randomHadamard(std::int64_t n) {
        auto h = hadamardMatrix(n); // throws with the size and the block-mode hint
        return h * signs(n).unsqueeze(0) / std::sqrt(static_cast<double>(n));
    }
    at::Tensor randomOrthogonal(std::int64_t n) {
        at::Tensor q, r;
        std::tie(q, r) = at::linalg_qr(gaussian(n, n));
        // Sign fix: Q·diag(sign(diag R)) makes the factorisation unique (diag R > 0), so Q is
        // Haar-distributed (Mezzadri 2007). A zero diagonal has probability 0; treat it as +.
        auto d = at::where(r.diagonal() < 0, at::full({n}, -1.0, at::kDouble), at::ones({n}, at::kDouble));
        return q * d.unsqueeze(0);
    }

private:
    std::mt19937_64 m_rng;
    bool m_haveSpare = false;
    double m_spare = 0;
};

void checkDim(std::int64_t dim, const char* what) {
    if (dim < 1) throw std::invalid_argument(std::string(what) + ": dimension must be positive, got " + std::to_string(dim));
}

void checkBlock(std::int64_t block, const char* what) {
    if (block < 1) throw std::invalid_argument(std::string(what) + ": block size must be positive, got " + std::to_string(block));
}

void checkDtype(const std::string& name, at::ScalarType dtype) {
    if (dtype != at::kFloat && dtype != at::kDouble) throw std::invalid_argument(name + ": dtype must be float32 or float64");
}

std::unique_ptr<MatrixTransform> wrap(std::string name, const at::Tensor& a, at::ScalarType dtype, std::string note = {}) {
    checkDtype(name, dtype);
    return std::make_unique<MatrixTransform>(std::move(name), a.to(dtype), /*orthogonal=*/true, at::Tensor(), std::move(note));
}

// A block-diagonal orthogonal A kept as its blocks (no dense d×d matrix).
std::unique_ptr<MatrixTransform> wrapBlocks(std::string name, const BlockDiagonal& a, at::ScalarType dtype, std::string note = {}) {
    checkDtype(name, dtype);
    return std::make_unique<MatrixTransform>(std::move(name), BlockDiagonal(a.blocks(), a.tail()).to(at::TensorOptions().dtype(dtype)),
                                             std::move(note));
}

} // namespace

at::Tensor seededGaussian(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
    if (rows < 0 || cols < 0) throw std::invalid_argument("seededGaussian: negative size");
    return SeededStream(seed).gaussian(rows, cols);
}

at::Tensor seededSigns(std::int64_t n, std::uint64_t seed) {
    if (n < 0) throw std::invalid_argument("seededSigns: negative size");
    return SeededStream(seed).signs(n);
}

at::Tensor randomHadamardMatrix(std::int64_t n, std::uint64_t seed) {
    checkDim(n, "hadamard");
    return SeededStream(seed).randomHadamard(n);
}

at::Tensor randomOrthogonalMatrix(std::int64_t n, std::uint64_t seed) {
    checkDim(n, "orthogonal");
    return SeededStream(seed).randomOrthogonal(n);
}

BlockDiagonal blockHadamard(std::int64_t dim, std::int64_t block, std::uint64_t seed, std::string* note) {
    checkDim(dim, "block-hadamard");
    checkBlock(block, "block-hadamard");
    if (!hasHadamard(block))
        throw std::invalid_argument("block-hadamard: block size " + std::to_string(block) +
                                    " has no Hadamard matrix; use a power of two such as 32");
    SeededStream rng(seed);
    std::string n;
    const std::int64_t rest = dim % block;
    // SPEC §1/§2: the remainder is a smaller block, Hadamard where its size has one, else identity.
    if (rest != 0) {
        n = "last block of " + std::to_string(rest) + " channels: ";
        n += hasHadamard(rest) ? "Hadamard " + std::to_string(rest)
                               : "identity (no Hadamard matrix of order " + std::to_string(rest) + ")";
    }
    if (note) *note = n;
    BlockDiagonal r = BlockDiagonal::generate(dim, block, [&](std::int64_t, std::int64_t size) {
        return size == block || hasHadamard(size) ? rng.randomHadamard(size) : at::eye(size, at::kDouble);
    });
    // Sylvester blocks (powers of two, whose row 0 is all +1): each block is (H/√b)·diag(s) with
    // s its first row's signs, which the fused T3 + MX kernel applies by butterflies.
    if (rest == 0 && (block & (block - 1)) == 0) r = r.withHadamardSigns(r.blocks().select(1, 0).sign().reshape({-1}));
    return r;
}

at::Tensor blockHadamardMatrix(std::int64_t dim, std::int64_t block, std::uint64_t seed, std::string* note) {
    return blockHadamard(dim, block, seed, note).dense();
}

BlockDiagonal blockOrthogonal(std::int64_t dim, std::int64_t block, std::uint64_t seed, std::string* note) {
    checkDim(dim, "block-orthogonal");
    checkBlock(block, "block-orthogonal");
    SeededStream rng(seed);
    const std::int64_t rest = dim % block;
    if (note) *note = rest ? "last block of " + std::to_string(rest) + " channels: orthogonal " + std::to_string(rest) : "";
    return BlockDiagonal::generate(dim, block, [&](std::int64_t, std::int64_t size) { return rng.randomOrthogonal(size); });
}

at::Tensor blockOrthogonalMatrix(std::int64_t dim, std::int64_t block, std::uint64_t seed, std::string* note) {
    return blockOrthogonal(dim, block, seed, note).dense();
}

std::unique_ptr<AffineTransform> makeIdentity(std::int64_t dim, at::ScalarType dtype) {
    checkDim(dim, "none");
    return wrapBlocks("none", BlockDiagonal(at::ones({dim, 1, 1}, at::kDouble), at::Tensor()), dtype);
}

std::unique_ptr<AffineTransform> makeRandomHadamard(std::int64_t dim, std::uint64_t seed, at::ScalarType dtype) {
    checkDim(dim, "hadamard");
    checkDtype("hadamard", dtype);
    if (!hasHadamard(dim)) hadamardMatrix(dim); // throws: the size and the block-mode hint
    // A = H_n·diag(s/√n) with the signs randomHadamardMatrix draws (the stream's first n draws:
    // building H_n takes none), the same entries: (±1)·s/√n rounds as s/√n does.
    return std::make_unique<MatrixTransform>("hadamard", (seededSigns(dim, seed) / std::sqrt(static_cast<double>(dim))).to(dtype));
}

std::unique_ptr<AffineTransform> makeBlockHadamard(std::int64_t dim, std::int64_t block, std::uint64_t seed, at::ScalarType dtype) {
    std::string note;
    const auto a = blockHadamard(dim, block, seed, &note);
    return wrapBlocks("block-hadamard(" + std::to_string(block) + ")", a, dtype, note);
}

std::unique_ptr<AffineTransform> makeRandomOrthogonal(std::int64_t dim, std::uint64_t seed, at::ScalarType dtype) {
    return wrap("orthogonal", randomOrthogonalMatrix(dim, seed), dtype);
}

std::unique_ptr<AffineTransform> makeBlockOrthogonal(std::int64_t dim, std::int64_t block, std::uint64_t seed, at::ScalarType dtype) {
    std::string note;
    const auto a = blockOrthogonal(dim, block, seed, &note);
    return wrapBlocks("block-orthogonal(" + std::to_string(block) + ")", a, dtype, note);
}

} // namespace latmix::transforms
