#include "tokenizer/HfPipeline.h"

#include "tokenizer/Pcre2Regex.h"
#include "tokenizer/Utf8.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace latmix::tokenizer {

using json = nlohmann::json;

namespace {

// GPT-2's pre-tokenizer regex, which HF's ByteLevel pre-tokenizer applies when use_regex.
const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kMetaspace = "\xE2\x96\x81"; // U+2581 "▁", SentencePiece's space

std::string replaceAll(const std::string& s, const Pcre2Regex& re, const std::string& with) {
    const auto m = re.findAll(s);
    if (m.empty()) return s;
    std::string out;
    out.reserve(s.size() + m.size() * with.size());
    std::size_t prev = 0;
    for (const auto& [b, e] : m) {
        out.append(s, prev, b - prev);
        out += with;
        prev = e;
    }
    out.append(s, prev, std::string::npos);
    return out;
}

// HF's NormalizedString::split(pattern, behavior) (tokenizer/normalizer.rs), byte offsets.
std::vector<std::string> splitBy(const std::string& s, const Pcre2Regex& re, HfPipeline::SplitBehavior behavior,
                                 bool invert) {
    struct Part {
        std::size_t b, e;
        bool match;
    };
    std::vector<Part> parts;
    std::size_t prev = 0;
    for (const auto& [b, e] : re.findAll(s)) {
        if (prev != b) parts.push_back({prev, b, invert});
        parts.push_back({b, e, !invert});
        prev = e;
    }
    if (prev != s.size()) parts.push_back({prev, s.size(), invert});

    using B = HfPipeline::SplitBehavior;
    std::vector<std::pair<std::size_t, std::size_t>> ranges;
    switch (behavior) {
    case B::Removed:
        for (const auto& p : parts)
            if (!p.match) ranges.emplace_back(p.b, p.e);
        break;
    case B::Isolated:
        for (const auto& p : parts) ranges.emplace_back(p.b, p.e);
        break;
    case B::MergedWithPrevious: {
        bool previousMatch = false;
        for (const auto& p : parts) {
            if (p.match && !previousMatch && !ranges.empty()) ranges.back().second = p.e;
            else ranges.emplace_back(p.b, p.e);
            previousMatch = p.match;
        }
        break;
    }
    case B::MergedWithNext: {
        bool nextMatch = false; // walked from the end, as HF folds the reversed list
        for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
            if (it->match && !nextMatch && !ranges.empty()) ranges.back().first = it->b;
            else ranges.emplace_back(it->b, it->e);
            nextMatch = it->match;
        }
        std::reverse(ranges.begin(), ranges.end());
        break;
    }
    case B::Contiguous: {
        bool previousMatch = false;
        for (const auto& p : parts) {
            if (p.match == previousMatch && !ranges.empty()) ranges.back().second = p.e;
            else ranges.emplace_back(p.b, p.e);
            previousMatch = p.match;
        }
        break;
    }
    }
    std::vector<std::string> out;
    for (const auto& [b, e] : ranges)
        if (e > b) out.push_back(s.substr(b, e - b)); // HF drops empty splits
    return out;
}

int hexDigit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

bool startsWith(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

// Strip up to `start` leading and `stop` trailing copies of the character `content`.
std::string stripChars(const std::string& s, const std::string& content, int start, int stop) {
    std::size_t b = 0, e = s.size();
    for (int i = 0; i < start && e - b >= content.size() && s.compare(b, content.size(), content) == 0; ++i)
        b += content.size();
    for (int i = 0; i < stop && e - b >= content.size() && s.compare(e - content.size(), content.size(), content) == 0; ++i)
        e -= content.size();
    return s.substr(b, e - b);
}

std::string stripWhitespace(const std::string& s, bool left, bool right) {
    std::size_t b = 0, e = s.size(), bad = 0;
    while (left && b < e) {
        const std::size_t n = utf8::validLength(s, b, bad);
        if (!n || !utf8::isWhitespace(utf8::codePoint(s, b, n))) break;
        b += n;
    }
    while (right && e > b) {
        std::size_t k = e - 1;
        while (k > b && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
        const std::size_t n = utf8::validLength(s, k, bad);
        if (!n || !utf8::isWhitespace(utf8::codePoint(s, k, n))) break;
        e = k;
    }
    return s.substr(b, e - b);
}

std::string typeOf(const json& j, const std::string& where, const std::string& file) {
    if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
        throw std::runtime_error(file + ": " + where + " has no \"type\"");
    return j["type"].get<std::string>();
}

template <class T>
T field(const json& j, const char* key, T def) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return def;
    return it->get<T>();
}

} // namespace

