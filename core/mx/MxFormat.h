#pragma once
// MX formats, element formats and scale modes (SPEC §1). Plain C++, no libtorch.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace latmix::mx {

// Element formats of the OCP MX specification plus the INT formats of microxcaling.
enum class ElementFormat { E2M1, E2M3, E3M2, E4M3, E5M2, Int8, Int4 };

// How the shared E8M0 exponent is chosen from the block's absolute maximum (SPEC §1). The first
// three are MX rules; FourOverSix is NVFP4's only other mode: each block of 16 takes the E4M3
// scale that maps its maximum to 6 or the one that maps it to 4, whichever has the smaller
// squared error (SPEC §1, "Four over six").
enum class ScaleMode { Floor, Ceil, Even, FourOverSix };

// User-facing quantization formats; names are the ones used in the CLI, GUI and files.
enum class Format { MxFp4, MxFp6E2M3, MxFp6E3M2, MxFp8E4M3, MxFp8E5M2, MxInt8, MxInt4, NvFp4 };

struct ElementSpec {
    const char* name;
    int bits;        // storage width of one code, sign included
    int emax;        // exponent of the largest binade (0 for INT: fixed-point in [-2, 2))
    int emin;        // exponent of the smallest normal binade (INT: 0, no binades)
    int mbits;       // mantissa bits (INT: fractional bits)
    int bias;        // exponent bias (INT: unused)
    double maxValue; // largest magnitude, saturation bound
    bool isInteger;
};

const ElementSpec& elementSpec(ElementFormat f);

struct FormatInfo {
    Format format;
    const char* name;
    ElementFormat element;
    int defaultBlock;
    bool nvfp4; // E4M3 block scales + FP32 tensor scale instead of E8M0 scales
};

const FormatInfo& formatInfo(Format f);
const std::vector<FormatInfo>& allFormats();

// The format named `name`, or nothing where no format has that name.
std::optional<Format> findFormat(std::string_view name);
// Parsers throw std::invalid_argument with a message listing the valid choices.
Format parseFormat(std::string_view name);
ScaleMode parseScaleMode(std::string_view name);
std::string formatName(Format f);
std::string scaleModeName(ScaleMode m);
std::string formatNameList();    // "mxfp4, mxfp6_e2m3, ..."
std::string scaleModeNameList(); // "floor, ceil, even, four-over-six"

// The paper's name for a model whose weights and activations are both in f: "W" and "A" with the
// element's width, "W4A4" (mxfp4, mxint4, nvfp4), "W6A6", "W8A8".
std::string precisionLabel(Format f);
// The label every format named shares ("W4A4" for mxfp4 and nvfp4), for a column over several
// runs; "quantized" when they differ, a name is unknown or there is none.
std::string precisionLabel(const std::vector<std::string>& formatNames);

struct MxConfig {
    Format format = Format::MxFp4;
    int blockSize = 32;
    ScaleMode scaleMode = ScaleMode::Floor;

    ElementFormat element() const { return formatInfo(format).element; }
    bool isNvfp4() const { return formatInfo(format).nvfp4; }
    // Throws std::invalid_argument: block not a power of two, NVFP4 with block != 16,
    // four-over-six on an MX format (NVFP4 reads the three MX modes as its one standard rule).
    void validate() const;
    bool fourOverSix() const { return isNvfp4() && scaleMode == ScaleMode::FourOverSix; }
    std::string describe() const; // "mxfp4, block 32, scale floor"
};

// A config with the format's default block size (32; NVFP4 16).
MxConfig makeConfig(Format f, ScaleMode mode = ScaleMode::Floor);

// E8M0 shared scale (SPEC §1): byte b means 2^(b-127); exponents are clamped to this range.
constexpr int kScaleExpMin = -127;
constexpr int kScaleExpMax = 127;
constexpr std::uint8_t kScaleNanCode = 0xFF;

// NVFP4 constants (SPEC §1).
constexpr float kNvfp4ScaleMin = 1.0f / 512.0f; // 2^-9, smallest E4M3 subnormal
constexpr float kNvfp4ScaleMax = 448.0f;        // E4M3 max
constexpr float kNvfp4GlobalDivisor = 448.0f * 6.0f;

} // namespace latmix::mx
