#include "tokenizer/BpeTokenizer.h"

#include "tokenizer/BpeModel.h"
#include "tokenizer/HfPipeline.h"
#include "tokenizer/Utf8.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

namespace latmix::tokenizer {

using json = nlohmann::json;

namespace {

// A token id from the file: an integer from 0 to 2^31 - 2 (vocabSize, one more, is an int).
// get<int>() would truncate a larger integer and convert a float with undefined behaviour (found
// by tests/fuzz/fuzz_tokenizer_json).
int tokenId(const json& v, const std::string& file, const std::string& where) {
    constexpr std::int64_t kMax = 2147483646;
    const bool ok = v.is_number_unsigned()  ? v.get<std::uint64_t>() <= static_cast<std::uint64_t>(kMax)
                    : v.is_number_integer() ? v.get<std::int64_t>() >= 0 && v.get<std::int64_t>() <= kMax
                                            : false;
    if (!ok)
        throw std::runtime_error(file + ": " + where + ": " + v.dump() +
                                 " is not a token id (an integer from 0 to 2147483646)");
    return static_cast<int>(v.get<std::int64_t>());
}

json readJson(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open tokenizer file " + path);
    std::stringstream ss;
    ss << in.rdbuf();
    try {
        return json::parse(ss.str());
    } catch (const json::exception& e) { // parse_error, and out_of_range for a number like 5E652 (fuzz_tokenizer_json)
        throw std::runtime_error(path + ": malformed JSON: " + e.what());
    }
}

// HF's single_word test treats letters, digits and '_' as word characters; outside ASCII this
// takes any non-space character as part of a word (an approximation; single_word is not used by
// the LLM tokenizers this reads).
bool isWordChar(std::uint32_t cp) {
    if (cp < 0x80) return std::isalnum(static_cast<int>(cp)) || cp == '_';
    return !utf8::isWhitespace(cp);
}

std::uint32_t lastChar(const std::string& s, std::size_t end) {
    std::size_t k = end - 1, bad = 0;
    while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
    const std::size_t n = utf8::validLength(s, k, bad);
    return n ? utf8::codePoint(s, k, n) : utf8::kReplacement;
}

std::uint32_t firstChar(const std::string& s, std::size_t begin, std::size_t* len = nullptr) {
    std::size_t bad = 0;
    const std::size_t n = utf8::validLength(s, begin, bad);
    if (len) *len = n ? n : bad;
    return n ? utf8::codePoint(s, begin, n) : utf8::kReplacement;
}

// bos_token / eos_token in tokenizer_config.json: a string or {"content": ...}; null: none.
std::string tokenName(const json& cfg, const char* key) {
    const auto it = cfg.find(key);
    if (it == cfg.end() || it->is_null()) return {};
    if (it->is_string()) return it->get<std::string>();
    if (it->is_object() && it->contains("content")) return (*it)["content"].get<std::string>();
    return {};
}

} // namespace

struct BpeTokenizer::Impl {
    struct AddedToken {
        int id;
        std::string content; // what is matched: for normalized tokens, after the normalizer
        bool special, lstrip, rstrip, singleWord, normalized;
    };
    struct Segment {
        std::string text;
        int id; // >= 0: an added token
        bool atStart;
    };

    std::string file;
    std::unique_ptr<BpeModel> model;
    std::unique_ptr<HfPipeline> pipeline;
    std::vector<AddedToken> added;
    std::unordered_map<int, std::size_t> addedById;
    std::unordered_map<std::string, int> addedByContent;
    // Candidates by first byte, longest first, for the raw and the normalized pass.
    std::array<std::vector<std::size_t>, 256> rawByByte, normByByte;
    int bos = -1, eos = -1, vocabSize = 0;
    bool addsBos = false;

