#include "train/Distillation.h"
#include "train/TrainFile.h"

#include "io/TensorFile.h"
#include "metrics/TransformMetrics.h"
#include "train/AdamW.h"
#include "train/LayerLocalTrainer.h" // scheduleFactor
#include "util/NonFinite.h"
#include "util/OutOfMemory.h"
#include "util/Remedy.h"
#include "util/Text.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <chrono>
#include <limits>
#include <map>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <sstream>
#include <stdexcept>

namespace latmix::train {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The batch of step k (0-based): `batch` distinct windows out of n, the same for a given seed
// whether or not the run was resumed.
std::vector<int64_t> batchOf(std::uint64_t seed, int k, int n, int batch) {
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(k) + 1);
    std::vector<int64_t> idx(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) idx[static_cast<size_t>(i)] = i;
    const int b = std::min(batch, n);
    for (int i = 0; i < b; ++i) {
        std::uniform_int_distribution<int> pick(i, n - 1);
        std::swap(idx[static_cast<size_t>(i)], idx[static_cast<size_t>(pick(rng))]);
    }
    idx.resize(static_cast<size_t>(b));
    return idx;
}

// Rank r's share of a step's global batch: its r-th `batch` windows (all of them in one process).
std::vector<int64_t> shareOf(const std::vector<int64_t>& global, int rank, int batch) {
    const auto first = std::min<std::size_t>(global.size(), std::size_t(rank) * batch);
    const auto last = std::min<std::size_t>(global.size(), std::size_t(rank + 1) * batch);
    return {global.begin() + first, global.begin() + last};
}

// κ(A), ‖AᵀA − I‖σ and the off-block norm of one transform (SPEC §3), as a training step records them.
struct MatrixMetrics {
    double cond, orth, off;
};
MatrixMetrics matrixMetrics(const transforms::AffineTransform* t, int block) {
    if (!t) return {DistillStep::nan, DistillStep::nan, DistillStep::nan};
    const at::Tensor a = t->matrix().detach().to(at::kDouble); // metrics on the training device
    // A diverging run's matrix can overflow before its loss does (LU factors of 1e29 multiply to
    // Inf); its metrics are then unknown, and the next step's loss names the divergence.
    if (!at::isfinite(a).all().item<bool>()) return {DistillStep::nan, DistillStep::nan, DistillStep::nan};
    const auto s = metrics::spectralSummary(a);
    return {s.conditionNumber, s.orthogonalityDeviation, metrics::offBlockNorm(a, std::min<int>(block, int(a.size(0))))};
}

} // namespace

std::int64_t layerGraphBytes(const model::ModelConfig& c, std::int64_t batch, std::int64_t seqLen) {
    const std::int64_t h = c.hiddenSize, N = batch * seqLen;
    // The MLP's rows per token: intermediate, or k experts' (MemoryEstimate's mlpWidth).
    const std::int64_t i = c.moe ? std::max<std::int64_t>(c.intermediateSize, std::int64_t(c.moe->expertsPerToken) * c.moe->expertWidth)
                                 : c.intermediateSize;
    const std::int64_t params = c.layerLinearWeights();
    // weights: the folded copy and the products that made it (T1, T2, γ, T3), about 3 copies;
    // activations saved for the backward: about 12 hidden-wide and 4 intermediate-wide rows per
    // token (norms, q/k/v/o inputs and outputs, MLP inputs, SiLU, products), and the attention
    // probabilities, per head T² per sequence.
    return 4 * (3 * params + N * (12 * h + 4 * i) + batch * c.numHeads * seqLen * seqLen);
}

std::int64_t teacherCacheBytes(const model::ModelConfig& c, std::int64_t windows, std::int64_t seqLen, int steps,
                               int batch, Objective objective) {
    if (objective != Objective::Kl || std::int64_t(steps) * batch <= windows) return 0; // no window comes back
    const std::int64_t bytes = windows * seqLen * c.hiddenSize * 4;
    return bytes <= (std::int64_t(256) << 20) ? bytes : 0;
}

bool keepsLayerGraphs(const model::ModelConfig& c, std::int64_t batch, std::int64_t seqLen) {
    return c.numLayers * layerGraphBytes(c, batch, seqLen) <= (std::int64_t(512) << 20);
}

Objective objectiveOf(const std::string& name) {
    if (name == "kl") return Objective::Kl;
    if (name == "ce") return Objective::CrossEntropy;
    if (name == "block-mse") return Objective::BlockMse;
    throw std::invalid_argument("unknown --loss '" + name + "'; use kl, ce or block-mse");
}

