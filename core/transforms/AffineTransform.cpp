#include "transforms/AffineTransform.h"

#include "transforms/Hadamard.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <stdexcept>

namespace latmix::transforms {

at::Tensor AffineTransform::forward(const at::Tensor& x) const {
    const at::Tensor a = matrix().to(x.scalar_type());
    auto y = at::matmul(x, a.t());
    const at::Tensor v = bias();
    return v.defined() ? y + v.to(x.scalar_type()) : y;
}

void AffineTransform::initBiasFromMean(const at::Tensor&) {
    throw std::logic_error(name() + " has no learned bias to initialise from the mean");
}

void AffineTransform::setBiasFromMean(const at::Tensor& mean) {
    at::Tensor v = bias();
    if (!v.defined()) AffineTransform::initBiasFromMean(mean);
    if (mean.numel() != dim())
        throw std::invalid_argument(name() + ": mean must have " + std::to_string(dim()) + " elements");
    at::NoGradGuard noGrad;
    const auto a = matrix();
    v.copy_(-at::matmul(a, mean.reshape({dim()}).to(a.options())));
}

void AffineTransform::to(const at::Device&) {
    throw std::logic_error(name() + " cannot be moved to another device");
}

MatrixTransform::MatrixTransform(std::string name, at::Tensor a, bool orthogonal, at::Tensor v, std::string note)
    : m_name(std::move(name)), m_a(std::move(a)), m_v(std::move(v)), m_orthogonal(orthogonal), m_note(std::move(note)) {
    if (m_a.dim() != 2 || m_a.size(0) != m_a.size(1)) throw std::invalid_argument(m_name + ": A must be square");
    if (!m_orthogonal) std::tie(m_lu, m_pivots) = at::linalg_lu_factor(m_a.to(at::kDouble));
}

MatrixTransform::MatrixTransform(std::string name, BlockDiagonal blocks, std::string note)
    : m_name(std::move(name)), m_blocks(std::move(blocks)), m_orthogonal(true), m_note(std::move(note)) {
    if (!m_blocks.defined()) throw std::invalid_argument(m_name + ": no blocks");
}

MatrixTransform::MatrixTransform(std::string name, BlockDiagonal blocks, BlockDiagonal inverseBlocks, std::string note)
    : m_name(std::move(name)), m_blocks(std::move(blocks)), m_inverseBlocks(std::move(inverseBlocks)), m_orthogonal(false),
      m_note(std::move(note)) {
    if (!m_blocks.defined() || m_inverseBlocks.size() != m_blocks.size())
        throw std::invalid_argument(m_name + ": the blocks and their inverse's must cover the same channels");
}

MatrixTransform::MatrixTransform(std::string name, at::Tensor hadamardDiagonal)
    : m_name(std::move(name)), m_hadamardDiagonal(std::move(hadamardDiagonal)), m_orthogonal(true) {
    if (m_hadamardDiagonal.dim() != 1 || !hasHadamard(m_hadamardDiagonal.size(0)))
        throw std::invalid_argument(m_name + ": the diagonal needs a Hadamard order");
}

std::int64_t MatrixTransform::dim() const {
    if (m_a.defined()) return m_a.size(0);
    return m_blocks.defined() ? m_blocks.size() : m_hadamardDiagonal.size(0);
}

at::Tensor MatrixTransform::matrix() const {
    if (m_a.defined()) return m_a;
    if (m_blocks.defined()) return m_blocks.dense();
    const auto& d = m_hadamardDiagonal;
    return hadamardMatrix(d.size(0)).to(d.options()) * d.unsqueeze(0);
}

namespace {
bool gradientWanted(const at::Tensor& x) { return x.requires_grad() && at::GradMode::is_enabled(); }
} // namespace

at::Tensor MatrixTransform::forward(const at::Tensor& x) const {
    at::Tensor y;
    if (m_blocks.defined()) y = m_blocks.to(x.options()).apply(x);
    else if (m_hadamardDiagonal.defined() && !gradientWanted(x)) y = hadamardRows(x, m_hadamardDiagonal);
    else return AffineTransform::forward(x);
    return m_v.defined() ? y + m_v.to(x.scalar_type()) : y;
}

at::Tensor MatrixTransform::inverse(const at::Tensor& y) const {
    auto z = m_v.defined() ? y - m_v.to(y.scalar_type()) : y;
    if (m_orthogonal && m_blocks.defined()) return m_blocks.to(z.options()).transposed().apply(z); // z·A
    if (m_orthogonal && m_hadamardDiagonal.defined() && !gradientWanted(z)) // z·A: rows ↦ diag(d)·Hᵀ·row
        return hadamardRowsTransposed(z, m_hadamardDiagonal);
    if (m_orthogonal) return at::matmul(z, matrix().to(y.scalar_type())); // (A⁻ᵀ = A for orthogonal A)
    if (m_inverseBlocks.defined()) return m_inverseBlocks.to(z.options()).apply(z); // rows ↦ A⁻¹ row
    // rows z: x Aᵀ = z  <=>  A xᵀ = zᵀ; solve with the stored LU factors.
    auto flat = z.reshape({-1, dim()}).to(at::kDouble).t();
    auto x = at::linalg_lu_solve(m_lu, m_pivots, flat).t();
    return x.to(y.scalar_type()).reshape(y.sizes());
}

at::Tensor MatrixTransform::inverseMatrix() const {
    if (m_orthogonal) return matrix().t();
    if (m_inverseBlocks.defined()) return m_inverseBlocks.dense();
    auto eye = at::eye(dim(), m_lu.options());
    return at::linalg_lu_solve(m_lu, m_pivots, eye).to(m_a.scalar_type());
}

void MatrixTransform::to(const at::Device& device) {
    if (m_a.defined()) m_a = m_a.to(device);
    if (m_v.defined()) m_v = m_v.to(device);
    if (m_hadamardDiagonal.defined()) m_hadamardDiagonal = m_hadamardDiagonal.to(device);
    if (m_blocks.defined()) {
        const auto& any = m_blocks.blocks().defined() ? m_blocks.blocks() : m_blocks.tail();
        m_blocks = m_blocks.to(at::TensorOptions().dtype(any.scalar_type()).device(device));
        if (m_inverseBlocks.defined()) m_inverseBlocks = m_inverseBlocks.to(at::TensorOptions().dtype(any.scalar_type()).device(device));
    }
    if (m_lu.defined()) {
        m_lu = m_lu.to(device);
        m_pivots = m_pivots.to(device);
    }
}

} // namespace latmix::transforms
