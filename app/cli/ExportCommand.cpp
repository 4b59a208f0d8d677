// latmix export: a quantization run as a Hugging Face or compressed-tensors folder (SPEC §8), or
// as one GGUF file for llama.cpp (docs/developer/gguf.md).
#include "cli/CliProgress.h"
#include "cli/Commands.h"

#include "export/ExportTargets.h"

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

namespace latmix::cli {
namespace {

struct ExportCliOptions {
    std::string runDir, format, out; // format: the target's name
    bool overwrite = false;
};

int runExport(const ExportCliOptions& o) {
    exporting::ExportSummary r;
    {
        CliProgress progress("export");
        r = exporting::exportTo(o.runDir, o.format, o.out, progress, o.overwrite);
    }
    const bool gguf = !exporting::exportTargetKind(r.target).extension.empty(); // one file
    std::printf("exported    %s -> %s (%s)\n", o.runDir.c_str(), r.out.c_str(),
                gguf ? (r.target + " for llama.cpp").c_str() : r.target.c_str());
    if (gguf)
        std::printf("tensors     %d, of which %d %s\n", r.tensors, r.packedLinears, r.packedType.c_str());
    else
        std::printf("tensors     %d in model.safetensors%s\n", r.tensors,
                    r.packedLinears ? (", " + std::to_string(r.packedLinears) + " block linears packed").c_str() : "");
    std::printf("size        %.2f MiB%s, %.1f s, %s\n", r.bytes / 1048576.0,
                gguf ? "" : (" in " + std::to_string(r.files.size()) + " files").c_str(), r.seconds,
                gguf ? "read back and verified" : "verified against the run");
    if (!gguf) {
        std::printf("files      ");
        for (const auto& f : r.files) std::printf(" %s", f.c_str());
        std::printf("\n");
    }
    for (const auto& n : r.notes) std::printf("note        %s\n", n.c_str());
    return 0;
}

} // namespace

Runner addExportCommand(CLI::App& app) {
    auto o = std::make_shared<ExportCliOptions>();
    auto* cmd = app.add_subcommand("export", "export a quantization run as a Hugging Face (bf16, dequantized) or "
                                             "compressed-tensors (packed MX) folder, or a GGUF file for llama.cpp");
    cmd->add_option("RUN_DIR", o->runDir, "run folder written by `latmix quantize` (model/, latmix.json)")->required();
    cmd->add_option("--format", o->format, "hf, compressed-tensors, gguf (MXFP4 and NVFP4 runs of Llama, Mistral, Qwen2, Qwen3, for llama.cpp; "
                    "embeddings, output and a folded-back down_proj in BF16) or gguf-f32 (those in F32: exact, larger)")
        ->required();
    cmd->add_option("--out", o->out, "output folder, new or empty unless --overwrite (gguf: the file, FILE.gguf)")->required();
    cmd->add_flag("--overwrite", o->overwrite, "replace an existing output folder or file once the export has succeeded");
    return [o] { return runExport(*o); };
}

} // namespace latmix::cli
