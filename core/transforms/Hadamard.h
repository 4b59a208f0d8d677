#pragma once
// Exact Hadamard matrices (SPEC §2): H with entries ±1 and H Hᵀ = n I, as float64.
//
// Constructions, tried in this order for n = m·2^k (m odd):
//   - n a power of two: Sylvester, H_{2n} = [[H_n, H_n], [H_n, -H_n]] from H_1 = [1]; entry
//     (i, j) is (-1)^popcount(i & j) (the "natural" Walsh–Hadamard order of the paper's H_4);
//   - the smallest base b = m·2^j (j = 0..k) that Paley gives directly, Sylvester-doubled up to n
//     (H_n = H_{2^(k-j)} ⊗ H_b): Paley I for b = q + 1 with q ≡ 3 (mod 4) a prime power, Paley II
//     for b = 2(q + 1) with q ≡ 1 (mod 4) a prime power. Arithmetic in GF(q), q = p^e, uses
//     polynomials over GF(p) modulo an irreducible polynomial found by brute force.
//     This gives e.g. 12 (q=11), 20 (19), 28 (27 = 3³), 36 (II, 17), 40 = 2·20, 52 (II, 25 = 5²),
//     60 (59), and so 288 = 36·8, 576 = 36·16, 768 = 12·64, 3584 = 28·128, 5120 = 20·256;
//   - otherwise a Kronecker product H_a ⊗ H_b of two constructible factors (a ≤ b, a smallest).
// Orders that none of these reach (every n not 1, 2 or a multiple of 4, and multiples of 4 such
// as 172 or 92) are an error naming the size and suggesting block mode.
#include "transforms/BlockDiagonal.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace latmix::transforms {

// ±1 float64 [n, n] matrix with H Hᵀ = n I exactly. Throws std::invalid_argument for a size with
// no construction (message names the size and suggests block-hadamard with block 32).
at::Tensor hadamardMatrix(std::int64_t n);

// Whether hadamardMatrix(n) succeeds (cheap: plans the construction without building it).
bool hasHadamard(std::int64_t n);

// Rows of x times (H_n·diag(d))ᵀ, i.e. each row r ↦ H_n·(d ⊙ r), with H_n = hadamardMatrix(n)
// (n = d.numel(), x.size(-1) == n), in x's dtype and device, by H_n's construction instead of an
// n² product per row: Sylvester by butterflies (n·log2 n additions), H_a ⊗ H_b factor by factor,
// a Paley order by its dense matrix (14336 = 512·28: 9 butterfly stages and a product with H_28).
// A random Hadamard H_n·diag(s)/√n is d = s/√n. Throws std::invalid_argument for an order with no
// construction or rows of another length.
at::Tensor hadamardRows(const at::Tensor& x, const at::Tensor& d);
// Rows of x times H_n·diag(d): each row r ↦ d ⊙ (H_nᵀ r) (the inverse of an orthogonal
// H_n·diag(d) applied to rows; Paley matrices are not symmetric, Sylvester ones are).
at::Tensor hadamardRowsTransposed(const at::Tensor& x, const at::Tensor& d);

// The diagonal blocks of hadamardMatrix(n) for blocks of `block` (the last one smaller where
// block does not divide n), float64, from the construction's entries without the n×n matrix.
BlockDiagonal hadamardDiagonalBlocks(std::int64_t n, std::int64_t block);

// How hadamardMatrix(n) builds its matrix, e.g. "Sylvester 2^5", "Sylvester 2^3 ⊗ Paley II (q=17)";
// empty when there is no construction.
std::string hadamardConstruction(std::int64_t n);

} // namespace latmix::transforms
