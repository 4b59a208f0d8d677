#include "model/Capture.h"

#include "model/LlamaModel.h"
#include "model/MixtureOfExperts.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <random>
#include <regex>
#include <set>
#include <stdexcept>

namespace latmix::model {

std::vector<std::vector<int>> sampleCalibrationWindows(const std::vector<int>& ids, int n, int len,
                                                       std::uint64_t seed) {
    if (len < 1 || n < 0) throw std::invalid_argument("calibration: need samples >= 0 and sequence length >= 1");
    if (ids.size() < static_cast<std::size_t>(len))
        throw std::invalid_argument("calibration text has " + std::to_string(ids.size()) +
                                    " tokens, fewer than one window of " + std::to_string(len));
    std::mt19937_64 rng(seed);
    const std::uint64_t starts = ids.size() - static_cast<std::size_t>(len) + 1;
    std::vector<std::vector<int>> windows;
    for (int i = 0; i < n; ++i) {
        const auto s = static_cast<std::size_t>(rng() % starts); // raw draws: identical on every library
        windows.emplace_back(ids.begin() + s, ids.begin() + s + len);
    }
    return windows;
}

std::vector<std::string> matchingPoints(const std::vector<std::string>& points, const std::string& pointsRegex,
                                        const std::string& where) {
    std::regex pattern;
    try {
        pattern = std::regex(pointsRegex);
    } catch (const std::regex_error& e) {
        throw std::invalid_argument("invalid --points regex '" + pointsRegex + "': " + e.what());
    }
    std::vector<std::string> out;
    for (const auto& p : points)
        if (std::regex_search(p, pattern)) out.push_back(p);
    if (out.empty())
        throw std::invalid_argument("no quantization point " + (where.empty() ? "" : where + " ") + "matches '" +
                                    pointsRegex +
                                    "'; points look like layers.0.self_attn.qkv.input, layers.0.mlp.down_proj.input");
    return out;
}

std::vector<std::string> capturePoints(const ModelConfig& config, const std::string& pointsRegex, bool expertPoints,
                                       const std::string& where) {
    if (expertPoints) return matchingPoints(pointNamesWithExperts(config), pointsRegex, where);
    try {
        return matchingPoints(quantizationPointNames(config), pointsRegex, where);
    } catch (const std::invalid_argument& e) {
        if (!config.moe) throw;
        // Throws the same error when no expert's point matches either; any it finds is an expert's
        // own (the others would have matched above).
        matchingPoints(pointNamesWithExperts(config), pointsRegex, where);
        throw std::invalid_argument(std::string(e.what()) +
                                    "; an expert's own down_proj input gets only the tokens routed to it, so it is "
                                    "offered by an in-memory capture that asks for it (`latmix analyze --model DIR "
                                    "--expert-points`, the workbench's activation and comparison views), never "
                                    "stored in a run file");
    }
}

void captureWindows(const LlamaModel& model, const std::vector<std::vector<int>>& windows,
                    const std::vector<std::string>& points, const CaptureSink& sink, JobContext& job,
                    const std::function<bool(std::size_t)>& stopAfter, std::int64_t tokensPerPass) {
    const std::set<std::string> wanted(points.begin(), points.end());
    // Thrown by the hook once a pass has reached every wanted point: the rest of the pass (the
    // later layers, the vocabulary-sized lm_head) is of no use to a capture. At the 1B shape a
    // point in layer 8 costs half the forward, and the lm_head alone a third of it.
    struct AllPointsSeen {};
    at::NoGradGuard noGrad;
    for (std::size_t first = 0; first < windows.size();) {
        job.checkCancelled();
        // This pass: windows [first, last) of one length, within the token budget.
        const auto length = static_cast<std::int64_t>(windows[first].size());
        std::size_t last = first + 1;
        while (last < windows.size() && static_cast<std::int64_t>(windows[last].size()) == length &&
               static_cast<std::int64_t>(last - first + 1) * length <= tokensPerPass)
            ++last;
        std::vector<std::int64_t> ids;
        for (std::size_t w = first; w < last; ++w) ids.insert(ids.end(), windows[w].begin(), windows[w].end());
        const auto batch = static_cast<std::int64_t>(last - first);
        const auto tokens = at::tensor(ids, at::kLong).reshape({batch, length});
        std::size_t seen = 0;
        try {
            model.forward(tokens.to(model.device()), [&](const std::string& point, const at::Tensor& x) {
                if (!wanted.count(point)) return x;
                const auto give = [&](std::size_t w, const at::Tensor& rows, const char* where) {
                    if (!at::isfinite(rows).all().item<bool>())
                        throw std::runtime_error("non-finite activations at " + point + " in calibration " + where +
                                                 std::to_string(w) + ": the model or its weights are broken");
                    sink(w, point, rows);
                };
                if (isExpertPoint(point)) // [1, tokens of the pass routed to the expert, width]
                    give(first, x.reshape({-1, x.size(-1)}), "windows from ");
                else
                    for (std::int64_t b = 0; b < batch; ++b)
                        give(first + static_cast<std::size_t>(b), x.select(0, b).reshape({-1, x.size(-1)}), "window ");
                // An idle expert's point is never reached: the pass then runs to its end.
                if (++seen == wanted.size()) throw AllPointsSeen{};
                return x;
            });
        } catch (const AllPointsSeen&) {
        }
        first = last;
        job.progress(double(first) / windows.size(), "window " + std::to_string(first) + "/" + std::to_string(windows.size()));
        if (stopAfter && stopAfter(first)) break;
    }
}

} // namespace latmix::model
