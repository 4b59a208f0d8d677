#pragma once
// The activations a transform analysis starts from, taken from a model folder: checkpoint →
// decoder → calibration windows → capture (model/Capture). `latmix analyze` and the workbench's
// comparison view both go through here.
#include "eval/ExpertLoad.h"
#include "train/TransformAnalysis.h"
#include "util/Job.h"

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <map>
#include <string>

namespace latmix::analysis {

struct ModelCapture {
    std::string modelDir;
    std::string calibrationText;     // tokenized with the folder's tokenizer (SPEC §5: never the test split)
    std::string pointsRegex = ".*";
    int samples = 8, seqLen = 256;
    std::uint64_t seed = 0;
    std::int64_t maxRows = 0;        // per point, 0: all
    at::ScalarType dtype = at::kFloat;
    std::string device = "cpu";
    // A run's transforms.h5: capture from the model with them folded in (fold::foldedModel),
    // i.e. what that run's quantizers see; empty: the checkpoint as it is.
    std::string transformsFile;
    // Check every weight for NaN/Inf (model::checkWeightsFinite) once the request is known to be
    // valid, before the capture: what the CLI does. The workbench checks a model once, when it
    // opens it, not at every capture.
    bool checkWeights = false;
    // Also each expert's own down_proj input (model::pointNamesWithExperts), for pointsRegex to
    // choose among: the rows of the tokens routed to that expert, fewer than the windows' tokens.
    bool expertPoints = false;
};

// Throws naming the folder, the point regex, the transforms file or the text when something does
// not fit; progress
// per calibration window, cancel between windows.
train::PointActivations captureModelActivations(const ModelCapture& request, JobContext& job = silentJob());

// The weights that read each of these points (model::pointWeights; an expert's own down_proj
// input: that expert's down_proj), as the capture's request sees them (with its transformsFile
// folded), float32 CPU: what the analysis's "wush" kind needs besides the activations.
std::map<std::string, at::Tensor> capturedPointWeights(const ModelCapture& request, const train::PointActivations& points);

// The tokens the router sends to each expert of a mixture-of-experts model folder
// (eval::measureExpertLoad) on the request's calibration windows (model::sampleCalibrationWindows;
// pointsRegex, maxRows, transformsFile unused): `latmix experts` and the workbench's experts view.
// Throws naming the folder when the model has no experts, before the model is loaded.
eval::ExpertLoad measureModelExpertLoad(const ModelCapture& request, JobContext& job = silentJob());

// The weight of one block linear of one layer, for the weights view: `original` as the checkpoint
// stores it (what RTN and GPTQ quantize: nothing folded, SPEC §6), and with a run's transforms.h5
// `folded`, the same linear as that run's weight quantizer sees it (γ, T1, T2 and T3 folded:
// fold::foldedLayer, in float64 then float32). float32 CPU; folded undefined without a run.
struct LinearWeights {
    at::Tensor original, folded;
};
// linear: a module of the layer, one of model::names::kBlockLinears ("self_attn.q_proj" ...
// "mlp.down_proj") or in a sparse layer the router ("mlp.gate") or an expert's linear
// ("mlp.experts.5.up_proj"). Throws naming the folder, the layer, the linear or the transforms file.
LinearWeights loadLinearWeights(const std::string& modelDir, int layer, const std::string& linear,
                                const std::string& transformsFile = {});

} // namespace latmix::analysis
