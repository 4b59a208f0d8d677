#pragma once
// How many tokens the router sends to each expert of a mixture-of-experts model (docs/spec.md,
// "Mixture of experts"): the load behind per-expert GPTQ, where an expert that few calibration
// tokens reach is rounded to nearest. `latmix experts` prints it.
#include "util/Job.h"

#include <cstdint>
#include <vector>

namespace latmix::model {
class LlamaModel;
}

namespace latmix::eval {

struct ExpertLoad {
    std::vector<int> layers;                       // the sparse layers, in order
    std::vector<std::vector<std::int64_t>> tokens; // [index in layers][expert]: tokens routed there
    std::int64_t tokensPerLayer = 0;               // tokens through each layer (windows x length)
    int expertsPerToken = 0;
};

// The model's own routing over the windows (no gradients, the lm_head never computed). Throws
// std::invalid_argument for a model without experts. Progress per window; cancel between windows.
ExpertLoad measureExpertLoad(const model::LlamaModel& model, const std::vector<std::vector<int>>& windows,
                             JobContext& job = silentJob());

} // namespace latmix::eval
