#include "export/GgufExport.h"

#include "export/ExportPlan.h"
#include "util/AtomicFile.h"
#include "export/GgufWriter.h"
#include "model/TensorNames.h"
#include "run/RunModel.h"
#include "export/GgufVocabulary.h"
#include "model/LlamaModel.h"
#include "util/Remedy.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <stdexcept>

namespace latmix::exporting {
namespace {

namespace fs = std::filesystem;
namespace names = model::names;

std::string bytesOf(const at::Tensor& t) {
    const auto c = t.contiguous();
    return std::string(static_cast<const char*>(c.data_ptr()), static_cast<std::size_t>(c.nbytes()));
}

// Hugging Face's Llama rotates the two halves of a head, llama.cpp's adjacent pairs (rope NORM):
// within each head of hd rows, row 2i takes row i and row 2i + 1 takes row hd/2 + i
// (llama.cpp's conversion/llama.py does the same reordering).
at::Tensor pairRows(std::int64_t heads, std::int64_t hd) {
    std::vector<std::int64_t> order;
    for (std::int64_t h = 0; h < heads; ++h)
        for (std::int64_t i = 0; i < hd / 2; ++i) {
            order.push_back(h * hd + i);
            order.push_back(h * hd + hd / 2 + i);
        }
    return at::tensor(order, at::kLong);
}

// GGUF's 4-bit types for a block linear: MXFP4 (blocks of 32) and NVFP4 (blocks of 16 in the run,
// 64-value blocks in ggml). A scheme's other formats are written as BF16: GGUF has no MXFP8 type
// (llama.cpp's 8-bit is Q8_0, an int8 with an FP16 scale per 32, which would round MXFP8's
// E4M3 × 2^k values again), and BF16 holds them — and MXINT8's, MXINT4's — exactly.
bool isGgufFp4(const mx::MxConfig& f) {
    return (f.format == mx::Format::MxFp4 && f.blockSize == 32) || (f.isNvfp4() && f.blockSize == 16);
}

class Writer {
public:
    // exact: the matrices that are no 4-bit linear (token_embd, output, W_down · H where T3 is
    // folded back) in F32, as the run holds them; else in BF16, as llama.cpp's own converter
    // writes a model's float tensors (issue 71: the F32 file of brownpy-13M was 69.5 MiB against
    // the 49.3 MiB of the FP32 checkpoint it came from).
    Writer(const run::RunModel& run, bool exact) : m_run(run), m_exact(exact) {}

