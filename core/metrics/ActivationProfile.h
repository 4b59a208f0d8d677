#pragma once
// What the activations of one quantization point look like to the MX quantizer, before and
// after a transform (the workbench's activation view; SPEC §3 for the errors): per-channel
// absolute maxima over tokens (the "massive activations" of a few channels), per-token norms, a
// histogram of the values, and the MX blocks of one chosen token with their shared scales and
// errors. One call on captured rows x [n, d]; the view only draws what it returns.
#include "mx/MxFormat.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace latmix::transforms {
class AffineTransform;
}

namespace latmix::metrics {

struct ActivationProfileOptions {
    mx::MxConfig format;
    std::int64_t token = 0; // the row whose MX blocks are shown
    int histogramBins = 81; // over [-m, m], m = max |y| (odd: a bin centred on 0)
    int topChannels = 8;    // how many of the largest per-channel maxima to name
};

// One side of the comparison: y = x (before) or y = T(x) (after). float64 CPU tensors.
struct ActivationSide {
    at::Tensor channelAbsMax;              // [d] max over rows of |y_rc|
    at::Tensor tokenNorm;                  // [n] ‖y_r‖₂
    std::vector<std::int64_t> topChannels; // the largest channelAbsMax, descending (ties: lower index first)
    at::Tensor histogramEdges;             // [bins + 1], -m .. m
    at::Tensor histogramCounts;            // [bins] values of y per bin (a value on an inner edge counts right)
    // The chosen token in the domain the quantizer sees:
    at::Tensor tokenValues;      // [d] y_t
    at::Tensor tokenQuantized;   // [d] Q(y_t)
    at::Tensor tokenScaleLog2;   // [N_B] log2 of each block's shared scale (the E8M0 exponent for MX)
    at::Tensor tokenBlockError;  // [N_B] SPEC §3 E_B^i of the token alone, in x's coordinates
    at::Tensor blockError;       // [N_B] SPEC §3 E_B^i over all rows
    double mse = 0;              // E(T) over all rows (T = identity before)
};

struct ActivationProfile {
    std::string transform; // the transform's name()
    std::int64_t rows = 0, dim = 0, token = 0;
    mx::MxConfig format;
    ActivationSide before, after;
};

// Throws std::invalid_argument naming what is wrong: x not [n, d] or not finite (naming point),
// the transform's width not d, token out of range, bins < 1.
ActivationProfile profileActivations(const at::Tensor& x, const transforms::AffineTransform& t,
                                     const ActivationProfileOptions& options, const std::string& point = "activations");

// The same for one point captured twice: before from the original model, after from the model
// a run quantizes (its transforms folded in: analysis::ModelCapture::transformsFile). Each side is
// profiled as it is (T = identity on it), so each mse is the MX error at the point in the
// coordinates its quantizer works in. transform names the after side. Throws when the two
// captures differ in shape (naming point).
ActivationProfile profileActivationPair(const at::Tensor& before, const at::Tensor& after, const std::string& transform,
                                        const ActivationProfileOptions& options, const std::string& point = "activations");

} // namespace latmix::metrics
