#include "eval/ActivationCapture.h"

#include "io/ActivationStore.h"
#include "model/LlamaModel.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <chrono>
#include <random>
#include <regex>
#include <stdexcept>

namespace latmix::eval {

std::vector<std::vector<int>> sampleCalibrationWindows(const std::vector<int>& ids, int n, int len,
                                                       std::uint64_t seed) {
    if (len < 1 || n < 0) throw std::invalid_argument("calibration: need samples >= 0 and sequence length >= 1");
    if (ids.size() < static_cast<size_t>(len))
        throw std::invalid_argument("calibration text has " + std::to_string(ids.size()) +
                                    " tokens, fewer than one window of " + std::to_string(len));
    std::mt19937_64 rng(seed);
    const std::uint64_t starts = ids.size() - static_cast<size_t>(len) + 1;
    std::vector<std::vector<int>> windows;
    for (int i = 0; i < n; ++i) {
        const auto s = static_cast<size_t>(rng() % starts); // raw draws: identical on every library
        windows.emplace_back(ids.begin() + s, ids.begin() + s + len);
    }
    return windows;
}

CaptureResult captureActivations(const model::LlamaModel& model, const std::vector<int>& calibrationIds,
                                 const CaptureOptions& o, const std::string& outPath,
                                 std::map<std::string, std::string> attributes, JobContext& job) {
    std::regex pattern;
    try {
        pattern = std::regex(o.pointsRegex);
    } catch (const std::regex_error& e) {
        throw std::invalid_argument("invalid --points regex '" + o.pointsRegex + "': " + e.what());
    }
    CaptureResult r;
    for (const auto& p : model::quantizationPointNames(model.config()))
        if (std::regex_search(p, pattern)) r.points.push_back(p);
    if (r.points.empty())
        throw std::invalid_argument("no quantization point matches '" + o.pointsRegex +
                                    "'; points look like layers.0.self_attn.qkv.input, layers.0.mlp.down_proj.input");
    const auto windows = sampleCalibrationWindows(calibrationIds, o.samples, o.seqLen, o.seed);
    attributes["samples"] = std::to_string(o.samples);
    attributes["seqlen"] = std::to_string(o.seqLen);
    attributes["seed"] = std::to_string(o.seed);
    attributes["points_regex"] = o.pointsRegex;
    io::ActivationWriter writer(outPath, o.bfloat16, attributes);
    const auto start = std::chrono::steady_clock::now();
    std::vector<int64_t> allTokens;
    at::NoGradGuard noGrad;
    for (size_t w = 0; w < windows.size(); ++w) {
        job.checkCancelled();
        allTokens.insert(allTokens.end(), windows[w].begin(), windows[w].end());
        auto tokens = at::tensor(std::vector<int64_t>(windows[w].begin(), windows[w].end()), at::kLong).unsqueeze(0);
        model.forward(tokens, [&](const std::string& point, const at::Tensor& x) {
            if (std::regex_search(point, pattern)) {
                if (!at::isfinite(x).all().item<bool>())
                    throw std::runtime_error("non-finite activations at " + point + " in calibration window " +
                                             std::to_string(w) + ": the model or its weights are broken");
                writer.append(point, x.reshape({-1, x.size(-1)}));
            }
            return x;
        });
        r.rowsPerPoint += o.seqLen;
        job.progress(double(w + 1) / windows.size(), "window " + std::to_string(w + 1) + "/" + std::to_string(windows.size()));
    }
    writer.writeTokens(at::tensor(allTokens, at::kLong).reshape({static_cast<int64_t>(windows.size()), o.seqLen}));
    writer.finish();
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return r;
}

} // namespace latmix::eval
