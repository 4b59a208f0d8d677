#pragma once
// The transform analysis of paper §3 / Fig. 2 as one job: for every quantization point and
// every transform kind, build the transform (learned kinds: train it layer-locally on the
// point's activations), then measure it with the SPEC §3 metrics. Used by `latmix analyze`;
// the results go to io/AnalysisStore (HDF5 + JSON).
#include "metrics/TransformMetrics.h"
#include "train/LayerLocalTrainer.h"
#include "transforms/LearnedTransforms.h"
#include "util/Job.h"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace latmix::model {
class LlamaModel;
}

namespace latmix::train {

// Activations of several points, rows [n, d] each, in point order.
using PointActivations = std::vector<std::pair<std::string, at::Tensor>>;

// Runs the model over seeded calibration windows (model::sampleCalibrationWindows) and keeps
// the activations of the points matching pointsRegex in memory (float32, CPU), at most maxRows
// rows per point (0: all). The points are model::quantizationPointNames, and with expertPoints
// also each expert's own down_proj input (model::pointNamesWithExperts: the rows of the tokens
// routed to the expert, in window and token order). Throws naming the point and the expert when
// an expert chosen got no token on the windows. Progress per window; cancel between windows.
PointActivations captureActivationsInMemory(const model::LlamaModel& model, const std::vector<int>& calibrationIds,
                                            const std::string& pointsRegex, int samples, int seqLen,
                                            std::uint64_t seed, std::int64_t maxRows = 0, bool expertPoints = false,
                                            JobContext& job = silentJob());

// The points of an activation run file (io/ActivationStore) matching pointsRegex.
PointActivations readActivations(const std::string& runFile, const std::string& pointsRegex, std::int64_t maxRows = 0);

struct AnalysisOptions {
    mx::MxConfig mx;
    std::vector<std::string> kinds;                          // transforms::makeTransform kinds
    std::vector<int> sweepBlocks = metrics::defaultSweepBlockSizes();
    transforms::TransformOptions transform;                  // blockSize is taken from mx.blockSize
    LayerLocalOptions training;                              // its mx is taken from mx
    c10::Device device = c10::kCPU;                          // where transforms train and run
    // The learned kinds as large as the method's transform at each point (true, the default:
    // T1 full at the residual's points, T2's blocks of headDim at o_proj's input, T3's blocks of
    // 32 at down_proj's; transforms/Blockwise.h), or full d×d everywhere (false: --learned-size
    // full). A point of another name, or o_proj's without headDim, gets full ones.
    bool learnedAsMethod = true;
    std::int64_t headDim = 0;
    // The "wush" kind needs the weights reading each point besides its activations: the stacked
    // [out, d] of model::pointWeights by point name. A point without one gets an error entry.
    std::map<std::string, at::Tensor> pointWeights;
};

// The kinds an analysis compares: transforms::transformKinds() and "wush", WUSH's closed form from
// the point's activations and the weights that read it (AnalysisOptions::pointWeights; SPEC §2),
// which no ablation can take since it is built from data.
std::vector<std::string> analysisKinds();
inline constexpr const char* kWushKind = "wush";

// The block of a learned kind at point under o (0: full d×d): AnalysisOptions::learnedAsMethod.
std::int64_t learnedBlockAt(const std::string& point, std::int64_t dim, const AnalysisOptions& o);

// One point × one transform.
struct AnalysisEntry {
    std::string point, kind;
    std::string error; // not empty: the transform could not be built or trained for this point
    bool learned = false;
    metrics::TransformReport report;
    // Sweep semantics: fixed block-diagonal kinds are rebuilt with each sweep block size (the
    // block transform follows the MX block, as in paper Fig. 2a); every other kind, learned ones
    // included, is held fixed while the MX block size varies.
    LayerLocalResult training;   // learned kinds
    // Learned kinds: A [d, d] and v [d] (undefined without bias), float64 CPU; a blockwise one
    // (AnalysisOptions::learnedAsMethod) keeps A as its blocks instead: matrixBlocks [nb, b, b]
    // and matrixTail [r, r] (undefined when b divides d), matrix undefined.
    at::Tensor matrix, bias;
    at::Tensor matrixBlocks, matrixTail;
    std::int64_t learnedBlock = 0; // the blocks' size; 0: full
    at::Tensor logAbsScales;     // learned kinds with scales
    double seconds = 0;
};

struct AnalysisResult {
    std::vector<std::pair<std::string, std::pair<std::int64_t, std::int64_t>>> points; // name, (rows, dim)
    std::vector<AnalysisEntry> entries; // point-major, kinds in the order given
    double seconds = 0;
};

// Throws std::invalid_argument naming what is wrong (MX config, unknown kind listing the valid
// ones, sweep block sizes, training settings); callers check before capturing anything.
void validateAnalysisOptions(const AnalysisOptions& options);

// Throws std::invalid_argument for invalid options (validateAnalysisOptions) (listing them) or non-finite activations
// (naming the point); per point and transform, anything else that fails becomes an entry with
// error set and the analysis goes on. Cancel throws JobCancelled between and inside trainings.
AnalysisResult analyzeTransforms(const PointActivations& activations, const AnalysisOptions& options,
                                 JobContext& job = silentJob());

} // namespace latmix::train
