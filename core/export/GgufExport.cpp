#include "export/GgufExport.h"

#include "export/ExportPlan.h"
#include "export/GgufWriter.h"
#include "model/TensorNames.h"
#include "run/RunModel.h"
#include "tokenizer/SentencePieceBpeJson.h"
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

class Writer {
public:
    Writer(const run::RunModel& run, const model::ModelConfig& c) : m_run(run), m_c(c) {}

    void tensorF32(const std::string& ggufName, const at::Tensor& t) {
        const auto f = t.to(at::kFloat).contiguous();
        std::vector<std::int64_t> ne(f.sizes().rbegin(), f.sizes().rend());
        m_w.addTensor(ggufName, ne, GgmlType::F32, bytesOf(f));
    }
    // A block linear's packed MXFP4 weight, rows reordered when `rows` is given. GGUF's MXFP4
    // rows are whole blocks of 32: a linear whose rows end in a shorter block (stories260K's
    // down_proj, 172 = 5 · 32 + 12) is written as the run's dequantized float32 weight, the same
    // values (llama.cpp then multiplies it without rounding its input to Q8_0).
    void linear(const std::string& ggufName, const std::string& prefix, const at::Tensor& rows = {}) {
        const mx::PackedTensor& p = m_run.packed.at(prefix);
        if (p.lastDim % 32 != 0) {
            const at::Tensor& w = m_run.tensors.at(prefix + ".weight");
            tensorF32(ggufName, rows.defined() ? w.index_select(0, rows) : w);
            ++m_partialBlocks;
            return;
        }
        at::Tensor codes = p.codes, scales = p.scales;
        if (rows.defined()) codes = codes.index_select(0, rows), scales = scales.index_select(0, rows);
        codes = codes.contiguous(), scales = scales.contiguous();
        const std::int64_t out = codes.size(0), in = p.lastDim;
        m_w.addTensor(ggufName, {in, out}, GgmlType::MXFP4,
                      mxfp4Blocks(codes.data_ptr<std::uint8_t>(), scales.data_ptr<std::uint8_t>(), out, in));
        ++m_mxfp4;
    }
    void biasIf(const std::string& ggufName, const std::string& hfName, const at::Tensor& rows = {}) {
        const auto it = m_run.tensors.find(hfName);
        if (it == m_run.tensors.end()) return;
        tensorF32(ggufName, rows.defined() ? it->second.index_select(0, rows) : it->second);
    }
    GgufWriter& gguf() { return m_w; }
    int mxfp4() const { return m_mxfp4; }
    int partialBlocks() const { return m_partialBlocks; }

private:
    const run::RunModel& m_run;
    const model::ModelConfig& m_c;
    GgufWriter m_w;
    int m_mxfp4 = 0, m_partialBlocks = 0;
};

void checkExportable(const run::RunModel& run, const model::ModelConfig& c, const std::string& runDir) {
    const std::string what = "cannot export " + runDir + " as GGUF: ";
    if (c.architecture != model::Architecture::Llama && c.architecture != model::Architecture::Mistral)
        throw std::runtime_error(what + "its architecture " + c.architectureName +
                                 " is not written yet (Llama and Mistral are); export hf or compressed-tensors");
    if (run.quant.weightFormat && run.quant.weightFormat->format == mx::Format::NvFp4)
        throw std::runtime_error(what + "its weights are NVFP4, which this export does not write yet (GGUF's NVFP4 "
                                        "groups 64 values under four scales); quantize with --format mxfp4, or export "
                                        "compressed-tensors");
    if (!run.quant.weightFormat || run.quant.weightFormat->format != mx::Format::MxFp4 ||
        run.quant.weightFormat->blockSize != 32)
        throw std::runtime_error(what + "its weights are not MXFP4 with blocks of 32, the one MX type GGUF has for them "
                                        "(MXINT4 has none); quantize with --format mxfp4");
    if (run.tensors.count(names::kLmHeadBias)) // the way out named by each face (--t1-bias off, or the control)
        throw util::RemediedError(what + "its lm_head has a bias (the folded T1 bias), which llama.cpp's llama "
                                         "architecture does not load",
                                  {{"t1_bias", "off", "", "when quantizing it again"}});
}

void addMetadata(GgufWriter& w, const model::ModelConfig& c, const tokenizer::SpmVocabulary& v) {
    w.addString("general.architecture", "llama");
    w.addUint32("general.file_type", 38); // LLAMA_FTYPE_MOSTLY_MXFP4_MOE: the file's MX type
    w.addUint32("llama.context_length", static_cast<std::uint32_t>(c.maxPositions));
    w.addUint32("llama.embedding_length", static_cast<std::uint32_t>(c.hiddenSize));
    w.addUint32("llama.block_count", static_cast<std::uint32_t>(c.numLayers));
    w.addUint32("llama.feed_forward_length", static_cast<std::uint32_t>(c.intermediateSize));
    w.addUint32("llama.attention.head_count", static_cast<std::uint32_t>(c.numHeads));
    w.addUint32("llama.attention.head_count_kv", static_cast<std::uint32_t>(c.numKvHeads));
    w.addUint32("llama.rope.dimension_count", static_cast<std::uint32_t>(c.headDim));
    w.addFloat32("llama.attention.layer_norm_rms_epsilon", static_cast<float>(c.rmsNormEps));
    w.addFloat32("llama.rope.freq_base", static_cast<float>(c.ropeTheta));
    w.addString("tokenizer.ggml.model", "llama");
    std::vector<std::string> tokens;
    std::vector<float> scores;
    std::vector<std::int32_t> types;
    for (const auto& p : v.pieces) {
        tokens.push_back(p.piece);
        scores.push_back(p.score);
        types.push_back(static_cast<std::int32_t>(p.type)); // SentencePiece's types are GGUF's
    }
    w.addStrings("tokenizer.ggml.tokens", tokens);
    w.addFloat32s("tokenizer.ggml.scores", scores);
    w.addInt32s("tokenizer.ggml.token_type", types);
    for (std::size_t id = 0; id < v.pieces.size(); ++id)
        if (v.pieces[id].type == tokenizer::SpmPiece::Type::Unknown) {
            w.addUint32("tokenizer.ggml.unknown_token_id", static_cast<std::uint32_t>(id));
            break;
        }
    if (v.bosId >= 0) w.addUint32("tokenizer.ggml.bos_token_id", static_cast<std::uint32_t>(v.bosId));
    if (v.eosId >= 0) w.addUint32("tokenizer.ggml.eos_token_id", static_cast<std::uint32_t>(v.eosId));
    w.addBool("tokenizer.ggml.add_bos_token", true);
    w.addBool("tokenizer.ggml.add_space_prefix", v.addDummyPrefix);
}

