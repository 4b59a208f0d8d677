#pragma once
// The activations a transform analysis starts from, taken from a model folder: checkpoint →
// decoder → calibration windows → capture (model/Capture). `latmix analyze` and the workbench's
// comparison view both go through here.
#include "train/TransformAnalysis.h"
#include "util/Job.h"

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>

namespace latmix::run {

struct ModelCapture {
    std::string modelDir;
    std::string calibrationText;     // tokenized with the folder's tokenizer (SPEC §5: never the test split)
    std::string pointsRegex = ".*";
    int samples = 8, seqLen = 256;
    std::uint64_t seed = 0;
    std::int64_t maxRows = 0;        // per point, 0: all
    at::ScalarType dtype = at::kFloat;
    std::string device = "cpu";
    // A run's transforms.h5: capture from the model with them folded in (train::foldedModel),
    // i.e. what that run's quantizers see; empty: the checkpoint as it is.
    std::string transformsFile;
};

// Throws naming the folder, the point regex, the transforms file or the text when something does
// not fit; progress
// per calibration window, cancel between windows.
train::PointActivations captureModelActivations(const ModelCapture& request, JobContext& job = silentJob());

} // namespace latmix::run
