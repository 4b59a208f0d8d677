// llama2.c legacy v0 checkpoint -> Hugging Face folder (SPEC §8).
//
// Layout of the legacy file (karpathy/llama2.c export.py legacy_export, also described in
// shared/data/PROVENANCE.md): 7 int32 header (dim, hidden_dim, n_layers, n_heads, n_kv_heads,
// vocab_size, seq_len), then fp32 tensors without padding, each matrix [out, in] row-major:
// token_embedding [vocab, dim], rms_att [L, dim], wq [L, dim, dim], wk [L, kv_dim, dim],
// wv [L, kv_dim, dim], wo [L, dim, dim], rms_ffn [L, dim], w1 [L, hidden, dim],
// w2 [L, dim, hidden], w3 [L, hidden, dim], rms_final [dim], freq_cis_real [seq, head/2],
// freq_cis_imag [seq, head/2], and wcls [vocab, dim] only when vocab_size < 0.
#include "import/Llama2cImport.h"

#include "io/SafeTensors.h"
#include "model/ModelConfig.h"
#include "model/TensorNames.h"
#include "tokenizer/Tokenizer.h"
#include "util/AtomicFile.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <utility>
#include <vector>

namespace fs = std::filesystem;

namespace latmix::importing {
using namespace latmix::model; // importers build model::ModelConfig and its tensors
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
    throw std::runtime_error("llama2.c checkpoint '" + path + "': " + what);
}

// llama2.c rotates interleaved pairs (x[2i], x[2i+1]); Hugging Face Llama rotates (x[i],
// x[i + head/2]). Reordering the rows of W_q/W_k per head makes both conventions compute the same
// attention scores: new row h*head + j*head/2 + i = old row h*head + 2i + j (PROVENANCE's
// W.reshape(n_heads, head/2, 2, in).transpose(0,2,1,3)).
at::Tensor permuteRotateHalf(const at::Tensor& w, int64_t heads) {
    const int64_t rows = w.size(0), in = w.size(1), head = rows / heads;
    return w.reshape({heads, head / 2, 2, in}).transpose(1, 2).reshape({rows, in}).contiguous();
}

class Reader {
public:
    Reader(std::ifstream& in, const std::string& path) : m_in(in), m_path(path) {}
    at::Tensor read(std::vector<int64_t> shape) {
        auto t = at::empty(shape, at::kFloat);
        const std::streamsize bytes = static_cast<std::streamsize>(t.numel() * sizeof(float));
        if (!m_in.read(reinterpret_cast<char*>(t.data_ptr<float>()), bytes))
            fail(m_path, "read failed (the file changed while importing?)");
        return t;
    }
    void skip(std::uint64_t floats) {
        if (!m_in.seekg(static_cast<std::streamoff>(floats * sizeof(float)), std::ios::cur))
            fail(m_path, "seek failed (the file changed while importing?)");
    }

private:
    std::ifstream& m_in;
    std::string m_path;
};

} // namespace

Llama2cHeader readLlama2cHeader(const std::string& binPath) {
    std::ifstream in(binPath, std::ios::binary);
    if (!in) fail(binPath, "cannot open it; check the path");
    std::error_code ec;
    const std::uint64_t fileSize = fs::file_size(binPath, ec);
    if (ec) fail(binPath, "cannot read its size: " + ec.message());
    unsigned char raw[28] = {};
    if (fileSize >= 28 && !in.read(reinterpret_cast<char*>(raw), 28)) fail(binPath, "cannot read its header");
    return parseLlama2cHeader(binPath, raw, fileSize);
}