    void tensorF32(const std::string& ggufName, const at::Tensor& t) {
        const auto f = t.to(at::kFloat).contiguous();
        std::vector<std::int64_t> ne(f.sizes().rbegin(), f.sizes().rend());
        m_w.addTensor(ggufName, ne, GgmlType::F32, bytesOf(f));
    }
    // A kept linear's weight (already a bf16 value, SPEC §4 "Kept linears"): ggml's BF16 is the
    // upper half of the float32 bits, as libtorch stores bfloat16.
    void tensorBf16(const std::string& ggufName, const at::Tensor& t) {
        const auto b = t.to(at::kBFloat16).contiguous();
        std::vector<std::int64_t> ne(b.sizes().rbegin(), b.sizes().rend());
        m_w.addTensor(ggufName, ne, GgmlType::BF16,
                      std::string(static_cast<const char*>(b.data_ptr()), static_cast<std::size_t>(b.numel()) * 2));
    }
    // A matrix that is no 4-bit linear (the embedding, lm_head, a folded-back W_down · H).
    void matrix(const std::string& ggufName, const at::Tensor& t) {
        if (m_exact) tensorF32(ggufName, t);
        else tensorBf16(ggufName, t);
    }
    bool exact() const { return m_exact; }
    int kept() const { return m_kept; }
    // A block linear's packed MXFP4 or NVFP4 weight, rows reordered when `rows` is given. GGUF's
    // rows are whole blocks (32 values for MXFP4, 64 for NVFP4): a linear whose rows end in a
    // shorter block (stories260K's down_proj, 172 = 5 · 32 + 12) is written as the run's
    // dequantized float32 weight, the same values (llama.cpp then multiplies it without rounding
    // its input to Q8_0). NVFP4's per-tensor scale goes beside it as "<name>.scale" [1], which
    // llama.cpp multiplies into the product.
    void linear(const std::string& ggufName, const std::string& prefix, const at::Tensor& rows = {}) {
        // The run's (dequantized) weight, rows reordered when asked.
        const auto runWeight = [&] {
            const at::Tensor& w = m_run.tensors.at(prefix + ".weight");
            return rows.defined() ? w.index_select(0, rows) : w;
        };
        if (!m_run.packed.count(prefix)) { // kept in full precision (--keep): BF16, as the run holds it
            tensorBf16(ggufName, runWeight());
            ++m_kept;
            return;
        }
        const mx::PackedTensor& p = m_run.packed.at(prefix);
        const bool nv = p.config.isNvfp4();
        if (!isGgufFp4(p.config)) { // a scheme's 8-bit (or MXINT) group: its values exactly, as BF16
            tensorBf16(ggufName, runWeight());
            ++m_otherFormats;
            return;
        }
        if (p.lastDim % (nv ? 64 : 32) != 0) {
            tensorF32(ggufName, runWeight());
            ++m_partialBlocks;
            return;
        }
        at::Tensor codes = p.codes, scales = p.scales;
        if (rows.defined()) codes = codes.index_select(0, rows), scales = scales.index_select(0, rows);
        codes = codes.contiguous(), scales = scales.contiguous();
        const std::int64_t out = codes.size(0), in = p.lastDim;
        const auto* c = codes.data_ptr<std::uint8_t>();
        const auto* s = scales.data_ptr<std::uint8_t>();
        m_w.addTensor(ggufName, {in, out}, nv ? GgmlType::NVFP4 : GgmlType::MXFP4,
                      nv ? nvfp4Blocks(c, s, out, in) : mxfp4Blocks(c, s, out, in));
        if (nv) tensorF32(ggufName.substr(0, ggufName.size() - 7) + ".scale", at::full({1}, p.globalScale, at::kFloat));
        ++m_fp4;
    }
    // The experts' linears of one kind stacked as llama.cpp's 3-D expert tensor {in, out, experts}
    // (its converter stacks the per-expert [out, in] matrices on a new outer axis): each expert's
    // blocks in turn. Rows ending in a partial block: the float32 weights, stacked the same way.
    void stackedLinear(const std::string& ggufName, const std::vector<std::string>& prefixes) {
        const mx::PackedTensor& first = m_run.packed.at(prefixes.front());
        const std::int64_t in = first.lastDim, out = first.codes.size(0), experts = std::int64_t(prefixes.size());
        const auto runWeights = [&] { // the run's (dequantized) weights, stacked the same way
            std::vector<at::Tensor> ws;
            for (const auto& p : prefixes) ws.push_back(m_run.tensors.at(p + ".weight"));
            return at::stack(ws);
        };
        if (!isGgufFp4(first.config)) { // a scheme's experts in another format: their values as BF16
            tensorBf16(ggufName, runWeights());
            ++m_otherFormats;
            return;
        }
        if (in % 32 != 0) {
            tensorF32(ggufName, runWeights());
            ++m_partialBlocks;
            return;
        }
        std::string bytes;
        for (const auto& p : prefixes) {
            const mx::PackedTensor& pk = m_run.packed.at(p);
            const at::Tensor codes = pk.codes.contiguous(), scales = pk.scales.contiguous();
            bytes += mxfp4Blocks(codes.data_ptr<std::uint8_t>(), scales.data_ptr<std::uint8_t>(), out, in);
        }
        m_w.addTensor(ggufName, {in, out, experts}, GgmlType::MXFP4, bytes);
        ++m_fp4;
    }
    // A bias when the run has it and the architecture loads it.
    void biasIf(const std::string& ggufName, const std::string& hfName, bool loads, const at::Tensor& rows = {}) {
        const auto it = m_run.tensors.find(hfName);
        if (it == m_run.tensors.end() || !loads) return;
        tensorF32(ggufName, rows.defined() ? it->second.index_select(0, rows) : it->second);
    }
    GgufWriter& gguf() { return m_w; }
    int fp4() const { return m_fp4; }
    int partialBlocks() const { return m_partialBlocks; }
    int otherFormats() const { return m_otherFormats; }

private:
    const run::RunModel& m_run;
    bool m_exact;
    GgufWriter m_w;
    int m_fp4 = 0, m_partialBlocks = 0, m_kept = 0, m_otherFormats = 0;
};

// What llama.cpp v0.4.0's architectures load (src/models/{llama,qwen2,qwen3}.cpp): a tensor it
// does not create fails the whole load, so a bias it has no place for must not be written.
struct GgufArchitecture {
    std::string name;
    bool ropePairs;  // rope NORM (adjacent pairs): q/k rows reordered; qwen's NEOX needs none
    bool oBias, mlpBias, qkNorm;
};

GgufArchitecture ggufArchitecture(const model::ModelConfig& c, const std::string& what) {
    switch (c.architecture) {
    case model::Architecture::Llama:
    case model::Architecture::Mistral: return {"llama", true, true, true, false};
    case model::Architecture::Qwen2: return {"qwen2", false, false, false, false};
    case model::Architecture::Qwen3: return {"qwen3", false, false, false, true};
    // Mixtral is llama.cpp's llama with experts (llama.<expert_count> > 0); Qwen3-MoE its qwen3moe.
    case model::Architecture::Mixtral: return {"llama", true, false, false, false};
    case model::Architecture::Qwen3Moe: return {"qwen3moe", false, false, false, true};
    }
    throw std::runtime_error(what + "its architecture " + c.architectureName + " has no GGUF mapping here");
}

// A bias the architecture cannot load is refused unless it is zero (then it is left out: the
// same function). The refusal names the tensor and the option that keeps it zero.
void checkBiases(const run::RunModel& run, const GgufArchitecture& a, const std::string& what) {
    for (const auto& [name, t] : run.tensors) {
        const bool isBias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
        if (!isBias || !t.ne(0).any().item<bool>()) continue;
        const bool o = name.find(names::kOProj) != std::string::npos, mlp = name.find(".mlp.") != std::string::npos;
        if ((o && !a.oBias) || (mlp && !a.mlpBias))
            throw util::RemediedError(what + name + " is not zero, and llama.cpp's " + a.name + " architecture loads no " +
                                          (o ? "attention output" : "MLP") + " bias (it holds the folded T2 bias)",
                                      {{"t2_bias", "off", "", "when quantizing it again"}});
    }
}

// What the config alone tells: the architecture, the weights' format, the experts' layout, the
// RoPE scaling.
GgufArchitecture checkConfig(const model::ModelConfig& c, const std::optional<mx::MxConfig>& wf, const std::string& runDir) {
    const std::string what = "cannot export " + runDir + " as GGUF: ";
    const GgufArchitecture a = ggufArchitecture(c, what);
    const bool mxfp4 = wf && wf->format == mx::Format::MxFp4 && wf->blockSize == 32,
               nvfp4 = wf && wf->isNvfp4() && wf->blockSize == 16;
    if (!mxfp4 && !nvfp4)
        throw util::RemediedError(what + "its weights are not MXFP4 (blocks of 32) or NVFP4 (blocks of 16), the 4-bit "
                                         "types GGUF has (MXINT4 has none)",
                                  {{"format", "mxfp4", "", "or nvfp4 when quantizing it again"}});
    if (c.moe) {
        // llama.cpp v0.4.0's qwen3moe and llama-with-experts (src/models/{qwen3moe,llama}.cpp):
        // every layer has the experts; routing is softmax, top-k and always renormalised.
        for (int l = 0; l < c.numLayers; ++l)
            if (!c.isSparseLayer(l))
                throw std::runtime_error(what + "layer " + std::to_string(l) + " has a dense MLP (mlp_only_layers, "
                                         "decoder_sparse_step), and llama.cpp's " + a.name +
                                         " architecture has experts in every layer; export hf instead");
        if (!c.moe->normTopK)
            throw std::runtime_error(what + "its router does not renormalise the top-k probabilities "
                                            "(norm_topk_prob false), and llama.cpp always does; export hf instead");
        if (wf && wf->isNvfp4())
            throw std::runtime_error(what + "NVFP4 experts need one global scale per expert, which llama.cpp's "
                                            "stacked expert tensors do not carry here; quantize with --format mxfp4");
    }
    if (c.ropeScaling && !a.ropePairs)
        throw std::runtime_error(what + "its rope_scaling is written for the llama architecture only; export hf instead");
    refuseOnlineInputTransforms(c, "GGUF", runDir);
    if (c.latmix)
        for (const auto& [group, f] : c.latmix->groupFormats)
            if (f.isNvfp4() && group.find(".experts") != std::string::npos)
                throw std::runtime_error(what + "its scheme puts " + group + " in NVFP4, and llama.cpp's stacked expert "
                                                "tensors carry no per-expert global scale here; give the experts mxfp4 or "
                                                "mxfp8 in the scheme");
    refuseLmHeadBias(c, runDir);
    return a;
}

GgufArchitecture checkExportable(const run::RunModel& run, const model::ModelConfig& c, const std::string& runDir) {
    const GgufArchitecture a = checkConfig(c, run.quant.weightFormat, runDir);
    checkBiases(run, a, "cannot export " + runDir + " as GGUF: ");
    return a;
}

void addMetadata(GgufWriter& w, const model::ModelConfig& c, const GgufArchitecture& a, const GgufVocabulary& v, bool nvfp4) {
    const std::string k = a.name + ".";
    auto u32 = [](auto n) { return static_cast<std::uint32_t>(n); };
    w.addString("general.architecture", a.name);
    w.addUint32("general.file_type", nvfp4 ? 39 : 38); // LLAMA_FTYPE_MOSTLY_NVFP4 / _MXFP4_MOE: the file's type
    w.addUint32(k + "context_length", u32(c.maxPositions));
    w.addUint32(k + "embedding_length", u32(c.hiddenSize));
    w.addUint32(k + "block_count", u32(c.numLayers));
    w.addUint32(k + "feed_forward_length", u32(c.intermediateSize));
    w.addUint32(k + "attention.head_count", u32(c.numHeads));
    w.addUint32(k + "attention.head_count_kv", u32(c.numKvHeads));
    w.addUint32(k + "attention.key_length", u32(c.headDim)); // Qwen3-32B: head_dim is not hidden / heads
    w.addUint32(k + "attention.value_length", u32(c.headDim));
    w.addUint32(k + "rope.dimension_count", u32(c.headDim));
    if (c.moe) { // llama.cpp's converter writes these for Qwen3-MoE and Mixtral alike
        w.addUint32(k + "expert_count", u32(c.moe->numExperts));
        w.addUint32(k + "expert_used_count", u32(c.moe->expertsPerToken));
        w.addUint32(k + "expert_feed_forward_length", u32(c.moe->expertWidth));
    }
    w.addFloat32(k + "attention.layer_norm_rms_epsilon", static_cast<float>(c.rmsNormEps));
    w.addFloat32(k + "rope.freq_base", static_cast<float>(c.ropeTheta));
    w.addString("tokenizer.ggml.model", v.model);
    w.addString("tokenizer.ggml.pre", v.pre);
    w.addStrings("tokenizer.ggml.tokens", v.tokens);
    if (!v.scores.empty()) w.addFloat32s("tokenizer.ggml.scores", v.scores);
    w.addInt32s("tokenizer.ggml.token_type", v.types);
    if (!v.merges.empty()) w.addStrings("tokenizer.ggml.merges", v.merges);
    if (v.unknownId >= 0) w.addUint32("tokenizer.ggml.unknown_token_id", u32(v.unknownId));
    if (v.bosId >= 0) w.addUint32("tokenizer.ggml.bos_token_id", u32(v.bosId));
    if (v.eosId >= 0) w.addUint32("tokenizer.ggml.eos_token_id", u32(v.eosId));
    w.addBool("tokenizer.ggml.add_bos_token", v.addBos);
    if (v.model == "llama") w.addBool("tokenizer.ggml.add_space_prefix", v.addSpacePrefix);
    if (!v.chatTemplate.empty()) w.addString("tokenizer.chat_template", v.chatTemplate);
}

// llama3 rope scaling as llama.cpp takes it: one factor per frequency that the unscaled
// frequency is divided by (its converter's rope_freqs tensor).
at::Tensor ropeFactors(const model::ModelConfig& c) {
    const auto base = 1.0 / at::pow(c.ropeTheta, at::arange(0, c.headDim, 2, at::kDouble) / static_cast<double>(c.headDim));
    return (base / model::ropeInverseFrequencies(c)).to(at::kFloat);
}

// One decoder layer's tensors under llama.cpp's names (blk.N.*). Biases the architecture does
// not load were checked to be zero (checkBiases) and are left out.
// A sparse layer's MLP: the router in float32 (llama.cpp's converter and llama-quantize never
// quantize ffn_gate_inp) and the experts' gate, up and down stacked; with T3, every expert's
// W_down · H in float32 as for the dense ffn_down.
void writeExperts(Writer& w, const run::RunModel& run, const model::ModelConfig& c, int l,
                  const std::vector<at::Tensor>& t3Blocks) {
    const std::string p = names::layerPrefix(l), b = "blk." + std::to_string(l) + ".";
    w.tensorF32(b + "ffn_gate_inp.weight", run.tensors.at(p + names::routerModule(c) + ".weight"));
    using E = names::ExpertLinear;
    const auto prefixes = [&](E kind) {
        std::vector<std::string> r;
        for (int e = 0; e < c.moe->numExperts; ++e) r.push_back(p + names::expertModule(c, e, kind));
        return r;
    };
    w.stackedLinear(b + "ffn_gate_exps.weight", prefixes(E::Gate));
    w.stackedLinear(b + "ffn_up_exps.weight", prefixes(E::Up));
    if (run.quant.t3Block == 0) return w.stackedLinear(b + "ffn_down_exps.weight", prefixes(E::Down));
    std::vector<at::Tensor> downs;
    for (const auto& d : prefixes(E::Down)) downs.push_back(foldBackT3(run.tensors.at(d + ".weight"), t3Blocks));
    w.matrix(b + "ffn_down_exps.weight", at::stack(downs));
}

void writeLayer(Writer& w, const run::RunModel& run, const model::ModelConfig& c, const GgufArchitecture& a, int l,
                const at::Tensor& qRows, const at::Tensor& kRows, const std::vector<at::Tensor>& t3Blocks) {
    const std::string p = names::layerPrefix(l), b = "blk." + std::to_string(l) + ".";
    w.tensorF32(b + "attn_norm.weight", run.tensors.at(p + names::kInputNorm + ".weight"));
    w.linear(b + "attn_q.weight", p + names::kQProj, qRows);
    w.linear(b + "attn_k.weight", p + names::kKProj, kRows);
    w.linear(b + "attn_v.weight", p + names::kVProj);
    w.linear(b + "attn_output.weight", p + names::kOProj);
    w.biasIf(b + "attn_q.bias", p + names::kQProj + ".bias", true, qRows);
    w.biasIf(b + "attn_k.bias", p + names::kKProj + ".bias", true, kRows);
    w.biasIf(b + "attn_v.bias", p + names::kVProj + ".bias", true);
    w.biasIf(b + "attn_output.bias", p + names::kOProj + ".bias", a.oBias);
    if (a.qkNorm) { // Qwen3: per-head RMSNorm of q and k before rope (no row pairing: NEOX rope)
        w.tensorF32(b + "attn_q_norm.weight", run.tensors.at(p + names::kQNorm + ".weight"));
        w.tensorF32(b + "attn_k_norm.weight", run.tensors.at(p + names::kKNorm + ".weight"));
    }
    w.tensorF32(b + "ffn_norm.weight", run.tensors.at(p + names::kPostAttentionNorm + ".weight"));
    if (c.isSparseLayer(l)) {
        writeExperts(w, run, c, l, t3Blocks);
        return;
    }
    w.linear(b + "ffn_gate.weight", p + names::kGateProj);
    w.linear(b + "ffn_up.weight", p + names::kUpProj);
    if (run.quant.t3Block > 0) // W_down · H: BF16, or F32 for the exact file (only its rounding then separates it)
        w.matrix(b + "ffn_down.weight", foldBackT3(run.tensors.at(p + names::kDownProj + ".weight"), t3Blocks));
    else
        w.linear(b + "ffn_down.weight", p + names::kDownProj);
    w.biasIf(b + "ffn_gate.bias", p + names::kGateProj + ".bias", a.mlpBias);
    w.biasIf(b + "ffn_up.bias", p + names::kUpProj + ".bias", a.mlpBias);
    w.biasIf(b + "ffn_down.bias", p + names::kDownProj + ".bias", a.mlpBias);
}

} // namespace

void checkGgufConfig(const model::ModelConfig& runConfig, const std::string& runDir) {
    checkConfig(runConfig, runConfig.latmix ? runConfig.latmix->weightFormat : std::nullopt, runDir);
}

GgufReport exportGguf(const std::string& runDir, const std::string& file, JobContext& job, bool overwrite, bool exact) {
    if (file.empty()) throw std::runtime_error("no output file given; pass --out FILE.gguf");
    std::error_code ec;
    if (fs::is_directory(file, ec))
        throw std::runtime_error("output path '" + file + "' is a folder; a GGUF export is one file: give FILE.gguf");
    if (fs::exists(file, ec) && !overwrite)
        throw std::runtime_error("output file '" + file + "' exists; choose a new name or pass --overwrite (it is "
                                 "replaced only after the export succeeded)");
    const std::string modelDir = (fs::path(runDir) / "model").string();
    const run::RunModel run = run::readRunModel(modelDir);
    const model::ModelConfig c = run::runModelConfig(run);
    const GgufArchitecture a = checkExportable(run, c, runDir);
    util::makeParentFolder(file); // as the folder targets make theirs
    Writer w(run, exact);
    GgufVocabulary vocabulary;
    try {
        vocabulary = readGgufVocabulary(modelDir, c.vocabSize);
    } catch (const std::exception& e) {
        throw std::runtime_error("cannot export " + runDir + " as GGUF: " + e.what());
    }
    addMetadata(w.gguf(), c, a, vocabulary, run.quant.weightFormat->isNvfp4());

    GgufReport r;
    r.file = file;
    w.matrix("token_embd.weight", run.tensors.at(names::kEmbed));
    if (c.ropeScaling) w.tensorF32("rope_freqs.weight", ropeFactors(c));
    const at::Tensor qRows = a.ropePairs ? pairRows(c.numHeads, c.headDim) : at::Tensor(),
                     kRows = a.ropePairs ? pairRows(c.numKvHeads, c.headDim) : at::Tensor();
    const std::vector<at::Tensor> t3Blocks =
        run.quant.t3Block > 0 ? run::t3Transform(run.quant, c.downProjWidth()).diagonalBlocks() : std::vector<at::Tensor>();
    for (int l = 0; l < c.numLayers; ++l) {
        job.checkCancelled();
        writeLayer(w, run, c, a, l, qRows, kRows, t3Blocks);
        job.progress(double(l + 1) / c.numLayers, "layer " + std::to_string(l + 1) + "/" + std::to_string(c.numLayers));
    }
    w.tensorF32("output_norm.weight", run.tensors.at(names::kFinalNorm));
    if (run.tensors.count(names::kLmHead)) w.matrix("output.weight", run.tensors.at(names::kLmHead));
    if (run.quant.t3Block > 0)
        r.notes.push_back(std::string("T3 folded back: ") + (c.moe ? "ffn_down_exps" : "ffn_down") + " stored in " +
                          (exact ? "F32" : "BF16") + " as W_down · H (llama.cpp applies no online Hadamard)");
    r.notes.push_back(exact ? "token_embd and output stored in F32, as the run holds them (the exact file)"
                            : "token_embd and output stored in BF16, as llama.cpp's converter writes them (the "
                              "gguf-f32 target keeps them F32)");
    if (w.kept() > 0)
        r.notes.push_back(std::to_string(w.kept()) + " linear(s) kept in full precision (--keep) stored as BF16" +
                          (run.quant.t3Block > 0 ? " (a kept down_proj in F32 with T3 folded back, as every down_proj)" : ""));
    if (w.otherFormats() > 0)
        r.notes.push_back(std::to_string(w.otherFormats()) + " tensor(s) of the scheme's groups in formats GGUF has no type "
                          "for (8-bit MX: llama.cpp's Q8_0 would round the values again) stored as BF16, which holds "
                          "their values exactly");
    if (w.partialBlocks() > 0)
        r.notes.push_back(std::to_string(w.partialBlocks()) + " linear(s) whose rows end in a block shorter than " +
                          (run.quant.weightFormat->isNvfp4() ? "64" : "32") +
                          " stored in float32 (GGUF's FP4 types have whole blocks only); their values are the run's");
    w.gguf().write(file);
    r.fp4Tensors = w.fp4();
    r.fp4Type = run.quant.weightFormat->isNvfp4() ? "NVFP4" : "MXFP4";
    r.tensors = w.gguf().tensorCount();
    r.bytes = fs::file_size(file);
    return r;
}

} // namespace latmix::exporting
