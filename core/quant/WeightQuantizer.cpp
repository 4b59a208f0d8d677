#include "quant/WeightQuantizer.h"

#include "mx/MxCodes.h"
#include "mx/MxKernelCpu.h"
#include "mx/MxQuantizer.h"
#include "quant/GptqKernelCpu.h"
#include "util/NonFinite.h"
#include "util/Text.h"
#include "mx/MxReference.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>

namespace latmix::quant {
namespace {


// s * Qe(x / s) elementwise, float32 (x and s broadcast). A true division, never a multiplication
// by 1/s: for MX (s a power of two) both are exact-equal, for NVFP4 the kernel divides.
at::Tensor onGrid(const at::Tensor& x, const at::Tensor& s, mx::ElementFormat f) {
    return mx::roundToElement(x / s, f) * s;
}

void checkWeight(const at::Tensor& w, const char* fn) {
    if (!w.defined()) throw std::invalid_argument(std::string(fn) + ": the weight is undefined");
    if (w.dim() != 2 || w.size(0) == 0 || w.size(1) == 0)
        throw std::invalid_argument(std::string(fn) + ": the weight must be a non-empty 2-D [out, in] matrix, got " +
                                    util::shapeText(w.sizes().vec()));
    if (!at::isFloatingType(w.scalar_type()))
        throw std::invalid_argument(std::string(fn) + ": the weight must be a floating-point tensor");
    const auto bad = util::findNonFinite(w);
    if (bad)
        throw std::invalid_argument(std::string(fn) + ": the weight " + util::shapeText(w.sizes().vec()) + " holds NaN/Inf (" +
                                    bad.describe() + ")");
}

void checkHessian(const at::Tensor& h, std::int64_t in, const char* fn) {
    if (!h.defined()) throw std::invalid_argument(std::string(fn) + ": the Hessian is undefined");
    if (h.dim() != 2 || h.size(0) != in || h.size(1) != in)
        throw std::invalid_argument(std::string(fn) + ": the Hessian must be [in, in] = [" + std::to_string(in) + ", " +
                                    std::to_string(in) + "], got " + util::shapeText(h.sizes().vec()));
    if (!at::isFloatingType(h.scalar_type()))
        throw std::invalid_argument(std::string(fn) + ": the Hessian must be a floating-point tensor");
    const auto bad = util::findNonFinite(h);
    if (bad) throw std::invalid_argument(std::string(fn) + ": the Hessian holds NaN/Inf (" + bad.describe() + ")");
    auto negative = at::nonzero(h.diagonal() < 0).cpu();
    if (negative.size(0) > 0)
        throw std::invalid_argument(std::string(fn) + ": the Hessian has negative diagonal entries (first at input " +
                                    std::to_string(negative[0][0].item<std::int64_t>()) + "): not a Gram matrix");
}

// tr(D H D^T) / tr(W H W^T) with D = W - Q, H undefined meaning the identity. A diagnostic, so
// it runs where w is, in float32 (a float64 pair of [out,in]x[in,in] products on the CPU cost
// more than the GPTQ itself at 8B scale). On the CPU, where even the float32 product costs
// about as much as GPTQ, a weight with more than kErrorRows rows is measured on kErrorRows
// evenly spaced rows (both traces are sums over rows; the same rows for both: a ratio estimate
// of the whole, a few percent off for heavy-tailed rows). A GPU measures the same rows, though
// the whole would cost it nothing: a CPU and a GPU run of one model then report one measure,
// differing by rounding alone (the device check compares them).
constexpr std::int64_t kErrorRows = 512;

double relativeError(const at::Tensor& w, const at::Tensor& q, const at::Tensor& h) {
    const auto opts = at::TensorOptions().dtype(at::kFloat).device(w.device());
    auto W = w.detach().to(opts);
    auto Q = q.detach().to(opts);
    if (W.size(0) > kErrorRows) {
        const auto rows = at::linspace(0, static_cast<double>(W.size(0) - 1), kErrorRows, opts).round().to(at::kLong);
        W = W.index_select(0, rows);
        Q = Q.index_select(0, rows);
    }
    const auto D = W - Q;
    at::Tensor num, den;
    if (h.defined()) {
        const auto H = h.detach().to(opts);
        const auto WD = at::cat({W, D}, 0); // one product for both traces
        const auto p = (at::mm(WD, H) * WD).sum(1);
        den = p.narrow(0, 0, W.size(0)).sum();
        num = p.narrow(0, W.size(0), D.size(0)).sum();
    } else {
        num = D.square().sum();
        den = W.square().sum();
    }
    const auto both = at::stack({num, den}).to(at::kCPU, at::kDouble); // one device round trip
    const double n = both[0].item<double>(), d = both[1].item<double>();
    return d > 0 ? n / d : 0.0;
}

// Cholesky factor or a clear error naming the failing column.
at::Tensor cholesky(const at::Tensor& a, bool upper, const char* what, double damping) {
    at::Tensor l, info;
    std::tie(l, info) = at::linalg_cholesky_ex(a, upper);
    const auto k = info.item<std::int64_t>();
    if (k != 0)
        throw std::invalid_argument(std::string("quantizeGptq: ") + what +
                                    " is not positive definite (Cholesky fails at order " + std::to_string(k) +
                                    "); is the Hessian a Gram matrix? Raising the damping (now " +
                                    std::to_string(damping) + ") helps");
    return l;
}

QuantizedWeight finish(const at::Tensor& w, const at::Tensor& q, const GroupScales& gs, const mx::MxConfig& c,
                       const at::Tensor& hessian) {
    QuantizedWeight r;
    r.dequantized = q.to(at::kCPU, at::kFloat).contiguous();
    // OCP MXINT8 is two's complement, without a −0 code: a weight rounded to −0 is +0 in the
    // packed codes, and the run's float32 weight must unpack from them bit for bit.
    if (c.element() == mx::ElementFormat::Int8) r.dequantized.masked_fill_(r.dequantized == 0, 0.0f);
    r.scales = gs.scales.to(at::kCPU, at::kFloat).contiguous();
    r.packed = packWithScales(r.dequantized, r.scales, c, gs.globalScale);
    r.relativeError = relativeError(w, r.dequantized, hessian);
    return r;
}

} // namespace

GroupScales staticScales(const at::Tensor& w, const mx::MxConfig& c, float nvfp4Global) {
    c.validate();
    if (!w.defined() || w.dim() < 1) throw std::invalid_argument("staticScales: need a tensor [..., in]");
    if (!c.isNvfp4()) nvfp4Global = 0;
    GroupScales g;
    g.scales = mx::blockScales(w, c, mx::Backend::Auto, nvfp4Global);
    if (nvfp4Global > 0) {
        g.globalScale = nvfp4Global;
    } else if (c.isNvfp4()) {
        // The same FP32 tensor scale as mx::fakeQuantize / mx::pack compute (SPEC §1).
        auto x = w.detach().to(at::kCPU, at::kFloat).contiguous();
        g.globalScale = mx::cpu::nvfp4GlobalScale(x.data_ptr<float>(), x.numel());
    }
    return g;
}

float sharedGlobalScale(const std::vector<at::Tensor>& weights) {
    float amax = 0.0f;
    for (const at::Tensor& w : weights) {
        if (!w.defined() || w.numel() == 0) continue;
        // Finite values only, as cpu::nvfp4GlobalScale; the maximum is exact on any device.
        const auto a = w.detach().to(at::kFloat).abs().nan_to_num_(0.0, 0.0, 0.0).amax();
        amax = std::max(amax, a.item<float>());
    }
    const float g = amax / mx::kNvfp4GlobalDivisor;
    return g > 0.0f ? g : 1.0f;
}

at::Tensor quantizeWithScales(const at::Tensor& x, const at::Tensor& scales, const mx::MxConfig& c) {
    c.validate();
    if (!x.defined() || x.dim() < 1 || !at::isFloatingType(x.scalar_type()))
        throw std::invalid_argument("quantizeWithScales: x must be a floating-point tensor [..., n]");
    const std::int64_t n = x.size(-1), B = c.blockSize, nb = (n + B - 1) / B;
    auto expected = x.sizes().vec();
    expected.back() = nb;
    if (!scales.defined() || scales.sizes().vec() != expected)
        throw std::invalid_argument("quantizeWithScales: scales must have x's shape with the last dimension " +
                                    std::to_string(nb) + " (one per group of " + std::to_string(B) + "), got " +
                                    (scales.defined() ? util::shapeText(scales.sizes().vec()) : std::string("undefined")));
    auto s = scales.detach().to(x.device(), at::kFloat);
    if (x.numel() == 0) return x.detach().to(at::kFloat).clone();
    if (!at::logical_and(s > 0, at::isfinite(s)).all().item<bool>())
        throw std::invalid_argument("quantizeWithScales: every scale must be positive and finite");
    const std::int64_t rows = x.numel() / n;
    auto x2 = x.detach().to(at::kFloat).reshape({rows, n});
    if (nb * B != n) x2 = at::constant_pad_nd(x2, {0, nb * B - n}, 0); // partial group: padding is dropped below
    auto q = onGrid(x2.reshape({rows, nb, B}), s.reshape({rows, nb, 1}), c.element()).reshape({rows, nb * B});
    return q.narrow(1, 0, n).reshape(x.sizes()).contiguous();
}

namespace {

// The scales' codes (E8M0, or E4M3 over NVFP4's global scale) and the scales as unpack rebuilds
// them from those codes; a scale that no code gives back exactly is refused, named by row and group.
struct ScaleCodes {
    at::Tensor codes, effective; // uint8 and float32 [rows, groups]
};
ScaleCodes encodeScales(const at::Tensor& s, bool nv, float globalScale) {
    const std::int64_t rows = s.size(0), nb = s.size(1);
    ScaleCodes r{at::empty({rows, nb}, at::TensorOptions().dtype(at::kByte)),
                 at::empty({rows, nb}, at::TensorOptions().dtype(at::kFloat))};
    const float* sp = s.data_ptr<float>();
    std::uint8_t* bp = r.codes.data_ptr<std::uint8_t>();
    float* ep = r.effective.data_ptr<float>();
    for (std::int64_t i = 0; i < rows * nb; ++i) {
        const float sv = sp[i];
        auto where = [&] {
            return "scale " + std::to_string(sv) + " of row " + std::to_string(i / nb) + ", group " + std::to_string(i % nb);
        };
        if (!(std::isfinite(sv) && sv > 0.0f))
            throw std::invalid_argument("packWithScales: " + where() + " is not positive and finite");
        if (nv) {
            const double sq = mx::ref::quantizeElement(static_cast<double>(sv) / globalScale, mx::ElementFormat::E4M3);
            bp[i] = mx::encodeElement(sq, mx::ElementFormat::E4M3);
            ep[i] = static_cast<float>(mx::decodeElement(bp[i], mx::ElementFormat::E4M3)) * globalScale;
            if (!(sq > 0) || ep[i] != sv)
                throw std::invalid_argument("packWithScales: " + where() + " is not an E4M3 value times the global scale");
        } else {
            int ex = 0;
            const double m = std::frexp(static_cast<double>(sv), &ex);
            const int e = ex - 1;
            if (m != 0.5 || e < mx::kScaleExpMin || e > mx::kScaleExpMax)
                throw std::invalid_argument("packWithScales: " + where() + " is not a power of two in the E8M0 range");
            bp[i] = mx::encodeE8M0(e);
            ep[i] = sv;
        }
    }
    return r;
}

// Each value's element code under its group's effective scale: decode(code) · scale in float32
// must give the value back bit for bit; the first value that does not is refused, by row and column.
at::Tensor encodeElements(const at::Tensor& x, const at::Tensor& eff, mx::ElementFormat elem, std::int64_t B) {
    const std::int64_t rows = x.size(0), n = x.size(1), nb = eff.size(1);
    const mx::ElementCodebook book(elem);
    auto codes = at::empty({rows, n}, at::TensorOptions().dtype(at::kByte));
    std::atomic<std::int64_t> firstBad{std::numeric_limits<std::int64_t>::max()};
    const float* xp = x.data_ptr<float>();
    const float* ep = eff.data_ptr<float>();
    std::uint8_t* cp = codes.data_ptr<std::uint8_t>();
    at::parallel_for(0, rows, std::max<std::int64_t>(1, 16384 / n), [&](std::int64_t r0, std::int64_t r1) {
        for (std::int64_t r = r0; r < r1; ++r)
            for (std::int64_t j = 0; j < n; ++j) {
                const std::int64_t i = r * n + j;
                const float xv = xp[i], sv = ep[r * nb + j / B];
                bool ok = std::isfinite(xv);
                if (ok) {
                    double v = 0;
                    const std::uint8_t code = book.nearest(static_cast<double>(xv) / sv, &v);
                    const float back = static_cast<float>(v) * sv;
                    ok = std::memcmp(&back, &xv, sizeof xv) == 0 || (back == 0.0f && xv == 0.0f); // INT8: no -0
                    if (ok) cp[i] = code;
                }
                if (!ok) {
                    std::int64_t cur = firstBad.load();
                    while (i < cur && !firstBad.compare_exchange_weak(cur, i)) {
                    }
                }
            }
    });
    if (firstBad.load() != std::numeric_limits<std::int64_t>::max()) {
        const std::int64_t i = firstBad.load(), r = i / n, j = i % n;
        throw std::invalid_argument("packWithScales: value " + std::to_string(xp[i]) + " at row " + std::to_string(r) +
                                    ", column " + std::to_string(j) + " is not on the grid of its group scale " +
                                    std::to_string(ep[r * nb + j / B]));
    }
    return codes;
}

} // namespace

mx::PackedTensor packWithScales(const at::Tensor& dequantized, const at::Tensor& scales, const mx::MxConfig& c,
                                float globalScale) {
    c.validate();
    if (!dequantized.defined() || dequantized.dim() < 1 || !at::isFloatingType(dequantized.scalar_type()))
        throw std::invalid_argument("packWithScales: values must be a floating-point tensor [..., n]");
    const std::int64_t n = dequantized.size(-1), B = c.blockSize, nb = (n + B - 1) / B;
    auto expected = dequantized.sizes().vec();
    expected.back() = nb;
    if (!scales.defined() || scales.sizes().vec() != expected)
        throw std::invalid_argument("packWithScales: scales must have the values' shape with the last dimension " +
                                    std::to_string(nb) + ", got " +
                                    (scales.defined() ? util::shapeText(scales.sizes().vec()) : std::string("undefined")));
    const bool nv = c.isNvfp4();
    if (nv && !(std::isfinite(globalScale) && globalScale > 0.0f))
        throw std::invalid_argument("packWithScales: the NVFP4 global scale must be positive and finite");
    if (!nv && globalScale != 1.0f)
        throw std::invalid_argument("packWithScales: a global scale other than 1 applies to NVFP4 only");

    auto x = dequantized.detach().to(at::kCPU, at::kFloat).contiguous().reshape({-1, n});
    auto s = scales.detach().to(at::kCPU, at::kFloat).contiguous().reshape({-1, nb});
    const ScaleCodes scaleCodes = encodeScales(s, nv, globalScale);
    const mx::ElementFormat elem = c.element();
    const at::Tensor codes = encodeElements(x, scaleCodes.effective, elem, B);

    mx::PackedTensor p;
    p.config = c;
    p.lastDim = n;
    p.globalScale = nv ? globalScale : 1.0f;
    at::Tensor packedCodes = mx::elementSpec(elem).bits == 4 ? mx::packNibbles(codes) : codes;
    auto codeShape = dequantized.sizes().vec();
    codeShape.back() = packedCodes.size(1);
    p.codes = packedCodes.reshape(codeShape);
    p.scales = scaleCodes.codes.reshape(expected);
    return p;
}

QuantizedWeight quantizeRtn(const at::Tensor& w, const mx::MxConfig& c, const at::Tensor& hessian, float nvfp4Global) {
    c.validate();
    checkWeight(w, "quantizeRtn");
    if (hessian.defined()) checkHessian(hessian, w.size(1), "quantizeRtn");
    auto wf = w.detach().to(at::kFloat);
    const GroupScales gs = staticScales(wf, c, nvfp4Global);
    return finish(w, quantizeWithScales(wf, gs.scales, c), gs, c, hessian);
}

namespace {

// GPTQ's column loop over the block of columns [i1, i1 + count) of W1 [out, count] (a copy,
// updated in place) on W1's device: each column onto its static grid (Q), its error over U_ii
// (Err1), and the OBS update of the block's columns right of it, in ten tensor operations a
// column (the rounding is three of them: mx::roundToElement). U: the upper Cholesky factor of
// H^-1, [in, in]. The same float64 operations in the same order as the fused CPU kernel.
void columnBlockTensorOps(at::Tensor& W1, const at::Tensor& U, const at::Tensor& colScale, at::Tensor& Q,
                          at::Tensor& Err1, std::int64_t i1, mx::ElementFormat elem) {
    const std::int64_t count = W1.size(1);
    auto U1 = U.narrow(0, i1, count).narrow(1, i1, count);
    for (std::int64_t i = 0; i < count; ++i) {
        auto col = W1.select(1, i);
        auto q = onGrid(col.to(at::kFloat), colScale.select(1, i1 + i), elem);
        Q.select(1, i1 + i).copy_(q);
        auto err = Err1.select(1, i);
        at::sub_out(err, col, q).div_(U1.select(0, i).select(0, i)); // (w - q) / U_ii, q widened exactly
        // Within the block: update the columns right of i (column i itself no longer matters).
        if (i + 1 < count)
            W1.narrow(1, i + 1, count - i - 1).addr_(err, U1.select(0, i).narrow(0, i + 1, count - i - 1), 1, -1);
    }
}

// The same loop, fused (quant/GptqKernelCpu), on CPU tensors: W1, Err1 [out, count] and U1, the
// block's diagonal part of U [count, count], contiguous; colScale and Q [out, in] contiguous.
void columnBlockCpu(at::Tensor& W1, const at::Tensor& U1, const at::Tensor& colScale, at::Tensor& Q,
                    at::Tensor& Err1, std::int64_t i1, mx::ElementFormat elem) {
    const std::int64_t in = Q.size(1);
    cpu::GptqBlock b;
    b.rows = W1.size(0);
    b.count = W1.size(1);
    b.w = W1.data_ptr<double>();
    b.wStride = b.count;
    b.u = U1.data_ptr<double>();
    b.uStride = b.count;
    b.scale = colScale.data_ptr<float>() + i1;
    b.scaleStride = in;
    b.q = Q.data_ptr<float>() + i1;
    b.qStride = in;
    b.err = Err1.data_ptr<double>();
    b.errStride = b.count;
    cpu::gptqBlock(b, elem);
}

} // namespace

QuantizedWeight quantizeGptq(const at::Tensor& w, const at::Tensor& hessian, const mx::MxConfig& c,
                             const GptqOptions& o, float nvfp4Global) {
    c.validate();
    checkWeight(w, "quantizeGptq");
    const std::int64_t out = w.size(0), in = w.size(1);
    checkHessian(hessian, in, "quantizeGptq");
    if (!(std::isfinite(o.damping) && o.damping >= 0))
        throw std::invalid_argument("quantizeGptq: damping must be finite and >= 0, got " + std::to_string(o.damping));
    if (o.columnBlock < 1)
        throw std::invalid_argument("quantizeGptq: columnBlock must be >= 1, got " + std::to_string(o.columnBlock));

    // Working precision float64 throughout (updates, Cholesky); rounding onto the grid in float32.
    const auto dev = w.device();
    auto W = w.detach().to(at::kFloat).to(at::kDouble).clone(); // the float32 weight, exactly
    auto H = hessian.detach().to(dev, at::kDouble).clone();

    // Dead inputs (never active): H_ii = 1 and their weights 0, as GPTQ does.
    auto dead = H.diagonal() == 0;
    const std::int64_t deadCount = dead.sum().item<std::int64_t>();
    if (deadCount > 0) {
        H.diagonal().masked_fill_(dead, 1.0);
        W.masked_fill_(dead.unsqueeze(0), 0.0);
    }

    // Static groups: scales from the full (dead-zeroed) W before the column loop, so that with
    // act-order every weight still uses its own group's scale (GPTQ static_groups, MR-GPTQ).
    const GroupScales gs = staticScales(W.to(at::kFloat), c, nvfp4Global);
    auto colScale = gs.scales.to(dev, at::kFloat).repeat_interleave(c.blockSize, 1).narrow(1, 0, in);

    at::Tensor perm;
    if (o.actOrder) {
        // Decreasing H_ii; a stable sort keeps ties in input order.
        perm = std::get<1>(at::sort(H.diagonal(), /*stable=*/true, /*dim=*/0, /*descending=*/true));
        W = W.index_select(1, perm);
        H = H.index_select(0, perm).index_select(1, perm);
        colScale = colScale.index_select(1, perm);
    }
    colScale = colScale.contiguous();

    H.diagonal().add_(o.damping * H.diagonal().mean());
    // Upper Cholesky factor U of H^-1 (H^-1 = U^T U): row i of U, divided by U_ii, is the OBS
    // update of the remaining columns after column i is quantized.
    // Each [in, in] float64 matrix is dropped as soon as the next is made: two alive at a time
    // (4 GB at in = 14336, Llama-3.1-8B's down_proj, with the caller's Hessian).
    auto L = cholesky(H, false, "the damped Hessian", o.damping);
    H = at::Tensor();
    auto Hinv = at::cholesky_inverse(L);
    L = at::Tensor();
    auto U = cholesky(Hinv, true, "the inverse Hessian", o.damping);
    Hinv = at::Tensor();

    // The column loop is sequential within a block: as tensor operations, ten small ones per
    // column (some 30 before roundToElement searched the grid: 0.38 ms per column on an H200,
    // docs/research/results.md), launch-bound on a GPU. The fused kernel runs it on the CPU for
    // any device, one call a block (the block's weights there, its errors back); the O(n^3) parts
    // (factorizations, one lazy-update product a block) stay on w's device.
    const bool fused = o.backend != mx::Backend::TensorOps;
    const at::Device loopDevice = fused ? at::Device(at::kCPU) : dev;
    const auto blockOptions = W.options().device(loopDevice); // float64
    const auto scaleOnLoop = colScale.to(loopDevice);         // contiguous, as colScale
    auto Q = at::empty({out, in}, blockOptions.dtype(at::kFloat));
    const std::int64_t bs = o.columnBlock;
    for (std::int64_t i1 = 0; i1 < in; i1 += bs) {
        const std::int64_t count = std::min(bs, in - i1);
        auto W1 = at::empty({out, count}, blockOptions);
        W1.copy_(W.narrow(1, i1, count));
        auto Err1 = at::empty({out, count}, blockOptions);
        if (fused)
            columnBlockCpu(W1, U.narrow(0, i1, count).narrow(1, i1, count).to(at::kCPU).contiguous(), scaleOnLoop,
                           Q, Err1, i1, c.element());
        else
            columnBlockTensorOps(W1, U, scaleOnLoop, Q, Err1, i1, c.element());
        // Lazy batch update of everything right of the block.
        if (i1 + count < in)
            W.narrow(1, i1 + count, in - i1 - count)
                .sub_(at::mm(Err1.to(dev), U.narrow(0, i1, count).narrow(1, i1 + count, in - i1 - count)));
    }
    if (o.actOrder) Q = Q.index_select(1, at::argsort(perm).to(Q.device()));

    QuantizedWeight r = finish(w, Q, gs, c, hessian);
    r.deadInputs = deadCount;
    return r;
}

HessianAccumulator::HessianAccumulator(std::int64_t in) : m_in(in) {
    if (in <= 0) throw std::invalid_argument("HessianAccumulator: the input width must be positive, got " + std::to_string(in));
    // Allocated by the first add(), on the activations' device: a GPU run's accumulators never
    // take host memory (a 128-expert layer holds 2 per expert, GBs at 8B widths).
    m_sum = at::zeros({0}, at::TensorOptions().dtype(at::kDouble));
}

void HessianAccumulator::add(const at::Tensor& x) {
    if (!x.defined() || x.dim() < 1 || x.size(-1) != m_in)
        throw std::invalid_argument("HessianAccumulator::add: activations must be [..., " + std::to_string(m_in) +
                                    "], got " + (x.defined() ? util::shapeText(x.sizes().vec()) : std::string("undefined")));
    if (!at::isFloatingType(x.scalar_type()))
        throw std::invalid_argument("HessianAccumulator::add: activations must be floating point");
    if (x.numel() == 0) return;
    if (m_rows == 0 && (m_sum.device() != x.device() || m_sum.numel() != m_in * m_in)) // accumulate where the data lives
        m_sum = at::zeros({m_in, m_in}, at::TensorOptions().dtype(at::kDouble).device(x.device()));
    auto x2 = x.detach().reshape({-1, m_in}).to(m_sum.device(), at::kDouble);
    const auto bad = util::findNonFinite(x2);
    if (bad)
        throw std::invalid_argument("the activations " + util::shapeText(x.sizes().vec()) +
                                    " of a Hessian hold NaN/Inf (row/input " + bad.describe() + ")");
    m_sum.addmm_(x2.t(), x2);
    m_rows += x2.size(0);
}

at::Tensor HessianAccumulator::hessian() const {
    if (m_rows == 0) throw std::logic_error("HessianAccumulator::hessian: no activation rows were added");
    return m_sum * (2.0 / static_cast<double>(m_rows));
}

at::Tensor HessianAccumulator::take() {
    if (m_rows == 0) throw std::logic_error("HessianAccumulator::take: no activation rows were added");
    at::Tensor h = m_sum.mul_(2.0 / static_cast<double>(m_rows));
    m_sum = at::zeros({0}, h.options()); // released; add() starts a new sum
    m_rows = 0;
    return h;
}

void HessianAccumulator::reduce(const std::function<void(const at::Tensor&)>& inPlace) {
    if (m_sum.numel() != m_in * m_in) m_sum = at::zeros({m_in, m_in}, m_sum.options()); // no rows here, or after take()
    inPlace(m_sum);
    const at::Tensor rows = at::full({1}, static_cast<double>(m_rows), at::TensorOptions().dtype(at::kDouble));
    inPlace(rows);
    m_rows = std::llround(rows.item<double>());
}

void HessianAccumulator::reset() {
    m_rows = 0;
    if (m_sum.numel() == m_in * m_in) m_sum.zero_();
}

} // namespace latmix::quant
