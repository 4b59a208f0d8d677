#pragma once
// Activation capture at the quantization points (SPEC §4, §5) to an HDF5 run file
// (io/ActivationStore), over seeded calibration windows (model/Capture).
#include "util/Job.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace latmix::model {
class LlamaModel;
}

namespace latmix::eval {

struct CaptureOptions {
    std::string pointsRegex = ".*"; // ECMAScript regex searched in point names
    int samples = 8;
    int seqLen = 256;
    std::uint64_t seed = 0;
    bool bfloat16 = false; // store activations as bfloat16 (half the disk)
};

struct CaptureResult {
    std::vector<std::string> points;
    std::int64_t rowsPerPoint = 0;
    double seconds = 0;
};

// Runs the model over model::sampleCalibrationWindows(calibrationIds, samples, seqLen, seed) and
// streams the activations at the matching points to an HDF5 run file, one window at a time (memory stays bounded). Progress per window; cancel
// between windows removes the partial file. attributes go to the file's root (model, config).
CaptureResult captureActivations(const model::LlamaModel& model, const std::vector<int>& calibrationIds,
                                 const CaptureOptions& options, const std::string& outPath,
                                 std::map<std::string, std::string> attributes, JobContext& job = silentJob());

} // namespace latmix::eval
