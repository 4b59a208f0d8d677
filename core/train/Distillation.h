#pragma once
// Model-level learning of T1/T2 by KL distillation (SPEC §5): the student is the model with the
// transforms folded into full-precision weights, the online T3 and MX fake quantization of the
// activations at the four points; the teacher is the original model. Loss = KL(teacher ‖
// student) of the next-token distributions at temperature τ + λ Σ_transforms (Σ log|s_i|)².
// AdamW, linear warmup then cosine. Every step is reported (loss, KL, vol, lr, timings, and
// every metricsEvery steps the §3 matrix metrics of A1 and of one chosen A2); the run file
// (HDF5) holds the series, the current transforms and the optimizer state, rewritten
// atomically every checkpointEvery steps, on cancel and at the end, so a run can be resumed.
#include "dist/ProcessGroup.h"
#include "model/LlamaModel.h"
#include "mx/MxFormat.h"
#include "fold/ModelTransforms.h"
#include "util/Job.h"

#include <ATen/core/Tensor.h>
#include <cstdint>

#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace latmix::train {

struct DistillStep {
    int step = 0; // 1-based
    // loss = objective + volumeWeight · vol; objective: the term DistillOptions::objective names
    // (the KL to the teacher, the cross-entropy or the block MSE; train.h5's series "objective",
    // "kl" in files written before the rename).
    double loss = 0, objective = 0, vol = 0, lr = 0;
    double seconds = 0; // whole step
    double teacherSeconds = 0, studentSeconds = 0, backwardSeconds = 0, metricsSeconds = 0;
    // Parts not kept in train.h5's series (`latmix bench train` prints them): the loss over the
    // vocabulary within studentSeconds, and AdamW's update.
    double lossSeconds = 0, optimizerSeconds = 0;
    // Within lossSeconds (CPU only; 0 elsewhere): the teacher's lm_head product and the product
    // that takes the loss's gradient back to the hidden states.
    double teacherLogitsSeconds = 0, lossGradientSeconds = 0;
    static constexpr double nan = std::numeric_limits<double>::quiet_NaN();
    // A1 and the tracked A2 (NaN on steps without metrics or without that transform)
    double a1Condition = nan, a1Orthogonality = nan, a1OffBlock = nan;
    double a2Condition = nan, a2Orthogonality = nan, a2OffBlock = nan;
    // The folded full-precision model's perplexity after this step (DistillOptions::foldedEval;
    // NaN on the other steps).
    double foldedPerplexity = nan;
};

// What the training minimises besides the volume term (paper Table 8): the KL to the teacher
// (SPEC §5, the default), the cross-entropy against the data's next tokens (SpinQuant's loss), or
// the MSE of each decoder block's output against the teacher's (FlatQuant's loss): the mean over
// blocks l of mean((T1⁻¹(x'_l) − x_l)²), x'_l the student's residual stream after block l (in
// T1's coordinates, mapped back) and x_l the teacher's. FlatQuant calibrates block by block, each
// on its own MSE; here T1 is shared by every block, so the blocks' MSEs are averaged in one
// end-to-end pass (the paper's Table 8 compares the three losses without saying more).
enum class Objective { Kl, CrossEntropy, BlockMse };
// "kl", "ce", "block-mse" → the objective; anything else throws std::invalid_argument naming them.
Objective objectiveOf(const std::string& name);
const char* objectiveName(Objective objective); // the name objectiveOf reads
// The warmup the schedule uses: the steps asked for, at most a tenth of the training (at least 1).
int effectiveWarmupSteps(int warmupSteps, int steps);

// The training's arithmetic (`--precision`). Fp32: every tensor and product in float32. Tf32: the
// same tensors, their products in TF32 on CUDA's tensor cores (10-bit mantissa). Bf16: mixed
// precision as PyTorch's autocast gives it: the frozen weights (once folded), the activations and
// every product of the decoder layers and of lm_head in bfloat16; the transforms, their inverses
// and log-determinants, the fold of T1/T2 into the weights (TF32 products on CUDA), the norms'
// statistics, the softmax, the loss's sums and AdamW's state in float32 (the cross-entropy
// objective's lm_head products too).
enum class Precision { Fp32, Tf32, Bf16 };
// "fp32", "tf32", "bf16", or "auto" (bf16 on a CUDA device, fp32 elsewhere); anything else throws
// std::invalid_argument naming them.
Precision precisionOf(const std::string& name, bool cuda);
const char* precisionName(Precision precision); // the name precisionOf reads
// The dtype of the decoder layers' weights, activations and products: bfloat16 for Bf16, else float32.
at::ScalarType computeDtype(Precision precision);
// Whether float32 products run in TF32 on a CUDA device: Tf32's products, and Bf16's folds.
bool usesTf32(Precision precision, bool cuda);