void importLlama2cWeights(const std::string& binPath, const std::string& outDirIn, const std::string& tokenizerBin) {
    const Llama2cHeader h = readLlama2cHeader(binPath);

    std::string outDir = outDirIn;
    while (outDir.size() > 1 && outDir.back() == '/') outDir.pop_back();
    if (outDir.empty()) throw std::invalid_argument("importLlama2cWeights: empty output folder");
    std::error_code ec;
    if (fs::exists(outDir, ec) && !(fs::is_directory(outDir, ec) && fs::is_empty(outDir, ec)))
        throw std::runtime_error("output folder '" + outDir +
                                 "' already exists and is not empty; choose a new folder or remove it first");
    const std::string tmp = util::makeTempSibling(outDir); // creates the parent folders
    try {
        std::ifstream in(binPath, std::ios::binary);
        if (!in) fail(binPath, "cannot open it; check the path");
        in.seekg(28);
        Reader r(in, binPath);
        const int64_t d = h.dim, f = h.hiddenDim, L = h.numLayers, V = h.vocabSize;
        const int64_t head = d / h.numHeads, kv = head * h.numKvHeads;

        // Stacked per-layer blocks, in file order.
        at::Tensor emb = r.read({V, d});
        at::Tensor rmsAtt = r.read({L, d});
        at::Tensor wq = r.read({L, d, d});
        at::Tensor wk = r.read({L, kv, d});
        at::Tensor wv = r.read({L, kv, d});
        at::Tensor wo = r.read({L, d, d});
        at::Tensor rmsFfn = r.read({L, d});
        at::Tensor w1 = r.read({L, f, d});
        at::Tensor w2 = r.read({L, d, f});
        at::Tensor w3 = r.read({L, f, d});
        at::Tensor rmsFinal = r.read({d});
        r.skip(2ull * static_cast<std::uint64_t>(h.seqLen) * static_cast<std::uint64_t>(head / 2)); // freq_cis
        at::Tensor wcls;
        if (!h.sharedClassifier) wcls = r.read({V, d});

        std::vector<std::pair<std::string, at::Tensor>> t;
        t.emplace_back(names::kEmbed, emb);
        for (int64_t i = 0; i < L; ++i) {
            const std::string p = names::layerPrefix(i);
            t.emplace_back(p + names::kInputNorm + ".weight", rmsAtt[i]);
            t.emplace_back(p + names::kQProj + ".weight", permuteRotateHalf(wq[i], h.numHeads));
            t.emplace_back(p + names::kKProj + ".weight", permuteRotateHalf(wk[i], h.numKvHeads));
            t.emplace_back(p + names::kVProj + ".weight", wv[i]);
            t.emplace_back(p + names::kOProj + ".weight", wo[i]);
            t.emplace_back(p + names::kPostAttentionNorm + ".weight", rmsFfn[i]);
            t.emplace_back(p + names::kGateProj + ".weight", w1[i]);
            t.emplace_back(p + names::kUpProj + ".weight", w3[i]);
            t.emplace_back(p + names::kDownProj + ".weight", w2[i]);
        }
        t.emplace_back(names::kFinalNorm, rmsFinal);
        if (!h.sharedClassifier) t.emplace_back(names::kLmHead, wcls);
        io::writeSafeTensors((fs::path(tmp) / "model.safetensors").string(), t,
                             {{"format", "pt"},
                              {"source", "llama2.c legacy v0 " + fs::path(binPath).filename().string()}});

        ModelConfig c;
        c.architecture = Architecture::Llama;
        c.architectureName = "LlamaForCausalLM";
        c.hiddenSize = h.dim;
        c.intermediateSize = h.hiddenDim;
        c.numLayers = h.numLayers;
        c.numHeads = h.numHeads;
        c.numKvHeads = h.numKvHeads;
        c.headDim = static_cast<int>(head);
        c.vocabSize = h.vocabSize;
        c.maxPositions = h.seqLen;
        c.rmsNormEps = 1e-5;   // llama2.c model.py / run.c
        c.ropeTheta = 10000.0; // llama2.c precompute_freqs_cis default
        c.tieWordEmbeddings = h.sharedClassifier;
        c.bosTokenId = 1; // llama2.c tokenizers: 1 = <s>, 2 = </s>
        c.eosTokenId = 2;
        c.torchDtype = "float32";
        const fs::path cfg = fs::path(tmp) / "config.json";
        util::writeTextFile(cfg.string(), c.toJsonText());
        if (!tokenizerBin.empty())
            tokenizer::convertLlama2cTokenizer(tokenizerBin, (fs::path(tmp) / "tokenizer.json").string());
        util::replaceDirectory(tmp, outDir); // outDir is absent or an empty folder (checked above)
    } catch (...) {
        util::removeTreeQuietly(tmp);
        throw;
    }
}

} // namespace latmix::importing
