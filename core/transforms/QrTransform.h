#pragma once
// Learned affine transform with the QR parametrisation (SPEC §2, paper Eq. "gen_inv_rep_qr"):
// A = Q0 · expm((G − Gᵀ)/2) · (R + diag(s)), T(x) = A x + v.
//   Q0   fixed orthogonal: the orthogonal factor of the initial matrix,
//   G    learned, starts at 0 (expm of a skew-symmetric matrix is orthogonal),
//   R    learned strictly-upper part of the triangular factor,
//   s    = sign ⊙ exp(logAbsS), learned log|s| (signs fixed, all + after the sign-fixed QR),
//   v    optional learned bias (init 0, or -A·mean on request).
// Rotation-only variant (the ablations' "rotation" / "rotation+bias"): R = 0 and s = 1, A = Q0 expm(·).
// Block granularity (paper Table 1 "Block"): with blockDiagonal = b > 0, G and R are masked to
// their b×b diagonal blocks; the QR of a block-diagonal init has a block-diagonal Q0, and expm of
// a block-diagonal skew matrix is block-diagonal, so A stays block-diagonal throughout training.
#include "transforms/AffineTransform.h"

#include <cstdint>
#include <string>
#include <vector>

namespace latmix::transforms {

class QrTransform : public AffineTransform {
public:
    // Starts at A = init (rotation-only: at the orthogonal factor of init). init = Q Rf by
    // at::linalg_qr in float64, sign-fixed to diag(Rf) > 0: Q0 = Q, R = strictly-upper(Rf),
    // s = diag(Rf). Parameters are stored in dtype (float32 or float64).
    // blockDiagonal > 0: init must be block-diagonal with that block (else invalid_argument).
    QrTransform(const at::Tensor& init, bool rotationOnly, bool withBias, at::ScalarType dtype = at::kFloat,
                std::string name = "learned-affine-qr", std::string note = {}, std::int64_t blockDiagonal = 0);

    std::int64_t dim() const override { return m_q0.size(0); }
    std::string name() const override { return m_name; }
    at::Tensor matrix() const override;
    at::Tensor bias() const override { return m_v; }
    at::Tensor inverse(const at::Tensor& y) const override; // transposes + one triangular solve
    at::Tensor inverseMatrix() const override;
    std::vector<at::Tensor> parameters() const override;
    at::Tensor logAbsScales() const override { return m_logAbsS; } // undefined for rotation-only
    std::string remainderNote() const override { return m_note; }
    void initBiasFromMean(const at::Tensor& mean) override;
    void to(const at::Device& device) override;

    bool rotationOnly() const { return !m_logAbsS.defined(); }
    bool hasBias() const { return m_v.defined(); }
    at::ScalarType dtype() const { return m_q0.scalar_type(); }
    at::Tensor rotation() const;   // Q = Q0 expm((G − Gᵀ)/2)
    at::Tensor triangular() const; // R + diag(s) (identity for rotation-only)
    at::Tensor scales() const;     // s (ones for rotation-only)
    std::int64_t blockDiagonal() const { return m_block; } // 0: full

private:
    std::string m_name, m_note;
    at::Tensor m_q0, m_signs;            // fixed
    std::int64_t m_block = 0;
    at::Tensor m_mask;                   // block granularity: sameBlockMask in the parameters' dtype
    at::Tensor m_g, m_r, m_logAbsS, m_v; // leaves (m_r, m_logAbsS undefined for rotation-only)
};

} // namespace latmix::transforms
