#pragma once
// A block-diagonal matrix kept as its blocks: equal blocks of size b stacked [nb, b, b] and an
// optional smaller last block [r, r] (a dimension that b does not divide, SPEC §1/§2).
// The online Hadamard T3 (SPEC §4) is one: for an intermediate size of 11008 the dense matrix
// would take 485 MB (float32) and n² multiply-adds per token; the blocks take 1.4 MB and n·b.
#include <ATen/core/Tensor.h>
#include <c10/core/TensorOptions.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace latmix::transforms {

// [d, d] mask that is 1 where row and column fall in the same block of `block` channels
// (i / block == j / block; the last block may be smaller) and 0 elsewhere, in options' dtype
// (bool: true/false). Throws for block < 1.
at::Tensor sameBlockMask(std::int64_t d, std::int64_t block, const at::TensorOptions& options);

class BlockDiagonal {
public:
    BlockDiagonal() = default;
    // blocks: [nb, b, b] (nb >= 1) or undefined; tail: [r, r] (r < b) or undefined.
    BlockDiagonal(at::Tensor blocks, at::Tensor tail);
    // The diagonal blocks of a dense [n, n] matrix that is block-diagonal with blocks of `block`
    // (the last one smaller where block does not divide n); what lies outside them is ignored.
    static BlockDiagonal ofDense(const at::Tensor& m, std::int64_t block);
    // ⌊n/block⌋ blocks of `block` then the smaller rest, each make(start, size) (float64
    // [size, size]) called in order of start: the one place that lays blocks out.
    static BlockDiagonal generate(std::int64_t n, std::int64_t block,
                                  const std::function<at::Tensor(std::int64_t start, std::int64_t size)>& make);

    bool defined() const { return m_blocks.defined() || m_tail.defined(); }
    std::int64_t size() const;       // n = nb·b + r
    std::int64_t blockSize() const;  // b (r when there are only the tail)
    const at::Tensor& blocks() const { return m_blocks; }
    const at::Tensor& tail() const { return m_tail; }
    // The diagonal blocks in order, the last one possibly smaller.
    std::vector<at::Tensor> diagonalBlocks() const;

    // Set by blockHadamard when every block is (H_b/√b)·diag(s_b) with Sylvester H_b (b a power
    // of two, no smaller last block): the signs, float32 [n] on the CPU, so that
    // mx::fakeQuantizeAfterHadamard can apply the blocks by butterflies. Undefined otherwise;
    // to() keeps it, transposed() drops it.
    const at::Tensor& hadamardSigns() const { return m_hadamardSigns; }
    BlockDiagonal withHadamardSigns(at::Tensor signs) const;

    BlockDiagonal to(const at::TensorOptions& options) const;
    BlockDiagonal transposed() const;
    at::Tensor dense() const; // [n, n], for tests and small sizes

    // x · Mᵀ along the last dimension of x (each row vector x_i ↦ M x_i), block by block.
    // Differentiable in x. An undefined matrix is the identity.
    at::Tensor apply(const at::Tensor& x) const;

private:
    at::Tensor m_blocks;
    at::Tensor m_tail;
    at::Tensor m_hadamardSigns;
};

} // namespace latmix::transforms