Precision precisionOf(const std::string& name, bool cuda) {
    if (name == "auto") return cuda ? Precision::Bf16 : Precision::Fp32;
    if (name == "fp32") return Precision::Fp32;
    if (name == "tf32") return Precision::Tf32;
    if (name == "bf16") return Precision::Bf16;
    throw std::invalid_argument("unknown --precision '" + name + "'; use auto, bf16, tf32 or fp32");
}

const char* precisionName(Precision precision) {
    switch (precision) {
    case Precision::Fp32: return "fp32";
    case Precision::Tf32: return "tf32";
    case Precision::Bf16: return "bf16";
    }
    return "fp32";
}

at::ScalarType computeDtype(Precision precision) { return precision == Precision::Bf16 ? at::kBFloat16 : at::kFloat; }

bool usesTf32(Precision precision, bool cuda) { return cuda && precision != Precision::Fp32; }

int effectiveWarmupSteps(int warmupSteps, int steps) { return std::min(warmupSteps, std::max(1, steps / 10)); }

const char* objectiveName(Objective objective) {
    switch (objective) {
    case Objective::Kl: return "kl";
    case Objective::CrossEntropy: return "ce";
    case Objective::BlockMse: return "block-mse";
    }
    return "kl";
}

at::Tensor distillationKl(const at::Tensor& teacher, const at::Tensor& student, double tau) {
    const auto logP = at::log_softmax(teacher.to(at::kFloat) / tau, -1);
    const auto logQ = at::log_softmax(student.to(at::kFloat) / tau, -1);
    // Σ_v p (log p − log q), averaged over tokens. SPEC §5 states the KL at temperature τ without
    // Hinton's τ² factor; with a fixed τ that only rescales the learning rate.
    return (logP.exp() * (logP - logQ)).sum(-1).mean();
}

namespace {

// Why step `step` of `steps` had a non-finite loss, as the one-line error the run stops with.
// The weights were checked when the checkpoint was opened, so either the original model's own
// forward overflows on this step's calibration windows (the teacher, named by the first
// quantization point in forward order where its activations are not finite, with the window,
// token and channel) or, the teacher being finite, the learned transforms made the student's
// loss non-finite: a divergence, whose remedy is the learning rate. `windows` are the rows of
// `tokens` as indices into the calibration set.
util::RemediedError nonFiniteLoss(const model::ModelConfig& c, const model::LlamaWeights& original,
                                  const at::Tensor& tokens, const std::vector<int64_t>& windows, int step, int steps,
                                  double loss) {
    std::string where;
    util::NonFinite first;
    {
        at::NoGradGuard g;
        model::ForwardOptions teacher;
        teacher.dtype = at::kFloat;
        const auto h = model::forwardHidden(c, original, teacher, tokens, [&](const std::string& point, const at::Tensor& x) {
            if (where.empty()) {
                if (auto bad = util::findNonFinite(x)) {
                    where = "activations at " + point;
                    first = std::move(bad);
                }
            }
            return x;
        });
        if (where.empty()) {
            if (auto bad = util::findNonFinite(h)) {
                where = "final hidden states";
                first = std::move(bad);
            }
        }
    }
    const std::string at = "training step " + std::to_string(step) + "/" + std::to_string(steps);
    if (where.empty())
        return util::RemediedError("distillation diverged at " + at + " (loss " + util::exactNumber(loss) +
                                       ") although the original model is finite on its calibration windows",
                                   {{"lr", "", "a lower", ""}}, "the run folder keeps the state before this step to resume from");
    // first.firstIndex is [row of the step's batch, token, channel].
    const auto row = first.firstIndex.empty() ? int64_t(-1) : first.firstIndex[0];
    const std::string window = row >= 0 && row < static_cast<int64_t>(windows.size())
                                   ? "calibration window " + std::to_string(windows[static_cast<size_t>(row)])
                                   : "this step's calibration windows";
    return util::RemediedError(at + ": the loss is not finite because the original model's " + where + " are not finite in " +
                                   window + " (" + first.describe() + " of [batch, tokens, width]) although its weights are: "
                                   "the model overflows in float32 on this text, which no learning rate fixes",
                               {}, "check it with `latmix eval`, or calibrate on other text");
}

// Every rank starts from rank 0's parameters and optimizer state (fresh or resumed).
void broadcastStart(dist::Group& group, const std::vector<at::Tensor>& params, AdamW& opt, DistillResult& r) {
    at::NoGradGuard g;
    auto counters = at::tensor(std::vector<double>{double(opt.t), double(r.startStep)}, at::kDouble);
    std::vector<at::Tensor> state = params;
    state.insert(state.end(), opt.m.begin(), opt.m.end());
    state.insert(state.end(), opt.v.begin(), opt.v.end());
    state.push_back(counters);
    group.broadcast(state, 0);
    opt.t = static_cast<std::int64_t>(counters[0].item<double>());
    r.startStep = static_cast<int>(counters[1].item<double>());
}

// The mean gradient of the global batch: each rank's objective is a mean over its own equal share
// of the tokens (the volume term is the same on every rank); the loss terms averaged with it.
// Returns whether any rank asked to cancel.
bool averageOverRanks(dist::Group& group, const std::vector<at::Tensor>& params, DistillLoss& l, bool cancelHere) {
    std::vector<at::Tensor> grads;
    for (auto& p : params) {
        if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p.detach());
        grads.push_back(p.grad());
    }
    auto terms = at::tensor(std::vector<double>{l.loss, l.objective, l.vol, cancelHere ? 1.0 : 0.0}, at::kDouble);
    grads.push_back(terms);
    group.allreduceMean(grads);
    l.loss = terms[0].item<double>();
    l.objective = terms[1].item<double>();
    l.vol = terms[2].item<double>();
    return terms[3].item<double>() > 0;
}

