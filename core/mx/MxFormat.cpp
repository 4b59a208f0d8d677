#include "mx/MxFormat.h"

#include <algorithm>
#include <array>
#include <stdexcept>

namespace latmix::mx {
namespace {

// Values from the OCP Microscaling Formats spec v1.0, Table 2 (FP) and microxcaling's INT
// formats (sign + fixed point with 2 integer bits: max (2^(bits-1)-1) / 2^(bits-2)).
const std::array<ElementSpec, 7> kElementSpecs = {{
    {"e2m1", 4, 2, 0, 1, 1, 6.0, false},
    {"e2m3", 6, 2, 0, 3, 1, 7.5, false},
    {"e3m2", 6, 4, -2, 2, 3, 28.0, false},
    {"e4m3", 8, 8, -6, 3, 7, 448.0, false},
    {"e5m2", 8, 15, -14, 2, 15, 57344.0, false},
    {"int8", 8, 0, 0, 6, 0, 127.0 / 64.0, true},
    {"int4", 4, 0, 0, 2, 0, 7.0 / 4.0, true},
}};

const std::vector<FormatInfo> kFormats = {
    {Format::MxFp4, "mxfp4", ElementFormat::E2M1, 32, false},
    {Format::MxFp6E2M3, "mxfp6_e2m3", ElementFormat::E2M3, 32, false},
    {Format::MxFp6E3M2, "mxfp6_e3m2", ElementFormat::E3M2, 32, false},
    {Format::MxFp8E4M3, "mxfp8_e4m3", ElementFormat::E4M3, 32, false},
    {Format::MxFp8E5M2, "mxfp8_e5m2", ElementFormat::E5M2, 32, false},
    {Format::MxInt8, "mxint8", ElementFormat::Int8, 32, false},
    {Format::MxInt4, "mxint4", ElementFormat::Int4, 32, false},
    {Format::NvFp4, "nvfp4", ElementFormat::E2M1, 16, true},
};

const char* const kScaleModeNames[] = {"floor", "ceil", "even", "four-over-six"};
constexpr int kScaleModeCount = 4;

} // namespace

const ElementSpec& elementSpec(ElementFormat f) { return kElementSpecs.at(static_cast<size_t>(f)); }

const FormatInfo& formatInfo(Format f) { return kFormats.at(static_cast<size_t>(f)); }

const std::vector<FormatInfo>& allFormats() { return kFormats; }

std::string formatNameList() {
    std::string out;
    for (const auto& f : kFormats) out += (out.empty() ? "" : ", ") + std::string(f.name);
    return out;
}

std::string scaleModeNameList() {
    std::string out;
    for (int i = 0; i < kScaleModeCount; ++i) out += (i ? ", " : "") + std::string(kScaleModeNames[i]);
    return out;
}

std::optional<Format> findFormat(std::string_view name) {
    for (const auto& f : kFormats)
        if (name == f.name) return f.format;
    return std::nullopt;
}

Format parseFormat(std::string_view name) {
    if (const auto f = findFormat(name)) return *f;
    throw std::invalid_argument("unknown MX format '" + std::string(name) + "'; choose one of " +
                                formatNameList());
}

ScaleMode parseScaleMode(std::string_view name) {
    for (int i = 0; i < kScaleModeCount; ++i)
        if (name == kScaleModeNames[i]) return static_cast<ScaleMode>(i);
    throw std::invalid_argument("unknown scale mode '" + std::string(name) + "'; choose one of " +
                                scaleModeNameList());
}

std::string formatName(Format f) { return formatInfo(f).name; }

std::string precisionLabel(Format f) {
    const std::string bits = std::to_string(elementSpec(formatInfo(f).element).bits);
    return "W" + bits + "A" + bits;
}

std::string precisionLabel(const std::vector<std::string>& formatNames) {
    std::string shared;
    for (const auto& name : formatNames) {
        const auto known = findFormat(name);
        if (!known) return "quantized";
        const std::string label = precisionLabel(*known);
        if (!shared.empty() && label != shared) return "quantized";
        shared = label;
    }
    return shared.empty() ? "quantized" : shared;
}

std::string scaleModeName(ScaleMode m) { return kScaleModeNames[static_cast<int>(m)]; }

void MxConfig::validate() const {
    if (blockSize < 1 || (blockSize & (blockSize - 1)) != 0)
        throw std::invalid_argument("MX block size " + std::to_string(blockSize) +
                                    " is not a power of two; use e.g. 16, 32 or 64");
    if (isNvfp4() && blockSize != 16)
        throw std::invalid_argument("nvfp4 uses blocks of 16 (got " + std::to_string(blockSize) +
                                    "); omit the block size or pass 16");
    if (!isNvfp4() && scaleMode == ScaleMode::FourOverSix)
        throw std::invalid_argument("scale mode four-over-six chooses between NVFP4's E4M3 block scales; " + formatName(format) +
                                    " has power-of-two scales: use nvfp4, or the scale mode floor, ceil or even");
}

std::string MxConfig::describe() const {
    std::string s = formatName(format) + ", block " + std::to_string(blockSize);
    if (!isNvfp4() || fourOverSix()) s += ", scale " + scaleModeName(scaleMode);
    return s;
}

MxConfig makeConfig(Format f, ScaleMode mode) {
    MxConfig c;
    c.format = f;
    c.blockSize = formatInfo(f).defaultBlock;
    c.scaleMode = mode;
    return c;
}

} // namespace latmix::mx
