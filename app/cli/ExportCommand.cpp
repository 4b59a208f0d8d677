// latmix export: a quantization run as a Hugging Face or compressed-tensors folder (SPEC §8).
#include "cli/CliProgress.h"
#include "cli/Commands.h"

#include "export/Export.h"
#include "export/GgufExport.h"

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

namespace latmix::cli {
namespace {

struct ExportCliOptions {
    std::string runDir, format, out;
    bool overwrite = false;
};

// WIP (issue 36): one GGUF file for llama.cpp.
int runGgufExport(const ExportCliOptions& o) {
    exporting::GgufReport r;
    {
        CliProgress progress("export");
        r = exporting::exportGguf(o.runDir, o.out, progress);
    }
    std::printf("exported    %s -> %s (gguf, %d MXFP4 tensors, %.2f MiB)\n", o.runDir.c_str(), r.file.c_str(),
                r.mxfp4Tensors, r.bytes / 1048576.0);
    for (const auto& n : r.notes) std::printf("note        %s\n", n.c_str());
    return 0;
}

int runExport(const ExportCliOptions& o) {
    if (o.format == "gguf") return runGgufExport(o);
    const auto format = exporting::parseExportFormat(o.format); // one-line error listing the choices
    exporting::ExportOptions options;
    options.overwrite = o.overwrite;
    exporting::ExportReport r;
    {
        CliProgress progress("export");
        r = exporting::exportRun(o.runDir, format, o.out, progress, options);
    }
    std::printf("exported    %s -> %s (%s)\n", r.runDir.c_str(), r.outDir.c_str(),
                exporting::exportFormatName(r.format).c_str());
    std::printf("tensors     %d in model.safetensors%s\n", r.tensors,
                r.packedLinears ? (", " + std::to_string(r.packedLinears) + " block linears packed").c_str() : "");
    std::printf("size        %.2f MiB in %zu files, %.1f s, verified against the run\n", r.bytes / 1048576.0,
                r.files.size(), r.seconds);
    std::printf("files      ");
    for (const auto& f : r.files) std::printf(" %s", f.c_str());
    std::printf("\n");
    for (const auto& n : r.notes) std::printf("note        %s\n", n.c_str());
    return 0;
}

} // namespace

Runner addExportCommand(CLI::App& app) {
    auto o = std::make_shared<ExportCliOptions>();
    auto* cmd = app.add_subcommand("export", "export a quantization run as a Hugging Face (bf16, dequantized) or "
                                             "compressed-tensors (packed MX) folder");
    cmd->add_option("RUN_DIR", o->runDir, "run folder written by `latmix quantize` (model/, latmix.json)")->required();
    cmd->add_option("--format", o->format, "hf or compressed-tensors")->required();
    cmd->add_option("--out", o->out, "output folder (must be new or empty unless --overwrite)")->required();
    cmd->add_flag("--overwrite", o->overwrite, "replace a non-empty output folder once the export has succeeded");
    return [o] { return runExport(*o); };
}

} // namespace latmix::cli