void takeStepResult(DistillStep& s, const DistillLoss& l) {
    s.lossSeconds = l.lossSeconds;
    s.teacherLogitsSeconds = l.teacherLogitsSeconds;
    s.lossGradientSeconds = l.lossGradientSeconds;
    s.loss = l.loss;
    s.objective = l.objective;
    s.vol = l.vol;
    s.teacherSeconds = l.teacherSeconds;
    s.studentSeconds = l.studentSeconds;
    s.backwardSeconds = l.backwardSeconds;
}

// κ, orthogonality and off-block norm of A1 and the tracked layer's A2, and the matrices
// themselves to o.onMatrices (the workbench's live heat maps).
void recordMatrixMetrics(DistillStep& s, const fold::ModelTransforms& transforms, const DistillOptions& o) {
    const auto t3 = Clock::now();
    const bool tracked = transforms.layers() > o.trackedLayer;
    const auto m1 = matrixMetrics(transforms.t1(), transforms.spec().blockSize);
    const auto m2 = tracked ? matrixMetrics(transforms.t2(o.trackedLayer), transforms.spec().blockSize)
                            : MatrixMetrics{DistillStep::nan, DistillStep::nan, DistillStep::nan};
    s.a1Condition = m1.cond, s.a1Orthogonality = m1.orth, s.a1OffBlock = m1.off;
    s.a2Condition = m2.cond, s.a2Orthogonality = m2.orth, s.a2OffBlock = m2.off;
    s.metricsSeconds = since(t3);
    if (!o.onMatrices) return;
    auto copy = [](const transforms::AffineTransform* t) {
        at::NoGradGuard g;
        return t ? t->matrix().detach().to(at::TensorOptions().dtype(at::kFloat).device(at::kCPU)).clone() : at::Tensor();
    };
    o.onMatrices(s.step, copy(transforms.t1()), tracked ? copy(transforms.t2(o.trackedLayer)) : at::Tensor());
}

// The teacher's normed final states per calibration window (teacherCacheBytes says when): each
// computed where the step would compute it (lossDevice), then kept in host memory, [T, hidden].
class TeacherCache {
public:
    TeacherCache(const model::ModelConfig& c, const model::LlamaWeights& original, const at::Tensor& calibration,
                 const DistillOptions& o, int world)
        : m_c(c), m_original(original), m_compute(o.compute),
          m_on(o.keepTeacherStates &&
               teacherCacheBytes(c, calibration.size(0), calibration.size(1), o.steps, o.batch * world, o.objective) > 0),
          m_rows(m_on ? static_cast<std::size_t>(calibration.size(0)) : 0) {}

