#include "mx/SyntheticActivations.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace latmix::mx {

std::vector<float> syntheticActivations(const SyntheticSpec& spec) {
    std::mt19937_64 rng(spec.seed);
    // Box-Muller on raw 64-bit draws: std::normal_distribution differs between standard
    // libraries, this does not.
    auto uniform = [&rng] { return (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53; };
    std::vector<float> x(static_cast<size_t>(std::max<std::int64_t>(spec.length, 0)));
    for (size_t i = 0; i < x.size(); ++i) {
        const double u1 = uniform(), u2 = uniform();
        x[i] = static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
    }
    if (x.empty()) return x;
    for (int k = 0; k < spec.outlierChannels; ++k) {
        const size_t channel = static_cast<size_t>(rng() % x.size());
        const double sign = (rng() & 1) ? 1.0 : -1.0;
        x[channel] = static_cast<float>(sign * spec.outlierScale * (0.75 + 0.5 * uniform()));
    }
    return x;
}

} // namespace latmix::mx