    void loadModel(const json& m);
    void loadAddedTokens(const json& list);
    void loadPostProcessor(const json& p, const std::string& where);
    void loadConfig();
    int idOf(const std::string& token) const;
    void splitAdded(const std::string& text, bool atStart, const std::array<std::vector<std::size_t>, 256>& index,
                    std::vector<Segment>& out) const;
};

int BpeTokenizer::Impl::idOf(const std::string& token) const {
    const auto it = addedByContent.find(token);
    return it != addedByContent.end() ? it->second : model->idOf(token);
}

void BpeTokenizer::Impl::loadModel(const json& m) {
    const auto unsupported = [&](const std::string& what) {
        throw std::runtime_error(file + ": unsupported " + what);
    };
    if (!m.is_object()) unsupported("\"model\" (missing or not an object)");
    // Files from before tokenizers 0.9 may lack "type"; they are BPE when they carry merges.
    const std::string type = m.contains("type") ? m["type"].get<std::string>() : (m.contains("merges") ? "BPE" : "");
    if (type != "BPE") unsupported("model.type \"" + type + "\" (only \"BPE\" is implemented)");
    if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"].get<double>() != 0.0)
        unsupported("model.dropout " + m["dropout"].dump() + " (BPE-dropout is for training)");
    for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
        if (m.contains(k) && !m[k].is_null() && !m[k].get<std::string>().empty())
            unsupported(std::string("model.") + k + " \"" + m[k].get<std::string>() + "\"");

    std::unordered_map<std::string, int> vocab;
    if (!m.contains("vocab") || !m["vocab"].is_object()) unsupported("model.vocab (missing or not an object)");
    vocab.reserve(m["vocab"].size());
    for (const auto& [tok, id] : m["vocab"].items()) vocab.emplace(tok, tokenId(id, file, "model.vocab[\"" + tok + "\"]"));

    std::vector<std::pair<std::string, std::string>> merges;
    if (m.contains("merges")) {
        const auto& list = m["merges"];
        merges.reserve(list.size());
        for (std::size_t i = 0; i < list.size(); ++i) {
            const auto& e = list[i];
            if (e.is_string()) {
                // "a b" (tokenizers < 0.20): exactly one space separates the two tokens.
                const std::string s = e.get<std::string>();
                const auto sp = s.find(' ');
                if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
                    throw std::runtime_error(file + ": model.merges[" + std::to_string(i) + "] \"" + s +
                                             "\" is not two tokens separated by one space");
                merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
            } else if (e.is_array() && e.size() == 2) {
                merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>()); // [a, b] (>= 0.20)
            } else {
                throw std::runtime_error(file + ": model.merges[" + std::to_string(i) + "] is neither \"a b\" nor [a, b]");
            }
        }
    }
    BpeModel::Options opt;
    if (m.contains("unk_token") && !m["unk_token"].is_null()) opt.unkToken = m["unk_token"].get<std::string>();
    opt.fuseUnk = m.value("fuse_unk", false);
    opt.byteFallback = m.value("byte_fallback", false);
    opt.ignoreMerges = m.value("ignore_merges", false);
    model = std::make_unique<BpeModel>(std::move(vocab), merges, opt, file);
}

void BpeTokenizer::Impl::loadAddedTokens(const json& list) {
    for (const auto& t : list) {
        AddedToken a{};
        a.id = tokenId(t.at("id"), file, "added_tokens id");
        a.content = t.at("content").get<std::string>();
        a.special = t.value("special", false);
        a.lstrip = t.value("lstrip", false);
        a.rstrip = t.value("rstrip", false);
        a.singleWord = t.value("single_word", false);
        a.normalized = t.value("normalized", !a.special); // AddedToken's default
        if (a.content.empty()) continue;
        // HF's AddedVocabulary gives a token that the model already has the model's id (and
        // warns when the file says otherwise).
        if (const int inModel = model->idOf(a.content); inModel >= 0) a.id = inModel;
        addedByContent[a.content] = a.id;
        // HF matches normalized tokens against normalized text, so their pattern is the
        // content passed through the normalizer too.
        if (a.normalized) a.content = pipeline->normalize(a.content);
        if (a.content.empty()) continue;
        addedById[a.id] = added.size();
        added.push_back(a);
    }
    for (std::size_t i = 0; i < added.size(); ++i) {
        auto& index = added[i].normalized ? normByByte : rawByByte;
        index[static_cast<unsigned char>(added[i].content[0])].push_back(i);
    }
    for (auto* index : {&rawByByte, &normByByte})
        for (auto& v : *index)
            std::stable_sort(v.begin(), v.end(),
                             [&](std::size_t a, std::size_t b) { return added[a].content.size() > added[b].content.size(); });
}

