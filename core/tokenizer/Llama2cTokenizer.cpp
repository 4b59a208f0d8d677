// llama2.c tokenizer.bin -> SentencePiece-style tokenizer.json (convertLlama2cTokenizer).
//
// The .bin (karpathy/llama2.c tokenizer.py export) is: int32 max_token_len, then for each id a
// float32 score, an int32 byte length and the bytes. The export replaced SentencePiece's "▁"
// with an ASCII space and wrote BOS / EOS as "\n<s>\n" / "\n</s>\n"; byte-fallback pieces keep
// their "<0xXX>" names. llama2.c encodes like SentencePiece BPE (dummy-prefix space, characters
// or their bytes + 3, then the highest-scoring adjacent merge, leftmost on ties), so the pieces
// go through the same writer as convertSentencePieceModel, with types recovered from the ids.
#include "tokenizer/SentencePieceBpeJson.h"
#include "tokenizer/Tokenizer.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace latmix::tokenizer {

namespace {

bool isBytePiece(const std::string& s) {
    const auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
    return s.size() == 6 && s.compare(0, 3, "<0x") == 0 && hex(s[3]) && hex(s[4]) && s[5] == '>';
}

std::string trimmed(const std::string& s) {
    const auto b = s.find_first_not_of(" \t\r\n");
    if (b == std::string::npos) return {};
    return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

} // namespace

void convertLlama2cTokenizer(const std::string& tokenizerBin, const std::string& tokenizerJsonOut, int bosId,
                             int eosId) {
    std::ifstream in(tokenizerBin, std::ios::binary);
    if (!in) throw std::runtime_error("tokenizer file not found: " + tokenizerBin);
    const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto bad = [&](const std::string& what) {
        throw std::runtime_error(tokenizerBin + ": not a llama2.c tokenizer: " + what);
    };
    std::size_t pos = 0;
    const auto read32 = [&](void* dst) {
        if (data.size() - pos < 4) bad("truncated at byte " + std::to_string(pos));
        std::memcpy(dst, data.data() + pos, 4); // little-endian on every platform llama2.c runs on
        pos += 4;
    };
    std::int32_t maxLen = 0;
    read32(&maxLen);
    if (maxLen <= 0 || maxLen > 1024) bad("max_token_len " + std::to_string(maxLen));

    std::vector<SpmPiece> pieces;
    while (pos < data.size()) {
        float score;
        std::int32_t len;
        read32(&score);
        read32(&len);
        if (len <= 0 || len > maxLen || data.size() - pos < static_cast<std::size_t>(len))
            bad("piece " + std::to_string(pieces.size()) + " has length " + std::to_string(len));
        SpmPiece p;
        p.piece.assign(data, pos, static_cast<std::size_t>(len));
        p.score = score;
        pos += static_cast<std::size_t>(len);
        const int id = static_cast<int>(pieces.size());
        if (id == 0) {
            p.type = SpmPiece::Type::Unknown; // SentencePiece's <unk> is id 0 in every llama2.c export
        } else if (id == bosId || id == eosId) {
            p.type = SpmPiece::Type::Control;
            const std::string t = trimmed(p.piece);
            p.piece = !t.empty() ? t : (id == bosId ? "<s>" : "</s>");
        } else if (isBytePiece(p.piece)) {
            p.type = SpmPiece::Type::Byte;
        } else {
            // Every space in a piece was a "▁" (SentencePiece pieces hold no raw spaces).
            std::string s;
            for (char c : p.piece) {
                if (c == ' ') s += "\xE2\x96\x81";
                else s += c;
            }
            p.piece = std::move(s);
        }
        pieces.push_back(std::move(p));
    }
    if (pieces.size() < 3) bad("only " + std::to_string(pieces.size()) + " pieces");
    SpmJsonOptions opt;
    opt.addDummyPrefix = true; // llama2.c's encode always prepends the dummy-prefix space
    opt.bosId = bosId;
    opt.eosId = eosId;
    writeSentencePieceBpeJson(pieces, opt, tokenizerJsonOut, tokenizerBin);
}

} // namespace latmix::tokenizer
