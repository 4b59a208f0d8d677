#pragma once
// The text steps of a Hugging Face tokenizer.json around the model: "normalizer",
// "pre_tokenizer" and "decoder". Internal to latmix_core (BpeTokenizer uses it).
//
// Supported, with HF tokenizers' semantics (normalizers/, pre_tokenizers/, decoders/ in
// huggingface/tokenizers):
//   normalizer    Sequence, Prepend, Replace (String or Regex), Strip, NFC (see below)
//   pre_tokenizer Sequence, ByteLevel, Split (all five behaviours, invert), Metaspace, Digits
//   decoder       Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace
// Anything else is refused with a std::runtime_error that names the file and the field.
//
// NFC (Qwen2's normalizer) is accepted and applied as the identity: there is no Unicode
// normalisation table in this library's dependencies. Text that is already NFC (nearly all
// real text, WikiText included) tokenizes exactly as HF does; decomposed input may not.
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace latmix::tokenizer {

class Pcre2Regex;

class HfPipeline {
public:
    // root: the whole tokenizer.json. `file` names the source in error messages.
    HfPipeline(const nlohmann::json& root, const std::string& file);
    ~HfPipeline();
    HfPipeline(const HfPipeline&) = delete;
    HfPipeline& operator=(const HfPipeline&) = delete;

    // Normalizer chain on one piece of text between added tokens (valid UTF-8).
    std::string normalize(std::string text) const;
    // Pre-tokenizer chain: the words the model encodes one by one. atStart: this piece begins
    // at offset 0 of the original input (Metaspace prepend_scheme "first" needs it).
    std::vector<std::string> preTokenize(std::string text, bool atStart) const;
    // Decoder chain on the token strings; without a decoder HF joins them with spaces.
    std::string decode(std::vector<std::string> tokens) const;

    bool byteLevel() const { return m_byteLevel; } // a ByteLevel pre-tokenizer or decoder

    enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

private:
    struct Normalizer;
    struct PreTokenizer;
    struct Decoder;

    void addNormalizer(const nlohmann::json& j, const std::string& where);
    void addPreTokenizer(const nlohmann::json& j, const std::string& where);
    void addDecoder(const nlohmann::json& j, const std::string& where);
    std::shared_ptr<const Pcre2Regex> pattern(const nlohmann::json& j, const std::string& where) const;
    [[noreturn]] void unsupported(const std::string& where, const std::string& what) const;

    std::string m_file;
    std::vector<Normalizer> m_normalizers;
    std::vector<PreTokenizer> m_preTokenizers;
    std::vector<Decoder> m_decoders;
    bool m_hasDecoder = false;
    bool m_byteLevel = false;
};

} // namespace latmix::tokenizer
