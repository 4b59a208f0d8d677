#include "train/LayerLocalTrainer.h"

#include "metrics/TransformMetrics.h"
#include "transforms/AffineTransform.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/optim/adamw.h> // the one optimizer header core uses (narrow, no torch/torch.h)

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <stdexcept>

namespace latmix::train {
namespace {

// Minibatches of rows without replacement: a partial Fisher-Yates shuffle from a seeded 64-bit
// Mersenne Twister with raw draws (same rows on every platform and libtorch version).
class RowSampler {
public:
    RowSampler(std::int64_t rows, std::uint64_t seed) : m_index(rows), m_rng(seed) {
        std::iota(m_index.begin(), m_index.end(), 0);
    }
    at::Tensor next(std::int64_t count) {
        const auto n = static_cast<std::uint64_t>(m_index.size());
        for (std::uint64_t i = 0; i < static_cast<std::uint64_t>(count); ++i)
            std::swap(m_index[i], m_index[i + m_rng() % (n - i)]);
        return at::tensor(std::vector<std::int64_t>(m_index.begin(), m_index.begin() + count), at::kLong);
    }

private:
    std::vector<std::int64_t> m_index;
    std::mt19937_64 m_rng;
};

// (Σ log|s_i|)², the volume term of SPEC §5 (|det A| = Π|s_i|); 0 without scales.
at::Tensor volumeTerm(const transforms::AffineTransform& t, const at::Tensor& like) {
    const at::Tensor logS = t.logAbsScales();
    if (!logS.defined()) return at::zeros({}, like.options());
    return logS.sum().pow(2).to(like.scalar_type());
}

void setLearningRate(torch::optim::AdamW& opt, double lr) {
    for (auto& group : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
}

std::string stepMessage(const TrainingStep& s, int steps) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "step %d/%d loss %.4g E(T) %.4g vol %.3g lr %.2g", s.step, steps, s.loss, s.mse,
                  s.vol, s.lr);
    return buf;
}

} // namespace

double scheduleFactor(int step, int steps, int warmupSteps, double warmupStartFactor) {
    if (warmupSteps > 0 && step < warmupSteps)
        return warmupStartFactor + (1.0 - warmupStartFactor) * static_cast<double>(step) / warmupSteps;
    const int cosineSteps = steps - std::max(warmupSteps, 0);
    if (cosineSteps <= 0) return 1.0;
    const double progress = static_cast<double>(step - std::max(warmupSteps, 0)) / cosineSteps;
    return 0.5 * (1.0 + std::cos(M_PI * std::min(progress, 1.0)));
}

LayerLocalTrainer::LayerLocalTrainer(LayerLocalOptions options) : m_o(std::move(options)) {
    m_o.mx.validate();
    if (m_o.steps < 1) throw std::invalid_argument("training needs at least one step");
    if (m_o.batchRows < 1) throw std::invalid_argument("minibatch must hold at least one row");
    if (!(m_o.lr > 0)) throw std::invalid_argument("learning rate must be positive");
    if (!(m_o.volumeWeight >= 0)) throw std::invalid_argument("volume weight must be non-negative");
    if (m_o.warmupSteps < 0) m_o.warmupSteps = m_o.steps / 10;
}

