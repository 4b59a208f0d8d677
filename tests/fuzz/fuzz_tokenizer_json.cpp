// tokenizer.json (load and encode): the input's first line is text to encode, the rest the file.
// An accepted tokenizer encodes to ids inside its vocabulary and decodes them again.
#include "FuzzSupport.h"

#include "tokenizer/Tokenizer.h"

#include <algorithm>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace latmix;
    const std::uint8_t* nl = std::find(data, data + size, std::uint8_t('\n'));
    const std::string text(reinterpret_cast<const char*>(data), static_cast<std::size_t>(nl - data));
    const std::uint8_t* file = nl == data + size ? nl : nl + 1;
    const std::string path = fuzz::writeInput("tokenizer.json", file, static_cast<std::size_t>(data + size - file));
    fuzz::expectResultOrClearError(path, [&] {
        const auto tok = tokenizer::Tokenizer::loadFile(path);
        for (const std::string& t : {text, std::string("Hello world <|begin_of_text|> 12345")}) {
            const std::vector<int> ids = tok->encode(t, true);
            for (int id : ids)
                if (id < 0 || id >= tok->vocabSize()) fuzz::finding("encoded id " + std::to_string(id) + " outside the vocabulary");
            (void)tok->decode(ids);
        }
    });
    return 0;
}
