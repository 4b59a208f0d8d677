#pragma once
// Layer-local learning of one transform (paper §3 numerical analysis, Fig. 2): minimise the
// transformation MSE E(T) of one quantization point's captured activations (relative to their
// mean square by default, see relativeMse) plus the volume regulariser of SPEC §5,
// λ (Σ log|s_i|)², with AdamW and a cosine schedule after a linear warmup. Q passes gradients with the straight-through estimator (SPEC §1). This is the
// analysis-scale counterpart of the model-level distillation of SPEC §5: no teacher, one point.
#include "mx/MxFormat.h"
#include "util/Job.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace latmix::transforms {
class AffineTransform;
}

namespace latmix::train {

struct TrainingStep {
    int step = 0;   // 1-based
    double loss = 0; // mse (relative when relativeMse) + λ vol, on the minibatch
    double mse = 0;  // E(T) on the minibatch (raw, never relative)
    double vol = 0;  // (Σ log|s_i|)², 0 for transforms without scales
    double lr = 0;
    double conditionNumber = std::numeric_limits<double>::quiet_NaN(); // tracked steps only
    double orthogonalityDeviation = std::numeric_limits<double>::quiet_NaN();
    double offBlockNorm = std::numeric_limits<double>::quiet_NaN();
};

struct LayerLocalOptions {
    mx::MxConfig mx;
    int steps = 200;
    int batchRows = 512;       // rows per minibatch, drawn without replacement (all rows when fewer)
    double lr = 1e-3;          // SPEC §5 default for CPU-sized models
    // AdamW weight decay. 0 by default: on the LU factors decay pulls A towards P·diag(sign),
    // away from the block-Hadamard start, which the MSE objective does not ask for.
    double weightDecay = 0.0;
    int warmupSteps = -1;            // linear warmup; -1: steps / 10 (SPEC §5: 100 of 1000)
    double warmupStartFactor = 0.1;  // SPEC §5
    double volumeWeight = 0.1;       // λ of SPEC §5
    // Divide E(T) in the loss by the mean square of the point's activations. SPEC §5 pairs λ with
    // the scale-free KL; raw E(T) scales with the activations² (1e-4 at one point, 1e+1 at the
    // next), so without this λ would mean something different at every point.
    bool relativeMse = true;
    bool biasFromMean = false;       // start a learned bias at v = -A·mean(x) (SPEC §2)
    std::uint64_t seed = 0;          // minibatch draws
    // κ(A), ‖AᵀA − I‖σ and the off-block norm every k steps (SPEC §3 "tracked every training
    // step"); 0: never. Two SVDs of A per tracked step (O(d³)).
    int matrixMetricsEvery = 0;
    std::function<void(const TrainingStep&)> onStep; // optional observer (GUI plots)
};

struct LayerLocalResult {
    std::vector<TrainingStep> history; // one entry per step
    double initialMse = 0, finalMse = 0; // E(T) on all rows before and after training (float64)
    // The parameters kept: the best on all rows of the start and of every tenth of the steps and
    // the last (the objective: E(T) relative as trained, + λ vol). 0: the start was best, and the
    // transform ends as it began; never worse than its start (issue 71).
    int bestStep = 0;
    double seconds = 0;
};

// Learning-rate factor at 0-based step: warmupStartFactor → 1 linearly over the warmup
// steps, then cosine 1 → 0 over the rest (PyTorch LinearLR then CosineAnnealingLR, eta_min 0).
double scheduleFactor(int step, int steps, int warmupSteps, double warmupStartFactor);

class LayerLocalTrainer {
public:
    explicit LayerLocalTrainer(LayerLocalOptions options);
    const LayerLocalOptions& options() const { return m_o; }

    // Trains t's parameters() in place on the rows x [n, d] (on x's device; t must live there
    // too), keeping the best of the objective on all rows among the start, every tenth of the
    // steps and the last (LayerLocalResult::bestStep). Progress every step (loss, E(T), vol); a
    // cancel request throws JobCancelled at the next step, leaving t at its last update. Throws std::invalid_argument naming the point
    // for a transform without parameters, a width mismatch or non-finite activations, and
    // std::runtime_error when the loss stops being finite.
    LayerLocalResult train(transforms::AffineTransform& t, const at::Tensor& x, JobContext& job = silentJob(),
                           const std::string& point = "activations") const;

private:
    LayerLocalOptions m_o;
};

} // namespace latmix::train
