#include "mx/MxQuantizer.h"

#include "mx/MxCodes.h"
#include "mx/MxKernelCpu.h"
#include "mx/MxReference.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

namespace latmix::mx {
namespace {

constexpr int64_t kMantissaUnit = 1 << 23; // one step of the float32 exponent field

struct Quantized {
    at::Tensor values; // float32, same shape as the input
    at::Tensor scales; // float32 [rows, blocks] or undefined when not asked for
};

// 2^e for int32 e in [-127, 127], built from the bits so that it is exact on every device.
at::Tensor pow2(const at::Tensor& e) {
    auto normal = (e + 127) * kMantissaUnit;
    auto bits = at::where(e >= -126, normal, at::full_like(e, 1 << 22)); // 2^-127 is subnormal
    return bits.view(at::kFloat);
}

// Shared exponent per block from the block maxima (finite, >= 0), SPEC §1.
at::Tensor sharedExponents(const at::Tensor& amax, ElementFormat f, ScaleMode mode) {
    const ElementSpec& s = elementSpec(f);
    auto bits = amax.contiguous().view(at::kInt);
    auto fe = at::div(bits, kMantissaUnit, "floor") - 127;
    at::Tensor e;
    // Subnormal maxima: only the INT formats (emax 0) can land above -127 there.
    at::Tensor subnormal;
    switch (mode) {
    case ScaleMode::Floor:
        e = fe - s.emax;
        subnormal = at::full_like(fe, kScaleExpMin);
        break;
    case ScaleMode::Ceil: {
        const float maxMantissa = static_cast<float>(s.maxValue) / std::ldexp(1.0f, std::ilogb(s.maxValue));
        auto mant = amax / pow2(fe.clamp_min(-126));
        e = fe - s.emax + (mant > maxMantissa).to(at::kInt);
        // ceil(log2(amax/max)) = -126 iff amax > max * 2^-127
        const float threshold = std::ldexp(static_cast<float>(s.maxValue), -127);
        subnormal = at::where(amax > threshold, at::full_like(fe, -126), at::full_like(fe, kScaleExpMin));
        break;
    }
    case ScaleMode::FourOverSix:
        throw std::invalid_argument("four-over-six chooses NVFP4's E4M3 scales, not an E8M0 exponent");
    case ScaleMode::Even: {
        const int64_t half = int64_t{1} << (23 - s.mbits - 1);
        auto rounded = at::bitwise_and(bits + half, 0x7f800000);
        e = at::div(rounded, kMantissaUnit, "floor") - 127 - s.emax;
        // amax rounds up to 2^-126 iff amax >= (2 - 2^-(mbits+1)) 2^-127
        const float threshold = std::ldexp(2.0f - std::ldexp(1.0f, -(s.mbits + 1)), -127);
        subnormal = at::where(amax >= threshold, at::full_like(fe, -126 - s.emax), at::full_like(fe, kScaleExpMin));
        break;
    }
    }
    e = at::where(bits < (1 << 23), subnormal, e);
    return at::clamp(e, kScaleExpMin, kScaleExpMax);
}

// An element format's grid as at::bucketize reads it: its values ascending (float32, both signs,
// zero once) and the boundary between each pair of neighbours: their midpoint (exact in float32:
// one bit more than the element's mantissa) where ref::quantizeElement sends a tie down, the float
// just below it where it sends the tie up. bucketize (right = false) gives value i for
// boundary[i-1] < y <= boundary[i]: nearest, ties half to even, ±max beyond the ends.
struct GridTables {
    at::Tensor values, boundaries;
};

GridTables buildGrid(ElementFormat f) {
    const ElementCodebook book(f);
    const std::vector<double>& v = book.values();
    std::vector<float> values(v.begin(), v.end()), bounds;
    for (std::size_t i = 0; i + 1 < v.size(); ++i) {
        const double mid = 0.5 * (v[i] + v[i + 1]);
        const auto m = static_cast<float>(mid);
        if (static_cast<double>(m) != mid)
            throw std::logic_error(std::string("the midpoint of ") + elementSpec(f).name + "'s values " + std::to_string(v[i]) +
                                   " and " + std::to_string(v[i + 1]) + " is not a float32");
        const bool tieUp = ref::quantizeElement(mid, f) == v[i + 1];
        bounds.push_back(tieUp ? std::nextafter(m, -std::numeric_limits<float>::infinity()) : m);
    }
    auto tensorOf = [](const std::vector<float>& x) {
        return at::tensor(at::ArrayRef<float>(x), at::TensorOptions().dtype(at::kFloat));
    };
    return {tensorOf(values), tensorOf(bounds)};
}

// Built once per format and device (a few hundred floats), kept for the process: GPTQ rounds a
// column at a time and would otherwise copy them to the device for every column. Never freed (a
// CUDA tensor must not outlive the CUDA context at exit).
const GridTables& gridTables(ElementFormat f, c10::Device d) {
    static std::mutex mutex;
    static auto* cache = new std::map<std::pair<int, std::string>, GridTables>();
    const std::lock_guard<std::mutex> lock(mutex);
    const auto key = std::make_pair(static_cast<int>(f), d.str());
    auto it = cache->find(key);
    if (it == cache->end()) {
        GridTables g = buildGrid(f);
        it = cache->emplace(key, GridTables{g.values.to(d), g.boundaries.to(d)}).first;
    }
    return it->second;
}

// The grid value nearest each y (float32, any device; signs of zeros not yet set): at::bucketize
// into int32 bucket indices, then a gather.
at::Tensor gridIndex(const at::Tensor& y, const GridTables& g) {
    return at::bucketize(y, g.boundaries, /*out_int32=*/true, /*right=*/false);
}
at::Tensor gridValues(const at::Tensor& index, const GridTables& g, at::IntArrayRef sizes) {
    return g.values.index_select(0, index.reshape({-1})).view(sizes);
}

at::Tensor deviceScalar(float v, const at::Tensor& like) {
    // A 0-d tensor on the same device, never a CPU scalar: CUDA turns division by a CPU scalar
    // into multiplication by its reciprocal, which is not bit exact.
    return at::scalar_tensor(v, like.options());
}

// The largest finite |x| of the whole tensor (NVFP4's global amax). From the blocks' maxima when
// every block is finite; a block holding NaN/Inf may still hold finite values that count.
at::Tensor finiteAmax(const at::Tensor& x2d, const at::Tensor& blockAmax, const at::Tensor& finite) {
    if (finite.all().item<bool>()) return blockAmax.amax();
    auto xabs = x2d.abs();
    return at::where(at::isfinite(xabs), xabs, at::zeros_like(xabs)).amax();
}

// NVFP4's effective block scales (E4M3 scale times g) for maxima mapped to mappedMax (SPEC §1).
at::Tensor nvfp4Effective(const at::Tensor& amax, const at::Tensor& g, float mappedMax) {
    auto s = at::clamp((amax / deviceScalar(mappedMax, amax)) / g, kNvfp4ScaleMin, kNvfp4ScaleMax);
    return roundToElement(s, ElementFormat::E4M3) * g;
}

// Four over six on tensors: per block the scale whose dequantized values have the smaller sum of
// squared errors, 6 on a tie. The sum runs in float64 over the block's columns one at a time, in
// index order, so that every device adds as ref::nvfp4PrefersFour does (a reduction kernel would
// pick its own order and could flip a near tie).
at::Tensor fourOverSixScales(const at::Tensor& blocks, const at::Tensor& eff6, const at::Tensor& eff4) {
    auto blockError = [&](const at::Tensor& eff) {
        auto deq = roundToElement(blocks / eff, ElementFormat::E2M1) * eff;
        auto e = (blocks.to(at::kDouble) - deq.to(at::kDouble)).square_();
        auto sum = e.select(-1, 0).clone();
        for (int64_t i = 1; i < e.size(-1); ++i) sum.add_(e.select(-1, i));
        return sum.unsqueeze(-1);
    };
    return at::where(blockError(eff4) < blockError(eff6), eff4, eff6);
}

// Over the tensor, one allocation besides the output: the grid indices (int32, x's size); the
// per-block maxima, exponents and scales are 1/B of it. The output holds y = x/s, then the grid
// values over y's indices, then their product with s. Seven passes: the maxima, y, the indices,
// the gather, the scale, the signs, the NaN blocks. (Four over six rounds each candidate once more.)
Quantized quantizeTensorOps(const at::Tensor& x2d, const MxConfig& c, bool wantScales, float nvfp4Global) {
    const int64_t rows = x2d.size(0), n = x2d.size(1), B = c.blockSize;
    const int64_t nb = (n + B - 1) / B;
    auto padded = nb * B == n ? x2d : at::constant_pad_nd(x2d, {0, nb * B - n}, 0);
    auto blocks = padded.reshape({rows, nb, B});
    // max |x| as max(max x, -min x): no |x| tensor; NaN propagates through both.
    auto amax = at::maximum(blocks.amax({-1}, true), blocks.amin({-1}, true).neg());
    auto finite = at::isfinite(amax);
    amax = at::where(finite, amax, at::zeros_like(amax));
    const ElementFormat elem = c.element();
    const GridTables& grid = gridTables(elem, x2d.device());
    auto q = at::empty({rows, nb, B}, blocks.options());
    at::Tensor scale;
    if (c.isNvfp4()) {
        at::Tensor g;
        if (nvfp4Global > 0) {
            g = deviceScalar(nvfp4Global, x2d);
        } else {
            g = finiteAmax(x2d, amax, finite) / deviceScalar(kNvfp4GlobalDivisor, x2d);
            g = at::where(g > 0, g, at::ones_like(g));
        }
        scale = nvfp4Effective(amax, g, 6.0f);
        // The padding of a partial block is zero: it adds nothing to either error.
        if (c.fourOverSix()) scale = fourOverSixScales(blocks, scale, nvfp4Effective(amax, g, 4.0f));
        at::div_out(q, blocks, scale);
    } else {
        auto e = sharedExponents(amax, elem, c.scaleMode);
        scale = pow2(e);
        at::mul_out(q, blocks, pow2(-e));
    }
    {
        const at::Tensor index = gridIndex(q, grid);
        auto flat = q.view({-1});
        at::index_select_out(flat, grid.values, 0, index.view({-1}));
    }
    // Scales are positive: y = x/s has x's sign, zeros included (SPEC §1 keeps the sign).
    q.mul_(scale).copysign_(blocks);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    q.masked_fill_(finite.logical_not(), nan);
    q = q.view({rows, nb * B});
    if (nb * B != n) q = q.narrow(1, 0, n).contiguous();
    Quantized r{q, {}};
    if (wantScales) r.scales = scale.masked_fill(finite.logical_not(), nan).reshape({rows, nb});
    return r;
}

Quantized quantizeCpuKernel(const at::Tensor& x2d, const MxConfig& c, bool wantScales, float nvfp4Global) {
    if (!x2d.device().is_cpu())
        throw std::invalid_argument("the MX CPU kernel needs a CPU tensor; use the tensor-ops backend");
    const int64_t rows = x2d.size(0), n = x2d.size(1);
    const int64_t nb = (n + c.blockSize - 1) / c.blockSize;
    auto x = x2d.contiguous();
    Quantized r{at::empty_like(x), {}};
    auto codes = at::empty({rows, nb}, x.options().dtype(at::kByte));
    const float g = !c.isNvfp4()     ? 1.0f
                    : nvfp4Global > 0 ? nvfp4Global
                                      : cpu::nvfp4GlobalScale(x.data_ptr<float>(), x.numel());
    cpu::QuantizeOutputs out;
    out.dequantized = r.values.data_ptr<float>();
    out.scaleCodes = codes.data_ptr<std::uint8_t>();
    cpu::quantizeRows(x.data_ptr<float>(), rows, n, c, g, out);
    if (wantScales) {
        // Decode the 256 possible scale bytes once, then gather.
        auto lut = at::empty({256}, x.options());
        float* l = lut.data_ptr<float>();
        for (int b = 0; b < 256; ++b)
            l[b] = c.isNvfp4() ? static_cast<float>(decodeElement(static_cast<std::uint8_t>(b), ElementFormat::E4M3)) * g
                               : static_cast<float>(decodeE8M0(static_cast<std::uint8_t>(b)));
        r.scales = lut.index({codes.to(at::kLong)});
    }
    return r;
}

// nvfp4Global > 0: NVFP4's tensor scale g given instead of x's own (blockScales).
Quantized quantize(const at::Tensor& x, const MxConfig& c, Backend backend, bool wantScales, float nvfp4Global = 0) {
    c.validate();
    const int64_t n = x.dim() == 0 ? 1 : x.size(-1);
    auto x2d = x.detach().to(at::kFloat).reshape({-1, n});
    if (backend == Backend::Auto)
        backend = x.device().is_cpu() ? Backend::CpuKernel : Backend::TensorOps;
    if (x2d.numel() == 0) return {x2d.clone(), at::empty({x2d.size(0), 0}, x2d.options())};
    return backend == Backend::CpuKernel ? quantizeCpuKernel(x2d, c, wantScales, nvfp4Global)
                                         : quantizeTensorOps(x2d, c, wantScales, nvfp4Global);
}

// Straight-through estimator (SPEC §1): identity gradient inside the representable range.
struct FakeQuantFunction : public torch::autograd::Function<FakeQuantFunction> {
    static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                              int64_t format, int64_t block, int64_t mode, int64_t backend) {
        MxConfig c{static_cast<Format>(format), static_cast<int>(block), static_cast<ScaleMode>(mode)};
        Quantized r = quantize(x, c, static_cast<Backend>(backend), true);
        const double maxValue = elementSpec(c.element()).maxValue;
        auto limit = (r.scales * maxValue).repeat_interleave(block, 1);
        const int64_t n = x.dim() == 0 ? 1 : x.size(-1);
        auto inside = x.detach().to(at::kFloat).reshape({-1, n}).abs() <= limit.narrow(1, 0, n);
        ctx->save_for_backward({inside.reshape(x.sizes())});
        return r.values.reshape(x.sizes()).to(x.scalar_type());
    }
    static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                   torch::autograd::variable_list grads) {
        auto inside = ctx->get_saved_variables()[0];
        auto g = grads[0] * inside.to(grads[0].scalar_type());
        return {g, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    }
};

} // namespace

