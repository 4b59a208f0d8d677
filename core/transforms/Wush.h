#pragma once
// WUSH (SPEC §2 "WUSH"; IST-DASLab's closed-form data-aware block transform for microscaling
// formats): for each block of B input channels of a linear, from the activations' second moment
// G_X = E[x_b x_bᵀ] and the weights' G_W = W_bᵀ W_b / R (R output rows), both damped,
//   G_W = L Lᵀ (Cholesky),  Lᵀ G_X L = U diag(λ) Uᵀ (eigh),  T_b = H_B · diag(λ^(-1/4)) · Uᵀ · Lᵀ
// with H_B the normalised Sylvester Hadamard (no random signs). Activations go x_b → T_b x_b and
// weights W_b → W_b T_b⁻¹, so W x is unchanged; after it the two second moments are the same,
// T G_X Tᵀ = T⁻ᵀ G_W T⁻¹ = H_B diag(√λ) H_Bᵀ: every coordinate of the block has the same
// variance for weights and activations alike. T is not orthogonal and differs block by block.
#include "transforms/BlockDiagonal.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace latmix::transforms {

// Sums of x_b x_bᵀ per block of `block` channels (the last one smaller where block does not
// divide the width) over every row added, float64 on the CPU: all WUSH reads of the activations.
class BlockMoments {
public:
    BlockMoments(std::int64_t width, std::int64_t block);
    void add(const at::Tensor& rows); // [..., width], any float dtype and device
    std::int64_t rows() const { return m_rows; }
    // E[x_b x_bᵀ] as a block-diagonal matrix. Throws std::logic_error without rows.
    BlockDiagonal mean() const;
    // Data parallel: sums the tensors over the ranks (a sum all-reduce of each tensor in place).
    void reduce(const std::function<void(const at::Tensor&)>& allreduceSum);

private:
    std::int64_t m_width, m_block, m_rows = 0;
    at::Tensor m_blocks, m_tail, m_count; // float64 [nb, b, b], [r, r], [1]
};

struct WushTransform {
    BlockDiagonal forward, inverse; // T and T⁻¹, float64 on the CPU, the blocks of activationMoments
    // One line per block whose second moment needed more than the standard 1 % damping to be
    // positive definite (or held nothing at all), for the run's log.
    std::vector<std::string> notes;
};

// T from a point's activation second moments (BlockMoments::mean) and the weights that read the
// point, [R, width] (several linears stacked along R: WUSH's fused form). Damping: 1 % of each
// second moment's mean diagonal, as the peer's code does; where a Cholesky factorisation still
// fails the damping grows tenfold (up to the mean diagonal itself), and a block whose moment is
// all zero gets the identity's; each such block is in notes, `where` naming it. A smaller last
// block without a Hadamard matrix of its size takes the identity in H's place (noted too).
WushTransform wushTransform(const BlockDiagonal& activationMoments, const at::Tensor& weight, const std::string& where = {});

} // namespace latmix::transforms
