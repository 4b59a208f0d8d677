// latmix mx-quantize: MX fake quantization of numbers read from stdin or a file.
#include "cli/Commands.h"

#include "mx/MxPack.h"
#include "mx/MxQuantizer.h"

#include <ATen/ATen.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace latmix::cli {
namespace {

struct MxQuantizeOptions {
    std::string format = "mxfp4";
    int block = 0; // 0: the format's default
    std::string scaleMode = "floor";
    std::string input;
    bool packed = false;
};

std::vector<float> readNumbers(std::istream& in, const std::string& source) {
    std::vector<float> values;
    std::string token;
    while (in >> token) {
        errno = 0;
        char* end = nullptr;
        const double v = std::strtod(token.c_str(), &end);
        if (end == token.c_str() || *end != '\0')
            throw std::invalid_argument("not a number: '" + token + "' (value " +
                                        std::to_string(values.size() + 1) + " of " + source + ")");
        values.push_back(static_cast<float>(v));
    }
    if (values.empty()) throw std::invalid_argument("no numbers in " + source);
    return values;
}

void printHex(const char* label, const at::Tensor& bytes) {
    auto b = bytes.contiguous();
    const std::uint8_t* p = b.data_ptr<std::uint8_t>();
    std::printf("%s", label);
    for (int64_t i = 0; i < b.numel(); ++i) std::printf(" %02x", p[i]);
    std::printf("\n");
}

int run(const MxQuantizeOptions& o) {
    mx::MxConfig c = mx::makeConfig(mx::parseFormat(o.format), mx::parseScaleMode(o.scaleMode));
    if (o.block != 0) c.blockSize = o.block;
    c.validate();
    std::vector<float> values;
    if (o.input.empty() || o.input == "-") {
        values = readNumbers(std::cin, "stdin");
    } else {
        std::ifstream f(o.input);
        if (!f) throw std::runtime_error("cannot open input file '" + o.input + "'");
        values = readNumbers(f, o.input);
    }
    auto x = at::from_blob(values.data(), {static_cast<int64_t>(values.size())}, at::kFloat).clone();
    if (o.packed) {
        const mx::PackedTensor p = mx::pack(x, c);
        std::printf("format %s block %d scale-mode %s values %zu blocks %lld\n", mx::formatName(c.format).c_str(),
                    c.blockSize, mx::scaleModeName(c.scaleMode).c_str(), values.size(),
                    static_cast<long long>(p.scales.numel()));
        if (c.isNvfp4()) std::printf("global-scale %.9g\n", p.globalScale);
        printHex(c.isNvfp4() ? "scales-e4m3" : "scales-e8m0", p.scales);
        printHex("codes", p.codes);
        return 0;
    }
    auto q = mx::fakeQuantize(x, c).contiguous();
    const float* qp = q.data_ptr<float>();
    for (int64_t i = 0; i < q.numel(); ++i) std::printf("%.9g\n", qp[i]);
    return 0;
}

} // namespace

Runner addMxQuantizeCommand(CLI::App& app) {
    auto o = std::make_shared<MxQuantizeOptions>();
    auto* cmd = app.add_subcommand("mx-quantize",
                                   "MX fake-quantize whitespace-separated numbers (one vector) and print "
                                   "the dequantized values, one per line");
    cmd->add_option("--format", o->format, "mxfp4, mxfp6_e2m3, mxfp6_e3m2, mxfp8_e4m3, mxfp8_e5m2, mxint8, mxint4, nvfp4")
        ->capture_default_str();
    cmd->add_option("--block", o->block, "MX block size, a power of two (default 32; nvfp4 16)");
    cmd->add_option("--scale-mode", o->scaleMode, mx::scaleModeNameList() + " (four-over-six: nvfp4 only)")->capture_default_str();
    cmd->add_option("--input", o->input, "read the numbers from FILE instead of stdin");
    cmd->add_flag("--packed", o->packed, "print packed element codes and scale bytes (hex) instead");
    return [o] { return run(*o); };
}

} // namespace latmix::cli
