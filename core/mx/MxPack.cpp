#include "mx/MxPack.h"

#include "mx/MxCodes.h"
#include "mx/MxKernelCpu.h"

#include <ATen/ATen.h>

#include <limits>
#include <stdexcept>

namespace latmix::mx {
namespace {

at::Tensor rowsView(const at::Tensor& t, std::int64_t lastDim) { return t.reshape({-1, lastDim}); }

std::vector<std::int64_t> withLastDim(at::IntArrayRef shape, std::int64_t n) {
    auto s = shape.vec();
    if (s.empty()) s.push_back(1);
    s.back() = n;
    return s;
}

} // namespace

at::Tensor packNibbles(const at::Tensor& codes) {
    const std::int64_t n = codes.size(-1);
    auto c = rowsView(codes.to(at::kByte), n).contiguous();
    const std::int64_t rows = c.size(0), m = (n + 1) / 2;
    auto out = at::zeros({rows, m}, c.options());
    const std::uint8_t* src = c.data_ptr<std::uint8_t>();
    std::uint8_t* dst = out.data_ptr<std::uint8_t>();
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t j = 0; j < n; ++j) {
            const std::uint8_t nib = src[r * n + j] & 0x0F;
            dst[r * m + j / 2] |= (j % 2 == 0) ? nib : static_cast<std::uint8_t>(nib << 4);
        }
    return out.reshape(withLastDim(codes.sizes(), m));
}

at::Tensor unpackNibbles(const at::Tensor& packed, std::int64_t n) {
    const std::int64_t m = packed.size(-1);
    if (m != (n + 1) / 2) throw std::invalid_argument("unpackNibbles: packed width does not match n");
    auto p = rowsView(packed, m).contiguous();
    const std::int64_t rows = p.size(0);
    auto out = at::empty({rows, n}, p.options());
    const std::uint8_t* src = p.data_ptr<std::uint8_t>();
    std::uint8_t* dst = out.data_ptr<std::uint8_t>();
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t j = 0; j < n; ++j) {
            const std::uint8_t b = src[r * m + j / 2];
            dst[r * n + j] = (j % 2 == 0) ? (b & 0x0F) : (b >> 4);
        }
    return out.reshape(withLastDim(packed.sizes(), n));
}

PackedTensor pack(const at::Tensor& x, const MxConfig& c) {
    c.validate();
    if (!x.device().is_cpu()) throw std::invalid_argument("pack: move the tensor to the CPU first");
    const std::int64_t n = x.dim() == 0 ? 1 : x.size(-1);
    auto x2d = x.detach().to(at::kFloat).reshape({-1, n}).contiguous();
    const std::int64_t rows = x2d.size(0), nb = (n + c.blockSize - 1) / c.blockSize;
    PackedTensor p;
    p.config = c;
    p.lastDim = n;
    p.globalScale = c.isNvfp4() ? cpu::nvfp4GlobalScale(x2d.data_ptr<float>(), x2d.numel()) : 1.0f;
    auto codes = at::empty({rows, n}, x2d.options().dtype(at::kByte));
    p.scales = at::empty({rows, nb}, codes.options());
    cpu::QuantizeOutputs out;
    out.scaleCodes = p.scales.data_ptr<std::uint8_t>();
    out.elementCodes = codes.data_ptr<std::uint8_t>();
    cpu::quantizeRows(x2d.data_ptr<float>(), rows, n, c, p.globalScale, out);
    const bool nibbles = elementSpec(c.element()).bits == 4;
    p.codes = nibbles ? packNibbles(codes) : codes;
    p.codes = p.codes.reshape(withLastDim(x.sizes(), p.codes.size(-1)));
    p.scales = p.scales.reshape(withLastDim(x.sizes(), nb));
    return p;
}

at::Tensor unpack(const PackedTensor& p) {
    const MxConfig& c = p.config;
    const ElementFormat elem = c.element();
    const bool nibbles = elementSpec(elem).bits == 4;
    const std::int64_t n = p.lastDim, B = c.blockSize, nb = (n + B - 1) / B;
    auto codes = (nibbles ? unpackNibbles(p.codes, n) : p.codes).reshape({-1, n}).contiguous();
    auto scales = p.scales.reshape({-1, nb}).contiguous();
    const std::int64_t rows = codes.size(0);
    auto out = at::empty({rows, n}, at::TensorOptions().dtype(at::kFloat));
    float elemLut[256], scaleLut[256];
    for (int b = 0; b < 256; ++b) {
        elemLut[b] = static_cast<float>(decodeElement(static_cast<std::uint8_t>(b), elem));
        scaleLut[b] = c.isNvfp4() ? static_cast<float>(decodeElement(static_cast<std::uint8_t>(b), ElementFormat::E4M3))
                                  : static_cast<float>(decodeE8M0(static_cast<std::uint8_t>(b)));
    }
    const std::uint8_t* cd = codes.data_ptr<std::uint8_t>();
    const std::uint8_t* sc = scales.data_ptr<std::uint8_t>();
    float* o = out.data_ptr<float>();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t j = 0; j < n; ++j) {
            const std::uint8_t sb = sc[r * nb + j / B];
            const float q = elemLut[cd[r * n + j]];
            if (c.isNvfp4()) {
                const float eff = scaleLut[sb] * p.globalScale; // same FP32 product as quantization
                o[r * n + j] = sb == 0x7F ? nan : q * eff;
            } else {
                o[r * n + j] = sb == kScaleNanCode ? nan : q * scaleLut[sb];
            }
        }
    return out.reshape(withLastDim(p.codes.sizes(), n));
}

} // namespace latmix::mx
