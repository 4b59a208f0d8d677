#include "export/ExportTargets.h"

#include "export/Export.h"
#include "export/ExportPlan.h"
#include "export/GgufExport.h"
#include "model/FusionGroups.h"
#include "model/ModelConfig.h"
#include "model/TensorNames.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>
#include <stdexcept>

namespace latmix::exporting {
namespace {

using Quantization = model::LatmixQuantization;

std::uint64_t values(std::int64_t out, std::int64_t in) { return std::uint64_t(out) * std::uint64_t(in); }

// Bytes of one block linear's weight [out, in] in each target (docs/developer/gguf.md,
// compressed-tensors.md): hf bf16; compressed-tensors the packed codes and a scale byte per block
// (NVFP4: its global scale too); GGUF 17/32 (MXFP4) or 36/64 (NVFP4) bytes per value, F32 where
// rows end in a partial block, and BF16 (gguf) or F32 (gguf-f32) where T3 was folded back into
// down_proj. Kept linears (--keep) are bf16 everywhere but a GGUF down_proj with T3 folded back
// (as every such down_proj). format: the linear's own (a scheme's group may have another than the
// run's); t3Block: the run's T3.
using WeightFormat = std::optional<mx::MxConfig>;
std::uint64_t hfLinearBytes(const WeightFormat&, int, std::int64_t out, std::int64_t in, bool, bool) {
    return 2 * values(out, in);
}

std::uint64_t ctLinearBytes(const WeightFormat& format, int t3Block, std::int64_t out, std::int64_t in, bool down, bool kept) {
    if (!format || kept || !ctFormatName(*format)) return 2 * values(out, in); // bf16, in ignore
    const std::int64_t block = format->blockSize;
    const std::int64_t codes = mx::elementSpec(format->element()).bits == 8 ? in : (in + 1) / 2;
    // A down_proj whose T3 is declared "hadamard" (Sylvester blocks: a power of two dividing its
    // input) carries the ±1 matrix in F32 (ExportPlan's T3Matrix).
    const bool t3Matrix = down && t3Block > 0 && (t3Block & (t3Block - 1)) == 0 && in % t3Block == 0;
    return std::uint64_t(out) * std::uint64_t(codes + (in + block - 1) / block) + (format->isNvfp4() ? 4 : 0) +
           (t3Matrix ? 4 * values(t3Block, t3Block) : 0);
}

// GGUF: a folded-back W_down · H in BF16 (gguf) or F32 (gguf-f32).
std::uint64_t ggufLinearBytesAt(const WeightFormat& format, int t3Block, std::int64_t out, std::int64_t in, bool down, bool kept,
                                std::uint64_t foldedBytes) {
    const std::uint64_t n = values(out, in);
    if (kept && down && t3Block > 0) return foldedBytes * n;
    if (!format || kept) return 2 * n;
    const bool nv = format->isNvfp4();
    // GGUF's 4-bit types; a scheme's other formats go as BF16 (GgufExport.cpp, Writer::linear).
    if (!(nv || (format->format == mx::Format::MxFp4 && format->blockSize == 32))) return 2 * n;
    const std::int64_t ggmlBlock = nv ? 64 : 32;
    if (down && t3Block > 0) return foldedBytes * n;
    if (in % ggmlBlock != 0) return 4 * n;
    return n / std::uint64_t(ggmlBlock) * (nv ? 36 : 17) + (nv ? 4 : 0);
}

std::uint64_t ggufLinearBytes(const WeightFormat& format, int t3Block, std::int64_t out, std::int64_t in, bool down, bool kept) {
    return ggufLinearBytesAt(format, t3Block, out, in, down, kept, 2);
}

std::uint64_t ggufF32LinearBytes(const WeightFormat& format, int t3Block, std::int64_t out, std::int64_t in, bool down, bool kept) {
    return ggufLinearBytesAt(format, t3Block, out, in, down, kept, 4);
}

void checkNothing(const model::ModelConfig&, const std::string&) {} // hf takes every run

void checkCompressedTensors(const model::ModelConfig& c, const std::string& runDir) {
    compressionFormat(c.latmix->weightFormat, runDir);
    refuseOnlineInputTransforms(c, "compressed-tensors", runDir);
}

void checkGguf(const model::ModelConfig& c, const std::string& runDir) { checkGgufConfig(c, runDir); }

// What each target's runtime computes and what its weights hold; weights: the run's weight format.
void describeHf(const Quantization& q, const std::string& weights, ExportTarget& t) {
    t.runtimes = "transformers, vLLM, and any runtime that loads a bf16 Hugging Face model";
    t.online = "nothing: the weight-only model (activations unquantized)";
    t.folded = std::string("T1, T2 and their biases") + (q.t3Block > 0 ? "; T3 folded back into down_proj" : "") +
               (q.inputTransforms.empty() ? "" : "; WUSH's input transforms folded back into the weights") + "; the " +
               weights + " weights dequantized to bf16";
}

void describeCompressedTensors(const Quantization& q, const std::string& weights, ExportTarget& t) {
    const bool t3 = q.t3Block > 0;
    t.runtimes = "vLLM (compressed-tensors 0.14 or later; W4A4 on SM100 GPUs and later, weights only before)";
    const std::string t3Online = t3 ? "T3, the block Hadamard of " + std::to_string(q.t3Block) + " on every down_proj input; " : "";
    t.online = t3Online + (q.activationFormat ? "dynamic " + q.activationFormat->describe() + " activations"
                                              : "no activation quantization");
    t.folded = std::string("T1, T2 and their biases") + (t3 ? "; T3's random signs in up_proj" : "") +
               "; codes and scales as the run stored them (" + weights + ")";
}

void describeGgufAs(const Quantization& q, const std::string& weights, ExportTarget& t, bool exact) {
    t.runtimes = "llama.cpp (MXFP4 and NVFP4 since 2025; checked with llama.cpp v0.4.0 through node-llama-cpp "
                 "3.21.1) and what is built on it: ollama, LM Studio";
    t.online = "nothing of LATMiX's: llama.cpp rounds activations to Q8_0 inside its CPU products";
    const std::string floats = exact ? "F32 (exact, 4 bytes a weight)" : "BF16 (2 bytes a weight)";
    t.folded = std::string("T1, T2 and the biases llama.cpp loads") +
               (q.t3Block > 0 ? "; T3 folded back into down_proj, stored in " + floats : std::string()) +
               "; the embedding and lm_head in " + floats + "; codes and scales as the run stored them (" + weights + ")";
}

void describeGguf(const Quantization& q, const std::string& weights, ExportTarget& t) { describeGgufAs(q, weights, t, false); }
void describeGgufF32(const Quantization& q, const std::string& weights, ExportTarget& t) { describeGgufAs(q, weights, t, true); }

ExportSummary writeFolder(const std::string& runDir, ExportFormat format, const std::string& out, JobContext& job,
                          bool overwrite) {
    ExportOptions options;
    options.overwrite = overwrite;
    const ExportReport r = exportRun(runDir, format, out, job, options);
    ExportSummary s;
    s.out = r.outDir;
    s.tensors = r.tensors;
    s.packedLinears = r.packedLinears;
    s.bytes = r.bytes;
    s.seconds = r.seconds;
    s.files = r.files;
    s.notes = r.notes;
    return s;
}

ExportSummary writeHf(const std::string& runDir, const std::string& out, JobContext& job, bool overwrite) {
    return writeFolder(runDir, ExportFormat::Hf, out, job, overwrite);
}

ExportSummary writeCompressedTensors(const std::string& runDir, const std::string& out, JobContext& job, bool overwrite) {
    return writeFolder(runDir, ExportFormat::CompressedTensors, out, job, overwrite);
}

ExportSummary writeGgufAs(const std::string& runDir, const std::string& out, JobContext& job, bool overwrite, bool exact) {
    const auto t0 = std::chrono::steady_clock::now();
    const GgufReport r = exportGguf(runDir, out, job, overwrite, exact);
    ExportSummary s;
    s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    s.out = r.file;
    s.tensors = r.tensors;
    s.packedLinears = r.fp4Tensors;
    s.packedType = r.fp4Type;
    s.bytes = r.bytes;
    s.notes = r.notes;
    return s;
}

ExportSummary writeGguf(const std::string& runDir, const std::string& out, JobContext& job, bool overwrite) {
    return writeGgufAs(runDir, out, job, overwrite, false);
}

ExportSummary writeGgufF32(const std::string& runDir, const std::string& out, JobContext& job, bool overwrite) {
    return writeGgufAs(runDir, out, job, overwrite, true);
}

// One row per target: its name, the bytes of a value of the tensors besides the block linears
// (gguf-f32 F32, the others bf16; the norms are F32 in GGUF, a rounding error here), and its
// functions.
struct Target {
    ExportTargetKind kind;
    std::uint64_t otherValueBytes;
    std::uint64_t (*linearBytes)(const WeightFormat& format, int t3Block, std::int64_t out, std::int64_t in, bool down, bool kept);
    void (*check)(const model::ModelConfig&, const std::string& runDir);
    void (*describe)(const Quantization&, const std::string& weights, ExportTarget&);
    ExportSummary (*write)(const std::string& runDir, const std::string& out, JobContext&, bool overwrite);
};

const std::vector<Target>& targets() {
    static const std::vector<Target> table = {
        {{"hf", "Hugging Face (bf16, T3 folded back)", ""}, 2, hfLinearBytes, checkNothing, describeHf, writeHf},
        {{"compressed-tensors", "compressed-tensors (packed MX codes + scales)", ""},
         2, ctLinearBytes, checkCompressedTensors, describeCompressedTensors, writeCompressedTensors},
        {{"gguf", "GGUF for llama.cpp (one file; MXFP4 and NVFP4 runs)", ".gguf"},
         2, ggufLinearBytes, checkGguf, describeGguf, writeGguf},
        {{"gguf-f32", "GGUF for llama.cpp, exact (F32 where not 4-bit)", ".gguf"},
         4, ggufF32LinearBytes, checkGguf, describeGgufF32, writeGgufF32},
    };
    return table;
}

const Target& target(const std::string& name) {
    std::string names;
    for (const Target& t : targets()) {
        if (t.kind.name == name) return t;
        names += (names.empty() ? "" : ", ") + t.kind.name;
    }
    throw std::invalid_argument("unknown export format '" + name + "'; choose one of " + names);
}

// RUN_DIR/model/config.json, which must be a run's.
model::ModelConfig runConfig(const std::string& runDir) {
    requireRunFolder(runDir);
    const std::string path = (std::filesystem::path(runDir) / "model" / "config.json").string();
    model::ModelConfig c = model::ModelConfig::fromFile(path);
    if (!c.latmix) throw std::runtime_error(path + " is not a quantization run's config (no \"latmix\" object)");
    return c;
}

} // namespace

const std::vector<ExportTargetKind>& exportTargetKinds() {
    static const std::vector<ExportTargetKind> kinds = [] {
        std::vector<ExportTargetKind> k;
        for (const Target& t : targets()) k.push_back(t.kind);
        return k;
    }();
    return kinds;
}

const ExportTargetKind& exportTargetKind(const std::string& name) { return target(name).kind; }

void checkExportTarget(const std::string& runDir, const std::string& format) {
    const Target& t = target(format); // an unknown name before the folder is read
    const model::ModelConfig c = runConfig(runDir);
    refuseLmHeadBias(c, runDir); // every target alike
    t.check(c, runDir);
}

ExportTarget describeExportTarget(const std::string& runDir, const std::string& format) {
    const Target& tg = target(format);
    const model::ModelConfig c = runConfig(runDir);
    const Quantization& q = *c.latmix;
    // Tensor data: every tensor the config calls for, block linears in the target's type, the
    // rest as the target stores them.
    std::uint64_t bytes = 0;
    const auto schemeFormats = model::groupLinearFormats(c, q.groupFormats); // a scheme's groups in other formats
    const std::set<std::string> kept(q.keptLinears.begin(), q.keptLinears.end());
    for (const auto& [name, shape] : model::requiredTensors(c)) {
        const std::string linear = model::names::blockLinearOfWeight(name);
        std::uint64_t n = 1;
        for (auto d : shape) n *= std::uint64_t(d);
        if (linear.empty()) {
            bytes += n * tg.otherValueBytes;
            continue;
        }
        const auto own = schemeFormats.find(linear);
        bytes += tg.linearBytes(own != schemeFormats.end() ? WeightFormat(own->second) : q.weightFormat, q.t3Block, shape[0],
                                shape[1], model::names::isDownProj(linear), kept.count(linear) != 0);
    }
    ExportTarget t;
    t.bytes = bytes;
    tg.describe(q, q.weightFormat ? q.weightFormat->describe() : "unquantized", t);
    return t;
}

ExportSummary exportTo(const std::string& runDir, const std::string& target, const std::string& out, JobContext& job,
                       bool overwrite) {
    // What the export dialog refused before Export, refused here in the same words before any work.
    checkExportTarget(runDir, target);
    ExportSummary s = exporting::target(target).write(runDir, out, job, overwrite);
    s.target = target;
    return s;
}

} // namespace latmix::exporting
