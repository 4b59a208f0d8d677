// latmix export: a quantization run as a Hugging Face or compressed-tensors folder (SPEC §8), or
// as one GGUF file for llama.cpp (docs/developer/gguf.md).
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

int runGgufExport(const ExportCliOptions& o) {
    exporting::GgufReport r;
    {
        CliProgress progress("export");
        r = exporting::exportGguf(o.runDir, o.out, progress, o.overwrite);
    }
    std::printf("exported    %s -> %s (gguf for llama.cpp)\n", o.runDir.c_str(), r.file.c_str());
    std::printf("tensors     %d, of which %d %s\n", r.tensors, r.fp4Tensors, r.fp4Type.c_str());
    std::printf("size        %.2f MiB, read back and verified\n", r.bytes / 1048576.0);
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
                                             "compressed-tensors (packed MX) folder, or a GGUF file for llama.cpp");
    cmd->add_option("RUN_DIR", o->runDir, "run folder written by `latmix quantize` (model/, latmix.json)")->required();
    cmd->add_option("--format", o->format, "hf, compressed-tensors, or gguf (MXFP4 and NVFP4 runs of Llama, Mistral, Qwen2, Qwen3, for llama.cpp)")
        ->required();
    cmd->add_option("--out", o->out, "output folder, new or empty unless --overwrite (gguf: the file, FILE.gguf)")->required();
    cmd->add_flag("--overwrite", o->overwrite, "replace an existing output folder or file once the export has succeeded");
    return [o] { return runExport(*o); };
}

} // namespace latmix::cli
