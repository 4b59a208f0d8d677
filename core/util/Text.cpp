#include "util/Text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <ctime>

namespace latmix::util {

std::string shapeText(const std::vector<std::int64_t>& s) {
    std::string t = "[";
    for (std::size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
    return t + "]";
}

std::vector<std::string> splitList(const std::string& text, char separator) {
    std::vector<std::string> out;
    for (std::size_t a = 0; a <= text.size();) {
        const std::size_t b = std::min(text.find(separator, a), text.size());
        std::string item = text.substr(a, b - a);
        a = b + 1;
        item.erase(0, item.find_first_not_of(" \t"));
        item.erase(item.find_last_not_of(" \t") + 1);
        out.push_back(std::move(item));
    }
    return out;
}

std::string joinList(const std::vector<std::string>& items, const std::string& separator) {
    std::string s;
    for (const auto& x : items) s += (s.empty() ? "" : separator) + x;
    return s;
}

std::string exactNumber(double v) {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    char b[64];
    const auto r = std::to_chars(b, b + sizeof b, v);
    return std::string(b, r.ptr);
}

std::string utcTimestamp() {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm); // not std::gmtime: its static result would race other threads
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

} // namespace latmix::util