// How the student quantizes the activations it feeds its linears: one format at every point, and
// a mixed-precision scheme's groups in theirs (their points by name, model::ForwardOptions::
// pointQuant) with its kept linears reading their inputs unquantized (docs/spec.md, "Mixed
// precision"). Converts from one format, the common case.
struct StudentQuantization {
    std::optional<mx::MxConfig> activation;
    std::map<std::string, std::optional<mx::MxConfig>> pointQuant;
    std::set<std::string> keptLinears;
    StudentQuantization(std::optional<mx::MxConfig> a = std::nullopt) : activation(std::move(a)) {}
    StudentQuantization(const mx::MxConfig& a) : activation(a) {}
};

struct DistillOptions {
    std::optional<mx::MxConfig> activation = mx::MxConfig{}; // the student's activation quantization (none: off)
    // A scheme's points in other formats and its kept linears (StudentQuantization); empty: none.
    std::map<std::string, std::optional<mx::MxConfig>> pointQuant;
    std::set<std::string> keptLinears;
    int steps = 1000;
    int batch = 4;                 // sequences per step (SPEC: ≤ 8)
    double lr = 1e-3;
    double weightDecay = 0.0;      // see LayerLocalOptions::weightDecay
    int warmupSteps = 100;         // clamped to steps / 10 for short runs
    double warmupStartFactor = 0.1;
    double temperature = 1.5;
    double volumeWeight = 0.1;
    Objective objective = Objective::Kl; // the `kl` of the steps is then this objective's value
    // The decoder layers' and lm_head's dtype in the teacher and the student (computeDtype(Precision)):
    // float32, or bfloat16 for mixed precision. TF32 is the caller's (compat::allowTf32Matmuls).
    at::ScalarType compute = at::kFloat;
    int metricsEvery = 10;         // matrix metrics every k steps (and the last); 0: never
    int trackedLayer = 0;          // whose A2 is tracked
    int checkpointEvery = 50;      // run-file rewrite every k steps; 0: only on cancel and at the end
    std::uint64_t seed = 0;        // batch draws: step k uses the same sequences on every run
    std::string runFile;           // HDF5 run file ("" : none); written and read by rank 0 only
    bool resume = false;           // continue from runFile's state
    bool keepTeacherStates = true; // keep each window's teacher states when teacherCacheBytes allows
    // Data parallel (null or size 1: one process). Step k draws batch × size windows from the
    // seeded permutation of the single-process run with batch × size; rank r takes the r-th
    // `batch` of them. Each step's gradients (and loss terms) are averaged over the ranks before
    // AdamW, so with the same global batch every rank trains what one process would, up to the
    // order of float additions; the parameters (and a resumed state) start as rank 0's. Only
    // rank 0 computes the matrix metrics, calls onMatrices and writes the run file. A cancel on any
    // rank travels in the step's all-reduce: every rank stops at the same step (JobCancelled).
    std::shared_ptr<dist::Group> group;
    // Paper Table 2's invariance check during training: foldedEval(transforms) returns the
    // perplexity of the model with the current T1/T2 (and T3) folded in, nothing quantized. Rank 0
    // calls it before the first step (DistillResult::foldedPerplexityStart), after step 1, every
    // foldedEvalEvery steps and after the last (DistillStep::foldedPerplexity, train.h5's
    // series/folded_ppl); its time counts in metricsSeconds. 0 or no function: never.
    int foldedEvalEvery = 0;
    std::function<double(const fold::ModelTransforms&)> foldedEval;
    std::function<void(const DistillStep&)> onStep;
    // On the steps with matrix metrics: float32 CPU copies of A1 and of the tracked layer's A2
    // (undefined where that transform is absent), for live heatmaps.
    std::function<void(int step, const at::Tensor& a1, const at::Tensor& a2)> onMatrices;
};

struct DistillResult {
    std::vector<DistillStep> history; // every step, resumed steps included
    int startStep = 0;                // steps restored from the run file
    double seconds = 0;
    double foldedPerplexityStart = DistillStep::nan; // before the first step (DistillOptions::foldedEval)
    // Windows whose teacher states this process computed and kept, and draws served from the
    // kept states (both 0 when they are not kept: DistillOptions::keepTeacherStates, teacherCacheBytes).
    std::int64_t teacherStatesKept = 0;
    std::int64_t teacherStatesReused = 0;
};

// calibration: int64 [N, T] token windows. original: the model's weights on the training device
// (any floating dtype: on the CPU the mapped file as stored); transforms on the same device. Trains transforms in place.
// Throws JobCancelled after writing the run file when cancelled; std::runtime_error when the
// loss stops being finite.
DistillResult distill(const model::ModelConfig& config, const model::LlamaWeights& original, const at::Tensor& calibration,
                      fold::ModelTransforms& transforms, const DistillOptions& options, JobContext& job = silentJob());

