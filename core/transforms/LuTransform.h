#pragma once
// Learned affine transform with the LU parametrisation (SPEC §2, paper Eq. "gen_inv_rep",
// after Glow): A = P L (U + diag(s)), T(x) = A x + v.
//   P      fixed permutation (from the LU factorisation of the initial matrix),
//   L      unit lower triangular: learned strictly-lower part,
//   U      learned strictly-upper part,
//   s      = sign ⊙ exp(logAbsS): fixed signs, learned log|s| (so |det A| = Π|s| = exp Σ log|s|),
//   v      optional learned bias (init 0, or -A·mean on request).
// The learned leaves are full [d, d] tensors masked with tril(·, -1) / triu(·, 1) when A is built,
// so entries outside the triangle get zero gradient and never matter.
// Block granularity (paper Table 1 "Block"): with blockDiagonal = b > 0 the factors are also
// masked to their b×b diagonal blocks, so A stays block-diagonal throughout training (each MX
// block learns its own small transform). A block-diagonal init has block-diagonal P, L and U
// (partial pivoting never leaves a block: the other blocks' entries of a column are zero).
#include "transforms/AffineTransform.h"

#include <cstdint>
#include <string>
#include <vector>

namespace latmix::transforms {

class LuTransform : public AffineTransform {
public:
    // Starts at A = init ([d, d], any float dtype, must be nonsingular): (P, L, U) = at::linalg_lu
    // of init in float64, s = diag(U). Parameters are stored in dtype (float32 or float64).
    // blockDiagonal > 0: init must be block-diagonal with that block (else invalid_argument).
    LuTransform(const at::Tensor& init, bool withBias, at::ScalarType dtype = at::kFloat,
                std::string name = "learned-affine-lu", std::string note = {}, std::int64_t blockDiagonal = 0);

    std::int64_t dim() const override { return m_logAbsS.size(0); }
    std::string name() const override { return m_name; }
    at::Tensor matrix() const override;
    // x Aᵀ + v through the factors, (x Wᵀ) Lᵀ then the permutation, when x has fewer rows than
    // d: 2·rows·d² multiply-adds instead of the d³ of forming A (at d = 8192 and 256 rows, 16×
    // less); with more rows, through A as AffineTransform does. Differentiable either way.
    at::Tensor forward(const at::Tensor& x) const override;
    at::Tensor bias() const override { return m_v; }
    at::Tensor inverse(const at::Tensor& y) const override; // triangular solves, no inverse
    at::Tensor inverseMatrix() const override;
    std::vector<at::Tensor> parameters() const override;
    at::Tensor logAbsScales() const override { return m_logAbsS; }
    std::string remainderNote() const override { return m_note; }
    void initBiasFromMean(const at::Tensor& mean) override;
    void to(const at::Device& device) override;

    bool hasBias() const { return m_v.defined(); }
    at::ScalarType dtype() const { return m_logAbsS.scalar_type(); }
    at::Tensor permutation() const; // P, [d, d] (P X = X[perm])
    at::Tensor lowerFactor() const; // L, unit lower triangular
    at::Tensor upperFactor() const; // U + diag(s)
    at::Tensor scales() const;      // s = sign ⊙ exp(logAbsS)
    std::int64_t blockDiagonal() const { return m_block; } // 0: full

private:
    std::string m_name, m_note;
    at::Tensor m_perm, m_invPerm; // int64 [d]: (P X)[i] = X[perm[i]]
    at::Tensor m_signs;           // fixed ±1, [d]
    std::int64_t m_block = 0;
    at::Tensor m_mask;            // block granularity: sameBlockMask in the parameters' dtype
    at::Tensor m_lower, m_upper, m_logAbsS, m_v; // leaves (m_v undefined without bias)
};

} // namespace latmix::transforms