at::Tensor fakeQuantize(const at::Tensor& x, const MxConfig& c, Backend backend) {
    if (x.requires_grad() && at::GradMode::is_enabled())
        return FakeQuantFunction::apply(x, static_cast<int64_t>(c.format), static_cast<int64_t>(c.blockSize),
                                        static_cast<int64_t>(c.scaleMode), static_cast<int64_t>(backend));
    return quantize(x, c, backend, false).values.reshape(x.sizes()).to(x.scalar_type());
}

bool fusedHadamardApplies(const at::Tensor& x, const MxConfig& c, std::int64_t hadamardBlock) {
    const std::int64_t B = c.blockSize;
    return x.device().is_cpu() && x.scalar_type() == at::kFloat && x.dim() >= 1 && !c.isNvfp4() &&
           hadamardBlock == B && B <= 64 && (B & (B - 1)) == 0 && x.size(-1) % B == 0 &&
           !(x.requires_grad() && at::GradMode::is_enabled());
}

at::Tensor fakeQuantizeAfterHadamard(const at::Tensor& x, const at::Tensor& signs, const MxConfig& c) {
    const int64_t n = x.dim() == 0 ? 1 : x.size(-1);
    if (!fusedHadamardApplies(x, c, c.blockSize) || signs.numel() != n)
        throw std::invalid_argument("fakeQuantizeAfterHadamard: needs a float32 CPU tensor without gradient, rows a "
                                    "multiple of the MX block and one sign per column (got " +
                                    std::to_string(n) + " columns, " + std::to_string(signs.numel()) + " signs)");
    const auto x2d = x.contiguous().view({-1, n});
    const auto s = signs.to(at::kFloat).cpu().contiguous();
    auto y = at::empty_like(x2d);
    cpu::QuantizeOutputs out;
    out.dequantized = y.data_ptr<float>();
    cpu::quantizeRowsAfterHadamard(x2d.data_ptr<float>(), s.data_ptr<float>(), x2d.size(0), n, c, out);
    return y.view(x.sizes());
}

at::Tensor blockScales(const at::Tensor& x, const MxConfig& c, Backend backend, float nvfp4Global) {
    if (!(nvfp4Global >= 0 && std::isfinite(nvfp4Global)))
        throw std::invalid_argument("blockScales: an NVFP4 tensor scale must be positive and finite, got " +
                                    std::to_string(nvfp4Global));
    auto r = quantize(x, c, backend, true, nvfp4Global);
    auto shape = x.sizes().vec();
    if (shape.empty()) shape.push_back(1);
    shape.back() = r.scales.size(1);
    return r.scales.reshape(shape);
}

// The same rule as MxKernelCpu's ElementGrid, on tensors: the nearest value of the element's
// grid, ties where ref::quantizeElement sends them (GridTables), then y's sign.
at::Tensor roundToElement(const at::Tensor& y, ElementFormat f) {
    const GridTables& grid = gridTables(f, y.device());
    return gridValues(gridIndex(y, grid), grid, y.sizes()).copysign_(y);
}

} // namespace latmix::mx
