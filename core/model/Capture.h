#pragma once
// The one capture loop: run the model over calibration windows and hand the activations at the
// quantization points (SPEC §4) to a sink. eval/ActivationCapture streams them to an HDF5 run
// file; train/TransformAnalysis keeps them in memory; both go through captureWindows().
#include "util/Job.h"

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace latmix::model {

class LlamaModel;

// n windows of len tokens at random starts in ids, from a seeded 64-bit Mersenne Twister
// (the same windows on every platform for the same seed). Throws if ids is shorter than len.
std::vector<std::vector<int>> sampleCalibrationWindows(const std::vector<int>& ids, int n, int len,
                                                       std::uint64_t seed);

// The names among `points` that the ECMAScript regex pointsRegex finds (std::regex_search), in
// the order given. Throws std::invalid_argument for an invalid regex or when none matches
// (`where` says of what: "of the model", "in 'run.h5'").
std::vector<std::string> matchingPoints(const std::vector<std::string>& points, const std::string& pointsRegex,
                                        const std::string& where);

struct ModelConfig;

// matchingPoints over the points a capture offers: quantizationPointNames, and with expertPoints
// pointNamesWithExperts (each expert's own down_proj input too). When none matches and the regex
// names an expert's own point that was not offered, the error says where such points are reached.
std::vector<std::string> capturePoints(const ModelConfig& config, const std::string& pointsRegex, bool expertPoints,
                                       const std::string& where);

// Receives the activations of one point in one window: rows [window length, dim] on the model's
// device, finite (checked before the call). An expert's own point (model::pointNamesWithExperts) gets
// instead, once per pass, the rows of the tokens routed to that expert in the whole pass
// (window: the pass's first), in token order; none when the expert got no token in the pass.
using CaptureSink = std::function<void(std::size_t window, const std::string& point, const at::Tensor& rows)>;

// Runs the model (no gradients) over the windows and calls sink for each of `points` and
// window, in window order for each point. Throws std::runtime_error naming the point and window
// (pass, for an expert's point) for non-finite activations. Progress per pass; cancel between passes (JobCancelled).
// stopAfter(windowsDone), when given, ends the loop early once it returns true. tokensPerPass > 0
// runs consecutive windows of one length together as a batch of up to that many tokens: each
// stored layer is then converted (a bf16 checkpoint on the CPU) once per pass instead of once
// per window, which is most of a short window's cost at 1B; 0 runs one window per pass.
void captureWindows(const LlamaModel& model, const std::vector<std::vector<int>>& windows,
                    const std::vector<std::string>& points, const CaptureSink& sink, JobContext& job = silentJob(),
                    const std::function<bool(std::size_t)>& stopAfter = nullptr, std::int64_t tokensPerPass = 0);

} // namespace latmix::model
