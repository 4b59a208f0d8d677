// llama2.c tokenizer.bin converted to tokenizer.json: a conversion that succeeds must give a
// tokenizer.json that loads and encodes, with ids inside the vocabulary.
#include "FuzzSupport.h"

#include "tokenizer/Tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace latmix;
    const std::string bin = fuzz::writeInput("tokenizer.bin", data, size);
    const std::string json = (fuzz::scratchDir() / "tokenizer.json").string();
    std::filesystem::remove(json);
    bool converted = false;
    fuzz::expectResultOrClearError(bin, [&] {
        tokenizer::convertLlama2cTokenizer(bin, json);
        converted = true;
    });
    if (!converted) return 0;
    try {
        const auto tok = tokenizer::Tokenizer::loadFile(json);
        for (const char* text : {"Once upon a time", " a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 b\n\t", ""}) {
            const std::vector<int> ids = tok->encode(text, true);
            for (int id : ids)
                if (id < 0 || id >= tok->vocabSize()) fuzz::finding("encoded id " + std::to_string(id) + " outside the vocabulary");
            (void)tok->decode(ids);
        }
    } catch (const std::exception& e) {
        fuzz::finding(std::string("a converted tokenizer.json does not load or encode: ") + e.what());
    }
    return 0;
}
