#include "util/BitCompare.h"

#include <ATen/ATen.h>

namespace latmix::util {

Mismatch firstBitMismatch(const at::Tensor& a, const at::Tensor& b) {
    Mismatch m;
    if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) {
        m.index = 0;
        return m;
    }
    auto ac = a.contiguous().reshape({-1}), bc = b.contiguous().reshape({-1});
    at::ScalarType bits;
    switch (a.element_size()) {
    case 1: bits = at::kByte; break;
    case 2: bits = at::kShort; break;
    case 4: bits = at::kInt; break;
    default: bits = at::kLong; break;
    }
    auto differ = ac.view(bits).ne(bc.view(bits));
    if (at::isFloatingType(a.scalar_type())) differ = differ.logical_and(ac.isnan().logical_and(bc.isnan()).logical_not());
    if (!differ.any().item<bool>()) return m;
    m.index = differ.nonzero().index({0, 0}).item<std::int64_t>();
    m.a = ac[m.index].to(at::kDouble).item<double>();
    m.b = bc[m.index].to(at::kDouble).item<double>();
    return m;
}

} // namespace latmix::util
