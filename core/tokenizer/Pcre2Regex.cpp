#include "tokenizer/Pcre2Regex.h"

#include "tokenizer/Utf8.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cctype>
#include <stdexcept>

namespace latmix::tokenizer {

namespace {

std::string errorText(int code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(code, buf, sizeof buf);
    return reinterpret_cast<const char*>(buf);
}

struct MatchData {
    pcre2_match_data* md;
    explicit MatchData(const pcre2_code* c) : md(pcre2_match_data_create_from_pattern(c, nullptr)) {
        if (!md) throw std::bad_alloc();
    }
    ~MatchData() { pcre2_match_data_free(md); }
};

// A bigger JIT stack, only for the rare subject that overflows the 32 KiB default (a very long
// run that a backtracking group walks through).
struct BigJitStack {
    pcre2_match_context* ctx = nullptr;
    pcre2_jit_stack* stack = nullptr;
    BigJitStack() {
        ctx = pcre2_match_context_create(nullptr);
        stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
        if (!ctx || !stack) throw std::bad_alloc();
        pcre2_jit_stack_assign(ctx, nullptr, stack);
    }
    ~BigJitStack() {
        pcre2_jit_stack_free(stack);
        pcre2_match_context_free(ctx);
    }
};

} // namespace

struct Pcre2Regex::Code {
    pcre2_code* code = nullptr;
    ~Code() { pcre2_code_free(code); }
};

Pcre2Regex::Pcre2Regex(const std::string& pattern) : m_pattern(pattern), m_code(std::make_unique<Code>()) {
    int err = 0;
    PCRE2_SIZE offset = 0;
    // UTF: the pattern and subjects are UTF-8; UCP: \s, \w, \d and POSIX classes use Unicode
    // properties, as in Oniguruma's Unicode mode.
    m_code->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
    if (!m_code->code)
        throw std::runtime_error("invalid regex /" + pattern + "/ at offset " + std::to_string(offset) + ": " +
                                 errorText(err));
    // JIT is an optimisation only: on failure (e.g. no JIT support) the interpreter is used.
    pcre2_jit_compile(m_code->code, PCRE2_JIT_COMPLETE);
}

Pcre2Regex::~Pcre2Regex() = default;

std::vector<std::pair<std::size_t, std::size_t>> Pcre2Regex::findAll(std::string_view subject) const {
    std::vector<std::pair<std::size_t, std::size_t>> out;
    MatchData data(m_code->code);
    std::unique_ptr<BigJitStack> big;
    const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
    std::size_t pos = 0;
    while (pos <= subject.size()) {
        // The tokenizer sanitises text to valid UTF-8 first, so the per-call check is skipped.
        int rc = pcre2_match(m_code->code, s, subject.size(), pos, PCRE2_NO_UTF_CHECK, data.md,
                             big ? big->ctx : nullptr);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !big) {
            big = std::make_unique<BigJitStack>();
            continue;
        }
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) throw std::runtime_error("regex /" + m_pattern + "/ failed: " + errorText(rc));
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.md);
        const std::size_t b = ov[0], e = ov[1];
        if (e > b) {
            out.emplace_back(b, e);
            pos = e;
        } else {
            if (b >= subject.size()) break;
            pos = b + utf8::charLength(subject, b);
        }
    }
    return out;
}

std::string Pcre2Regex::quote(std::string_view literal) {
    std::string out;
    for (char c : literal) {
        const auto u = static_cast<unsigned char>(c);
        if (u < 0x80 && !std::isalnum(u)) out += '\\';
        out += c;
    }
    return out;
}

} // namespace latmix::tokenizer
