#include "tokenizer/SentencePieceBpeJson.h"

#include "tokenizer/Utf8.h"
#include "util/AtomicFile.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <stdexcept>
#include <tuple>
#include <unordered_map>

namespace latmix::tokenizer {

namespace {

using ojson = nlohmann::ordered_json; // keeps vocab in id order in the file
const char* const kSpace = "\xE2\x96\x81"; // "▁"

ojson stringPattern(const std::string& s) { return ojson{{"String", s}}; }

} // namespace

namespace {

using T = SpmPiece::Type;

// Merges: every split (at character boundaries) of a NORMAL piece into two mergeable pieces,
// by decreasing score, ties by ids.
ojson mergesOf(const std::vector<SpmPiece>& pieces, const std::unordered_map<std::string, int>& idOf) {
    const int n = static_cast<int>(pieces.size());
    const auto mergeable = [&](const std::string& s) {
        const auto it = idOf.find(s);
        if (it == idOf.end()) return -1;
        const T t = pieces[static_cast<std::size_t>(it->second)].type;
        return t == T::Normal || t == T::UserDefined ? it->second : -1;
    };
    struct M {
        float score;
        int piece, left, right;
    };
    std::vector<M> merges;
    for (int id = 0; id < n; ++id) {
        const auto& p = pieces[static_cast<std::size_t>(id)];
        if (p.type != T::Normal) continue;
        for (std::size_t k = utf8::charLength(p.piece, 0); k < p.piece.size(); k += utf8::charLength(p.piece, k)) {
            const int l = mergeable(p.piece.substr(0, k)), r = mergeable(p.piece.substr(k));
            if (l >= 0 && r >= 0) merges.push_back({p.score, id, l, r});
        }
    }
    std::sort(merges.begin(), merges.end(), [](const M& a, const M& b) {
        if (a.score != b.score) return a.score > b.score;
        return std::tie(a.piece, a.left, a.right) < std::tie(b.piece, b.left, b.right);
    });
    ojson mergeList = ojson::array();
    for (const auto& m : merges)
        mergeList.push_back(ojson::array({pieces[static_cast<std::size_t>(m.left)].piece, pieces[static_cast<std::size_t>(m.right)].piece}));
    return mergeList;
}

// The unknown, control and user-defined pieces as added tokens.
ojson addedTokens(const std::vector<SpmPiece>& pieces) {
    ojson added = ojson::array();
    for (int id = 0; id < static_cast<int>(pieces.size()); ++id) {
        const auto& p = pieces[static_cast<std::size_t>(id)];
        if (p.type != T::Unknown && p.type != T::Control && p.type != T::UserDefined) continue;
        added.push_back(ojson{{"id", id},
                              {"content", p.piece},
                              {"single_word", false},
                              {"lstrip", false},
                              {"rstrip", false},
                              {"normalized", false},
                              {"special", p.type != T::UserDefined}});
    }
    return added;
}

// BOS before each sequence, as SentencePiece's add_bos does (null without a BOS).
ojson postProcessor(const std::vector<SpmPiece>& pieces, int bosId) {
    if (bosId < 0) return nullptr;
    const std::string bos = pieces[static_cast<std::size_t>(bosId)].piece;
    const auto special = ojson{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}};
    return ojson{{"type", "TemplateProcessing"},
                 {"single", ojson::array({special, ojson{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                 {"pair", ojson::array({special, ojson{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, special,
                                        ojson{{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
                 {"special_tokens",
                  ojson{{bos, ojson{{"id", bos}, {"ids", ojson::array({bosId})}, {"tokens", ojson::array({bos})}}}}}};
}

} // namespace

void writeSentencePieceBpeJson(const std::vector<SpmPiece>& pieces, const SpmJsonOptions& options,
                               const std::string& jsonOut, const std::string& source) {
    const int n = static_cast<int>(pieces.size());
    std::unordered_map<std::string, int> idOf;
    idOf.reserve(pieces.size());
    int unkId = -1;
    bool hasBytes = false;
    for (int id = 0; id < n; ++id) {
        const auto& p = pieces[static_cast<std::size_t>(id)];
        if (p.piece.empty() || !utf8::isValid(p.piece))
            throw std::runtime_error(source + ": piece " + std::to_string(id) + " is empty or not valid UTF-8");
        if (!idOf.emplace(p.piece, id).second)
            throw std::runtime_error(source + ": piece '" + p.piece + "' occurs twice (ids " +
                                     std::to_string(idOf[p.piece]) + " and " + std::to_string(id) + ")");
        if (p.type == T::Unknown && unkId < 0) unkId = id;
        hasBytes = hasBytes || p.type == T::Byte;
    }
    if (unkId < 0) throw std::runtime_error(source + ": no unknown piece (<unk>)");
    const auto checkId = [&](int id, const char* what) {
        if (id >= n) throw std::runtime_error(source + ": " + what + " id " + std::to_string(id) + " is outside the vocabulary");
    };
    checkId(options.bosId, "BOS");
    checkId(options.eosId, "EOS");

    ojson vocab = ojson::object();
    for (int id = 0; id < n; ++id) vocab[pieces[static_cast<std::size_t>(id)].piece] = id;
    ojson normalizers = ojson::array();
    if (options.addDummyPrefix) normalizers.push_back(ojson{{"type", "Prepend"}, {"prepend", kSpace}});
    normalizers.push_back(ojson{{"type", "Replace"}, {"pattern", stringPattern(" ")}, {"content", kSpace}});
    ojson decoders = ojson::array();
    decoders.push_back(ojson{{"type", "Replace"}, {"pattern", stringPattern(kSpace)}, {"content", " "}});
    decoders.push_back(ojson{{"type", "ByteFallback"}});
    decoders.push_back(ojson{{"type", "Fuse"}});
    if (options.addDummyPrefix) decoders.push_back(ojson{{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});

    ojson root;
    root["version"] = "1.0";
    root["truncation"] = nullptr;
    root["padding"] = nullptr;
    root["added_tokens"] = addedTokens(pieces);
    root["normalizer"] = ojson{{"type", "Sequence"}, {"normalizers", normalizers}};
    root["pre_tokenizer"] = nullptr;
    root["post_processor"] = postProcessor(pieces, options.bosId);
    root["decoder"] = ojson{{"type", "Sequence"}, {"decoders", decoders}};
    root["model"] = ojson{{"type", "BPE"},
                          {"dropout", nullptr},
                          {"unk_token", pieces[static_cast<std::size_t>(unkId)].piece},
                          {"continuing_subword_prefix", nullptr},
                          {"end_of_word_suffix", nullptr},
                          {"fuse_unk", true},
                          {"byte_fallback", hasBytes},
                          {"ignore_merges", false},
                          {"vocab", vocab},
                          {"merges", mergesOf(pieces, idOf)}};
    // A temporary name renamed when complete: an interrupted write leaves no half tokenizer.json.
    util::writeFileAtomically(jsonOut, root.dump() + "\n");
}

namespace {

// A merge of tokenizer.json as its two halves: ["a", "b"], or "a b" in older files.
std::pair<std::string, std::string> halves(const nlohmann::json& m, const std::string& source) {
    if (m.is_array() && m.size() == 2) return {m[0].get<std::string>(), m[1].get<std::string>()};
    const std::string s = m.is_string() ? m.get<std::string>() : std::string();
    const auto space = s.find(' ');
    if (space == std::string::npos) throw std::runtime_error(source + ": a merge is neither [a, b] nor \"a b\"");
    return {s.substr(0, space), s.substr(space + 1)};
}

bool isBytePiece(const std::string& p) {
    return p.size() == 6 && p.compare(0, 3, "<0x") == 0 && p[5] == '>' && std::isxdigit(static_cast<unsigned char>(p[3])) &&
           std::isxdigit(static_cast<unsigned char>(p[4]));
}

} // namespace

SpmVocabulary readSentencePieceBpeJson(const std::string& jsonPath) {
    std::ifstream in(jsonPath, std::ios::binary);
    if (!in) throw std::runtime_error(jsonPath + " is missing or unreadable");
    nlohmann::json j;
    try {
        in >> j;
    } catch (const std::exception& e) {
        throw std::runtime_error(jsonPath + " is not valid JSON: " + e.what());
    }
    const auto refuse = [&](const std::string& what) {
        throw std::runtime_error(jsonPath + " is not a SentencePiece-style BPE tokenizer (" + what +
                                 "); byte-level BPE tokenizers (Llama 3, Qwen) have no SentencePiece vocabulary");
    };
    const auto& model = j.value("model", nlohmann::json::object());
    if (model.value("type", "") != "BPE") refuse("model.type is not BPE");
    if (!model.value("byte_fallback", false)) refuse("model.byte_fallback is off");
    bool prepend = false, replace = false;
    const auto& norm = j.value("normalizer", nlohmann::json());
    for (const auto& n : norm.is_object() && norm.contains("normalizers") ? norm["normalizers"] : nlohmann::json::array({norm})) {
        if (!n.is_object()) continue;
        prepend = prepend || (n.value("type", "") == "Prepend" && n.value("prepend", "") == kSpace);
        replace = replace || (n.value("type", "") == "Replace" && n.value("content", "") == kSpace);
    }
    if (!replace) refuse("no normalizer replaces spaces by ▁");

    SpmVocabulary v;
    v.addDummyPrefix = prepend;
    const auto& vocab = model.at("vocab");
    v.pieces.resize(vocab.size());
    std::vector<bool> seen(vocab.size(), false);
    for (const auto& [piece, id] : vocab.items()) {
        const auto i = id.get<std::size_t>();
        if (i >= v.pieces.size() || seen[i]) refuse("the vocabulary's ids are not 0.." + std::to_string(vocab.size() - 1));
        seen[i] = true;
        v.pieces[i].piece = piece;
        v.pieces[i].type = isBytePiece(piece) ? SpmPiece::Type::Byte : SpmPiece::Type::Normal;
    }
    const std::string unk = model.value("unk_token", "");
    for (const auto& t : j.value("added_tokens", nlohmann::json::array())) {
        const auto i = t.at("id").get<std::size_t>();
        if (i >= v.pieces.size()) continue;
        v.pieces[i].type = !t.value("special", false) ? SpmPiece::Type::UserDefined
                           : t.value("content", "") == unk ? SpmPiece::Type::Unknown
                                                           : SpmPiece::Type::Control;
    }
    // Scores. writeSentencePieceBpeJson orders the merges by the merged piece's score, highest
    // first, and SentencePiece's encoder (and llama.cpp's SPM one) merges the pair whose result
    // scores highest: the first merge that makes a piece gives its rank, −rank its score. Pieces no
    // merge makes score below all of them (their scores are never compared: a merge's result is
    // at least two characters).
    const auto& merges = model.value("merges", nlohmann::json::array());
    const float lowest = -static_cast<float>(merges.size()) - 1;
    for (auto& p : v.pieces) p.score = p.type == SpmPiece::Type::Normal ? lowest : 0.0f;
    std::unordered_map<std::string, std::size_t> idOf;
    for (std::size_t i = 0; i < v.pieces.size(); ++i) idOf.emplace(v.pieces[i].piece, i);
    for (std::size_t r = 0; r < merges.size(); ++r) {
        const auto [a, b] = halves(merges[r], jsonPath);
        const auto it = idOf.find(a + b);
        if (it == idOf.end()) refuse("merge " + std::to_string(r) + " makes '" + a + b + "', which is not in the vocabulary");
        auto& p = v.pieces[it->second];
        if (p.score == lowest) p.score = -static_cast<float>(r);
    }
    // BOS: the post-processor's first special token (HF's Llama template); EOS: SentencePiece's
    // default piece "</s>" when the vocabulary has it.
    const auto& post = j.value("post_processor", nlohmann::json());
    if (post.is_object() && post.contains("single"))
        for (const auto& item : post["single"])
            if (item.contains("SpecialToken")) {
                const auto it = idOf.find(item["SpecialToken"].value("id", ""));
                if (it != idOf.end()) v.bosId = static_cast<int>(it->second);
                break;
            }
    if (const auto it = idOf.find("</s>"); it != idOf.end()) v.eosId = static_cast<int>(it->second);
    return v;
}

} // namespace latmix::tokenizer