void BpeTokenizer::Impl::loadPostProcessor(const json& p, const std::string& where) {
    if (p.is_null()) return;
    const std::string type = p.is_object() && p.contains("type") ? p["type"].get<std::string>() : "";
    if (type == "Sequence") {
        const auto& list = p.at("processors");
        for (std::size_t i = 0; i < list.size(); ++i) loadPostProcessor(list[i], where + ".processors[" + std::to_string(i) + "]");
    } else if (type == "ByteLevel") {
        // Only adjusts offsets (trim_offsets); ids are unchanged.
    } else if (type == "TemplateProcessing") {
        // "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}] means "BOS, text".
        std::vector<std::string> leading;
        for (const auto& item : p.at("single")) {
            if (item.contains("Sequence")) break;
            if (item.contains("SpecialToken")) leading.push_back(item["SpecialToken"].at("id").get<std::string>());
        }
        if (leading.size() > 1)
            throw std::runtime_error(file + ": unsupported " + where + ".single: more than one special token before $A");
        if (leading.size() == 1) {
            int id = -1;
            const auto& specials = p.contains("special_tokens") ? p["special_tokens"] : json::object();
            const json ids = specials.contains(leading[0]) ? specials[leading[0]].value("ids", json::array()) : json::array();
            if (ids.is_number()) id = tokenId(ids, file, where + ".special_tokens ids"); // a bare number, not [id]
            else if (ids.is_array() && !ids.empty()) id = tokenId(ids[0], file, where + ".special_tokens ids");
            else id = idOf(leading[0]);
            if (id < 0) throw std::runtime_error(file + ": " + where + ": special token '" + leading[0] + "' has no id");
            bos = id;
            addsBos = true;
        }
    } else {
        throw std::runtime_error(file + ": unsupported " + where + ": type \"" + type + "\"");
    }
}

void BpeTokenizer::Impl::loadConfig() {
    // tokenizer_config.json (transformers) beside the file overrides the post-processor's BOS
    // decision and names BOS / EOS.
    const auto cfgPath = std::filesystem::path(file).parent_path() / "tokenizer_config.json";
    std::error_code ec;
    if (std::filesystem::exists(cfgPath, ec)) {
        const json cfg = readJson(cfgPath.string());
        if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean()) addsBos = cfg["add_bos_token"].get<bool>();
        const std::string b = tokenName(cfg, "bos_token"), e = tokenName(cfg, "eos_token");
        if (!b.empty() && idOf(b) >= 0) bos = idOf(b);
        if (!e.empty() && idOf(e) >= 0) eos = idOf(e);
    }
    // Without a config: the usual names (SentencePiece's <s> / </s>, Llama 3, GPT-2 / Qwen).
    if (bos < 0)
        for (const char* n : {"<s>", "<|begin_of_text|>", "<bos>"})
            if (idOf(n) >= 0) {
                bos = idOf(n);
                break;
            }
    if (eos < 0)
        for (const char* n : {"</s>", "<|end_of_text|>", "<|endoftext|>", "<eos>"})
            if (idOf(n) >= 0) {
                eos = idOf(n);
                break;
            }
    if (bos < 0) addsBos = false;
}

void BpeTokenizer::Impl::splitAdded(const std::string& text, bool atStart,
                                    const std::array<std::vector<std::size_t>, 256>& index,
                                    std::vector<Segment>& out) const {
    // Leftmost-longest matching (HF builds an Aho-Corasick automaton with LeftmostLongest),
    // then HF's find_matches adjustments for single_word, lstrip and rstrip.
    std::size_t from = 0; // start of the text not yet emitted
    const auto emitText = [&](std::size_t b, std::size_t e) {
        if (e > b) out.push_back(Segment{text.substr(b, e - b), -1, atStart && b == 0});
    };
    for (std::size_t pos = 0; pos < text.size();) {
        const AddedToken* hit = nullptr;
        for (std::size_t i : index[static_cast<unsigned char>(text[pos])]) {
            const auto& c = added[i].content;
            if (text.compare(pos, c.size(), c) == 0) {
                hit = &added[i];
                break;
            }
        }
        if (!hit) {
            ++pos;
            continue;
        }
        std::size_t start = pos, stop = pos + hit->content.size();
        pos = stop;
        if (hit->singleWord) {
            const bool spaceBefore = start == 0 || !isWordChar(lastChar(text, start));
            const bool spaceAfter = stop == text.size() || !isWordChar(firstChar(text, stop));
            if (!spaceBefore || !spaceAfter) continue;
        }
        if (hit->lstrip) {
            std::size_t s = start;
            while (s > from && utf8::isWhitespace(lastChar(text, s))) {
                --s;
                while (s > from && (static_cast<unsigned char>(text[s]) & 0xC0) == 0x80) --s;
            }
            start = std::max(s, from);
        }
        if (hit->rstrip) {
            std::size_t len = 0;
            while (stop < text.size() && utf8::isWhitespace(firstChar(text, stop, &len))) stop += len;
            pos = stop;
        }
        emitText(from, start);
        out.push_back(Segment{{}, hit->id, false});
        from = stop;
    }
    emitText(from, text.size());
}

