#include "export/ExportTargets.h"

#include "export/Export.h"
#include "export/ExportPlan.h"
#include "export/GgufExport.h"
#include "model/ModelConfig.h"
#include "model/TensorNames.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <stdexcept>

namespace latmix::exporting {
namespace {

// Bytes of one block linear's weight [out, in] in each target (docs/developer/gguf.md,
// compressed-tensors.md): hf bf16; compressed-tensors the packed codes and a scale byte per block
// (NVFP4: its global scale too); GGUF 17/32 (MXFP4) or 36/64 (NVFP4) bytes per value, F32 where
// rows end in a partial block or T3 was folded back into down_proj.
std::uint64_t linearBytes(const std::string& format, const model::LatmixQuantization& q, std::int64_t out, std::int64_t in,
                          bool down, bool kept) {
    const std::uint64_t n = std::uint64_t(out) * std::uint64_t(in);
    if (format == "gguf" && kept && down && q.t3Block > 0) return 4 * n; // T3 folded back: F32 like every down_proj
    if (format == "hf" || !q.weightFormat || kept) return 2 * n;        // bf16 (--keep: BF16 in every target)
    const bool nv = q.weightFormat->isNvfp4();
    const std::int64_t block = q.weightFormat->blockSize;
    if (format == "compressed-tensors")
        return std::uint64_t(out) * std::uint64_t((in + 1) / 2 + (in + block - 1) / block) + (nv ? 4 : 0);
    const std::int64_t ggmlBlock = nv ? 64 : 32;
    if ((down && q.t3Block > 0) || in % ggmlBlock != 0) return 4 * n;
    return n / std::uint64_t(ggmlBlock) * (nv ? 36 : 17) + (nv ? 4 : 0);
}

// RUN_DIR/model/config.json, which must be a run's; format checked first.
model::ModelConfig runConfig(const std::string& runDir, const std::string& format) {
    if (format != "gguf") parseExportFormat(format); // an unknown name: the choices listed
    const std::string path = (std::filesystem::path(runDir) / "model" / "config.json").string();
    model::ModelConfig c = model::ModelConfig::fromFile(path);
    if (!c.latmix) throw std::runtime_error(path + " is not a quantization run's config (no \"latmix\" object)");
    return c;
}

} // namespace

void checkExportTarget(const std::string& runDir, const std::string& format) {
    const model::ModelConfig c = runConfig(runDir, format);
    if (format == "gguf") checkGgufConfig(c, runDir);
    if (format == "compressed-tensors") {
        compressionFormat(c.latmix->weightFormat, runDir);
        refuseOnlineInputTransforms(c, "compressed-tensors", runDir);
    }
}

ExportTarget describeExportTarget(const std::string& runDir, const std::string& format) {
    const model::ModelConfig c = runConfig(runDir, format);
    const model::LatmixQuantization& q = *c.latmix;
    const bool t3 = q.t3Block > 0;
    const std::string fmt = q.weightFormat ? q.weightFormat->describe() : "unquantized";

    // Tensor data: every tensor the config calls for, block linears in the target's type, the
    // rest as the target stores them (GGUF F32, the others bf16).
    std::uint64_t bytes = 0;
    for (const auto& [name, shape] : model::requiredTensors(c)) {
        const std::string linear = model::names::blockLinearOfWeight(name);
        std::uint64_t n = 1;
        for (auto d : shape) n *= std::uint64_t(d);
        bytes += linear.empty() ? n * (format == "gguf" ? 4 : 2)
                                : linearBytes(format, q, shape[0], shape[1],
                                              linear.find(model::names::kDownProj) != std::string::npos,
                                              std::find(q.keptLinears.begin(), q.keptLinears.end(), linear) != q.keptLinears.end());
    }

    ExportTarget t;
    t.bytes = bytes;
    if (format == "hf") {
        t.runtimes = "transformers, vLLM, and any runtime that loads a bf16 Hugging Face model";
        t.online = "nothing: the weight-only model (activations unquantized)";
        t.folded = std::string("T1, T2 and their biases") + (t3 ? "; T3 folded back into down_proj" : "") +
                   (q.inputTransforms.empty() ? "" : "; WUSH's input transforms folded back into the weights") +
                   "; the " + fmt + " weights dequantized to bf16";
    } else if (format == "compressed-tensors") {
        t.runtimes = "vLLM (compressed-tensors 0.14 or later; W4A4 on SM100 GPUs and later, weights only before)";
        const std::string t3Online = t3 ? "T3, the block Hadamard of " + std::to_string(q.t3Block) + " on every down_proj input; " : "";
        t.online = t3Online + (q.activationFormat ? "dynamic " + q.activationFormat->describe() + " activations"
                                                  : "no activation quantization");
        t.folded = std::string("T1, T2 and their biases") + (t3 ? "; T3's random signs in up_proj" : "") +
                   "; codes and scales as the run stored them (" + fmt + ")";
    } else {
        t.runtimes = "llama.cpp (MXFP4 and NVFP4 since 2025; checked with llama.cpp v0.4.0 through node-llama-cpp "
                     "3.21.1) and what is built on it: ollama, LM Studio";
        t.online = "nothing of LATMiX's: llama.cpp rounds activations to Q8_0 inside its CPU products";
        t.folded = std::string("T1, T2 and the biases llama.cpp loads") +
                   (t3 ? "; T3 folded back into down_proj, stored in F32 (exact, 4 bytes a weight)" : "") +
                   "; codes and scales as the run stored them (" + fmt + ")";
    }
    return t;
}

ExportSummary exportTo(const std::string& runDir, const std::string& target, const std::string& out, JobContext& job,
                       bool overwrite) {
    ExportSummary s;
    s.target = target;
    if (target == "gguf") {
        const auto t0 = std::chrono::steady_clock::now();
        const GgufReport r = exportGguf(runDir, out, job, overwrite);
        s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        s.out = r.file;
        s.tensors = r.tensors;
        s.packedLinears = r.fp4Tensors;
        s.packedType = r.fp4Type;
        s.bytes = r.bytes;
        s.notes = r.notes;
        return s;
    }
    ExportOptions options;
    options.overwrite = overwrite;
    const ExportReport r = exportRun(runDir, parseExportFormat(target), out, job, options);
    s.out = r.outDir;
    s.tensors = r.tensors;
    s.packedLinears = r.packedLinears;
    s.bytes = r.bytes;
    s.seconds = r.seconds;
    s.files = r.files;
    s.notes = r.notes;
    return s;
}

} // namespace latmix::exporting
