// Tokenizer::loadFromDir / loadFile: pick the implementation from the file.
#include "model/Tokenizer.h"

#include "model/BpeTokenizer.h"
#include "model/SentencePieceTokenizer.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace latmix::model {

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

} // namespace latmix::model
