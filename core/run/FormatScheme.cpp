#include "run/FormatScheme.h"

#include "quant/BitBudget.h"
#include "util/AtomicFile.h"

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>

namespace latmix::run {

namespace {

constexpr const char* kBf16 = "bf16";

std::string trim(const std::string& s) {
    const auto b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::string quoted(const SchemeRule& r) { return "'" + r.pattern + " = " + r.format + "'"; }

std::regex compile(const SchemeRule& r) {
    try {
        return std::regex(r.pattern, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
        throw std::invalid_argument("scheme rule " + quoted(r) + ": '" + r.pattern + "' is not a regular expression (" + e.what() + ")");
    }
}

// "q_proj, k_proj" from module names.
std::string shortList(const std::vector<std::string>& linears) {
    std::string s;
    for (const auto& m : linears) s += (s.empty() ? "" : ", ") + m.substr(m.find_last_of('.') + 1);
    return s;
}

std::string escapeDots(const std::string& name) {
    std::string s;
    for (char c : name) s += c == '.' ? std::string("\\.") : std::string(1, c);
    return s;
}

} // namespace

std::optional<mx::MxConfig> parseSchemeFormat(const std::string& name) {
    if (name == kBf16) return std::nullopt;
    if (name == "mxfp8") return mx::makeConfig(mx::Format::MxFp8E4M3); // the and OCP's usual 8-bit MX
    if (name == "nvfp4:four-over-six") return mx::makeConfig(mx::Format::NvFp4, mx::ScaleMode::FourOverSix);
    if (const auto f = mx::findFormat(name)) return mx::makeConfig(*f);
    throw std::invalid_argument("unknown format '" + name + "' (scheme formats: " + schemeFormatNames() + ")");
}

std::string schemeFormatName(const std::optional<mx::MxConfig>& f) {
    if (!f) return kBf16;
    if (f->format == mx::Format::MxFp8E4M3) return "mxfp8";
    if (f->fourOverSix()) return "nvfp4:four-over-six";
    return mx::formatName(f->format);
}

std::string schemeFormatNames() { return "mxfp4, nvfp4, nvfp4:four-over-six, mxint4, mxfp8, mxint8, bf16"; }

std::vector<SchemeRule> parseSchemeRules(const std::string& text) {
    std::vector<SchemeRule> rules;
    std::string line;
    std::istringstream in(text);
    while (std::getline(in, line)) {
        line = line.substr(0, line.find('#'));
        std::istringstream parts(line);
        std::string part;
        while (std::getline(parts, part, ';')) {
            part = trim(part);
            if (part.empty()) continue;
            const auto eq = part.rfind('=');
            if (eq == std::string::npos)
                throw std::invalid_argument("scheme rule '" + part + "' has no '=': write REGEX = FORMAT, e.g. self_attn = mxfp8");
            SchemeRule r{trim(part.substr(0, eq)), trim(part.substr(eq + 1))};
            if (r.pattern.empty() || r.format.empty())
                throw std::invalid_argument("scheme rule '" + part + "' needs a regex before '=' and a format after it");
            try {
                parseSchemeFormat(r.format);
            } catch (const std::invalid_argument& e) {
                throw std::invalid_argument("scheme rule " + quoted(r) + ": " + e.what());
            }
            compile(r);
            rules.push_back(std::move(r));
        }
    }
    return rules;
}

std::string schemeRulesText(const std::vector<SchemeRule>& rules) {
    std::string s;
    for (const auto& r : rules) s += r.pattern + " = " + r.format + "\n";
    return s;
}

std::vector<SchemeRule> readSchemeRules(const std::string& fileOrText) {
    if (std::filesystem::is_regular_file(fileOrText)) return parseSchemeRules(util::readTextFile(fileOrText, "scheme"));
    if (fileOrText.find('=') != std::string::npos) return parseSchemeRules(fileOrText);
    throw std::invalid_argument("scheme '" + fileOrText + "' is neither a file nor rules (REGEX = FORMAT; ...)");
}

std::vector<GroupFormat> resolveScheme(const model::ModelConfig& config, const std::vector<SchemeRule>& rules,
                                       const std::optional<mx::MxConfig>& runFormat) {
    const auto groups = model::fusionGroups(config);
    std::vector<GroupFormat> r;
    for (const auto& g : groups) r.push_back({g, runFormat, -1});
    for (std::size_t i = 0; i < rules.size(); ++i) {
        const auto re = compile(rules[i]);
        const auto format = parseSchemeFormat(rules[i].format);
        bool took = false;
        for (auto& gf : r) {
            std::vector<std::string> found, missed;
            for (const auto& m : gf.group.linears) (std::regex_search(m, re) ? found : missed).push_back(m);
            const bool whole = std::regex_search(gf.group.name, re) || missed.empty();
            if (!whole && !found.empty())
                throw std::invalid_argument("scheme rule " + quoted(rules[i]) + " splits the fusion group " + gf.group.name +
                                            ": it matches " + shortList(found) + " but not " + shortList(missed) +
                                            ", and a group's linears take one format (they read one quantized input); "
                                            "name the group (" + escapeDots(gf.group.name) + ") or all of its linears");
            if (!whole) continue;
            took = true;
            if (gf.rule >= 0) continue; // an earlier rule took it
            gf.format = format;
            gf.rule = static_cast<int>(i);
        }
        if (!took)
            throw std::invalid_argument("scheme rule " + quoted(rules[i]) + " matches none of the " + std::to_string(groups.size()) +
                                        " fusion groups (names like " + groups.front().name + ", linears like " +
                                        groups.front().linears.front() + ")");
    }
    return r;
}

double averageBits(const std::vector<GroupFormat>& groups) {
    double bits = 0, weights = 0;
    for (const auto& g : groups) {
        bits += quant::bitsPerWeight(g.format) * static_cast<double>(g.group.weights);
        weights += static_cast<double>(g.group.weights);
    }
    return weights > 0 ? bits / weights : 0;
}

std::vector<SchemeRule> rulesNamingEachGroup(const std::vector<GroupFormat>& groups) {
    std::vector<SchemeRule> r;
    for (const auto& g : groups) r.push_back({"^" + escapeDots(g.group.name) + "$", schemeFormatName(g.format)});
    return r;
}

SchemePreview previewScheme(const model::ModelConfig& config, const std::string& schemeFileOrText,
                            const std::optional<mx::MxConfig>& runFormat) {
    SchemePreview p;
    try {
        const auto rules = schemeFileOrText.empty() ? std::vector<SchemeRule>{} : readSchemeRules(schemeFileOrText);
        const auto groups = resolveScheme(config, rules, runFormat);
        for (const auto& g : groups)
            for (const auto& point : g.group.points) p.pointFormats[point] = schemeFormatName(g.format);
        p.bits = averageBits(groups);
    } catch (const std::exception& e) {
        p = SchemePreview{};
        p.error = e.what();
    }
    return p;
}

} // namespace latmix::run
