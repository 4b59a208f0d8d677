#pragma once
// JSON of the "latmix" config.json object and of an MX format, written in one place for
// config.json (ModelConfig), the run model (export/RunModel) and latmix.json (quant/Pipeline).
// Internal to latmix_core: nlohmann_json is a private dependency, include only from .cpp files.
#include "model/ModelConfig.h"

#include <nlohmann/json.hpp>

namespace latmix::model {

// {"format": "mxfp4", "block": 32, "scale_mode": "floor"}, or null for no format.
nlohmann::ordered_json mxConfigJson(const std::optional<mx::MxConfig>& f);

// {"method", "weight_format", "activation_format", "online_hadamard", "lm_head_bias"}; read back
// by ModelConfig::fromJsonText.
nlohmann::ordered_json latmixJson(const LatmixQuantization& q, bool lmHeadBias);

} // namespace latmix::model
