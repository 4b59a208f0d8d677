#pragma once
// A learned transform as large as a method's transform at a point (issue 71): one independent
// transform of a learned kind on each block of `block` channels (the last block smaller where
// block does not divide d), A block-diagonal. LATMiX's T3 is a block Hadamard of 32 on the
// down_proj input and T2 acts per attention head (SPEC §4): a learned kind compared there at that
// size costs n·d·b a product instead of n·d², and its metrics read the blocks (blockStructure):
// at Llama-3.2-1B's 8192-wide down_proj input a full learned matrix took 473 s to train and its
// κ 70 s to track, and ended worse than no transform.
#include "transforms/LearnedTransforms.h"

#include <memory>
#include <string>
#include <vector>

namespace latmix::transforms {

class BlockwiseTransform : public AffineTransform {
public:
    // kind: a learned kind (transformKinds()); each block is makeTransform(kind, its size, o) with
    // seed o.seed + its index, so that the blocks start apart.
    BlockwiseTransform(const std::string& kind, std::int64_t dim, std::int64_t block, const TransformOptions& o);

    std::int64_t dim() const override { return m_dim; }
    std::string name() const override { return m_name; }
    std::int64_t block() const { return m_block; }
    at::Tensor matrix() const override;        // dense: small widths and tests only
    at::Tensor inverseMatrix() const override; // dense, likewise
    at::Tensor bias() const override;
    at::Tensor forward(const at::Tensor& x) const override;
    at::Tensor inverse(const at::Tensor& y) const override;
    // The blocks' current matrices (recomputed at each call: training moves them).
    const BlockDiagonal* blockStructure() const override;
    std::vector<at::Tensor> parameters() const override;
    at::Tensor logAbsScales() const override;
    std::string remainderNote() const override { return m_note; }
    void initBiasFromMean(const at::Tensor& mean) override;
    void to(const at::Device& device) override;

private:
    // x (channels last) times the block-diagonal matrix whose blocks matrixOf(part) gives,
    // transposed: x Mᵀ.
    template <typename Matrix>
    at::Tensor perBlock(const at::Tensor& x, Matrix&& matrixOf) const;

    std::int64_t m_dim, m_block;
    std::string m_name, m_note;
    std::vector<std::unique_ptr<AffineTransform>> m_parts;
    mutable BlockDiagonal m_structure;
};

} // namespace latmix::transforms
