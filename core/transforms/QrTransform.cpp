#include "transforms/QrTransform.h"

#include "transforms/BlockGranularity.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <tuple>

namespace latmix::transforms {
namespace {

at::Tensor leaf(const at::Tensor& t) { return t.detach().clone().set_requires_grad(true); }
at::Tensor masked(const at::Tensor& t, const at::Tensor& mask) { return mask.defined() ? t * mask : t; }

} // namespace

QrTransform::QrTransform(const at::Tensor& init, bool rotationOnly, bool withBias, at::ScalarType dtype, std::string name,
                         std::string note, std::int64_t blockDiagonal)
    : m_name(std::move(name)), m_note(std::move(note)), m_block(blockDiagonal) {
    if (init.dim() != 2 || init.size(0) != init.size(1) || init.size(0) < 1)
        throw std::invalid_argument(m_name + ": initial matrix must be square and non-empty");
    if (dtype != at::kFloat && dtype != at::kDouble) throw std::invalid_argument(m_name + ": dtype must be float32 or float64");
    const std::int64_t d = init.size(0);
    m_mask = learnedBlockMask(init, m_block, dtype, m_name);
    at::Tensor q, r;
    std::tie(q, r) = at::linalg_qr(init.detach().to(at::kDouble).cpu()); // init = Q R
    const at::Tensor rd = r.diagonal();
    if (!rotationOnly && !at::all(rd != 0).item<bool>()) throw std::invalid_argument(m_name + ": initial matrix is singular");
    // Sign fix D = diag(sign(diag R)) (zero → +): init = (Q D)(D R) with diag(D R) = |diag R| > 0.
    const auto sgn = at::where(rd < 0, at::full({d}, -1.0, at::kDouble), at::ones({d}, at::kDouble));
    m_q0 = masked((q * sgn.unsqueeze(0)).to(dtype), m_mask); // Householder QR keeps the blocks; clear rounding dust
    m_g = leaf(at::zeros({d, d}, at::TensorOptions().dtype(dtype)));
    if (!rotationOnly) {
        const auto rf = r * sgn.unsqueeze(1);
        m_signs = at::ones({d}, at::TensorOptions().dtype(dtype));
        m_r = leaf(masked(at::triu(rf, 1).to(dtype), m_mask));
        m_logAbsS = leaf(at::log(rf.diagonal()).to(dtype));
    }
    if (withBias) m_v = leaf(at::zeros({d}, at::TensorOptions().dtype(dtype)));
}

at::Tensor QrTransform::rotation() const {
    // expm of the skew-symmetric (G − Gᵀ)/2 is orthogonal (paper §3); libtorch differentiates it.
    const auto g = masked(m_g, m_mask);
    return at::matmul(m_q0, at::linalg_matrix_exp((g - g.t()) * 0.5));
}

at::Tensor QrTransform::scales() const {
    if (rotationOnly()) return at::ones({dim()}, m_q0.options());
    return m_signs * at::exp(m_logAbsS);
}

at::Tensor QrTransform::triangular() const {
    if (rotationOnly()) return at::eye(dim(), m_q0.options());
    return at::triu(masked(m_r, m_mask), 1) + at::diag(scales());
}

at::Tensor QrTransform::matrix() const {
    auto q = rotation();
    return rotationOnly() ? q : at::matmul(q, triangular());
}

at::Tensor QrTransform::inverse(const at::Tensor& y) const {
    // Rows: x Aᵀ = z with Aᵀ = Wᵀ Qᵀ (W = R + diag s)  ⇒  x Wᵀ = z Q (Q orthogonal), Wᵀ lower.
    const auto t = at::promote_types(y.scalar_type(), dtype());
    auto z = y.reshape({-1, dim()}).to(t);
    if (m_v.defined()) z = z - m_v.to(t);
    auto zq = at::matmul(z, rotation().to(t));
    if (rotationOnly()) return zq.to(y.scalar_type()).reshape(y.sizes());
    auto x = at::linalg_solve_triangular(triangular().to(t).t(), zq, /*upper=*/false, /*left=*/false);
    return x.to(y.scalar_type()).reshape(y.sizes());
}

at::Tensor QrTransform::inverseMatrix() const {
    // A⁻¹ = W⁻¹ Qᵀ (W = R + diag s upper triangular; rotation-only: Qᵀ).
    auto qt = rotation().t();
    if (rotationOnly()) return qt;
    return at::linalg_solve_triangular(triangular(), qt, /*upper=*/true);
}

std::vector<at::Tensor> QrTransform::parameters() const {
    std::vector<at::Tensor> p{m_g};
    if (!rotationOnly()) {
        p.push_back(m_r);
        p.push_back(m_logAbsS);
    }
    if (m_v.defined()) p.push_back(m_v);
    return p;
}

void QrTransform::initBiasFromMean(const at::Tensor& mean) {
    setBiasFromMean(mean);
}

void QrTransform::to(const at::Device& device) {
    if (m_g.device() == device) return; // already there: keep the leaves an optimizer may hold
    m_q0 = m_q0.to(device);
    if (m_mask.defined()) m_mask = m_mask.to(device);
    m_g = leaf(m_g.to(device));
    if (!rotationOnly()) {
        m_signs = m_signs.to(device);
        m_r = leaf(m_r.to(device));
        m_logAbsS = leaf(m_logAbsS.to(device));
    }
    if (m_v.defined()) m_v = leaf(m_v.to(device));
}

} // namespace latmix::transforms