// GGUF's "llama" tokenizer is SentencePiece's vocabulary: from tokenizer.model, else from a
// SentencePiece-style tokenizer.json (Llama 2 converted by Hugging Face, llama2.c imports).
tokenizer::SpmVocabulary sentencePieceVocabulary(const std::string& modelDir, const std::string& runDir) {
    const fs::path dir(modelDir);
    if (fs::is_regular_file(dir / "tokenizer.model")) return tokenizer::readSentencePieceVocabulary((dir / "tokenizer.model").string());
    if (fs::is_regular_file(dir / "tokenizer.json")) return tokenizer::readSentencePieceBpeJson((dir / "tokenizer.json").string());
    throw std::runtime_error("cannot export " + runDir + " as GGUF: its model folder has neither tokenizer.model nor "
                             "tokenizer.json; copy the source model's tokenizer files into " + modelDir);
}

} // namespace

GgufReport exportGguf(const std::string& runDir, const std::string& file, JobContext& job, bool overwrite) {
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
    checkExportable(run, c, runDir);
    Writer w(run, c);
    addMetadata(w.gguf(), c, sentencePieceVocabulary(modelDir, runDir));

    GgufReport r;
    r.file = file;
    w.tensorF32("token_embd.weight", run.tensors.at(names::kEmbed));
    const at::Tensor qRows = pairRows(c.numHeads, c.headDim), kRows = pairRows(c.numKvHeads, c.headDim);
    const auto t3 = run::t3Transform(run.quant, c.intermediateSize);
    for (int l = 0; l < c.numLayers; ++l) {
        job.checkCancelled();
        const std::string p = names::layerPrefix(l), b = "blk." + std::to_string(l) + ".";
        w.tensorF32(b + "attn_norm.weight", run.tensors.at(p + names::kInputNorm + ".weight"));
        w.linear(b + "attn_q.weight", p + names::kQProj, qRows);
        w.linear(b + "attn_k.weight", p + names::kKProj, kRows);
        w.linear(b + "attn_v.weight", p + names::kVProj);
        w.linear(b + "attn_output.weight", p + names::kOProj);
        w.biasIf(b + "attn_q.bias", p + names::kQProj + ".bias", qRows);
        w.biasIf(b + "attn_k.bias", p + names::kKProj + ".bias", kRows);
        w.biasIf(b + "attn_v.bias", p + names::kVProj + ".bias");
        w.biasIf(b + "attn_output.bias", p + names::kOProj + ".bias");
        w.tensorF32(b + "ffn_norm.weight", run.tensors.at(p + names::kPostAttentionNorm + ".weight"));
        w.linear(b + "ffn_gate.weight", p + names::kGateProj);
        w.linear(b + "ffn_up.weight", p + names::kUpProj);
        if (run.quant.t3Block > 0) // W_down · H: float32, so only its rounding separates it from the run's
            w.tensorF32(b + "ffn_down.weight", foldBackT3(run.tensors.at(p + names::kDownProj + ".weight"), t3.diagonalBlocks()));
        else
            w.linear(b + "ffn_down.weight", p + names::kDownProj);
        w.biasIf(b + "ffn_gate.bias", p + names::kGateProj + ".bias");
        w.biasIf(b + "ffn_up.bias", p + names::kUpProj + ".bias");
        w.biasIf(b + "ffn_down.bias", p + names::kDownProj + ".bias");
        job.progress(double(l + 1) / c.numLayers, "layer " + std::to_string(l + 1) + "/" + std::to_string(c.numLayers));
    }
    w.tensorF32("output_norm.weight", run.tensors.at(names::kFinalNorm));
    if (run.tensors.count(names::kLmHead)) w.tensorF32("output.weight", run.tensors.at(names::kLmHead));
    if (run.quant.t3Block > 0)
        r.notes.push_back("T3 folded back: ffn_down stored in float32 as W_down · H (llama.cpp applies no online Hadamard)");
    if (w.partialBlocks() > 0)
        r.notes.push_back(std::to_string(w.partialBlocks()) + " linear(s) whose rows end in a block shorter than 32 stored in "
                          "float32 (GGUF's MXFP4 has whole blocks only); their values are the run's");
    w.gguf().write(file);
    r.mxfp4Tensors = w.mxfp4();
    r.tensors = w.gguf().tensorCount();
    r.bytes = fs::file_size(file);
    return r;
}

} // namespace latmix::exporting
