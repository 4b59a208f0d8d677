#pragma once
// Synthetic activation vectors shaped like LLM residual streams: Gaussian bulk plus a few
// channels with massive outliers. Used by the MX format explorer and the benchmarks.
#include <cstdint>
#include <vector>

namespace latmix::mx {

struct SyntheticSpec {
    std::int64_t length = 256;
    int outlierChannels = 4;    // how many channels carry outliers
    double outlierScale = 40.0; // their magnitude relative to the bulk's standard deviation
    std::uint64_t seed = 1;
};

// Deterministic for a given spec (own generator, no global state).
std::vector<float> syntheticActivations(const SyntheticSpec& spec);

} // namespace latmix::mx
