// Tokenizer::loadFromDir / loadFile: pick the implementation from the file.
#include "tokenizer/Tokenizer.h"

#include "tokenizer/BpeTokenizer.h"
#include "tokenizer/SentencePieceTokenizer.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace latmix::tokenizer {

namespace fs = std::filesystem;

std::unique_ptr<Tokenizer> Tokenizer::loadFile(const std::string& path) {
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) throw std::runtime_error("tokenizer file not found: " + path);
    std::string ext = fs::path(path).extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (ext == ".json") return std::make_unique<BpeTokenizer>(path);
    if (ext == ".model") return std::make_unique<SentencePieceTokenizer>(path);
    if (ext == ".bin")
        throw std::runtime_error(path + ": a llama2.c tokenizer.bin is not loaded directly; convert it to a "
                                        "tokenizer.json with convertLlama2cTokenizer");
    // Another name: JSON starts with '{' (after optional whitespace); else try SentencePiece.
    std::ifstream in(path, std::ios::binary);
    char c = 0;
    while (in.get(c) && std::isspace(static_cast<unsigned char>(c))) {
    }
    if (in && c == '{') return std::make_unique<BpeTokenizer>(path);
    return std::make_unique<SentencePieceTokenizer>(path);
}

std::unique_ptr<Tokenizer> Tokenizer::loadFromDir(const std::string& dir) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) throw std::runtime_error("tokenizer folder not found: " + dir);
    // tokenizer.json first, as transformers' fast tokenizers do.
    for (const char* name : {"tokenizer.json", "tokenizer.model"}) {
        const fs::path p = fs::path(dir) / name;
        if (fs::is_regular_file(p, ec)) return loadFile(p.string());
    }
    throw std::runtime_error("no tokenizer.json or tokenizer.model in " + dir);
}

std::vector<std::string> tokenizerFileNames() {
    return {"tokenizer.json",   "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json",
            "added_tokens.json", "vocab.json",      "merges.txt",            "generation_config.json"};
}

std::vector<std::string> copyTokenizerFiles(const std::string& from, const std::string& to) {
    std::vector<std::string> copied;
    if (from.empty()) return copied;
    for (const auto& name : tokenizerFileNames()) {
        const fs::path src = fs::path(from) / name;
        std::error_code ec;
        if (!fs::is_regular_file(src, ec)) continue;
        fs::copy_file(src, fs::path(to) / name, fs::copy_options::overwrite_existing, ec);
        if (ec)
            throw std::runtime_error("cannot copy tokenizer file '" + src.string() + "' to '" + to + "': " + ec.message());
        copied.push_back(name);
    }
    return copied;
}

} // namespace latmix::tokenizer
