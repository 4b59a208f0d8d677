#pragma once
// tokenizer.model (a SentencePiece ModelProto) through libsentencepiece itself: the reference
// that the tokenizer.json path is checked against. Special tokens in text are not matched
// (SentencePiece treats "<s>" in text as characters); decode drops control tokens.
//
// libsentencepiece is loaded at run time (dlopen of libsentencepiece.so.0 with RTLD_LOCAL |
// RTLD_DEEPBIND), not linked: Debian's build embeds protobuf-lite and exports its symbols, which
// clash with the libprotobuf that libtorch loads; a process linked to both crashes during
// start-up. Isolated this way each keeps its own protobuf. Without the library installed, only
// this class (and convertSentencePieceModel) throws; tokenizer.json files need nothing of it.
#include "tokenizer/Tokenizer.h"

#include <memory>
#include <string>
#include <vector>

namespace latmix::tokenizer {

class SentencePieceTokenizer final : public Tokenizer {
public:
    // Throws std::runtime_error naming the file when it is missing or not a SentencePiece model.
    explicit SentencePieceTokenizer(const std::string& modelPath);
    ~SentencePieceTokenizer() override;

    std::vector<int> encode(const std::string& text, bool addBos) const override;
    std::string decode(const std::vector<int>& ids) const override;
    int vocabSize() const override;
    int bosId() const override;
    int eosId() const override;
    bool addsBosByDefault() const override { return true; } // Llama's convention for SentencePiece models
    std::string kind() const override { return "sentencepiece"; }

    std::vector<std::string> encodePieces(const std::string& text) const;

private:
    struct Processor; // a sentencepiece::SentencePieceProcessor in the dlopened library
    std::string m_path;
    std::unique_ptr<Processor> m_sp;
};

} // namespace latmix::tokenizer
