#pragma once
// Fixed transforms of SPEC §2 (no learned parameters, no bias): identity, random Hadamard,
// block-diagonal random Hadamard, random orthogonal, block-diagonal random orthogonal.
//
// Randomness comes from std::mt19937_64 seeded with the given seed and a Box–Muller transform
// written out here (as core/mx/SyntheticActivations.cpp), never from at::randn, whose stream
// differs between libtorch versions: the same seed gives the same matrix on every build.
// All matrices are generated in float64; the factories convert to the requested dtype.
#include "transforms/AffineTransform.h"
#include "transforms/BlockDiagonal.h"

#include <cstdint>
#include <memory>
#include <string>

namespace latmix::transforms {

// ---- Matrices (float64).

// [rows, cols] i.i.d. standard normal, row-major draw order.
at::Tensor seededGaussian(std::int64_t rows, std::int64_t cols, std::uint64_t seed);
// [n] of ±1.
at::Tensor seededSigns(std::int64_t n, std::uint64_t seed);

// H / √n · diag(±1) (SPEC §2, signs on the input side as QuaRot: see the .cpp), orthogonal. Throws std::invalid_argument where hadamardMatrix(n) does.
at::Tensor randomHadamardMatrix(std::int64_t n, std::uint64_t seed);
// Q of the QR factorisation of an n×n Gaussian, columns sign-fixed so that diag(R) > 0 (Haar).
at::Tensor randomOrthogonalMatrix(std::int64_t n, std::uint64_t seed);

// Block-diagonal matrices with blocks of `block` (each block its own random draw). A dimension
// that block does not divide ends in a smaller block (SPEC §1/§2): for Hadamard a random
// Hadamard of that size where one exists, else identity; for orthogonal a smaller random
// orthogonal block. *note (if given) receives the description of that last block, or "".
// Throws std::invalid_argument when block < 1 or (Hadamard) block has no Hadamard matrix.
at::Tensor blockHadamardMatrix(std::int64_t dim, std::int64_t block, std::uint64_t seed, std::string* note = nullptr);
// The same matrix as its blocks (the online T3 of SPEC §4 without the dense n×n).
BlockDiagonal blockHadamard(std::int64_t dim, std::int64_t block, std::uint64_t seed, std::string* note = nullptr);
at::Tensor blockOrthogonalMatrix(std::int64_t dim, std::int64_t block, std::uint64_t seed, std::string* note = nullptr);
BlockDiagonal blockOrthogonal(std::int64_t dim, std::int64_t block, std::uint64_t seed, std::string* note = nullptr);

// ---- Transforms (MatrixTransform, orthogonal: inverse through Aᵀ).
// Names: "none", "hadamard", "block-hadamard(B)", "orthogonal", "block-orthogonal(B)".
std::unique_ptr<AffineTransform> makeIdentity(std::int64_t dim, at::ScalarType dtype = at::kFloat);
std::unique_ptr<AffineTransform> makeRandomHadamard(std::int64_t dim, std::uint64_t seed, at::ScalarType dtype = at::kFloat);
std::unique_ptr<AffineTransform> makeBlockHadamard(std::int64_t dim, std::int64_t block, std::uint64_t seed,
                                                   at::ScalarType dtype = at::kFloat);
std::unique_ptr<AffineTransform> makeRandomOrthogonal(std::int64_t dim, std::uint64_t seed, at::ScalarType dtype = at::kFloat);
std::unique_ptr<AffineTransform> makeBlockOrthogonal(std::int64_t dim, std::int64_t block, std::uint64_t seed,
                                                     at::ScalarType dtype = at::kFloat);

} // namespace latmix::transforms
