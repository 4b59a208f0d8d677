#pragma once
// Writes a SentencePiece BPE vocabulary (pieces, scores, types) as a Hugging Face
// tokenizer.json that BpeTokenizer (and HF tokenizers) encode exactly as SentencePiece does.
// Internal to latmix_core: convertLlama2cTokenizer and convertSentencePieceModel share it.
//
// SentencePiece's BPE encoder (bpe_model.cc) starts from characters and repeatedly merges the
// adjacent pair whose concatenation is a piece with the highest score, leftmost on ties; an
// unknown character becomes its <0xXX> byte pieces with byte_fallback. HF's BPE merges by rank
// instead, so the merges are derived the way HF's SentencePiece converters do
// (transformers' SentencePieceExtractor): every split of a piece into two pieces becomes a
// merge; merges are ordered by the merged piece's score (highest first), then by its id, then
// by the ids of the two halves.
//
// Only NORMAL pieces are merge results and only NORMAL / USER_DEFINED pieces merge parts:
// SentencePiece looks merged strings up among those pieces alone (CONTROL, UNKNOWN and BYTE
// pieces live in a separate reserved map). UNUSED pieces are dropped from the merges (SentencePiece
// would merge into them and split them again; neither Llama 2 nor llama2.c vocabularies have any).
//
// Everything else mirrors what HF's Llama converter writes: normalizer Prepend("▁") +
// Replace(" " -> "▁"), no pre-tokenizer, BPE with fuse_unk and byte_fallback, decoder
// Replace("▁" -> " ") + ByteFallback + Fuse + Strip(1 leading space), UNKNOWN and CONTROL pieces
// as special added tokens, USER_DEFINED pieces as non-special added tokens, and a
// TemplateProcessing post-processor that puts BOS first.
#include <string>
#include <vector>

namespace latmix::tokenizer {

struct SpmPiece {
    // Values of sentencepiece_model.proto's SentencePiece.Type.
    enum class Type { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };
    std::string piece; // UTF-8, spaces already as "▁"
    float score = 0.0f;
    Type type = Type::Normal;
};

// A SentencePiece BPE model's vocabulary with the settings the exports need.
struct SpmVocabulary {
    std::vector<SpmPiece> pieces; // by id
    bool addDummyPrefix = true;
    int bosId = -1, eosId = -1;
};
// Reads tokenizer.model through libsentencepiece; throws naming the file for Unigram models and
// normalizers other than the identity (what convertSentencePieceModel also refuses).
SpmVocabulary readSentencePieceVocabulary(const std::string& modelPath);

// The inverse of writeSentencePieceBpeJson for the exports that need SentencePiece's vocabulary
// (GGUF's "llama" tokenizer): pieces and types from a SentencePiece-style BPE tokenizer.json (the
// shape written here, or HF's Llama 2 one), scores from the merges' order. Throws naming the file
// for byte-level BPE tokenizers (Llama 3, Qwen) and anything else of another shape.
SpmVocabulary readSentencePieceBpeJson(const std::string& jsonPath);

struct SpmJsonOptions {
    bool addDummyPrefix = true; // NormalizerSpec.add_dummy_prefix
    int bosId = -1;             // put first by the post-processor when >= 0
    int eosId = -1;
};

// `source` names the input in error messages (duplicate pieces, invalid UTF-8, no <unk>).
void writeSentencePieceBpeJson(const std::vector<SpmPiece>& pieces, const SpmJsonOptions& options,
                               const std::string& jsonOut, const std::string& source);

} // namespace latmix::tokenizer
