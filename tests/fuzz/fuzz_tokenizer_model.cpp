// tokenizer.model through libsentencepiece (load and encode), and its conversion to
// tokenizer.json.
#include "FuzzSupport.h"

#include "tokenizer/Tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace latmix;
    const std::string path = fuzz::writeInput("tokenizer.model", data, size);
    fuzz::expectResultOrClearError(path, [&] {
        const auto tok = tokenizer::Tokenizer::loadFile(path);
        const std::vector<int> ids = tok->encode("Once upon a time, \xc3\xa9\xe2\x82\xac 42", true);
        for (int id : ids)
            if (id < 0 || id >= tok->vocabSize()) fuzz::finding("encoded id " + std::to_string(id) + " outside the vocabulary");
        (void)tok->decode(ids);
    });
    const std::string json = (fuzz::scratchDir() / "converted.json").string();
    fuzz::expectResultOrClearError(path, [&] { tokenizer::convertSentencePieceModel(path, json); });
    return 0;
}