BpeTokenizer::BpeTokenizer(const std::string& tokenizerJson) : m_d(std::make_unique<Impl>()) {
    m_d->file = tokenizerJson;
    const json root = readJson(tokenizerJson);
    try {
        if (!root.is_object()) throw std::runtime_error(tokenizerJson + ": not a tokenizer.json (top level is not an object)");
        m_d->loadModel(root.contains("model") ? root["model"] : json());
        m_d->pipeline = std::make_unique<HfPipeline>(root, tokenizerJson);
        if (root.contains("added_tokens") && root["added_tokens"].is_array()) m_d->loadAddedTokens(root["added_tokens"]);
        if (root.contains("post_processor")) m_d->loadPostProcessor(root["post_processor"], "post_processor");
        m_d->loadConfig();
    } catch (const json::exception& e) {
        // A field of the wrong JSON type somewhere: still name the file.
        throw std::runtime_error(tokenizerJson + ": unexpected tokenizer.json content: " + e.what());
    }
    m_d->vocabSize = m_d->model->maxId() + 1;
    for (const auto& a : m_d->added) m_d->vocabSize = std::max(m_d->vocabSize, a.id + 1);
}

BpeTokenizer::~BpeTokenizer() = default;

std::vector<int> BpeTokenizer::encode(const std::string& text, bool addBos) const {
    std::vector<int> ids;
    if (addBos && m_d->bos >= 0) ids.push_back(m_d->bos);
    const std::string clean = utf8::lossy(text);
    std::vector<Impl::Segment> raw;
    m_d->splitAdded(clean, true, m_d->rawByByte, raw);
    std::vector<Impl::Segment> norm;
    for (auto& seg : raw) {
        if (seg.id >= 0) {
            ids.push_back(seg.id);
            continue;
        }
        norm.clear();
        m_d->splitAdded(m_d->pipeline->normalize(std::move(seg.text)), seg.atStart, m_d->normByByte, norm);
        for (auto& n : norm) {
            if (n.id >= 0) {
                ids.push_back(n.id);
                continue;
            }
            for (const auto& word : m_d->pipeline->preTokenize(std::move(n.text), n.atStart))
                m_d->model->encodeWord(word, ids);
        }
    }
    return ids;
}

std::string BpeTokenizer::decode(const std::vector<int>& ids) const {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int id : ids) {
        const auto it = m_d->addedById.find(id);
        if (it != m_d->addedById.end()) {
            const auto& a = m_d->added[it->second];
            if (a.special) continue;
            // HF feeds the decoder the token as it is matched: for normalized=true added tokens
            // the normalized content (e.g. "▁hi▁there"), which the decoder then maps back.
            tokens.push_back(a.content);
            continue;
        }
        const std::string* t = m_d->model->tokenOf(id);
        if (!t) throw std::runtime_error(m_d->file + ": cannot decode id " + std::to_string(id) + " (not in the vocabulary)");
        tokens.push_back(*t);
    }
    return m_d->pipeline->decode(std::move(tokens));
}

int BpeTokenizer::vocabSize() const { return m_d->vocabSize; }
int BpeTokenizer::bosId() const { return m_d->bos; }
int BpeTokenizer::eosId() const { return m_d->eos; }
bool BpeTokenizer::addsBosByDefault() const { return m_d->addsBos; }
std::string BpeTokenizer::kind() const { return m_d->pipeline->byteLevel() ? "bpe-bytelevel" : "bpe-sentencepiece"; }
std::size_t BpeTokenizer::mergeCount() const { return m_d->model->mergeCount(); }

std::string BpeTokenizer::idToToken(int id) const {
    if (const std::string* t = m_d->model->tokenOf(id)) return *t;
    for (const auto& [content, aid] : m_d->addedByContent)
        if (aid == id) return content;
    return {};
}

} // namespace latmix::tokenizer