struct HfPipeline::Normalizer {
    enum Kind { Prepend, Replace, Strip } kind;
    std::string text; // Prepend: prefix; Replace: content
    std::shared_ptr<const Pcre2Regex> re;
    bool left = false, right = false;
};

struct HfPipeline::PreTokenizer {
    enum Kind { ByteLevel, Split, Metaspace } kind;
    std::shared_ptr<const Pcre2Regex> re; // ByteLevel: GPT-2 regex or null; Split: its pattern
    SplitBehavior behavior = SplitBehavior::Isolated;
    bool invert = false;
    bool addPrefixSpace = false; // ByteLevel
    std::string replacement;     // Metaspace
    enum Prepend { Always, First, Never } prepend = Always;
    bool split = true;
};

struct HfPipeline::Decoder {
    enum Kind { ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace } kind;
    std::shared_ptr<const Pcre2Regex> re;
    std::string text; // Replace: content; Strip: the character; Metaspace: replacement
    int start = 0, stop = 0;
    bool prependFirst = true; // Metaspace: prepend_scheme != "never"
};

HfPipeline::HfPipeline(const json& root, const std::string& file) : m_file(file) {
    if (root.contains("normalizer") && !root["normalizer"].is_null()) addNormalizer(root["normalizer"], "normalizer");
    if (root.contains("pre_tokenizer") && !root["pre_tokenizer"].is_null())
        addPreTokenizer(root["pre_tokenizer"], "pre_tokenizer");
    if (root.contains("decoder") && !root["decoder"].is_null()) {
        m_hasDecoder = true;
        addDecoder(root["decoder"], "decoder");
    }
}

HfPipeline::~HfPipeline() = default;

void HfPipeline::unsupported(const std::string& where, const std::string& what) const {
    throw std::runtime_error(m_file + ": unsupported " + where + ": " + what);
}

std::shared_ptr<const Pcre2Regex> HfPipeline::pattern(const json& j, const std::string& where) const {
    // HF serialises patterns as {"String": "..."} (literal) or {"Regex": "..."}.
    try {
        if (j.is_object() && j.contains("String")) return std::make_shared<Pcre2Regex>(Pcre2Regex::quote(j["String"].get<std::string>()));
        if (j.is_object() && j.contains("Regex")) return std::make_shared<Pcre2Regex>(j["Regex"].get<std::string>());
    } catch (const std::runtime_error& e) {
        throw std::runtime_error(m_file + ": " + where + ".pattern: " + e.what());
    }
    unsupported(where + ".pattern", j.dump());
}

void HfPipeline::addNormalizer(const json& j, const std::string& where) {
    const std::string type = typeOf(j, where, m_file);
    if (type == "Sequence") {
        const auto& list = j.at("normalizers");
        for (std::size_t i = 0; i < list.size(); ++i) addNormalizer(list[i], where + ".normalizers[" + std::to_string(i) + "]");
    } else if (type == "Prepend") {
        m_normalizers.push_back({Normalizer::Prepend, j.at("prepend").get<std::string>(), nullptr});
    } else if (type == "Replace") {
        m_normalizers.push_back({Normalizer::Replace, j.at("content").get<std::string>(), pattern(j.at("pattern"), where)});
    } else if (type == "Strip") {
        Normalizer n{Normalizer::Strip, {}, nullptr};
        n.left = field(j, "strip_left", false);
        n.right = field(j, "strip_right", false);
        m_normalizers.push_back(n);
    } else if (type == "NFC") {
        // Identity here; see the header.
    } else {
        unsupported(where, "type \"" + type + "\"");
    }
}

