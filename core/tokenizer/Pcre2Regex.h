#pragma once
// A compiled PCRE2 pattern (8-bit, UTF + UCP) for the regexes found in tokenizer.json files:
// the GPT-2 / Llama-3 / Qwen2 pre-tokenizer patterns use \p{L}, \p{N}, \s, lookahead and
// possessive quantifiers, which PCRE2 supports with the same meaning as Oniguruma (what HF
// tokenizers uses). Internal to latmix_core. Thread-safe: matching allocates per call.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace latmix::tokenizer {

class Pcre2Regex {
public:
    // Throws std::runtime_error with PCRE2's message and offset when the pattern is invalid.
    explicit Pcre2Regex(const std::string& pattern);
    ~Pcre2Regex();
    Pcre2Regex(const Pcre2Regex&) = delete;
    Pcre2Regex& operator=(const Pcre2Regex&) = delete;

    // Byte ranges [begin, end) of the successive non-overlapping, non-empty matches in
    // `subject` (valid UTF-8). An empty match moves the search on by one character, as
    // Oniguruma's / Rust regex's find_iter do; empty matches never reach the caller because
    // HF drops empty splits anyway.
    std::vector<std::pair<std::size_t, std::size_t>> findAll(std::string_view subject) const;

    const std::string& pattern() const { return m_pattern; }

    // The literal text as a pattern (for the {"String": ...} form of HF patterns).
    static std::string quote(std::string_view literal);

private:
    std::string m_pattern;
    struct Code;
    std::unique_ptr<Code> m_code;
};

} // namespace latmix::tokenizer
