#pragma once
// A run's tokenizer as GGUF's tokenizer metadata (docs/developer/gguf.md, "Tokenizer"):
// SentencePiece vocabularies as llama.cpp's "llama" tokenizer (pieces, scores, types), byte-level
// BPE ones (Llama 3, Qwen 2/3) as its "gpt2" tokenizer (tokens, merges, types, and the
// pre-tokenizer named by the regex it uses). Ids the tokenizer leaves free up to the model's
// vocabulary size become "[PAD<id>]" tokens of type unused, as llama.cpp's converter writes them.
#include <cstdint>
#include <string>
#include <vector>

namespace latmix::exporting {

struct GgufVocabulary {
    std::string model;       // tokenizer.ggml.model: "llama" (SentencePiece) or "gpt2" (byte-level BPE)
    std::string pre;         // tokenizer.ggml.pre: "default", "llama-bpe", "qwen2"
    std::vector<std::string> tokens;
    std::vector<float> scores; // "llama" only
    std::vector<std::int32_t> types; // 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
    std::vector<std::string> merges; // "gpt2" only: "left right"
    int bosId = -1, eosId = -1, unknownId = -1;
    bool addBos = false;
    bool addSpacePrefix = false; // "llama" only
    std::string chatTemplate;    // tokenizer_config.json's chat_template, when it has one
};

// The tokenizer of modelDir (tokenizer.model, else tokenizer.json; tokenizer_config.json for BOS
// and the chat template), padded to vocabSize. Throws naming the file and what llama.cpp lacks:
// no tokenizer, a byte-level pre-tokenizer that llama.cpp knows by no name given here, more tokens
// than the model's embedding has rows.
GgufVocabulary readGgufVocabulary(const std::string& modelDir, std::int64_t vocabSize);

} // namespace latmix::exporting
