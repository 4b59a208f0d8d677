#include "transforms/BlockDiagonal.h"
#include "transforms/BlockGranularity.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

namespace latmix::transforms {

at::Tensor sameBlockMask(std::int64_t d, std::int64_t block, const at::TensorOptions& options) {
    if (block < 1) throw std::invalid_argument("block size must be positive, got " + std::to_string(block));
    const auto blockOf = at::arange(d, at::TensorOptions().dtype(at::kLong).device(options.device())).div(block, "floor");
    return blockOf.unsqueeze(1).eq(blockOf.unsqueeze(0)).to(options.dtype());
}

at::Tensor learnedBlockMask(const at::Tensor& init, std::int64_t block, at::ScalarType dtype, const std::string& who) {
    if (block < 0) throw std::invalid_argument(who + ": block size must be non-negative");
    if (block == 0) return {};
    const auto a = init.detach().cpu().to(at::kDouble);
    if (!at::equal(a * sameBlockMask(a.size(0), block, at::kDouble), a))
        throw std::invalid_argument(who + ": the initial matrix of a block-diagonal transform must be block-diagonal (block " +
                                    std::to_string(block) + ")");
    return sameBlockMask(a.size(0), block, dtype);
}

BlockDiagonal::BlockDiagonal(at::Tensor blocks, at::Tensor tail) : m_blocks(std::move(blocks)), m_tail(std::move(tail)) {
    if (m_blocks.defined() && (m_blocks.dim() != 3 || m_blocks.size(0) < 1 || m_blocks.size(1) != m_blocks.size(2)))
        throw std::invalid_argument("BlockDiagonal: blocks must be [nb >= 1, b, b]");
    if (m_tail.defined() && (m_tail.dim() != 2 || m_tail.size(0) != m_tail.size(1)))
        throw std::invalid_argument("BlockDiagonal: the last block must be square");
    if (m_blocks.defined() && m_tail.defined() && m_tail.size(0) >= m_blocks.size(1))
        throw std::invalid_argument("BlockDiagonal: the last block must be smaller than the others");
}

BlockDiagonal BlockDiagonal::ofDense(const at::Tensor& m, std::int64_t block) {
    if (m.dim() != 2 || m.size(0) != m.size(1) || block < 1)
        throw std::invalid_argument("BlockDiagonal::ofDense: needs a square matrix and a positive block size");
    const std::int64_t n = m.size(0), full = n / block, rest = n % block;
    std::vector<at::Tensor> blocks;
    for (std::int64_t i = 0; i < full; ++i) blocks.push_back(m.narrow(0, i * block, block).narrow(1, i * block, block));
    return {full > 0 ? at::stack(blocks) : at::Tensor(),
            rest > 0 ? m.narrow(0, full * block, rest).narrow(1, full * block, rest).contiguous() : at::Tensor()};
}

BlockDiagonal BlockDiagonal::generate(std::int64_t n, std::int64_t block,
                                     const std::function<at::Tensor(std::int64_t, std::int64_t)>& make) {
    const std::int64_t full = n / block, rest = n % block;
    at::Tensor blocks, tail;
    if (full > 0) {
        blocks = at::empty({full, block, block}, at::kDouble);
        for (std::int64_t i = 0; i < full; ++i) blocks[i].copy_(make(i * block, block));
    }
    if (rest != 0) tail = make(full * block, rest);
    return {blocks, tail};
}

std::int64_t BlockDiagonal::size() const {
    return (m_blocks.defined() ? m_blocks.size(0) * m_blocks.size(1) : 0) + (m_tail.defined() ? m_tail.size(0) : 0);
}

std::int64_t BlockDiagonal::blockSize() const {
    return m_blocks.defined() ? m_blocks.size(1) : (m_tail.defined() ? m_tail.size(0) : 0);
}

std::vector<at::Tensor> BlockDiagonal::diagonalBlocks() const {
    std::vector<at::Tensor> r;
    if (m_blocks.defined())
        for (std::int64_t i = 0; i < m_blocks.size(0); ++i) r.push_back(m_blocks[i]);
    if (m_tail.defined()) r.push_back(m_tail);
    return r;
}

BlockDiagonal BlockDiagonal::withHadamardSigns(at::Tensor signs) const {
    if (m_tail.defined() || !m_blocks.defined() || signs.numel() != size())
        throw std::invalid_argument("BlockDiagonal: Hadamard signs need equal blocks and one sign per channel");
    BlockDiagonal r = *this;
    r.m_hadamardSigns = signs.to(at::TensorOptions().dtype(at::kFloat).device(c10::kCPU)).contiguous();
    return r;
}

BlockDiagonal BlockDiagonal::to(const at::TensorOptions& options) const {
    BlockDiagonal r{m_blocks.defined() ? m_blocks.to(options) : at::Tensor(),
                    m_tail.defined() ? m_tail.to(options) : at::Tensor()};
    r.m_hadamardSigns = m_hadamardSigns;
    return r;
}

BlockDiagonal BlockDiagonal::transposed() const {
    return {m_blocks.defined() ? m_blocks.transpose(1, 2).contiguous() : at::Tensor(),
            m_tail.defined() ? m_tail.t().contiguous() : at::Tensor()};
}

at::Tensor BlockDiagonal::dense() const {
    if (!defined()) return {};
    const auto& any = m_blocks.defined() ? m_blocks : m_tail;
    auto d = at::zeros({size(), size()}, any.options());
    std::int64_t start = 0;
    for (const auto& b : diagonalBlocks()) {
        d.narrow(0, start, b.size(0)).narrow(1, start, b.size(0)).copy_(b);
        start += b.size(0);
    }
    return d;
}

at::Tensor BlockDiagonal::apply(const at::Tensor& x) const {
    if (!defined()) return x;
    const std::int64_t n = size();
    if (x.dim() < 1 || x.size(-1) != n)
        throw std::invalid_argument("BlockDiagonal::apply: last dimension " + std::to_string(x.dim() ? x.size(-1) : 0) +
                                    " does not match the matrix size " + std::to_string(n));
    std::vector<std::int64_t> lead(x.sizes().begin(), x.sizes().end() - 1);
    const std::int64_t rows = x.numel() / std::max<std::int64_t>(n, 1);
    std::vector<at::Tensor> parts;
    std::int64_t main = 0;
    if (m_blocks.defined()) {
        const std::int64_t nb = m_blocks.size(0), b = m_blocks.size(1);
        main = nb * b;
        // Blocks of one (the identity, a diagonal): a product per channel, not nb 1×1 matmuls.
        if (b == 1 && !m_tail.defined()) return x * m_blocks.view({nb}).to(x.scalar_type());
        // [rows, nb, b] → [nb, rows, b] · blockᵀ → back; one batched matmul, no dense n×n.
        auto xm = x.narrow(-1, 0, main).reshape({rows, nb, b}).transpose(0, 1);
        auto y = at::bmm(xm, m_blocks.transpose(1, 2)).transpose(0, 1);
        auto shape = lead;
        shape.push_back(main);
        parts.push_back(y.reshape(shape));
    }
    if (m_tail.defined()) parts.push_back(at::matmul(x.narrow(-1, main, n - main), m_tail.t()));
    return parts.size() == 1 ? parts[0] : at::cat(parts, -1);
}

} // namespace latmix::transforms
