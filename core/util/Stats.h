#pragma once
// Summary statistics over runs or documents (zero-shot standard errors, sweep tables).
#include <cmath>
#include <limits>
#include <vector>

namespace latmix::util {

// The mean; 0 for no values.
inline double mean(const std::vector<double>& x) {
    double s = 0;
    for (double v : x) s += v;
    return x.empty() ? 0.0 : s / static_cast<double>(x.size());
}

// The sample standard deviation (n − 1 in the denominator, as numpy's ddof=1 and the harness's
// sample_stddev); NaN for fewer than two values.
inline double sampleStd(const std::vector<double>& x) {
    if (x.size() < 2) return std::numeric_limits<double>::quiet_NaN();
    const double m = mean(x);
    double ss = 0;
    for (double v : x) ss += (v - m) * (v - m);
    return std::sqrt(ss / static_cast<double>(x.size() - 1));
}

} // namespace latmix::util