    // [B·T, hidden] for the windows of tokens (its rows, in order); undefined when not kept.
    at::Tensor statesOf(const std::vector<int64_t>& windows, const at::Tensor& tokens) {
        if (!m_on) return {};
        std::vector<int64_t> missing; // rows of tokens whose window is not kept yet
        for (std::size_t b = 0; b < windows.size(); ++b)
            if (!m_rows[static_cast<std::size_t>(windows[b])].defined()) missing.push_back(static_cast<int64_t>(b));
        m_kept += static_cast<std::int64_t>(missing.size());
        m_reused += static_cast<std::int64_t>(windows.size() - missing.size());
        if (!missing.empty()) {
            const auto rows = tokens.index_select(0, at::tensor(missing, at::kLong).to(tokens.device()));
            const auto states = teacherNormedStates(m_c, m_original, rows, lossDevice(m_original, tokens.device()), m_compute);
            const int64_t T = tokens.size(1);
            for (std::size_t i = 0; i < missing.size(); ++i)
                m_rows[static_cast<std::size_t>(windows[static_cast<std::size_t>(missing[i])])] =
                    states.narrow(0, static_cast<int64_t>(i) * T, T).to(states.options().device(at::kCPU), false, /*copy=*/true);
        }
        std::vector<at::Tensor> parts;
        for (int64_t w : windows) parts.push_back(m_rows[static_cast<std::size_t>(w)]);
        return at::cat(parts, 0);
    }
    std::int64_t kept() const { return m_kept; }     // windows computed and kept
    std::int64_t reused() const { return m_reused; } // draws served from kept states

private:
    const model::ModelConfig& m_c;
    const model::LlamaWeights& m_original;
    const at::ScalarType m_compute;
    const bool m_on;
    std::vector<at::Tensor> m_rows; // per window; undefined until its first draw
    std::int64_t m_kept = 0, m_reused = 0;
};

// What distill refuses before it starts: no windows, no steps, nothing to learn, too few
// windows for every rank's share of a batch.
void checkDistillInputs(const at::Tensor& calibration, const DistillOptions& o, bool hasParameters, int world) {
    if (calibration.dim() != 2 || calibration.size(0) < 1)
        throw std::invalid_argument("calibration must be [windows, tokens] with at least one window");
    if (o.steps < 1 || o.batch < 1) throw std::invalid_argument("steps and batch must be positive");
    if (o.temperature <= 0) throw std::invalid_argument("temperature must be positive");
    if (o.compute != at::kFloat && o.compute != at::kBFloat16)
        throw std::invalid_argument("the training computes in float32 or bfloat16 (--precision fp32, tf32 or bf16)");
    if (!hasParameters) throw std::invalid_argument("the transforms have nothing to learn (fixed kinds)");
    const auto n = calibration.size(0);
    if (world > 1 && n < o.batch * world)
        throw std::invalid_argument("data-parallel training over " + std::to_string(world) + " ranks with batch " +
                                    std::to_string(o.batch) + " needs " + std::to_string(o.batch * world) +
                                    " calibration windows, there are " + std::to_string(n) +
                                    "; raise --calib-samples or lower --batch");
}

// After a finished step: the matrix metrics (root) and the folded FP perplexity when due.
void measureStep(DistillStep& s, const fold::ModelTransforms& transforms, const DistillOptions& o, bool root,
                 bool trackFolded) {
    if (root && o.metricsEvery > 0 && (s.step % o.metricsEvery == 0 || s.step == o.steps || s.step == 1))
        recordMatrixMetrics(s, transforms, o);
    if (trackFolded && (s.step == 1 || s.step % o.foldedEvalEvery == 0 || s.step == o.steps)) {
        const auto t4 = Clock::now();
        s.foldedPerplexity = o.foldedEval(transforms);
        s.metricsSeconds += since(t4);
    }
}

void announceStep(const DistillStep& s, const DistillOptions& o, JobContext& job) {
    std::ostringstream msg;
    msg << "step " << s.step << "/" << o.steps << "  loss " << s.loss << "  " << objectiveName(o.objective) << " " << s.objective << "  lr " << s.lr;
    if (std::isfinite(s.foldedPerplexity)) msg << "  folded FP ppl " << s.foldedPerplexity;
    job.progress(static_cast<double>(s.step) / o.steps, msg.str());
}

} // namespace

