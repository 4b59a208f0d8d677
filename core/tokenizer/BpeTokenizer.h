#pragma once
// A Hugging Face tokenizer.json whose model.type is "BPE", in the two shapes found in LLM
// checkpoints:
//  - byte-level BPE (GPT-2, Llama 3, Qwen2): ByteLevel and/or Split(regex) pre-tokenizer, every
//    byte through GPT-2's bytes-to-unicode alphabet, ByteLevel decoder;
//  - SentencePiece-style BPE (Llama 2, Mistral, TinyLlama, and what convertLlama2cTokenizer /
//    convertSentencePieceModel write): "▁" for spaces via Prepend+Replace normalizers or a
//    Metaspace pre-tokenizer, <0xXX> byte fallback, Replace/ByteFallback/Fuse/Strip decoder.
//
// encode follows HF tokenizers' Tokenizer::encode without truncation or padding:
//  1. added_tokens with normalized=false are found in the raw text (leftmost-longest, honouring
//     lstrip / rstrip / single_word) and become their ids;
//  2. each piece between them goes through the normalizer, then added tokens with
//     normalized=true are found in the normalized text;
//  3. the remaining pieces go through the pre-tokenizer, then BPE word by word (BpeModel:
//     lowest merge rank first, leftmost on ties).
// Input that is not valid UTF-8 is read with U+FFFD for each bad sequence first (HF only takes
// valid strings; SentencePiece does the same replacement).
//
// decode skips special added tokens (BOS, EOS, ...), like HF's decode(skip_special_tokens=True)
// and like SentencePiece, which renders control tokens as nothing; an id that is neither in the
// vocab nor an added token throws.
//
// BOS: the post_processor's TemplateProcessing "single" template decides when it starts with a
// SpecialToken (that token is the BOS and addsBosByDefault() is true); a tokenizer_config.json
// beside the file overrides this with add_bos_token and names bos_token / eos_token. Tokens a
// template appends after the sequence (rare) are not added: encode(addBos) only prepends BOS.
#include "tokenizer/Tokenizer.h"

#include <memory>
#include <string>
#include <vector>

namespace latmix::tokenizer {

class BpeTokenizer final : public Tokenizer {
public:
    // Throws std::runtime_error naming the file: missing or malformed file, model.type other
    // than "BPE", or a normalizer / pre-tokenizer / decoder / post-processor it does not know.
    explicit BpeTokenizer(const std::string& tokenizerJson);
    ~BpeTokenizer() override;

    std::vector<int> encode(const std::string& text, bool addBos) const override;
    std::string decode(const std::vector<int>& ids) const override;
    int vocabSize() const override;
    int bosId() const override;
    int eosId() const override;
    bool addsBosByDefault() const override;
    std::string kind() const override; // "bpe-bytelevel" or "bpe-sentencepiece"

    std::string idToToken(int id) const;           // raw token string; empty when absent
    std::size_t mergeCount() const;

private:
    struct Impl;
    std::unique_ptr<Impl> m_d;
};

} // namespace latmix::tokenizer
