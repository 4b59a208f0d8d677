#include "util/Text.h"

namespace latmix::util {

std::string shapeText(const std::vector<std::int64_t>& s) {
    std::string t = "[";
    for (std::size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
    return t + "]";
}

} // namespace latmix::util
