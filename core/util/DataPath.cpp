#include "util/DataPath.h"

#include <cstdlib>
#include <filesystem>
#include <stdexcept>

namespace latmix::util {

std::string dataDir() {
    const char* dir = std::getenv("LATMIX_DATA_DIR");
    return dir && *dir ? std::string(dir) : std::string("../shared/data");
}

std::string dataFile(const std::string& relative) { return dataDir() + "/" + relative; }

std::string requireDataFile(const std::string& relative, const std::string& what) {
    const std::string path = dataFile(relative);
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
        throw std::runtime_error(what + " not found at '" + path +
                                 "'; set the data folder (LATMIX_DATA_DIR, or File › Data folder… in the workbench) or give the "
                                 "file itself (the command's file option, or the Calibration form's text fields)");
    return path;
}

std::string calibrationTextFile(const std::string& given) {
    return given.empty() ? requireDataFile("wikitext-2/wiki.valid.tokens", "calibration text") : given;
}

std::string wikiText2TestFile() { return requireDataFile("wikitext-2/wiki.test.raw", "WikiText-2 test split"); }

} // namespace latmix::util
