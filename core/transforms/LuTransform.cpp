#include "transforms/LuTransform.h"

#include "transforms/BlockGranularity.h"

#include <ATen/ATen.h>

#include <algorithm>

#include <stdexcept>
#include <tuple>

namespace latmix::transforms {
namespace {

at::Tensor leaf(const at::Tensor& t) { return t.detach().clone().set_requires_grad(true); }

// Rows z [..., d] → [N, d] in the promoted dtype of y and the parameters (float64 stays float64).
at::ScalarType workType(const at::Tensor& y, at::ScalarType p) { return at::promote_types(y.scalar_type(), p); }

at::Tensor masked(const at::Tensor& t, const at::Tensor& mask) { return mask.defined() ? t * mask : t; }

} // namespace

LuTransform::LuTransform(const at::Tensor& init, bool withBias, at::ScalarType dtype, std::string name, std::string note,
                         std::int64_t blockDiagonal)
    : m_name(std::move(name)), m_note(std::move(note)), m_block(blockDiagonal) {
    if (init.dim() != 2 || init.size(0) != init.size(1) || init.size(0) < 1)
        throw std::invalid_argument(m_name + ": initial matrix must be square and non-empty");
    if (dtype != at::kFloat && dtype != at::kDouble) throw std::invalid_argument(m_name + ": dtype must be float32 or float64");
    const std::int64_t d = init.size(0);
    m_mask = learnedBlockMask(init, m_block, dtype, m_name);
    at::Tensor p, l, u;
    std::tie(p, l, u) = at::linalg_lu(init.detach().to(at::kDouble).cpu()); // init = P L U
    const at::Tensor s = u.diagonal();
    if (!at::all(s != 0).item<bool>()) throw std::invalid_argument(m_name + ": initial matrix is singular");
    m_perm = p.argmax(1);        // P[i][perm[i]] = 1
    m_invPerm = p.argmax(0);     // P[invPerm[j]][j] = 1
    m_signs = at::sign(s).to(dtype);
    m_lower = leaf(masked(at::tril(l, -1).to(dtype), m_mask));
    m_upper = leaf(masked(at::triu(u, 1).to(dtype), m_mask));
    m_logAbsS = leaf(at::log(at::abs(s)).to(dtype));
    if (withBias) m_v = leaf(at::zeros({d}, at::TensorOptions().dtype(dtype)));
}

at::Tensor LuTransform::scales() const { return m_signs * at::exp(m_logAbsS); }

at::Tensor LuTransform::lowerFactor() const {
    return at::tril(masked(m_lower, m_mask), -1) + at::eye(dim(), m_lower.options().requires_grad(false));
}

at::Tensor LuTransform::upperFactor() const { return at::triu(masked(m_upper, m_mask), 1) + at::diag(scales()); }

at::Tensor LuTransform::permutation() const {
    auto eye = at::eye(dim(), m_lower.options().requires_grad(false));
    return eye.index_select(0, m_perm);
}

at::Tensor LuTransform::matrix() const {
    // P X = X[perm]: a row gather, exact and differentiable.
    return at::matmul(lowerFactor(), upperFactor()).index_select(0, m_perm);
}

at::Tensor LuTransform::forward(const at::Tensor& x) const {
    const std::int64_t rows = x.numel() / std::max<std::int64_t>(dim(), 1);
    if (rows >= dim()) return AffineTransform::forward(x);
    // A = P L W with (P X) = X[perm]: (x Aᵀ)[:, i] = (x (L W)ᵀ)[:, perm[i]].
    const auto type = x.scalar_type();
    auto y = at::matmul(at::matmul(x, upperFactor().to(type).t()), lowerFactor().to(type).t()).index_select(-1, m_perm);
    return m_v.defined() ? y + m_v.to(type) : y;
}

at::Tensor LuTransform::inverse(const at::Tensor& y) const {
    // Rows: x Aᵀ = z with Aᵀ = Wᵀ Lᵀ Pᵀ (W = U + diag s)  ⇒  x Wᵀ Lᵀ = z P, and (z P)[:, j] = z[:, invPerm[j]].
    const auto t = workType(y, dtype());
    auto z = y.reshape({-1, dim()}).to(t);
    if (m_v.defined()) z = z - m_v.to(t);
    z = z.index_select(1, m_invPerm);
    // c Lᵀ = z P: Lᵀ upper unitriangular; x Wᵀ = c: Wᵀ lower (SPEC §2: triangular solves only).
    auto c = at::linalg_solve_triangular(lowerFactor().to(t).t(), z, /*upper=*/true, /*left=*/false, /*unitriangular=*/true);
    auto x = at::linalg_solve_triangular(upperFactor().to(t).t(), c, /*upper=*/false, /*left=*/false);
    return x.to(y.scalar_type()).reshape(y.sizes());
}

at::Tensor LuTransform::inverseMatrix() const {
    // A⁻¹ = W⁻¹ L⁻¹ Pᵀ with (Pᵀ)[i][j] = [perm[j] == i].
    auto pt = at::eye(dim(), m_lower.options().requires_grad(false)).index_select(1, m_perm);
    auto x = at::linalg_solve_triangular(lowerFactor(), pt, /*upper=*/false, /*left=*/true, /*unitriangular=*/true);
    return at::linalg_solve_triangular(upperFactor(), x, /*upper=*/true);
}

std::vector<at::Tensor> LuTransform::parameters() const {
    std::vector<at::Tensor> p{m_lower, m_upper, m_logAbsS};
    if (m_v.defined()) p.push_back(m_v);
    return p;
}

void LuTransform::initBiasFromMean(const at::Tensor& mean) {
    setBiasFromMean(mean);
}

void LuTransform::to(const at::Device& device) {
    if (m_lower.device() == device) return; // already there: keep the leaves an optimizer may hold
    m_perm = m_perm.to(device);
    m_invPerm = m_invPerm.to(device);
    m_signs = m_signs.to(device);
    if (m_mask.defined()) m_mask = m_mask.to(device);
    m_lower = leaf(m_lower.to(device));
    m_upper = leaf(m_upper.to(device));
    m_logAbsS = leaf(m_logAbsS.to(device));
    if (m_v.defined()) m_v = leaf(m_v.to(device));
}

} // namespace latmix::transforms
