#include "export/GgufVocabulary.h"

#include "tokenizer/SentencePieceBpeJson.h"
#include "tokenizer/Tokenizer.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace latmix::exporting {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

json readJson(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error(path.string() + " is missing or unreadable");
    try {
        return json::parse(in);
    } catch (const std::exception& e) {
        throw std::runtime_error(path.string() + " is not valid JSON: " + e.what());
    }
}

// Every "Regex" pattern of a pre-tokenizer, nested Sequences included.
void collectRegexes(const json& j, std::vector<std::string>& out) {
    if (j.is_object()) {
        if (j.contains("Regex") && j["Regex"].is_string()) out.push_back(j["Regex"].get<std::string>());
        for (const auto& [key, value] : j.items()) collectRegexes(value, out);
    } else if (j.is_array()) {
        for (const auto& value : j) collectRegexes(value, out);
    }
}

// llama.cpp chooses its byte-level pre-tokenizer by name (src/llama-vocab.cpp); its converter
// finds the name by hashing a tokenization, here the regex itself is compared with the
// tokenizer.json patterns llama.cpp's own comments give for each name.
std::string preTokenizerName(const json& tokenizer, const std::string& file) {
    static const std::vector<std::pair<std::string, std::string>> known = {
        {"llama-bpe", R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3})"
                      R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
        {"qwen2", R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N})"
                  R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
    };
    std::vector<std::string> regexes;
    collectRegexes(tokenizer.value("pre_tokenizer", json()), regexes);
    for (const auto& [name, pattern] : known)
        for (const auto& r : regexes)
            if (r == pattern) return name;
    throw std::runtime_error(file + ": its pre-tokenizer regex is none of those written here (Llama 3's, Qwen 2/3's); "
                             "llama.cpp picks its pre-tokenizer by name, and a wrong one tokenizes differently. Export "
                             "hf or compressed-tensors instead");
}

GgufVocabulary sentencePiece(const tokenizer::SpmVocabulary& v) {
    GgufVocabulary g;
    g.model = "llama";
    g.pre = "default";
    for (std::size_t id = 0; id < v.pieces.size(); ++id) {
        const auto& p = v.pieces[id];
        g.tokens.push_back(p.piece);
        g.scores.push_back(p.score);
        g.types.push_back(static_cast<std::int32_t>(p.type)); // SentencePiece's types are GGUF's
        if (p.type == tokenizer::SpmPiece::Type::Unknown && g.unknownId < 0) g.unknownId = static_cast<int>(id);
    }
    g.bosId = v.bosId;
    g.eosId = v.eosId;
    g.addSpacePrefix = v.addDummyPrefix;
    return g;
}

GgufVocabulary byteLevelBpe(const json& t, const std::string& file) {
    GgufVocabulary g;
    g.model = "gpt2";
    g.pre = preTokenizerName(t, file);
    const json& model = t.at("model");
    std::vector<std::pair<std::int64_t, std::string>> byId;
    for (const auto& [token, id] : model.at("vocab").items()) byId.emplace_back(id.get<std::int64_t>(), token);
    std::vector<std::pair<std::int64_t, std::pair<std::string, std::int32_t>>> added;
    for (const auto& a : t.value("added_tokens", json::array()))
        added.push_back({a.at("id").get<std::int64_t>(), {a.at("content").get<std::string>(), a.value("special", false) ? 3 : 4}});
    std::int64_t size = 0;
    for (const auto& [id, token] : byId) size = std::max(size, id + 1);
    for (const auto& [id, token] : added) size = std::max(size, id + 1);
    g.tokens.assign(static_cast<std::size_t>(size), std::string());
    g.types.assign(static_cast<std::size_t>(size), 0);
    for (const auto& [id, token] : byId) g.tokens[std::size_t(id)] = token, g.types[std::size_t(id)] = 1;
    for (const auto& [id, token] : added) g.tokens[std::size_t(id)] = token.first, g.types[std::size_t(id)] = token.second;
    for (const auto& m : model.value("merges", json::array()))
        g.merges.push_back(m.is_array() ? m[0].get<std::string>() + " " + m[1].get<std::string>() : m.get<std::string>());
    return g;
}

} // namespace

GgufVocabulary readGgufVocabulary(const std::string& modelDir, std::int64_t vocabSize) {
    const fs::path dir(modelDir), spm = dir / "tokenizer.model", hf = dir / "tokenizer.json";
    GgufVocabulary g;
    if (fs::is_regular_file(spm)) {
        g = sentencePiece(tokenizer::readSentencePieceVocabulary(spm.string()));
    } else if (fs::is_regular_file(hf)) {
        const json t = readJson(hf);
        const bool byteLevel = t.value("model", json::object()).value("byte_fallback", false) == false;
        g = byteLevel ? byteLevelBpe(t, hf.string()) : sentencePiece(tokenizer::readSentencePieceBpeJson(hf.string()));
    } else {
        throw std::runtime_error(modelDir + " has neither tokenizer.model nor tokenizer.json; copy the source model's "
                                            "tokenizer files into it");
    }
    if (static_cast<std::int64_t>(g.tokens.size()) > vocabSize)
        throw std::runtime_error(modelDir + ": the tokenizer has " + std::to_string(g.tokens.size()) +
                                 " tokens but the model's embedding only " + std::to_string(vocabSize) + " rows");
    // Free ids (and the model's rows past the tokenizer) as llama.cpp's converter names them.
    for (std::size_t id = 0; id < static_cast<std::size_t>(vocabSize); ++id) {
        if (id >= g.tokens.size()) g.tokens.emplace_back(), g.types.push_back(0);
        if (g.types[id] == 0) g.tokens[id] = "[PAD" + std::to_string(id) + "]", g.types[id] = 5;
    }
    if (g.model == "llama") g.scores.resize(g.tokens.size(), 0.0f);
    // BOS, EOS and whether BOS is added: as the run's own tokenizer has them (tokenizer_config.json
    // first, as transformers reads it).
    const auto tok = tokenizer::Tokenizer::loadFromDir(modelDir);
    if (g.model == "gpt2") g.bosId = tok->bosId(), g.eosId = tok->eosId();
    g.addBos = tok->addsBosByDefault() && g.bosId >= 0;
    if (fs::is_regular_file(dir / "tokenizer_config.json")) {
        const json cfg = readJson(dir / "tokenizer_config.json");
        if (cfg.contains("chat_template") && cfg["chat_template"].is_string()) g.chatTemplate = cfg["chat_template"].get<std::string>();
    }
    return g;
}

} // namespace latmix::exporting
