#include "train/Distillation.h"

#include "fold/Fold.h"
#include "io/TensorFile.h"
#include "metrics/TransformMetrics.h"
#include "train/LayerLocalTrainer.h" // scheduleFactor
#include "util/OutOfMemory.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <random>
#include <sstream>
#include <stdexcept>

namespace latmix::train {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// AdamW as PyTorch defines it (decoupled decay, bias-corrected moments, eps outside the root).
// Written out instead of torch::optim::AdamW so that its state can be saved and restored with
// the same code on libtorch 1.13 and 2.x (the optimizer-state API differs between them).
struct AdamW {
    std::vector<at::Tensor> params, m, v;
    double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0;
    std::int64_t t = 0;
    explicit AdamW(std::vector<at::Tensor> p, double wd) : params(std::move(p)), weightDecay(wd) {
        for (auto& x : params) {
            m.push_back(at::zeros_like(x).detach());
            v.push_back(at::zeros_like(x).detach());
        }
    }
    void step(double lr) {
        at::NoGradGuard noGrad;
        ++t;
        const double c1 = 1 - std::pow(beta1, double(t)), c2 = 1 - std::pow(beta2, double(t));
        for (size_t i = 0; i < params.size(); ++i) {
            auto& p = params[i];
            if (!p.grad().defined()) continue;
            const at::Tensor g = p.grad();
            if (weightDecay != 0) p.mul_(1 - lr * weightDecay);
            m[i].mul_(beta1).add_(g, 1 - beta1);
            v[i].mul_(beta2).addcmul_(g, g, 1 - beta2);
            const at::Tensor denom = (v[i] / c2).sqrt_().add_(eps);
            p.addcdiv_(m[i], denom, -lr / c1);
        }
    }
    void zeroGrad() {
        for (auto& p : params)
            if (p.grad().defined()) p.mutable_grad() = at::Tensor();
    }
};

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

struct Metrics3 {
    double cond, orth, off;
};
Metrics3 matrixMetrics(const transforms::AffineTransform* t, int block) {
    if (!t) return {DistillStep::nan, DistillStep::nan, DistillStep::nan};
    const at::Tensor a = t->matrix().detach().to(at::kDouble).cpu();
    const auto s = metrics::spectralSummary(a);
    return {s.conditionNumber, s.orthogonalityDeviation, metrics::offBlockNorm(a, std::min<int>(block, int(a.size(0))))};
}

const char* kSeries[] = {"loss", "kl", "vol", "lr", "seconds", "teacher_seconds", "student_seconds", "backward_seconds",
                         "metrics_seconds", "a1_condition", "a1_orthogonality", "a1_off_block", "a2_condition",
                         "a2_orthogonality", "a2_off_block"};

std::vector<double> fieldsOf(const DistillStep& s) {
    return {s.loss, s.kl, s.vol, s.lr, s.seconds, s.teacherSeconds, s.studentSeconds, s.backwardSeconds, s.metricsSeconds,
            s.a1Condition, s.a1Orthogonality, s.a1OffBlock, s.a2Condition, s.a2Orthogonality, s.a2OffBlock};
}

void writeRunFile(const std::string& path, const std::vector<DistillStep>& history, const ModelTransforms& transforms,
                  const AdamW& opt, const DistillOptions& o, int stepsDone, const std::string& status) {
    std::vector<std::pair<std::string, at::Tensor>> t;
    const size_t n = history.size();
    auto steps = at::empty({static_cast<int64_t>(n)}, at::kLong);
    for (size_t i = 0; i < n; ++i) steps[static_cast<int64_t>(i)] = history[i].step;
    t.emplace_back("series/step", steps);
    for (size_t f = 0; f < std::size(kSeries); ++f) {
        auto col = at::empty({static_cast<int64_t>(n)}, at::kDouble);
        auto* p = col.data_ptr<double>();
        for (size_t i = 0; i < n; ++i) p[i] = fieldsOf(history[i])[f];
        t.emplace_back(std::string("series/") + kSeries[f], col);
    }
    for (size_t i = 0; i < opt.params.size(); ++i) {
        t.emplace_back("state/param/" + std::to_string(i), opt.params[i].detach().cpu());
        t.emplace_back("state/m/" + std::to_string(i), opt.m[i].cpu());
        t.emplace_back("state/v/" + std::to_string(i), opt.v[i].cpu());
    }
    t.emplace_back("state/adam_t", at::full({1}, opt.t, at::kLong));
    t.emplace_back("state/steps_done", at::full({1}, stepsDone, at::kLong));
    {
        at::NoGradGuard g;
        if (transforms.t1()) t.emplace_back("T1/A", transforms.t1()->matrix().detach().to(at::kDouble).cpu());
        if (transforms.layers() > 0 && transforms.t2(o.trackedLayer))
            t.emplace_back("T2/A", transforms.t2(o.trackedLayer)->matrix().detach().to(at::kDouble).cpu());
    }
    std::ostringstream cfg;
    cfg << "steps=" << o.steps << " batch=" << o.batch << " lr=" << o.lr << " temperature=" << o.temperature
        << " volume_weight=" << o.volumeWeight << " seed=" << o.seed << " activation=" << (o.activation ? o.activation->describe() : std::string("none"));
    io::writeTensorFile(path, t, {{"status", status}, {"options", cfg.str()}, {"tracked_layer", std::to_string(o.trackedLayer)}});
}

} // namespace

