#include "mx/MxCodes.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

namespace latmix::mx {

ElementCodebook::ElementCodebook(ElementFormat f) {
    std::vector<std::pair<double, std::uint8_t>> all;
    for (unsigned code = 0; code < (1u << elementSpec(f).bits); ++code) {
        const double v = decodeElement(static_cast<std::uint8_t>(code), f);
        if (!std::isfinite(v) || v == 0.0) continue;
        try { // only the codes encodeElement gives (INT8's -128/64 lies outside its symmetric range)
            if (encodeElement(v, f) != code) continue;
        } catch (const std::invalid_argument&) {
            continue;
        }
        all.emplace_back(v, static_cast<std::uint8_t>(code));
    }
    all.emplace_back(0.0, 0); // zero: its code by the sign of the value looked up
    std::sort(all.begin(), all.end());
    for (const auto& [v, code] : all) {
        m_values.push_back(v);
        m_codes.push_back(code);
    }
    m_zero = encodeElement(0.0, f);
    m_negativeZero = encodeElement(-0.0, f); // INT8 has one zero: the same code
}

std::uint8_t ElementCodebook::nearest(double x, double* value) const {
    const auto it = std::lower_bound(m_values.begin(), m_values.end(), x);
    std::size_t i = static_cast<std::size_t>(it - m_values.begin());
    if (i == m_values.size() || (i > 0 && x - m_values[i - 1] < m_values[i] - x)) --i;
    if (m_values[i] == 0.0) { // rounds to zero: its sign is the value's
        *value = std::signbit(x) ? -0.0 : 0.0;
        return std::signbit(x) ? m_negativeZero : m_zero;
    }
    *value = m_values[i];
    return m_codes[i];
}

std::uint8_t encodeElement(double value, ElementFormat f) {
    const ElementSpec& spec = elementSpec(f);
    if (std::isnan(value)) {
        if (f == ElementFormat::E4M3) return 0x7F;
        if (f == ElementFormat::E5M2) return 0x7F;
        throw std::invalid_argument(std::string("NaN has no code in ") + spec.name);
    }
    const bool negative = std::signbit(value);
    const double a = std::fabs(value);
    if (spec.isInteger) {
        const double units = a * std::ldexp(1.0, spec.mbits);
        const int mag = static_cast<int>(units);
        if (mag != units || a > spec.maxValue)
            throw std::invalid_argument(std::string("value off the ") + spec.name + " grid");
        if (f == ElementFormat::Int4) return static_cast<std::uint8_t>((negative ? 0x8 : 0x0) | mag);
        return static_cast<std::uint8_t>(static_cast<std::int8_t>(negative ? -mag : mag));
    }
    const unsigned sign = negative ? 1u << (spec.bits - 1) : 0u;
    if (a == 0.0) return static_cast<std::uint8_t>(sign);
    int expField;
    double mant;
    if (a < std::ldexp(1.0, spec.emin)) {
        expField = 0;
        mant = a / std::ldexp(1.0, spec.emin - spec.mbits);
    } else {
        const int e = std::ilogb(a);
        expField = e + spec.bias;
        mant = (a / std::ldexp(1.0, e) - 1.0) * std::ldexp(1.0, spec.mbits);
    }
    const unsigned m = static_cast<unsigned>(mant);
    if (m != mant || a > spec.maxValue)
        throw std::invalid_argument(std::string("value off the ") + spec.name + " grid");
    return static_cast<std::uint8_t>(sign | (static_cast<unsigned>(expField) << spec.mbits) | m);
}

double decodeElement(std::uint8_t code, ElementFormat f) {
    const ElementSpec& spec = elementSpec(f);
    if (f == ElementFormat::Int8) return static_cast<std::int8_t>(code) / 64.0;
    if (f == ElementFormat::Int4) {
        const double mag = (code & 0x7) * 0.25;
        return (code & 0x8) ? -mag : mag;
    }
    const unsigned c = code & ((1u << spec.bits) - 1);
    const bool negative = (c >> (spec.bits - 1)) & 1u;
    const unsigned expField = (c >> spec.mbits) & ((1u << (spec.bits - 1 - spec.mbits)) - 1);
    const unsigned m = c & ((1u << spec.mbits) - 1);
    double a;
    if (f == ElementFormat::E4M3 && expField == 15 && m == 7) {
        a = std::numeric_limits<double>::quiet_NaN();
    } else if (f == ElementFormat::E5M2 && expField == 31) {
        a = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
    } else if (expField == 0) {
        a = m * std::ldexp(1.0, spec.emin - spec.mbits);
    } else {
        a = (1.0 + m * std::ldexp(1.0, -spec.mbits)) * std::ldexp(1.0, static_cast<int>(expField) - spec.bias);
    }
    return negative ? -a : a;
}

double decodeE8M0(std::uint8_t code) {
    if (code == kScaleNanCode) return std::numeric_limits<double>::quiet_NaN();
    return std::ldexp(1.0, static_cast<int>(code) - 127);
}


} // namespace latmix::mx
