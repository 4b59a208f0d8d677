#pragma once
// Real data lives outside the project (SPEC: never committed); LATMIX_DATA_DIR points at it.
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace latmix::cli {

// LATMIX_DATA_DIR/relative (default ../shared/data); throws naming the path when it is missing.
inline std::string dataPath(const std::string& relative, const char* what) {
    const char* dir = std::getenv("LATMIX_DATA_DIR");
    const std::string base = dir && *dir ? dir : "../shared/data";
    const std::string path = base + "/" + relative;
    if (!std::filesystem::exists(path))
        throw std::runtime_error(std::string(what) + " not found at '" + path +
                                 "'; set LATMIX_DATA_DIR to the data folder or pass a file");
    return path;
}

} // namespace latmix::cli
