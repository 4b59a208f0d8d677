#pragma once
// Text <-> token ids for the checkpoints the workbench opens: tokenizer.json (byte-level BPE
// with a regex pre-tokenizer, as Llama 3 / Qwen; SentencePiece-style BPE with byte fallback,
// as Llama 2 / TinyStories) and tokenizer.model (libsentencepiece).
#include <memory>
#include <string>
#include <vector>

namespace latmix::tokenizer {

class Tokenizer {
public:
    virtual ~Tokenizer() = default;
    // addBos: prepend BOS when the tokenizer has one. Special tokens in text are matched as
    // single ids where the tokenizer declares them (tokenizer.json added_tokens).
    virtual std::vector<int> encode(const std::string& text, bool addBos) const = 0;
    virtual std::string decode(const std::vector<int>& ids) const = 0;
    virtual int vocabSize() const = 0;
    virtual int bosId() const = 0; // -1 when none
    virtual int eosId() const = 0; // -1 when none
    // What the tokenizer's own config does by default (tokenizer_config.json add_bos_token /
    // the post-processor; SentencePiece Llama models: true).
    virtual bool addsBosByDefault() const = 0;
    virtual std::string kind() const = 0; // "bpe-bytelevel", "bpe-sentencepiece", "sentencepiece"

    // tokenizer.json in dir if present, else tokenizer.model. Throws naming the folder.
    static std::unique_ptr<Tokenizer> loadFromDir(const std::string& dir);
    // A tokenizer.json or a tokenizer.model file.
    static std::unique_ptr<Tokenizer> loadFile(const std::string& path);
};

// llama2.c tokenizer (.bin: max_token_len, then per id score, length, bytes) converted to an
// equivalent SentencePiece-style tokenizer.json (BPE, byte fallback, merges ordered by score).
void convertLlama2cTokenizer(const std::string& tokenizerBin, const std::string& tokenizerJsonOut,
                             int bosId = 1, int eosId = 2);

// A SentencePiece BPE tokenizer.model (identity normalizer, as Llama 2's) converted through
// libsentencepiece (pieces, scores, types) to an equivalent tokenizer.json of the same shape.
// Throws naming the file for Unigram models and normalizers a tokenizer.json cannot express.
void convertSentencePieceModel(const std::string& modelPath, const std::string& tokenizerJsonOut);

// Tokenizer-side files copied along with a model: tokenizer.json, tokenizer.model,
// tokenizer_config.json, special_tokens_map.json, added_tokens.json, vocab.json, merges.txt,
// generation_config.json (whichever exist).
std::vector<std::string> tokenizerFileNames();

// Copies the tokenizer files that exist in `from` into `to`; returns their names. Throws naming
// the file that could not be copied.
std::vector<std::string> copyTokenizerFiles(const std::string& from, const std::string& to);

} // namespace latmix::tokenizer
