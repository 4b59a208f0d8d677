#include "eval/ActivationCapture.h"

#include "io/ActivationStore.h"
#include "model/Capture.h"
#include "model/LlamaModel.h"

#include <ATen/ATen.h>

#include <chrono>
#include <stdexcept>

namespace latmix::eval {

CaptureResult captureActivations(const model::LlamaModel& model, const std::vector<int>& calibrationIds,
                                 const CaptureOptions& o, const std::string& outPath,
                                 std::map<std::string, std::string> attributes, JobContext& job) {
    CaptureResult r;
    r.points = model::capturePoints(model.config(), o.pointsRegex, false, "");
    const auto windows = model::sampleCalibrationWindows(calibrationIds, o.samples, o.seqLen, o.seed);
    attributes["samples"] = std::to_string(o.samples);
    attributes["seqlen"] = std::to_string(o.seqLen);
    attributes["seed"] = std::to_string(o.seed);
    attributes["points_regex"] = o.pointsRegex;
    io::ActivationWriter writer(outPath, o.bfloat16, attributes);
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::int64_t> allTokens;
    for (const auto& w : windows) allTokens.insert(allTokens.end(), w.begin(), w.end());
    model::captureWindows(
        model, windows, r.points,
        [&](std::size_t, const std::string& point, const at::Tensor& rows) { writer.append(point, rows); }, job);
    r.rowsPerPoint = static_cast<std::int64_t>(windows.size()) * o.seqLen;
    writer.writeTokens(at::tensor(allTokens, at::kLong).reshape({static_cast<int64_t>(windows.size()), o.seqLen}));
    writer.finish();
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return r;
}

} // namespace latmix::eval