// One training step's loss, KL(teacher ‖ student) at temperature τ + λ·volume, with its gradient
// left in the .grad of every transforms parameter (accumulated: zero them first). Memory stays at
// the weights as given (any dtype; a layer is converted to float32 when it runs) plus one
// layer's graph: the student runs without a graph keeping each layer's input, then every layer
// is recomputed with its graph during the backward pass (activation checkpointing); the
// embedding and lm_head are transformed on the looked-up rows / final hidden states, never
// refolded as tables; the KL and its gradient are computed over vocabulary chunks. Equal to
// distillationKl(forwardWith(original), forwardWith(transforms.fold(...))) and its gradient,
// within float32 rounding (tst_distillation). tokens: int64 [B, T] on the training device.
// Objective::CrossEntropy: the student's cross-entropy against the next tokens instead of the KL
// (no teacher pass; `objective` holds it), equal to at::cross_entropy of the folded student's logits.
// Objective::BlockMse: the block-output MSE above (`objective` holds it); no logits are formed, the
// teacher's block outputs are kept for the step ([B·T, d] per block).
struct DistillLoss {
    double loss = 0, objective = 0, vol = 0; // as in DistillStep
    double teacherSeconds = 0, studentSeconds = 0, backwardSeconds = 0;
    double lossSeconds = 0; // the part of studentSeconds spent on the loss over the vocabulary
    // Within lossSeconds, on the CPU: the teacher's logit product and the loss gradient's product.
    double teacherLogitsSeconds = 0, lossGradientSeconds = 0;
};
// keepLayerGraphs: whether the forward keeps every layer's graph for the backward pass
// (nullopt: keepsLayerGraphs decides) instead of recomputing each layer from its saved input.
// The gradients are the same bits either way.
// teacherNormed (KL only): the teacher's normed final states of these tokens, [B·T, hidden]
// float32 (teacherNormedStates, kept from an earlier step); undefined: the step computes them.
// compute: DistillOptions::compute. In bfloat16 the loss and gradient are those of the same
// models computed in bfloat16 (each layer folded in float32, then rounded), not the float32 ones.
DistillLoss distillationStep(const model::ModelConfig& config, const model::LlamaWeights& original,
                             const fold::ModelTransforms& transforms, const StudentQuantization& student,
                             const at::Tensor& tokens, double temperature, double volumeWeight,
                             Objective objective = Objective::Kl, std::optional<bool> keepLayerGraphs = std::nullopt,
                             const at::Tensor& teacherNormed = {}, at::ScalarType compute = at::kFloat);

// Where a step's loss over the vocabulary computes: lm_head's device, or the tokens' device when
// lm_head stays in host memory (offloaded or mapped weights).
c10::Device lossDevice(const model::LlamaWeights& original, c10::Device tokensDevice);

// The KL's target: the frozen teacher's final hidden states of tokens [B, T] after the final norm,
// [B·T, hidden] float32 on `device` (where lm_head computes), its layers computed in `compute`. No graph.
at::Tensor teacherNormedStates(const model::ModelConfig& config, const model::LlamaWeights& original,
                               const at::Tensor& tokens, c10::Device device, at::ScalarType compute = at::kFloat);

// The teacher is frozen: a window's teacherNormedStates are the same at every step that draws it.
// distill keeps them (host memory, float32) when the objective is the KL, some window is drawn
// more than once (steps × batch > windows) and all windows' states fit in 256 MiB; later draws
// then skip the teacher's forward. The bytes it keeps (0: none); run/quantize/MemoryEstimate counts them.
std::int64_t teacherCacheBytes(const model::ModelConfig& config, std::int64_t windows, std::int64_t seqLen, int steps,
                               int batch, Objective objective);

// Activation checkpointing (one layer's graph at a time, each layer computed twice) bounds the
// step's memory at 1B and beyond; when the graphs of all layers together stay under 512 MiB
// (a model of a few layers of width ≤ 512 at batch 4 × 256: brownpy-13M, stories260K) the
// forward keeps them and the backward pass skips the second forward. layerGraphBytes is the
// estimate of one layer's graph over `tokens` tokens (float32 weights folded with their graph,
// the saved activations and attention scores); run/quantize/MemoryEstimate counts the kept graphs too.
std::int64_t layerGraphBytes(const model::ModelConfig& config, std::int64_t batch, std::int64_t seqLen);
bool keepsLayerGraphs(const model::ModelConfig& config, std::int64_t batch, std::int64_t seqLen);

// KL(p ‖ q) per token, averaged over tokens, of softmax(teacher/τ) and softmax(student/τ);
// logits [..., V]. Exposed for tests.
at::Tensor distillationKl(const at::Tensor& teacherLogits, const at::Tensor& studentLogits, double temperature);

// The per-step series of a run file (for the GUI and reports). Series a file written by an
// older version lacks (folded_ppl) read as NaN.
std::vector<DistillStep> readDistillSeries(const std::string& runFile);
// The folded FP perplexity before the first step recorded in a run file (NaN: none).
double readFoldedPerplexityStart(const std::string& runFile);

} // namespace latmix::train