at::Tensor distillationKl(const at::Tensor& teacher, const at::Tensor& student, double tau) {
    const auto logP = at::log_softmax(teacher.to(at::kFloat) / tau, -1);
    const auto logQ = at::log_softmax(student.to(at::kFloat) / tau, -1);
    // Σ_v p (log p − log q), averaged over tokens. SPEC §5 states the KL at temperature τ without
    // Hinton's τ² factor; with a fixed τ that only rescales the learning rate.
    return (logP.exp() * (logP - logQ)).sum(-1).mean();
}

std::vector<DistillStep> readDistillSeries(const std::string& runFile) {
    const auto f = io::readTensorFile(runFile);
    auto it = f.tensors.find("series/step");
    if (it == f.tensors.end()) throw std::runtime_error("'" + runFile + "' holds no training series");
    const auto steps = it->second;
    std::vector<DistillStep> out(static_cast<size_t>(steps.numel()));
    std::vector<const double*> cols;
    for (const char* name : kSeries) {
        auto c = f.tensors.find(std::string("series/") + name);
        if (c == f.tensors.end()) throw std::runtime_error("'" + runFile + "' lacks series/" + name);
        cols.push_back(c->second.data_ptr<double>());
    }
    for (size_t i = 0; i < out.size(); ++i) {
        DistillStep& s = out[i];
        s.step = static_cast<int>(steps[static_cast<int64_t>(i)].item<int64_t>());
        double* dst[] = {&s.loss, &s.kl, &s.vol, &s.lr, &s.seconds, &s.teacherSeconds, &s.studentSeconds, &s.backwardSeconds,
                         &s.metricsSeconds, &s.a1Condition, &s.a1Orthogonality, &s.a1OffBlock, &s.a2Condition,
                         &s.a2Orthogonality, &s.a2OffBlock};
        for (size_t f2 = 0; f2 < cols.size(); ++f2) *dst[f2] = cols[f2][i];
    }
    return out;
}

