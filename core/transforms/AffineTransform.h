#pragma once
// Affine transforms T(x) = A x + v acting on the last dimension of activations (SPEC §2):
// for rows x (shape [..., d]) forward(x) = x Aᵀ + v and inverse(y) = (y - v) A⁻ᵀ, the inverse
// always through transposes or triangular solves, never a generic matrix inverse.
#include "transforms/BlockDiagonal.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace latmix::transforms {

class AffineTransform {
public:
    virtual ~AffineTransform() = default;

    virtual std::int64_t dim() const = 0;
    virtual std::string name() const = 0; // e.g. "block-hadamard(32)", "learned-affine-lu"

    // A, [d, d], float64 or float32; differentiable w.r.t. parameters() for learned transforms.
    virtual at::Tensor matrix() const = 0;
    // v, [d], or an undefined tensor when the transform has no bias.
    virtual at::Tensor bias() const { return {}; }

    virtual at::Tensor forward(const at::Tensor& x) const;       // x Aᵀ + v
    virtual at::Tensor inverse(const at::Tensor& y) const = 0;   // (y - v) A⁻ᵀ
    // A⁻¹, [d, d], from the factors (triangular solves / transposes); differentiable like matrix().
    virtual at::Tensor inverseMatrix() const = 0;

    // d when A = H_n·diag(d) with H_n = hadamardMatrix(n), the unnormalised ±1 Hadamard matrix of
    // transforms/Hadamard.h (a random Hadamard: d = s/√n), so products with A can go through
    // hadamardRows and A's singular values are √n·|d_j|; undefined for every other A.
    virtual at::Tensor hadamardDiagonal() const { return {}; }
    // A's diagonal blocks when A is block-diagonal by construction (the fixed block kinds,
    // identity as blocks of 1); null otherwise. Metrics read singular values off the blocks.
    virtual const BlockDiagonal* blockStructure() const { return nullptr; }

    // Learnable leaf tensors (requires_grad), empty for fixed transforms.
    virtual std::vector<at::Tensor> parameters() const { return {}; }
    // log|s| of the diagonal of the LU/QR factorisation (SPEC §2), for the volume regulariser
    // λ(Σ log|s_i|)²; undefined for transforms without one.
    virtual at::Tensor logAbsScales() const { return {}; }

    // Human-readable note on how a dimension that the block size does not divide was handled
    // ("last block of 12 channels: Hadamard 12"); empty when nothing special happened.
    virtual std::string remainderNote() const { return {}; }

    // Sets a learned bias to v = -A·mean, so that T(mean) = 0 (SPEC §2 "-A·mean(x) on request");
    // mean has d elements. Throws std::logic_error for transforms without a learned bias.
    virtual void initBiasFromMean(const at::Tensor& mean);

    // Moves every tensor (parameters included) to device. Learned transforms get new leaf
    // tensors: call it before handing parameters() to an optimizer. The default throws
    // std::logic_error (MatrixTransform and the learned transforms implement it).
    virtual void to(const at::Device& device);

protected:
    // The shared body of initBiasFromMean for transforms whose bias() is a learned leaf:
    // writes -A·mean into it in place (no autograd record).
    void setBiasFromMean(const at::Tensor& mean);
};

// A fixed transform given by A and a way to undo it. When orthogonal is true the inverse uses
// Aᵀ; otherwise A must be triangular-factorable and the inverse solves with an LU factorisation
// computed once. Used for the fixed transforms and in tests.
class MatrixTransform : public AffineTransform {
public:
    MatrixTransform(std::string name, at::Tensor a, bool orthogonal, at::Tensor v = {}, std::string note = {});
    // An orthogonal block-diagonal A kept as its blocks only (identity, block-Hadamard,
    // block-orthogonal): at d = 14336 the dense float64 matrix would be 1.6 GB to build and zero
    // for products that need n·b; matrix() builds it when a caller asks.
    MatrixTransform(std::string name, BlockDiagonal blocks, std::string note = {});
    // A block-diagonal A that is not orthogonal (WUSH), kept as its blocks and its inverse's blocks.
    MatrixTransform(std::string name, BlockDiagonal blocks, BlockDiagonal inverseBlocks, std::string note);
    // A = H_n·diag(d), H_n = hadamardMatrix(n), kept as d (a random Hadamard: d = s/√n): rows go
    // through hadamardRows, metrics read σ_j = √n·|d_j|; matrix() builds the dense A on request.
    MatrixTransform(std::string name, at::Tensor hadamardDiagonal);
    std::int64_t dim() const override;
    std::string name() const override { return m_name; }
    at::Tensor matrix() const override;
    at::Tensor bias() const override { return m_v; }
    at::Tensor inverse(const at::Tensor& y) const override;
    at::Tensor inverseMatrix() const override;
    std::string remainderNote() const override { return m_note; }
    void to(const at::Device& device) override;
    at::Tensor hadamardDiagonal() const override { return m_hadamardDiagonal; }
    at::Tensor forward(const at::Tensor& x) const override;
    const BlockDiagonal* blockStructure() const override { return m_blocks.defined() ? &m_blocks : nullptr; }

private:
    std::string m_name;
    at::Tensor m_a, m_v, m_lu, m_pivots, m_hadamardDiagonal;
    BlockDiagonal m_blocks, m_inverseBlocks;
    bool m_orthogonal;
    std::string m_note;
};

} // namespace latmix::transforms
