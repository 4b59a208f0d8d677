#include "transforms/Blockwise.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <stdexcept>

namespace latmix::transforms {

BlockwiseTransform::BlockwiseTransform(const std::string& kind, std::int64_t dim, std::int64_t block, const TransformOptions& o)
    : m_dim(dim), m_block(block) {
    if (!isLearnedKind(kind)) throw std::invalid_argument(kind + ": only a learned kind is built block by block");
    if (block < 1 || dim < 1) throw std::invalid_argument(kind + ": blocks of " + std::to_string(block) + " over " + std::to_string(dim));
    for (std::int64_t start = 0, i = 0; start < dim; start += block, ++i) {
        TransformOptions p = o;
        p.seed = o.seed + static_cast<std::uint64_t>(i);
        p.blockSize = std::min(block, dim - start); // a block-diagonal init is the whole block
        p.blockDiagonal = false;
        m_parts.push_back(makeTransform(kind, p.blockSize, p));
    }
    m_name = kind + ", blocks of " + std::to_string(block);
    if (dim % block != 0) m_note = "last block of " + std::to_string(dim % block) + " channels";
}

// One batched product over the whole blocks (x's rows as [blocks, rows, block] against the
// stacked [blocks, block, block] matrices), the smaller last block on its own: 256 blocks of the
// 8192-wide down_proj input took 256 products, narrows and a concatenation per call before
// (issue 71: about 0.6 s a training step at Llama-3.2-1B's width).
template <typename Matrix>
at::Tensor BlockwiseTransform::perBlock(const at::Tensor& x, Matrix&& matrixOf) const {
    const std::int64_t whole = m_dim / m_block, main = whole * m_block;
    const auto shape = x.sizes().vec();
    const at::Tensor rows = x.reshape({-1, m_dim});
    std::vector<at::Tensor> out;
    if (whole > 0) {
        std::vector<at::Tensor> blocks;
        blocks.reserve(static_cast<std::size_t>(whole));
        for (std::int64_t i = 0; i < whole; ++i) blocks.push_back(matrixOf(*m_parts[static_cast<std::size_t>(i)]));
        const at::Tensor a = at::stack(blocks).to(rows.scalar_type());                   // [whole, b, b]
        const at::Tensor xb = rows.narrow(1, 0, main).reshape({-1, whole, m_block}).transpose(0, 1); // [whole, n, b]
        out.push_back(at::bmm(xb, a.transpose(1, 2)).transpose(0, 1).reshape({-1, main}));
    }
    if (main < m_dim) {
        const at::Tensor tail = matrixOf(*m_parts.back()).to(rows.scalar_type());
        out.push_back(rows.narrow(1, main, m_dim - main).matmul(tail.t()));
    }
    return (out.size() == 1 ? out.front() : at::cat(out, 1)).reshape(shape);
}

at::Tensor BlockwiseTransform::forward(const at::Tensor& x) const { // x Aᵀ + v
    at::Tensor y = perBlock(x, [](const AffineTransform& t) { return t.matrix(); });
    const at::Tensor v = bias();
    return v.defined() ? y + v.to(y.scalar_type()) : y;
}

at::Tensor BlockwiseTransform::inverse(const at::Tensor& y) const { // (y − v) A⁻ᵀ
    const at::Tensor v = bias();
    return perBlock(v.defined() ? y - v.to(y.scalar_type()) : y, [](const AffineTransform& t) { return t.inverseMatrix(); });
}

at::Tensor BlockwiseTransform::matrix() const {
    std::vector<at::Tensor> blocks;
    for (const auto& p : m_parts) blocks.push_back(p->matrix());
    return at::block_diag(blocks);
}

at::Tensor BlockwiseTransform::inverseMatrix() const {
    std::vector<at::Tensor> blocks;
    for (const auto& p : m_parts) blocks.push_back(p->inverseMatrix());
    return at::block_diag(blocks);
}

at::Tensor BlockwiseTransform::bias() const {
    std::vector<at::Tensor> v;
    for (const auto& p : m_parts) {
        const at::Tensor b = p->bias();
        if (!b.defined()) return {};
        v.push_back(b);
    }
    return at::cat(v);
}

const BlockDiagonal* BlockwiseTransform::blockStructure() const {
    at::NoGradGuard noGrad;
    std::vector<at::Tensor> full;
    at::Tensor tail;
    for (const auto& p : m_parts) {
        const at::Tensor a = p->matrix().detach();
        if (p->dim() == m_block)
            full.push_back(a);
        else
            tail = a;
    }
    m_structure = BlockDiagonal(full.empty() ? at::Tensor() : at::stack(full), tail);
    return &m_structure;
}

std::vector<at::Tensor> BlockwiseTransform::parameters() const {
    std::vector<at::Tensor> all;
    for (const auto& p : m_parts)
        for (const auto& t : p->parameters()) all.push_back(t);
    return all;
}

at::Tensor BlockwiseTransform::logAbsScales() const {
    std::vector<at::Tensor> s;
    for (const auto& p : m_parts) {
        const at::Tensor l = p->logAbsScales();
        if (!l.defined()) return {};
        s.push_back(l);
    }
    return at::cat(s);
}

void BlockwiseTransform::initBiasFromMean(const at::Tensor& mean) {
    for (std::size_t i = 0; i < m_parts.size(); ++i)
        m_parts[i]->initBiasFromMean(mean.narrow(0, static_cast<std::int64_t>(i) * m_block, m_parts[i]->dim()));
}

void BlockwiseTransform::to(const at::Device& device) {
    for (auto& p : m_parts) p->to(device);
}

} // namespace latmix::transforms
