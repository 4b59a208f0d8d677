#pragma once
// Bit codes of single MX elements and of shared scales (SPEC §1, OCP MX v1.0 §5).
#include "mx/MxFormat.h"

#include <cstdint>
#include <cstring>
#include <vector>

namespace latmix::mx {

// Code of a value that lies on the element grid (a result of ref::quantizeElement).
// FP formats: sign | exponent | mantissa, width ElementSpec::bits. INT4: sign-magnitude
// (bit 3 sign, magnitude in quarters). INT8: two's complement in 64ths (OCP MXINT8).
std::uint8_t encodeElement(double value, ElementFormat f);
// Inverse of encodeElement. E4M3 0x7F/0xFF and E5M2 exponent-31 codes decode to NaN/Inf.
double decodeElement(std::uint8_t code, ElementFormat f);

// The codes of one element format ordered by value, for values already on its grid (packing a
// quantized weight): nearest() finds a value's code by a binary search over the 2^bits decoded
// codes instead of ref::quantizeElement's and encodeElement's floating-point arithmetic, which
// cost more than the rest of packing. The caller checks that the code's value is the one it has.
class ElementCodebook {
public:
    explicit ElementCodebook(ElementFormat f);
    // The code whose value is nearest x (x finite; ±0 keep their sign where the format has one),
    // and that value in *value.
    std::uint8_t nearest(double x, double* value) const;
    // The format's finite values, ascending, zero once (INT8 without -128/64: symmetric).
    const std::vector<double>& values() const { return m_values; }

private:
    std::vector<double> m_values; // the finite values, ascending, zero once
    std::vector<std::uint8_t> m_codes;
    std::uint8_t m_zero = 0, m_negativeZero = 0;
};

// E8M0: byte b means 2^(b - 127); 0xFF is NaN.
inline std::uint8_t encodeE8M0(int exponent) { return static_cast<std::uint8_t>(exponent + 127); }
double decodeE8M0(std::uint8_t code);

// Power of two 2^e as float for e in [-149, 127], built from its bits (exact on every target).
inline float pow2f(int e) {
    const std::uint32_t bits = e >= -126 ? static_cast<std::uint32_t>(e + 127) << 23 : 1u << (e + 149);
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

} // namespace latmix::mx
