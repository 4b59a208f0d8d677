#include "tokenizer/BpeModel.h"

#include "tokenizer/Utf8.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <queue>
#include <stdexcept>

namespace latmix::tokenizer {

BpeModel::BpeModel(std::unordered_map<std::string, int> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges, Options options,
                   const std::string& file)
    : m_vocab(std::move(vocab)), m_options(std::move(options)) {
    int maxId = -1;
    for (const auto& [tok, id] : m_vocab) {
        if (id < 0) throw std::runtime_error(file + ": model.vocab: negative id for token '" + tok + "'");
        maxId = std::max(maxId, id);
    }
    // The id -> token table is dense: a few entries with ids in the billions would ask for that
    // many slots. Real vocabularies number their tokens 0..n-1; allow generous gaps, no more.
    const std::size_t limit = 2 * m_vocab.size() + 1024;
    if (static_cast<std::size_t>(maxId) >= limit)
        throw std::runtime_error(file + ": model.vocab: id " + std::to_string(maxId) + " is far beyond its " +
                                 std::to_string(m_vocab.size()) + " tokens (ids must number the tokens densely, from 0)");
    m_idToToken.resize(static_cast<std::size_t>(maxId + 1));
    m_hasToken.assign(static_cast<std::size_t>(maxId + 1), false);
    for (const auto& [tok, id] : m_vocab) {
        m_idToToken[static_cast<std::size_t>(id)] = tok;
        m_hasToken[static_cast<std::size_t>(id)] = true;
    }

    if (!m_options.unkToken.empty()) {
        m_unkId = idOf(m_options.unkToken);
        // HF refuses to encode with an unk_token that is not in the vocab (UnkTokenOutOfVocabulary).
        if (m_unkId < 0)
            throw std::runtime_error(file + ": model.unk_token '" + m_options.unkToken + "' is not in model.vocab");
    }
    // HF spells byte-fallback tokens format!("<{:#04X}>", b): "<0x" then two upper-case digits.
    for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        m_byteIds[b] = idOf(name);
    }

    m_merges.reserve(merges.size());
    for (std::size_t rank = 0; rank < merges.size(); ++rank) {
        const auto& [a, b] = merges[rank];
        const int ia = idOf(a), ib = idOf(b), merged = idOf(a + b);
        if (ia < 0 || ib < 0 || merged < 0)
            throw std::runtime_error(file + ": model.merges[" + std::to_string(rank) + "] ('" + a + "', '" + b +
                                     "'): " + (ia < 0 ? a : ib < 0 ? b : a + b) + " is not in model.vocab");
        // A pair listed twice keeps the later rank, as HF's HashMap collect does.
        m_merges[key(ia, ib)] = Merge{static_cast<int>(rank), merged};
    }
}

int BpeModel::idOf(const std::string& token) const {
    const auto it = m_vocab.find(token);
    return it == m_vocab.end() ? -1 : it->second;
}

const std::string* BpeModel::tokenOf(int id) const {
    if (id < 0 || id >= static_cast<int>(m_idToToken.size()) || !m_hasToken[static_cast<std::size_t>(id)]) return nullptr;
    return &m_idToToken[static_cast<std::size_t>(id)];
}

void BpeModel::encodeWord(std::string_view word, std::vector<int>& out) const {
    if (word.empty()) return;
    if (m_options.ignoreMerges) {
        const auto it = m_vocab.find(std::string(word));
        if (it != m_vocab.end()) {
            out.push_back(it->second);
            return;
        }
    }

    // Symbols form a doubly linked list over the initial characters; a merge keeps the left
    // symbol (so its index keeps the left-to-right order) and retires the right one.
    struct Symbol {
        int id;
        int prev;
        int next;
        bool alive;
    };
    std::vector<Symbol> sym;
    sym.reserve(word.size());
    const auto push = [&sym](int id) {
        const int n = static_cast<int>(sym.size());
        sym.push_back(Symbol{id, n - 1, -1, true});
        if (n > 0) sym[static_cast<std::size_t>(n - 1)].next = n;
    };
    bool lastWasUnk = false;
    std::string ch;
    for (std::size_t i = 0; i < word.size();) {
        const std::size_t n = utf8::charLength(word, i);
        ch.assign(word.substr(i, n));
        i += n;
        const auto it = m_vocab.find(ch);
        if (it != m_vocab.end()) {
            push(it->second);
            lastWasUnk = false;
            continue;
        }
        if (m_options.byteFallback) {
            bool all = true;
            for (unsigned char c : ch) all = all && m_byteIds[c] >= 0;
            if (all) {
                for (unsigned char c : ch) push(m_byteIds[c]);
                lastWasUnk = false;
                continue;
            }
        }
        if (m_unkId < 0) continue; // HF drops the character when there is no unk_token
        if (!(m_options.fuseUnk && lastWasUnk)) push(m_unkId);
        lastWasUnk = true;
    }

    // Min-heap on (rank, position): lowest rank first, leftmost among equal ranks (HF's
    // Merge ordering in word.rs).
    struct Cand {
        int rank;
        int pos;
        int newId;
        bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
    const auto consider = [&](int left) {
        const int right = sym[static_cast<std::size_t>(left)].next;
        if (right < 0) return;
        const auto it = m_merges.find(key(sym[static_cast<std::size_t>(left)].id, sym[static_cast<std::size_t>(right)].id));
        if (it != m_merges.end()) heap.push(Cand{it->second.rank, left, it->second.newId});
    };
    for (int i = 0; i + 1 < static_cast<int>(sym.size()); ++i) consider(i);

    while (!heap.empty()) {
        const Cand top = heap.top();
        heap.pop();
        Symbol& left = sym[static_cast<std::size_t>(top.pos)];
        if (!left.alive || left.next < 0) continue;
        Symbol& right = sym[static_cast<std::size_t>(left.next)];
        // Stale entry check exactly as HF does it: the pair now at this position must still
        // merge into the same token (only the new id is compared, not the rank).
        const auto it = m_merges.find(key(left.id, right.id));
        if (it == m_merges.end() || it->second.newId != top.newId) continue;
        left.id = top.newId;
        right.alive = false;
        left.next = right.next;
        if (right.next >= 0) sym[static_cast<std::size_t>(right.next)].prev = top.pos;
        if (left.prev >= 0) consider(left.prev);
        consider(top.pos);
    }
    for (int i = sym.empty() ? -1 : 0; i >= 0; i = sym[static_cast<std::size_t>(i)].next)
        out.push_back(sym[static_cast<std::size_t>(i)].id);
}

} // namespace latmix::tokenizer