DistillResult distill(const model::ModelConfig& c, const model::LlamaWeights& original, const at::Tensor& calibration,
                      ModelTransforms& transforms, const DistillOptions& o, JobContext& job) {
    if (calibration.dim() != 2 || calibration.size(0) < 1)
        throw std::invalid_argument("calibration must be [windows, tokens] with at least one window");
    if (o.steps < 1 || o.batch < 1) throw std::invalid_argument("steps and batch must be positive");
    if (o.temperature <= 0) throw std::invalid_argument("temperature must be positive");
    const auto params = transforms.parameters();
    if (params.empty()) throw std::invalid_argument("the transforms have nothing to learn (fixed kinds)");
    const auto start = Clock::now();
    const auto device = original.embed.device();
    const auto fopts = at::TensorOptions().dtype(at::kFloat).device(device);

    // The student's fixed part: γ folded, T3 applied (W_down T3ᵀ); T1/T2 fold on top each step.
    model::LlamaWeights base;
    model::ForwardOptions studentOptions;
    {
        at::NoGradGuard g;
        base = fold::foldNorms(c, original);
        if (transforms.t3().defined()) {
            base = fold::applyT3(base, transforms.t3());
            studentOptions.t3 = transforms.t3().to(fopts);
        }
    }
    studentOptions.activationQuant = o.activation;

    AdamW opt(params, o.weightDecay);
    DistillResult r;
    if (o.resume) {
        if (o.runFile.empty()) throw std::invalid_argument("resume needs a run file");
        const auto f = io::readTensorFile(o.runFile);
        auto get = [&](const std::string& k) {
            auto it = f.tensors.find(k);
            if (it == f.tensors.end())
                throw std::runtime_error("'" + o.runFile + "' has no '" + k + "': not a training run file, or of other transforms");
            return it->second;
        };
        at::NoGradGuard g;
        for (size_t i = 0; i < params.size(); ++i) {
            const auto p = get("state/param/" + std::to_string(i));
            if (!p.sizes().equals(params[i].sizes()))
                throw std::runtime_error("'" + o.runFile + "': saved parameter " + std::to_string(i) +
                                         " does not fit these transforms (other method or model?)");
            params[i].copy_(p);
            opt.m[i].copy_(get("state/m/" + std::to_string(i)));
            opt.v[i].copy_(get("state/v/" + std::to_string(i)));
        }
        opt.t = get("state/adam_t").item<int64_t>();
        r.startStep = static_cast<int>(get("state/steps_done").item<int64_t>());
        r.history = readDistillSeries(o.runFile);
        if (static_cast<int>(r.history.size()) > r.startStep) r.history.resize(static_cast<size_t>(r.startStep));
    }

    const int warmup = std::min(o.warmupSteps, std::max(1, o.steps / 10));
    const int n = static_cast<int>(calibration.size(0));
    auto save = [&](int done, const std::string& status) {
        if (!o.runFile.empty()) writeRunFile(o.runFile, r.history, transforms, opt, o, done, status);
    };
    for (int k = r.startStep; k < o.steps; ++k) {
        if (job.cancelRequested()) {
            save(k, "cancelled");
            throw JobCancelled();
        }
        const auto t0 = Clock::now();
        DistillStep s;
        s.step = k + 1;
        s.lr = o.lr * scheduleFactor(k, o.steps, warmup, o.warmupStartFactor);
        // One step on the device. Out of memory here names the step; before AdamW touched the
        // parameters the run file is saved at the last finished step, so --resume goes on from
        // there; during AdamW's update the state may be half-stepped and the last checkpoint stays.
        const std::string stage = "training step " + std::to_string(s.step) + "/" + std::to_string(o.steps);
        bool updating = false;
        try {
            guardMemory(stage, "rerun with a smaller --batch or a shorter --seqlen (training keeps the whole model on the device, "
                        "also with --offload); the run folder is resumable with --resume", [&] {
                const auto idx = at::tensor(batchOf(o.seed, k, n, o.batch), at::kLong);
                const auto tokens = calibration.index_select(0, idx).to(device);
                at::Tensor teacher;
                {
                    at::NoGradGuard g;
                    teacher = model::forwardWith(c, original, {}, tokens);
                }
                s.teacherSeconds = since(t0);
                const auto t1 = Clock::now();
                const auto studentWeights = transforms.fold(c, base);
                const auto student = model::forwardWith(c, studentWeights, studentOptions, tokens);
                const auto kl = distillationKl(teacher, student, o.temperature);
                const auto vol = transforms.volume().to(kl.device());
                const auto loss = kl + o.volumeWeight * vol;
                s.studentSeconds = since(t1);
                const auto t2 = Clock::now();
                opt.zeroGrad();
                loss.backward();
                updating = true;
                opt.step(s.lr);
                s.loss = loss.item<double>();
                s.kl = kl.item<double>();
                s.vol = vol.item<double>();
                s.backwardSeconds = since(t2);
            });
        } catch (const OutOfMemory&) {
            if (!updating) save(k, "out of memory");
            throw;
        }
        if (!std::isfinite(s.loss)) {
            save(k, "diverged");
            throw std::runtime_error("distillation diverged at step " + std::to_string(s.step) + " (loss " +
                                     std::to_string(s.loss) + "); lower the learning rate (--lr)");
        }
        if (o.metricsEvery > 0 && (s.step % o.metricsEvery == 0 || s.step == o.steps || s.step == 1)) {
            const auto t3 = Clock::now();
            const auto m1 = matrixMetrics(transforms.t1(), transforms.spec().blockSize);
            const auto m2 = transforms.layers() > o.trackedLayer
                                ? matrixMetrics(transforms.t2(o.trackedLayer), transforms.spec().blockSize)
                                : Metrics3{DistillStep::nan, DistillStep::nan, DistillStep::nan};
            s.a1Condition = m1.cond, s.a1Orthogonality = m1.orth, s.a1OffBlock = m1.off;
            s.a2Condition = m2.cond, s.a2Orthogonality = m2.orth, s.a2OffBlock = m2.off;
            s.metricsSeconds = since(t3);
            if (o.onMatrices) {
                auto copy = [](const transforms::AffineTransform* t) {
                    at::NoGradGuard g;
                    return t ? t->matrix().detach().to(at::TensorOptions().dtype(at::kFloat).device(at::kCPU)).clone()
                             : at::Tensor();
                };
                o.onMatrices(s.step, copy(transforms.t1()),
                             transforms.layers() > o.trackedLayer ? copy(transforms.t2(o.trackedLayer)) : at::Tensor());
            }
        }
        s.seconds = since(t0);
        r.history.push_back(s);
        if (o.onStep) o.onStep(s);
        std::ostringstream msg;
        msg << "step " << s.step << "/" << o.steps << "  loss " << s.loss << "  kl " << s.kl << "  lr " << s.lr;
        job.progress(static_cast<double>(s.step) / o.steps, msg.str());
        if (o.checkpointEvery > 0 && s.step % o.checkpointEvery == 0 && s.step < o.steps) save(s.step, "running");
    }
    save(o.steps, "finished");
    r.seconds = since(start);
    return r;
}

} // namespace latmix::train