DistillResult distill(const model::ModelConfig& c, const model::LlamaWeights& original, const at::Tensor& calibration,
                      fold::ModelTransforms& transforms, const DistillOptions& o, JobContext& job) {
    const auto params = transforms.parameters();
    const int world = o.group ? o.group->size() : 1;
    checkDistillInputs(calibration, o, !params.empty(), world);
    const auto start = Clock::now();
    const auto device = original.embed.device();

    AdamW opt(params, o.weightDecay);
    StudentQuantization student(o.activation);
    student.pointQuant = o.pointQuant;
    student.keptLinears = o.keptLinears;
    DistillResult r;
    const int rank = o.group ? o.group->rank() : 0;
    const bool root = rank == 0;
    const int n = static_cast<int>(calibration.size(0));
    TeacherCache teacher(c, original, calibration, o, world);
    if (o.resume && root) {
        if (o.runFile.empty()) throw std::invalid_argument("resume needs a run file");
        restoreTrainFile(o.runFile, params, opt, r);
    }

    if (world > 1) broadcastStart(*o.group, params, opt, r);

    const int warmup = effectiveWarmupSteps(o.warmupSteps, o.steps);
    auto save = [&](int done, const std::string& status) {
        if (root && !o.runFile.empty())
            writeTrainFile(o.runFile, r.history, r.foldedPerplexityStart, transforms, opt, o, done, status);
    };
    const bool trackFolded = root && o.foldedEval && o.foldedEvalEvery > 0;
    if (trackFolded && r.startStep == 0) {
        job.progress(0, "folded FP perplexity before training");
        r.foldedPerplexityStart = o.foldedEval(transforms);
    }
    for (int k = r.startStep; k < o.steps; ++k) {
        // One process cancels here; several ranks agree in the step's all-reduce below, so that
        // all stop at the same step (a rank leaving alone would break the others' collective).
        if (world == 1 && job.cancelRequested()) {
            save(k, "cancelled");
            throw JobCancelled();
        }
        bool cancelled = false;
        const auto t0 = Clock::now();
        DistillStep s;
        s.step = k + 1;
        s.lr = o.lr * scheduleFactor(k, o.steps, warmup, o.warmupStartFactor);
        // One step on the device. Out of memory here names the step; before AdamW touched the
        // parameters the run file is saved at the last finished step, so --resume goes on from
        // there; during AdamW's update the state may be half-stepped and the last checkpoint stays.
        const std::string stage = "training step " + std::to_string(s.step) + "/" + std::to_string(o.steps);
        bool updating = false;
        at::Tensor stepTokens;             // set when the loss is not finite, for the diagnosis
        std::vector<int64_t> stepWindows;
        try {
            guardMemory(stage, {{"batch", "", "a smaller", ""}, {"seqlen", "", "a shorter", ""}},
                        "the run folder keeps the last finished step to resume from", [&] {
                const auto mine = shareOf(batchOf(o.seed, k, n, o.batch * world), rank, o.batch);
                const auto idx = at::tensor(mine, at::kLong);
                const auto tokens = calibration.index_select(0, idx).to(device);
                opt.zeroGrad();
                const auto tTeacher = Clock::now();
                const at::Tensor kept = teacher.statesOf(mine, tokens);
                const double keptSeconds = since(tTeacher);
                DistillLoss l = distillationStep(c, original, transforms, student, tokens, o.temperature,
                                                 o.volumeWeight, o.objective, std::nullopt, kept, o.compute);
                l.teacherSeconds += keptSeconds; // a window's first draw runs the teacher here
                if (world > 1 && (cancelled = averageOverRanks(*o.group, params, l, job.cancelRequested()))) return;
                if (!std::isfinite(l.loss)) { // never into AdamW's state or the run file
                    s.loss = l.loss;
                    stepTokens = tokens;
                    stepWindows = mine;
                    return;
                }
                updating = true;
                const auto tOpt = Clock::now();
                opt.step(s.lr);
                s.optimizerSeconds = since(tOpt);
                takeStepResult(s, l);
            });
        } catch (const OutOfMemory&) {
            if (!updating) save(k, "out of memory");
            throw;
        }
        if (cancelled) {
            save(k, "cancelled");
            throw JobCancelled();
        }
        if (!std::isfinite(s.loss)) {
            // Saved at the last finished step, the parameters untouched by this one: resumable.
            save(k, "non-finite loss");
            throw nonFiniteLoss(c, original, stepTokens, stepWindows, s.step, o.steps, s.loss);
        }
        measureStep(s, transforms, o, root, trackFolded);
        s.seconds = since(t0);
        r.history.push_back(s);
        if (o.onStep) o.onStep(s);
        announceStep(s, o, job);
        if (o.checkpointEvery > 0 && s.step % o.checkpointEvery == 0 && s.step < o.steps) save(s.step, "running");
    }
    save(o.steps, "finished");
    r.seconds = since(start);
    r.teacherStatesKept = teacher.kept();
    r.teacherStatesReused = teacher.reused();
    return r;
}

} // namespace latmix::train
