#include "model/ShardIndex.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <stdexcept>

namespace latmix::model {

std::vector<std::pair<std::string, std::string>> parseShardIndex(const std::string& text, const std::string& indexPath) {
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        throw std::runtime_error("'" + indexPath + "' is not valid JSON (" + e.what() +
                                 "); download the checkpoint again");
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
        throw std::runtime_error("'" + indexPath + "' has no 'weight_map' object (tensor name -> shard file)");
    std::vector<std::pair<std::string, std::string>> map;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
        if (!it.value().is_string())
            throw std::runtime_error("'" + indexPath + "': weight_map entry '" + it.key() + "' is not a file name");
        const std::string shard = it.value().get<std::string>();
        const std::filesystem::path p(shard);
        bool escapes = shard.empty() || p.is_absolute();
        for (const auto& part : p) escapes = escapes || part == "..";
        if (escapes)
            throw std::runtime_error("'" + indexPath + "' names shard '" + shard +
                                     "', which is not a file inside the folder");
        map.emplace_back(it.key(), shard);
    }
    return map;
}

} // namespace latmix::model
