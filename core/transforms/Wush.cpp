#include "transforms/Wush.h"

#include "transforms/Hadamard.h"

#include <ATen/ATen.h>

#include <cmath>
#include <stdexcept>
#include <string>

namespace latmix::transforms {

BlockMoments::BlockMoments(std::int64_t width, std::int64_t block) : m_width(width), m_block(block) {
    if (width < 1 || block < 1) throw std::invalid_argument("BlockMoments: width and block must be positive");
    const auto f64 = at::TensorOptions().dtype(at::kDouble);
    const std::int64_t full = width / block, rest = width % block;
    if (full > 0) m_blocks = at::zeros({full, block, block}, f64);
    if (rest > 0) m_tail = at::zeros({rest, rest}, f64);
    m_count = at::zeros({1}, f64);
}

void BlockMoments::add(const at::Tensor& rows) {
    if (rows.size(-1) != m_width)
        throw std::invalid_argument("BlockMoments: rows of " + std::to_string(rows.size(-1)) + " channels, expected " +
                                    std::to_string(m_width));
    const auto x = rows.reshape({-1, m_width}).to(at::kDouble);
    const std::int64_t n = x.size(0), full = m_width / m_block;
    if (m_blocks.defined()) {
        const auto b = x.narrow(1, 0, full * m_block).view({n, full, m_block}).transpose(0, 1); // [nb, n, b]
        m_blocks += at::bmm(b.transpose(1, 2), b).to(at::kCPU);
    }
    if (m_tail.defined()) {
        const auto t = x.narrow(1, full * m_block, m_width - full * m_block);
        m_tail += at::matmul(t.t(), t).to(at::kCPU);
    }
    m_rows += n;
    m_count += static_cast<double>(n);
}

BlockDiagonal BlockMoments::mean() const {
    if (m_rows == 0) throw std::logic_error("BlockMoments: no rows added");
    const double n = static_cast<double>(m_rows);
    return {m_blocks.defined() ? m_blocks / n : at::Tensor(), m_tail.defined() ? m_tail / n : at::Tensor()};
}

void BlockMoments::reduce(const std::function<void(const at::Tensor&)>& allreduceSum) {
    if (m_blocks.defined()) allreduceSum(m_blocks);
    if (m_tail.defined()) allreduceSum(m_tail);
    allreduceSum(m_count);
    m_rows = static_cast<std::int64_t>(std::llround(m_count.item<double>()));
}

namespace {

// g + damping·I per block, the damping a fraction of each block's mean diagonal; a block whose
// diagonal is all zero takes I (any transform serves it). Then Cholesky, raising the fraction
// tenfold for the blocks that fail, up to 1. Returns the lower factors; notes the blocks.
at::Tensor dampedCholesky(const at::Tensor& g, const char* what, std::int64_t firstBlock, const std::string& where,
                          std::vector<std::string>& notes) {
    const std::int64_t k = g.size(0), b = g.size(1);
    const auto eye = at::eye(b, g.options()).expand({k, b, b});
    const auto meanDiag = g.diagonal(0, 1, 2).mean(1); // [k]
    const auto zero = meanDiag.le(0);
    auto scale = at::where(zero, at::ones_like(meanDiag), meanDiag);
    auto fraction = at::full({k}, 0.01, g.options());
    at::Tensor l, info;
    for (double f = 0.01;; f *= 10) {
        std::tie(l, info) = at::linalg_cholesky_ex(g + (fraction * scale).view({k, 1, 1}) * eye, false);
        const auto failed = info.ne(0);
        if (!failed.any().item<bool>() || f >= 1) {
            if (failed.any().item<bool>())
                throw std::invalid_argument("WUSH" + (where.empty() ? std::string() : " at " + where) + ": the " + what +
                                            " second moment of a block is not positive definite even with a damping of its "
                                            "mean diagonal (not finite?); check the calibration activations");
            break;
        }
        fraction = at::where(failed, fraction * 10, fraction);
    }
    const auto frac = fraction.to(at::kCPU), z = zero.to(at::kCPU);
    for (std::int64_t i = 0; i < k; ++i) {
        const std::string block = "block " + std::to_string(firstBlock + i) + (where.empty() ? "" : " of " + where);
        if (z[i].item<bool>())
            notes.push_back("WUSH " + block + ": the " + what + " second moment is zero; regularised with the identity");
        else if (frac[i].item<double>() > 0.011)
            notes.push_back("WUSH " + block + ": the " + what + " second moment is singular; regularised with " +
                            std::to_string(100 * frac[i].item<double>()).substr(0, 5) + " % of its mean diagonal");
    }
    return l;
}

// T and T⁻¹ of k blocks of size b: gx [k, b, b] activation moments, w [R, k, b] weight blocks.
std::pair<at::Tensor, at::Tensor> wushBlocks(const at::Tensor& gx, const at::Tensor& w, std::int64_t firstBlock,
                                             const std::string& where, std::vector<std::string>& notes) {
    const std::int64_t R = w.size(0), k = gx.size(0), b = gx.size(1);
    const auto wb = w.permute({1, 0, 2}); // [k, R, b]
    const auto gw = at::bmm(wb.transpose(1, 2), wb) / static_cast<double>(R);
    const auto lw = dampedCholesky(gw, "weights'", firstBlock, where, notes);       // G_W = L Lᵀ
    const auto lx = dampedCholesky(gx, "activations'", firstBlock, where, notes);   // damped G_X = C Cᵀ
    const auto gxDamped = at::bmm(lx, lx.transpose(1, 2));
    const auto m = at::bmm(at::bmm(lw.transpose(1, 2), gxDamped), lw);            // Lᵀ G_X L
    at::Tensor lambda, u;
    std::tie(lambda, u) = at::linalg_eigh(0.5 * (m + m.transpose(1, 2)));          // symmetric up to rounding
    if (!(lambda.min().item<double>() > 0) || !at::isfinite(lambda).all().item<bool>())
        throw std::invalid_argument("WUSH" + (where.empty() ? std::string() : " at " + where) +
                                    ": a block's balanced spectrum is not positive and finite");
    // H_b/√b (natural Sylvester order, no signs); a size without a Hadamard matrix: the identity.
    at::Tensor had;
    if (hasHadamard(b)) {
        had = hadamardMatrix(b).to(gx.options()) / std::sqrt(static_cast<double>(b));
    } else {
        had = at::eye(b, gx.options());
        notes.push_back("WUSH block " + std::to_string(firstBlock) + (where.empty() ? "" : " of " + where) + ": no Hadamard of " +
                        std::to_string(b) + ", the identity in its place");
    }
    const auto hadK = had.expand({k, b, b});
    // T = H diag(λ^-1/4) Uᵀ Lᵀ;  T⁻¹ = L⁻ᵀ U diag(λ^1/4) Hᵀ (a triangular solve, no general inverse).
    const auto t = at::bmm(hadK * lambda.pow(-0.25).unsqueeze(1), at::bmm(u.transpose(1, 2), lw.transpose(1, 2)));
    const auto right = at::bmm(u * lambda.pow(0.25).unsqueeze(1), hadK.transpose(1, 2));
    const auto tInv = at::linalg_solve_triangular(lw.transpose(1, 2), right, /*upper=*/true);
    return {t, tInv};
}

} // namespace

WushTransform wushTransform(const BlockDiagonal& moments, const at::Tensor& weight, const std::string& where) {
    const std::int64_t width = moments.size();
    if (weight.dim() != 2 || weight.size(1) != width)
        throw std::invalid_argument("WUSH" + (where.empty() ? std::string() : " at " + where) + ": weights [R, " +
                                    std::to_string(width) + "] expected");
    const auto w = weight.detach().to(at::kCPU, at::kDouble);
    WushTransform r;
    at::Tensor blocks, blocksInv, tail, tailInv;
    const std::int64_t b = moments.blocks().defined() ? moments.blocks().size(1) : 0;
    const std::int64_t full = b > 0 ? moments.blocks().size(0) : 0;
    if (full > 0) {
        const auto wb = w.narrow(1, 0, full * b).view({w.size(0), full, b});
        std::tie(blocks, blocksInv) = wushBlocks(moments.blocks().to(at::kCPU, at::kDouble), wb, 0, where, r.notes);
    }
    if (moments.tail().defined()) {
        const std::int64_t rest = moments.tail().size(0);
        const auto wt = w.narrow(1, full * b, rest).view({w.size(0), 1, rest});
        std::tie(tail, tailInv) =
            wushBlocks(moments.tail().to(at::kCPU, at::kDouble).unsqueeze(0), wt, full, where, r.notes);
        tail = tail.squeeze(0), tailInv = tailInv.squeeze(0);
    }
    r.forward = BlockDiagonal(blocks, tail);
    r.inverse = BlockDiagonal(blocksInv, tailInv);
    return r;
}

} // namespace latmix::transforms