void HfPipeline::addPreTokenizer(const json& j, const std::string& where) {
    const std::string type = typeOf(j, where, m_file);
    PreTokenizer p{};
    if (type == "Sequence") {
        const auto& list = j.at("pretokenizers");
        for (std::size_t i = 0; i < list.size(); ++i)
            addPreTokenizer(list[i], where + ".pretokenizers[" + std::to_string(i) + "]");
        return;
    } else if (type == "ByteLevel") {
        // Defaults of HF's ByteLevel::default(): add_prefix_space and use_regex both true.
        p.kind = PreTokenizer::ByteLevel;
        p.addPrefixSpace = field(j, "add_prefix_space", true);
        if (field(j, "use_regex", true)) {
            static const auto gpt2 = std::make_shared<const Pcre2Regex>(kGpt2Pattern);
            p.re = gpt2;
        }
        m_byteLevel = true;
    } else if (type == "Split") {
        p.kind = PreTokenizer::Split;
        p.re = pattern(j.at("pattern"), where);
        const std::string b = j.at("behavior").get<std::string>();
        if (b == "Removed") p.behavior = SplitBehavior::Removed;
        else if (b == "Isolated") p.behavior = SplitBehavior::Isolated;
        else if (b == "MergedWithPrevious") p.behavior = SplitBehavior::MergedWithPrevious;
        else if (b == "MergedWithNext") p.behavior = SplitBehavior::MergedWithNext;
        else if (b == "Contiguous") p.behavior = SplitBehavior::Contiguous;
        else unsupported(where + ".behavior", "\"" + b + "\"");
        p.invert = field(j, "invert", false);
    } else if (type == "Metaspace") {
        p.kind = PreTokenizer::Metaspace;
        p.replacement = field<std::string>(j, "replacement", kMetaspace);
        // prepend_scheme (tokenizers >= 0.14) or the older add_prefix_space flag.
        std::string scheme = field<std::string>(j, "prepend_scheme", "");
        if (scheme.empty()) scheme = field(j, "add_prefix_space", true) ? "always" : "never";
        if (scheme == "always") p.prepend = PreTokenizer::Always;
        else if (scheme == "first") p.prepend = PreTokenizer::First;
        else if (scheme == "never") p.prepend = PreTokenizer::Never;
        else unsupported(where + ".prepend_scheme", "\"" + scheme + "\"");
        p.split = field(j, "split", true);
        p.re = std::make_shared<const Pcre2Regex>(Pcre2Regex::quote(p.replacement));
    } else if (type == "Digits") {
        // char::is_numeric is Unicode N; individual digits are Isolated one by one, otherwise
        // runs of them (HF's Contiguous) — the same as isolating \p{N}+.
        p.kind = PreTokenizer::Split;
        p.re = std::make_shared<const Pcre2Regex>(field(j, "individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)");
        p.behavior = SplitBehavior::Isolated;
    } else {
        unsupported(where, "type \"" + type + "\"");
    }
    m_preTokenizers.push_back(std::move(p));
}

void HfPipeline::addDecoder(const json& j, const std::string& where) {
    const std::string type = typeOf(j, where, m_file);
    Decoder d{};
    if (type == "Sequence") {
        const auto& list = j.at("decoders");
        for (std::size_t i = 0; i < list.size(); ++i) addDecoder(list[i], where + ".decoders[" + std::to_string(i) + "]");
        return;
    } else if (type == "ByteLevel") {
        d.kind = Decoder::ByteLevel;
        m_byteLevel = true;
    } else if (type == "Replace") {
        d.kind = Decoder::Replace;
        d.re = pattern(j.at("pattern"), where);
        d.text = j.at("content").get<std::string>();
    } else if (type == "ByteFallback") {
        d.kind = Decoder::ByteFallback;
    } else if (type == "Fuse") {
        d.kind = Decoder::Fuse;
    } else if (type == "Strip") {
        d.kind = Decoder::Strip;
        d.text = j.at("content").get<std::string>();
        d.start = field(j, "start", 0);
        d.stop = field(j, "stop", 0);
    } else if (type == "Metaspace") {
        d.kind = Decoder::Metaspace;
        d.text = field<std::string>(j, "replacement", kMetaspace);
        std::string scheme = field<std::string>(j, "prepend_scheme", "");
        if (scheme.empty()) scheme = field(j, "add_prefix_space", true) ? "always" : "never";
        d.prependFirst = scheme != "never";
    } else {
        unsupported(where, "type \"" + type + "\"");
    }
    m_decoders.push_back(std::move(d));
}

std::string HfPipeline::normalize(std::string s) const {
    for (const auto& n : m_normalizers) {
        switch (n.kind) {
        case Normalizer::Prepend:
            if (!s.empty()) s = n.text + s; // HF's Prepend leaves empty text alone
            break;
        case Normalizer::Replace:
            s = replaceAll(s, *n.re, n.text);
            break;
        case Normalizer::Strip:
            s = stripWhitespace(s, n.left, n.right);
            break;
        }
    }
    return s;
}

std::vector<std::string> HfPipeline::preTokenize(std::string text, bool atStart) const {
    std::vector<std::string> splits;
    if (!text.empty()) splits.push_back(std::move(text));
    const auto& bl = utf8::ByteLevelMap::instance();
    for (const auto& p : m_preTokenizers) {
        std::vector<std::string> next;
        for (std::size_t i = 0; i < splits.size(); ++i) {
            std::string s = std::move(splits[i]);
            // Only the first split of a piece that starts the input sits at original offset 0.
            const bool first = atStart && i == 0;
            switch (p.kind) {
            case PreTokenizer::ByteLevel: {
                if (p.addPrefixSpace && !startsWith(s, " ")) s.insert(0, " ");
                std::vector<std::string> parts;
                if (p.re) parts = splitBy(s, *p.re, SplitBehavior::Isolated, false);
                else parts.push_back(std::move(s));
                for (const auto& part : parts) {
                    std::string mapped;
                    mapped.reserve(part.size() * 2);
                    for (unsigned char c : part) utf8::append(mapped, bl.toCp[c]);
                    next.push_back(std::move(mapped));
                }
                break;
            }
            case PreTokenizer::Split:
                for (auto& part : splitBy(s, *p.re, p.behavior, p.invert)) next.push_back(std::move(part));
                break;
            case PreTokenizer::Metaspace: {
                std::string r;
                r.reserve(s.size() + 8);
                for (char c : s) {
                    if (c == ' ') r += p.replacement;
                    else r += c;
                }
                const bool prepend = p.prepend == PreTokenizer::Always || (p.prepend == PreTokenizer::First && first);
                if (prepend && !startsWith(r, p.replacement)) r.insert(0, p.replacement);
                if (p.split) {
                    for (auto& part : splitBy(r, *p.re, SplitBehavior::MergedWithNext, false)) next.push_back(std::move(part));
                } else if (!r.empty()) {
                    next.push_back(std::move(r));
                }
                break;
            }
            }
        }
        splits = std::move(next);
    }
    return splits;
}

std::string HfPipeline::decode(std::vector<std::string> tokens) const {
    if (!m_hasDecoder) {
        std::string out;
        for (std::size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
        return out;
    }
    const auto& bl = utf8::ByteLevelMap::instance();
    for (const auto& d : m_decoders) {
        std::vector<std::string> next;
        switch (d.kind) {
        case Decoder::ByteLevel: {
            // Every character of a token maps back to its byte; a token with a character outside
            // the byte alphabet (e.g. an added token) contributes its own UTF-8 unchanged. The
            // bytes are then read as UTF-8 with replacement (String::from_utf8_lossy).
            std::string bytes;
            for (const auto& t : tokens) {
                std::string tb;
                bool all = true;
                for (std::size_t i = 0, bad = 0; i < t.size() && all;) {
                    const std::size_t n = utf8::validLength(t, i, bad);
                    const std::uint32_t cp = n ? utf8::codePoint(t, i, n) : 0xFFFFFFFF;
                    if (cp < bl.toByte.size() && bl.toByte[cp] >= 0) tb += static_cast<char>(bl.toByte[cp]);
                    else all = false;
                    i += n ? n : bad;
                }
                bytes += all ? tb : t;
            }
            next.push_back(utf8::lossy(bytes));
            break;
        }
        case Decoder::Replace:
            for (const auto& t : tokens) next.push_back(replaceAll(t, *d.re, d.text));
            break;
        case Decoder::ByteFallback: {
            // Runs of <0xXX> tokens become their bytes when those form valid UTF-8, else one
            // U+FFFD per byte token (HF's byte_fallback.rs).
            std::string pending;
            const auto flush = [&] {
                if (pending.empty()) return;
                if (utf8::isValid(pending)) next.push_back(pending);
                else
                    for (std::size_t i = 0; i < pending.size(); ++i) next.emplace_back("\xEF\xBF\xBD");
                pending.clear();
            };
            for (const auto& t : tokens) {
                int value = -1;
                if (t.size() == 6 && startsWith(t, "<0x") && t[5] == '>') {
                    const int hi = hexDigit(t[3]), lo = hexDigit(t[4]);
                    if (hi >= 0 && lo >= 0) value = hi * 16 + lo;
                }
                if (value >= 0) {
                    pending += static_cast<char>(value);
                } else {
                    flush();
                    next.push_back(t);
                }
            }
            flush();
            break;
        }
        case Decoder::Fuse: {
            std::string all;
            for (const auto& t : tokens) all += t;
            next.push_back(std::move(all));
            break;
        }
        case Decoder::Strip:
            for (const auto& t : tokens) next.push_back(stripChars(t, d.text, d.start, d.stop));
            break;
        case Decoder::Metaspace:
            // HF drops every replacement character of the FIRST token when a prefix was
            // prepended, and turns all others into spaces.
            for (std::size_t i = 0; i < tokens.size(); ++i) {
                std::string r;
                const std::string& t = tokens[i];
                for (std::size_t k = 0; k < t.size();) {
                    if (t.compare(k, d.text.size(), d.text) == 0) {
                        if (!(i == 0 && d.prependFirst)) r += ' ';
                        k += d.text.size();
                    } else {
                        r += t[k++];
                    }
                }
                next.push_back(std::move(r));
            }
            break;
        }
        tokens = std::move(next);
    }
    std::string out;
    for (const auto& t : tokens) out += t;
    return out;
}

} // namespace latmix::tokenizer
