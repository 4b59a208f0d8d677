#pragma once
// The "model" part of a Hugging Face BPE tokenizer: vocab, ranked merges, unknown handling and
// byte fallback, applied to one pre-tokenized word. Internal to latmix_core; BpeTokenizer puts
// the normalizer, pre-tokenizer, added tokens and decoder around it.
//
// Behaviour follows HF tokenizers' models/bpe (model.rs, word.rs):
//  - the word is split into characters; a character missing from the vocab becomes its
//    <0xXX> byte tokens when byte_fallback is on and all of them exist, else unk_token
//    (consecutive unknowns fused into one when fuse_unk), else it is dropped;
//  - then, repeatedly, the adjacent pair with the LOWEST merge rank (its index in "merges") is
//    merged, the leftmost one when the same rank occurs more than once;
//  - ignore_merges: a word that is itself in the vocab is emitted as that one token.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace latmix::tokenizer {

class BpeModel {
public:
    struct Options {
        std::string unkToken; // empty: none
        bool fuseUnk = false;
        bool byteFallback = false;
        bool ignoreMerges = false;
    };

    // merges in rank order. `file` only names the source in error messages.
    BpeModel(std::unordered_map<std::string, int> vocab,
             const std::vector<std::pair<std::string, std::string>>& merges, Options options,
             const std::string& file);

    // Appends the ids of `word` (valid UTF-8) to `out`.
    void encodeWord(std::string_view word, std::vector<int>& out) const;

    int idOf(const std::string& token) const; // -1 when absent
    const std::string* tokenOf(int id) const; // nullptr when absent
    int maxId() const { return static_cast<int>(m_idToToken.size()) - 1; }
    std::size_t mergeCount() const { return m_merges.size(); }

private:
    struct Merge {
        int rank;
        int newId;
    };
    static std::uint64_t key(int a, int b) {
        return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
    }

    std::unordered_map<std::string, int> m_vocab;
    std::vector<std::string> m_idToToken;
    std::vector<bool> m_hasToken;
    std::unordered_map<std::uint64_t, Merge> m_merges;
    Options m_options;
    int m_unkId = -1;
    int m_byteIds[256];
};

} // namespace latmix::tokenizer
