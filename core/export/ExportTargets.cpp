#include "export/ExportTargets.h"

#include "model/ModelConfig.h"

#include <filesystem>
#include <stdexcept>

namespace latmix::exporting {
namespace {

// Bytes of one block linear's weight [out, in] in each target (docs/developer/gguf.md,
// compressed-tensors.md): hf bf16; compressed-tensors the packed codes and a scale byte per block
// (NVFP4: its global scale too); GGUF 17/32 (MXFP4) or 36/64 (NVFP4) bytes per value, F32 where
// rows end in a partial block or T3 was folded back into down_proj.
std::uint64_t linearBytes(const std::string& format, const model::LatmixQuantization& q, std::int64_t out, std::int64_t in,
                          bool down) {
    const std::uint64_t n = std::uint64_t(out) * std::uint64_t(in);
    if (format == "hf" || !q.weightFormat) return 2 * n;
    const bool nv = q.weightFormat->isNvfp4();
    const std::int64_t block = q.weightFormat->blockSize;
    if (format == "compressed-tensors")
        return std::uint64_t(out) * std::uint64_t((in + 1) / 2 + (in + block - 1) / block) + (nv ? 4 : 0);
    const std::int64_t ggmlBlock = nv ? 64 : 32;
    if ((down && q.t3Block > 0) || in % ggmlBlock != 0) return 4 * n;
    return n / std::uint64_t(ggmlBlock) * (nv ? 36 : 17) + (nv ? 4 : 0);
}

} // namespace

ExportTarget describeExportTarget(const std::string& runDir, const std::string& format) {
    if (format != "hf" && format != "compressed-tensors" && format != "gguf")
        throw std::invalid_argument("unknown export format '" + format + "'; choose one of hf, compressed-tensors, gguf");
    const std::string path = (std::filesystem::path(runDir) / "model" / "config.json").string();
    const model::ModelConfig c = model::ModelConfig::fromFile(path);
    if (!c.latmix) throw std::runtime_error(path + " is not a quantization run's config (no \"latmix\" object)");
    const model::LatmixQuantization& q = *c.latmix;
    const bool t3 = q.t3Block > 0;
    const std::string fmt = q.weightFormat ? q.weightFormat->describe() : "unquantized";

    // Tensor data: the block linears of every layer, the embedding (and lm_head when untied).
    const std::int64_t h = c.hiddenSize, i = c.intermediateSize, qd = std::int64_t(c.numHeads) * c.headDim,
                       kv = std::int64_t(c.numKvHeads) * c.headDim;
    const std::pair<std::int64_t, std::int64_t> shapes[] = {{qd, h}, {kv, h}, {kv, h}, {h, qd}, {i, h}, {i, h}};
    std::uint64_t bytes = 0;
    for (const auto& [out, in] : shapes) bytes += linearBytes(format, q, out, in, false);
    bytes += linearBytes(format, q, h, i, true);
    bytes *= std::uint64_t(c.numLayers);
    const std::uint64_t table = std::uint64_t(c.vocabSize) * std::uint64_t(h) * (format == "gguf" ? 4 : 2);
    bytes += table * (c.tieWordEmbeddings ? 1 : 2);

    ExportTarget t;
    t.bytes = bytes;
    if (format == "hf") {
        t.runtimes = "transformers, vLLM, and any runtime that loads a bf16 Hugging Face model";
        t.online = "nothing: the weight-only model (activations unquantized)";
        t.folded = std::string("T1, T2 and their biases") + (t3 ? "; T3 folded back into down_proj" : "") +
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

} // namespace latmix::exporting
