#pragma once
// Small text helpers for messages.
#include <cstdint>
#include <string>
#include <vector>

namespace latmix::util {

// "[a, b]" for error messages.
std::string shapeText(const std::vector<std::int64_t>& shape);

} // namespace latmix::util
