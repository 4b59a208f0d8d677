// config.json (ModelConfig::fromJsonText) and the tensor list it implies. An accepted config
// must write back (toJsonText) to a config.json that reads back to the same text.
#include "FuzzSupport.h"

#include "model/ModelConfig.h"
#include "model/TensorNames.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace latmix;
    const std::string text(reinterpret_cast<const char*>(data), size);
    fuzz::expectResultOrClearError("config.json", [&] {
        const model::ModelConfig c = model::ModelConfig::fromJsonText(text, "config.json");
        const std::string again = c.toJsonText();
        std::string twice;
        try {
            twice = model::ModelConfig::fromJsonText(again, "config.json").toJsonText();
        } catch (const std::exception& e) {
            fuzz::finding(std::string("an accepted config does not read back: ") + e.what());
        }
        if (twice != again) fuzz::finding("config.json does not round-trip:\n" + again + "\n" + twice);
        // Checkpoint::load's next step: only for configs of a size a file could hold.
        if (std::int64_t(c.numLayers) * c.hiddenSize <= (std::int64_t(1) << 24)) (void)model::requiredTensors(c);
    });
    return 0;
}