LayerLocalResult LayerLocalTrainer::train(transforms::AffineTransform& t, const at::Tensor& xIn, JobContext& job,
                                          const std::string& point) const {
    metrics::requireFiniteActivations(xIn, point);
    if (xIn.size(1) != t.dim())
        throw std::invalid_argument("activations of '" + point + "' have " + std::to_string(xIn.size(1)) +
                                    " channels but transform '" + t.name() + "' is " + std::to_string(t.dim()) +
                                    "-dimensional");
    const std::vector<at::Tensor> params = t.parameters();
    if (params.empty())
        throw std::invalid_argument("transform '" + t.name() + "' has nothing to learn (fixed transform)");
    const auto start = std::chrono::steady_clock::now();
    const at::Tensor x = xIn.to(params.front().scalar_type());
    LayerLocalResult r;
    r.initialMse = metrics::transformationMse(x, t, m_o.mx);
    if (m_o.biasFromMean && t.bias().defined()) t.initBiasFromMean(x.mean(0));

    double mseScale = 1.0;
    if (m_o.relativeMse) {
        at::NoGradGuard noGrad;
        mseScale = x.to(at::kDouble).pow(2).mean().item<double>();
        if (!(mseScale > 0)) mseScale = 1.0; // all-zero activations: nothing to scale
    }
    torch::optim::AdamW opt(params, torch::optim::AdamWOptions(m_o.lr).weight_decay(m_o.weightDecay));
    RowSampler sampler(x.size(0), m_o.seed);
    const std::int64_t batch = std::min<std::int64_t>(m_o.batchRows, x.size(0));
    // The best iterate on all rows, by the objective trained: a step size too large for a wide
    // transform (the 8192-wide down_proj input of Llama-3.2-1B ended worse than no transform)
    // cannot make the result worse than the start.
    auto objective = [&](double mse) {
        at::NoGradGuard noGrad;
        return mse / mseScale + m_o.volumeWeight * volumeTerm(t, at::zeros({}, at::kDouble)).item<double>();
    };
    double best = objective(r.initialMse);
    std::vector<at::Tensor> bestParams;
    for (const auto& p : params) bestParams.push_back(p.detach().clone());
    const int every = std::max(1, m_o.steps / 10);
    for (int k = 0; k < m_o.steps; ++k) {
        job.checkCancelled();
        TrainingStep s;
        s.step = k + 1;
        s.lr = m_o.lr * scheduleFactor(k, m_o.steps, m_o.warmupSteps, m_o.warmupStartFactor);
        setLearningRate(opt, s.lr);
        opt.zero_grad();
        const at::Tensor xb = batch == x.size(0) ? x : x.index_select(0, sampler.next(batch).to(x.device()));
        const at::Tensor mse = metrics::transformationMseLoss(xb, t, m_o.mx);
        const at::Tensor vol = volumeTerm(t, mse);
        const at::Tensor loss = mse / mseScale + m_o.volumeWeight * vol;
        s.loss = loss.item<double>();
        s.mse = mse.item<double>();
        s.vol = vol.item<double>();
        if (!std::isfinite(s.loss))
            throw std::runtime_error("training the transform of '" + point + "' diverged at step " +
                                     std::to_string(s.step) + " (loss " + std::to_string(s.loss) +
                                     "); lower the learning rate");
        loss.backward();
        opt.step();
        if (m_o.matrixMetricsEvery > 0 && (s.step % m_o.matrixMetricsEvery == 0 || s.step == m_o.steps)) {
            // Through the transform, so that a blockwise one is read off its blocks (issue 71: κ of
            // a dense 8192² A took ~70 s each time).
            const auto spectral = metrics::spectralSummary(t);
            s.conditionNumber = spectral.conditionNumber;
            s.orthogonalityDeviation = spectral.orthogonalityDeviation;
            s.offBlockNorm = metrics::offBlockNorm(t, m_o.mx.blockSize);
        }
        r.history.push_back(s);
        if (m_o.onStep) m_o.onStep(s);
        job.progress(static_cast<double>(s.step) / m_o.steps, stepMessage(s, m_o.steps));
        if (s.step % every == 0 || s.step == m_o.steps) {
            const double now = objective(metrics::transformationMse(x, t, m_o.mx));
            if (now < best) {
                best = now;
                r.bestStep = s.step;
                at::NoGradGuard noGrad;
                for (std::size_t i = 0; i < params.size(); ++i) bestParams[i].copy_(params[i].detach());
            }
        }
    }
    if (r.bestStep != m_o.steps) { // an earlier iterate (or the start) was better: back to it
        at::NoGradGuard noGrad;
        for (std::size_t i = 0; i < params.size(); ++i) params[i].copy_(bestParams[i]);
    }
    r.finalMse = metrics::transformationMse(x, t, m_o.mx);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return r;
}

} // namespace latmix::train
