#include "import/Llama2cHeader.h"

#include <stdexcept>

namespace latmix::importing {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
    throw std::runtime_error("llama2.c checkpoint '" + path + "': " + what);
}

std::string headerText(const Llama2cHeader& h) {
    return "dim=" + std::to_string(h.dim) + " hidden_dim=" + std::to_string(h.hiddenDim) +
           " n_layers=" + std::to_string(h.numLayers) + " n_heads=" + std::to_string(h.numHeads) +
           " n_kv_heads=" + std::to_string(h.numKvHeads) + " vocab_size=" +
           (h.sharedClassifier ? "" : "-") + std::to_string(h.vocabSize) + " seq_len=" + std::to_string(h.seqLen);
}

} // namespace

std::uint64_t llama2cFloatCount(const Llama2cHeader& h) {
    const std::uint64_t d = h.dim, f = h.hiddenDim, L = h.numLayers, v = h.vocabSize, s = h.seqLen;
    const std::uint64_t head = d / h.numHeads, kv = head * h.numKvHeads;
    std::uint64_t n = v * d;           // token_embedding
    n += L * d;                        // rms_att
    n += L * d * d;                    // wq
    n += 2 * L * kv * d;               // wk, wv
    n += L * d * d;                    // wo
    n += L * d;                        // rms_ffn
    n += 3 * L * f * d;                // w1, w2, w3
    n += d;                            // rms_final
    n += 2 * s * (head / 2);           // freq_cis_real, freq_cis_imag
    if (!h.sharedClassifier) n += v * d; // wcls
    return n;
}

Llama2cHeader parseLlama2cHeader(const std::string& binPath, const unsigned char (&raw)[28], std::uint64_t fileSize) {
    if (fileSize < 28)
        fail(binPath, "file is " + std::to_string(fileSize) +
                          " bytes, shorter than the 28-byte header; it is not a llama2.c checkpoint");
    std::int32_t v[7];
    for (int i = 0; i < 7; ++i)
        v[i] = static_cast<std::int32_t>(std::uint32_t(raw[4 * i]) | std::uint32_t(raw[4 * i + 1]) << 8 |
                                         std::uint32_t(raw[4 * i + 2]) << 16 | std::uint32_t(raw[4 * i + 3]) << 24);
    // export.py's version 1/2 files start with the magic "ak42" (0x616b3432) instead of dim.
    if (static_cast<std::uint32_t>(v[0]) == 0x616b3432u)
        fail(binPath, "this is a llama2.c version " + std::to_string(v[1]) +
                          " export (magic 'ak42'); only the legacy v0 format is supported: re-export with "
                          "`python export.py --version 0` or use the Hugging Face checkpoint instead");
    Llama2cHeader h;
    h.dim = v[0];
    h.hiddenDim = v[1];
    h.numLayers = v[2];
    h.numHeads = v[3];
    h.numKvHeads = v[4];
    h.sharedClassifier = v[5] > 0;
    // INT32_MIN has no positive counterpart (found by tests/fuzz/fuzz_llama2c): it stays 0 and
    // fails the check below.
    h.vocabSize = v[5] == INT32_MIN ? 0 : v[5] < 0 ? -v[5] : v[5];
    h.seqLen = v[6];
    // Generous limits that keep every size computation below 2^63 and catch files that are not
    // llama2.c checkpoints at all (their first bytes read as absurd dimensions).
    const bool sane = h.dim > 0 && h.dim <= 65536 && h.hiddenDim > 0 && h.hiddenDim <= (1 << 20) && h.numLayers > 0 &&
                      h.numLayers <= 4096 && h.numHeads > 0 && h.numKvHeads > 0 && h.vocabSize > 0 &&
                      h.vocabSize <= (1 << 24) && h.seqLen > 0 && h.seqLen <= (1 << 24);
    if (!sane)
        fail(binPath, "header (" + headerText(h) + ") holds impossible sizes; it is not a llama2.c legacy checkpoint");
    if (h.dim % h.numHeads != 0 || (h.dim / h.numHeads) % 2 != 0 || h.numHeads % h.numKvHeads != 0)
        fail(binPath, "header (" + headerText(h) +
                          ") is inconsistent: n_heads must divide dim into even head sizes and n_kv_heads must "
                          "divide n_heads");
    const std::uint64_t want = 28 + 4 * llama2cFloatCount(h);
    if (fileSize != want)
        fail(binPath, "file is " + std::to_string(fileSize) + " bytes but its header (" + headerText(h) +
                          ") requires exactly " + std::to_string(want) + " bytes (" +
                          (fileSize < want ? "the file is truncated" : "the file has trailing data") +
                          "); download it again, or check that it is a legacy v0 export");
    return h;
}

} // namespace latmix::importing
