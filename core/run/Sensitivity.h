#pragma once
// Which fusion groups deserve the bits (docs/spec.md, "Mixed precision"): for each group and
// candidate format, the KL to the full-precision model with that group alone quantized (weights
// round-to-nearest with static scales, its input points' activations fake-quantized), measured on
// calibration windows (never the test text); and the bit-budget problem those scores pose.
#include "quant/BitBudget.h"
#include "run/FormatScheme.h"
#include "util/Job.h"

#include <cstdint>
#include <string>
#include <vector>

namespace latmix::run {

struct SensitivityRequest {
    std::string modelDir;
    std::vector<int> calibrationIds; // the calibration text, tokenized with the model's tokenizer
    std::string calibrationSource;   // its file, recorded
    int seqLen = 512;
    int windows = 8;
    // Candidate formats by scheme name (parseSchemeFormat); bf16 (kept) is always a candidate:
    // the group as the reference has it, KL 0.
    std::vector<std::string> formats = {"mxfp4", "mxfp8"};
    std::string dtype = "float32";
    std::string device = "cpu";
    bool estimate = true; // the first-order estimate beside the measured KL
    bool measure = true;  // the measured KL (groups × formats passes); false: the estimate alone
    // The memory a CPU run may use; 0: what the host has available now (tests set less).
    std::int64_t availableBytes = 0;
};

// The peak memory of measureSensitivity, roughly (the largest terms): the weights in the request's
// dtype; the measured KL adds one window's logits and log-probabilities; the estimate adds the
// block linears as float32 leaves and their gradients (8 bytes a weight) and the activations one
// window's backward pass keeps. storedParameters: the checkpoint's parameter count.
std::int64_t sensitivityPeakBytes(const model::ModelConfig& config, std::int64_t storedParameters,
                                  const SensitivityRequest& request);

struct SensitivityTable {
    std::string model, calibration;
    int seqLen = 0, windows = 0;
    std::int64_t tokens = 0;           // predicted tokens per measurement
    std::vector<std::string> formats;  // the candidates, bf16 last
    std::vector<model::FusionGroup> groups;
    // [group][format]: mean KL(FP ‖ group quantized) in nats per token and its standard error;
    // empty when only the estimate was asked for
    std::vector<std::vector<double>> kl, klStdErr;
    // [group][format]: the first-order estimate (AutoScheme-style, docs/spec.md): with G the
    // gradient of the calibration cross-entropy, Σ |G ⊙ (Q(W) − W)| over the group's weights plus,
    // window by window, Σ |∂L/∂x ⊙ (Q(x) − x)| over its input points; one forward and backward pass
    // over the windows. Empty when it was not computed.
    std::vector<std::vector<double>> estimate;
    // Per quantized format (formats without bf16): Spearman's rank correlation of the estimate and
    // the measured KL over the groups.
    std::vector<double> rankCorrelation;
    double seconds = 0, estimateSeconds = 0;
};

// Groups × formats passes over the windows, one more for the reference, and one forward and
// backward pass for the estimate (request.estimate). Progress per pass with
// the group and format; honours cancel between windows. Throws naming the format or file, and on
// the CPU before loading anything when sensitivityPeakBytes exceeds the memory available (naming
// both and the ways out); an allocation that fails later is reported with the same ways out.
SensitivityTable measureSensitivity(const SensitivityRequest& request, JobContext& job = silentJob());

// Spearman's rank correlation of two equally long lists (ties take their mean rank); NaN when
// either is constant or shorter than 2.
double rankCorrelation(const std::vector<double>& a, const std::vector<double>& b);

// The table as JSON text and back (throws naming the file and what is missing).
std::string sensitivityJson(const SensitivityTable& t);
SensitivityTable readSensitivity(const std::string& path);

// The budget problem of a table: every group's candidates, except the groups a user's rule fixed
// (resolved.rule >= 0: that format alone; one the table did not measure is refused naming it).
// resolved: resolveScheme of the same model (groups in the same order).
// byEstimate: the candidates' scores are the estimates instead of the measured KL (a table made
// with the estimate alone; the plan's "predicted KL" is then in the estimate's units).
quant::BudgetProblem budgetProblem(const SensitivityTable& table, const std::vector<GroupFormat>& resolved, double budget,
                                   bool byEstimate = false);
// The groups' formats a solution picks (fixed groups keep theirs), for rulesNamingEachGroup.
std::vector<GroupFormat> chosenScheme(const SensitivityTable& table, const std::vector<GroupFormat>& resolved,
                                      const quant::BudgetSolution& solution);

} // namespace latmix::run
