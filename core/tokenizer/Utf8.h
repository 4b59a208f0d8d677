#pragma once
// UTF-8 helpers shared by the tokenizers (internal to latmix_core). Header-only, no state.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace latmix::tokenizer::utf8 {

constexpr std::uint32_t kReplacement = 0xFFFD;

// Length of the valid UTF-8 sequence at s[i], or 0 when it is not valid. When not valid,
// `bad` receives the length of the "maximal subpart" (Unicode §3.9, the rule Rust's
// String::from_utf8_lossy and Python's errors="replace" follow): the lead byte plus the
// continuation bytes that were still acceptable; that many bytes become one U+FFFD.
inline std::size_t validLength(std::string_view s, std::size_t i, std::size_t& bad) {
    const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
    const unsigned char c0 = b(i);
    bad = 1;
    if (c0 < 0x80) return 1;
    std::size_t need;
    unsigned char lo = 0x80, hi = 0xBF; // range allowed for the second byte
    if (c0 >= 0xC2 && c0 <= 0xDF) need = 1;
    else if (c0 == 0xE0) { need = 2; lo = 0xA0; }
    else if ((c0 >= 0xE1 && c0 <= 0xEC) || c0 == 0xEE || c0 == 0xEF) need = 2;
    else if (c0 == 0xED) { need = 2; hi = 0x9F; } // no UTF-16 surrogates
    else if (c0 == 0xF0) { need = 3; lo = 0x90; }
    else if (c0 >= 0xF1 && c0 <= 0xF3) need = 3;
    else if (c0 == 0xF4) { need = 3; hi = 0x8F; } // nothing above U+10FFFF
    else return 0;
    for (std::size_t k = 1; k <= need; ++k) {
        if (i + k >= s.size()) return 0;
        const unsigned char c = b(i + k);
        const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
        if (c < l || c > h) return 0;
        bad = k + 1;
    }
    return need + 1;
}

inline void append(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

// Code point of the valid sequence of length n at s[i].
inline std::uint32_t codePoint(std::string_view s, std::size_t i, std::size_t n) {
    const auto b = [&](std::size_t k) { return static_cast<std::uint32_t>(static_cast<unsigned char>(s[i + k])); };
    switch (n) {
    case 1: return b(0);
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
    }
}

// Byte length of the character at s[i] for text already known to be valid UTF-8.
inline std::size_t charLength(std::string_view s, std::size_t i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

inline bool isValid(std::string_view s) {
    for (std::size_t i = 0, bad = 0; i < s.size();) {
        const std::size_t n = validLength(s, i, bad);
        if (n == 0) return false;
        i += n;
    }
    return true;
}

// Valid UTF-8 with each maximal invalid subpart replaced by U+FFFD (from_utf8_lossy).
inline std::string lossy(std::string_view s) {
    if (isValid(s)) return std::string(s);
    std::string out;
    out.reserve(s.size() + 8);
    for (std::size_t i = 0, bad = 0; i < s.size();) {
        const std::size_t n = validLength(s, i, bad);
        if (n) {
            out.append(s.substr(i, n));
            i += n;
        } else {
            append(out, kReplacement);
            i += bad;
        }
    }
    return out;
}

// Unicode White_Space (what Rust's char::is_whitespace tests; HF uses it for lstrip/rstrip).
inline bool isWhitespace(std::uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

// GPT-2's bytes_to_unicode (openai/gpt-2 encoder.py, HF tokenizers' ByteLevel): printable
// Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves, the other 68 bytes get
// code points 256, 257, ... in byte order, so every byte becomes a visible character.
struct ByteLevelMap {
    std::array<std::uint32_t, 256> toCp{};
    std::array<int, 324> toByte{}; // code point -> byte, -1 where none (all mapped cps are < 324)
    ByteLevelMap() {
        toByte.fill(-1);
        std::uint32_t next = 256;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            toCp[b] = printable ? static_cast<std::uint32_t>(b) : next++;
            toByte[toCp[b]] = b;
        }
    }
    static const ByteLevelMap& instance() {
        static const ByteLevelMap m;
        return m;
    }
};

} // namespace latmix::tokenizer::utf8
