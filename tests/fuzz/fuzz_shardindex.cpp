// model.safetensors.index.json: every shard accepted is a relative path inside the folder.
#include "FuzzSupport.h"

#include "model/ShardIndex.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace latmix;
    const std::string text(reinterpret_cast<const char*>(data), size);
    fuzz::expectResultOrClearError("model.safetensors.index.json", [&] {
        for (const auto& [name, shard] : model::parseShardIndex(text, "model.safetensors.index.json")) {
            const std::filesystem::path p(shard);
            if (shard.empty() || p.is_absolute()) fuzz::finding("accepted shard '" + shard + "'");
            for (const auto& part : p)
                if (part == "..") fuzz::finding("accepted shard '" + shard + "' outside the folder");
        }
    });
    return 0;
}
