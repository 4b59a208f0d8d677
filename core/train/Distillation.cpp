#include "train/Distillation.h"
#include "train/TrainFile.h"
#include "train/KlKernelCpu.h"

#include "fold/Fold.h"
#include "io/TensorFile.h"
#include "metrics/TransformMetrics.h"
#include "train/AdamW.h"
#include "train/LayerLocalTrainer.h" // scheduleFactor
#include "util/NonFinite.h"
#include "util/OutOfMemory.h"
#include "util/Text.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <chrono>
#include <limits>
#include <map>
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
    const std::int64_t h = c.hiddenSize, i = c.intermediateSize, N = batch * seqLen;
    const std::int64_t q = std::int64_t(c.numHeads) * c.headDim, kv = std::int64_t(c.numKvHeads) * c.headDim;
    const std::int64_t params = 2 * h * q + 2 * h * kv + 3 * h * i;
    // weights: the folded copy and the products that made it (T1, T2, γ, T3), about 3 copies;
    // activations saved for the backward: about 12 hidden-wide and 4 intermediate-wide rows per
    // token (norms, q/k/v/o inputs and outputs, MLP inputs, SiLU, products), and the attention
    // probabilities, per head T² per sequence.
    return 4 * (3 * params + N * (12 * h + 4 * i) + batch * c.numHeads * seqLen * seqLen);
}

bool keepsLayerGraphs(const model::ModelConfig& c, std::int64_t batch, std::int64_t seqLen) {
    return c.numLayers * layerGraphBytes(c, batch, seqLen) <= (std::int64_t(512) << 20);
}

DistillLoss distillationStep(const model::ModelConfig& c, const model::LlamaWeights& original,
                             const fold::ModelTransforms& transforms, const std::optional<mx::MxConfig>& activation,
                             const at::Tensor& tokens, double tau, double volumeWeight, Objective objective,
                             std::optional<bool> keepLayerGraphs) {
    DistillLoss r;
    const bool keepGraphs = keepLayerGraphs ? *keepLayerGraphs : keepsLayerGraphs(c, tokens.size(0), tokens.size(1));
    const bool crossEntropy = objective == Objective::CrossEntropy, blockMse = objective == Objective::BlockMse;
    const auto t0 = Clock::now();
    const auto device = tokens.device();
    const auto fopts = at::TensorOptions().dtype(at::kFloat).device(device);
    const std::int64_t T = tokens.size(1), N = tokens.numel(), V = c.vocabSize, chunk = 16384;
    model::ForwardOptions teacherOptions;
    teacherOptions.dtype = at::kFloat;
    // Layers placed over several devices (`--devices`: the weights of layer l on its device, the
    // embedding with the first, lm_head with the last): each layer computes where its weights
    // are, the hidden states and gradients move between devices, the transforms stay on the
    // tokens' device and reach the others through copies whose gradients come back (below). On
    // one device (or with offloaded layers) all of this is the tokens' device.
    auto devOf = [&](int l) { return model::layerComputeDevice(original.layers[static_cast<size_t>(l)], device); };
    const c10::Device top = original.lmHead.device().is_cpu() ? device : original.lmHead.device();
    const auto topts = fopts.device(top);
    struct PerDevice {
        model::ForwardOptions student;
        model::RopeTables rope;
    };
    std::map<std::string, PerDevice> perDevice;
    auto on = [&](c10::Device d) -> PerDevice& {
        auto it = perDevice.find(d.str());
        if (it != perDevice.end()) return it->second;
        PerDevice p;
        p.student.activationQuant = activation;
        if (transforms.t3().defined()) p.student.t3 = transforms.t3().to(fopts.device(d));
        p.rope = model::ropeTables(c, T, at::kFloat, d);
        return perDevice.emplace(d.str(), std::move(p)).first->second;
    };

    // The teacher's normed final hidden states (no graph); its logits are made a chunk at a time.
    // Block MSE: the teacher's output of every block instead, each on its layer's device.
    at::Tensor teacherNormed;
    std::vector<at::Tensor> teacherBlocks;
    if (objective == Objective::Kl) { // cross-entropy against the data needs no teacher
        at::NoGradGuard g;
        const auto h = model::forwardHidden(c, original, teacherOptions, tokens).to(top);
        teacherNormed = model::rmsNorm(h, original.finalNorm.to(topts), c.rmsNormEps).reshape({N, c.hiddenSize});
    } else if (blockMse) {
        at::NoGradGuard g;
        model::forwardHidden(c, original, teacherOptions, tokens, nullptr, &teacherBlocks);
    }
    r.teacherSeconds = since(t0);
    const auto t1 = Clock::now();

    // T1 once per step: its matrices with their graph (m1), and leaf copies every use below
    // differentiates against; their gradients go back through m1 at the end.
    const fold::AffineMatrices m1 = transforms.t1Matrices();
    fold::AffineMatrices leaf1;
    auto leafOf = [](const at::Tensor& t) { return t.defined() ? t.detach().requires_grad_(true) : t; };
    if (m1.defined()) leaf1 = {leafOf(m1.a), leafOf(m1.aInv), leafOf(m1.v)};
    // Placed layers: a leaf copy of T1 on each other device, its gradient added to T1's below.
    std::map<std::string, fold::AffineMatrices> leafCopies;
    auto leaf1On = [&](c10::Device d) -> const fold::AffineMatrices& {
        if (!leaf1.defined() || d == device) return leaf1;
        auto it = leafCopies.find(d.str());
        if (it != leafCopies.end()) return it->second;
        auto copy = [&](const at::Tensor& t) { return t.defined() ? leafOf(t.detach().to(d)) : t; };
        return leafCopies.emplace(d.str(), fold::AffineMatrices{copy(leaf1.a), copy(leaf1.aInv), copy(leaf1.v)})
            .first->second;
    };
    // The student's layer l: γ folded, T3 on W_down, T1 and T2 folded, from the weights as stored
    // (one layer converted at a time; nothing of the model is copied whole), on its device.
    auto studentLayer = [&](int l) {
        const c10::Device d = devOf(l);
        model::LayerWeights y = model::convertLayer(original.layers[static_cast<size_t>(l)], fopts.device(d));
        fold::AffineMatrices m2 = transforms.t2Matrices(l);
        if (m2.defined() && d != device) m2 = {m2.a.to(d), m2.aInv.to(d), m2.v.defined() ? m2.v.to(d) : m2.v};
        const auto& t3 = !transforms.t3().defined() || d == device ? transforms.t3() : on(d).student.t3;
        fold::foldLayer(c, y, l, t3, leaf1On(d), m2);
        return y;
    };
    // Embedding rows through T1 (e ↦ A1 e + v1) on the looked-up rows, not the table.
    const auto rows = model::embedTokens(c, original, tokens).to(fopts).detach();
    auto embedStudent = [&] {
        if (!leaf1.defined()) return rows;
        auto x = at::matmul(rows, leaf1.a.t());
        return leaf1.v.defined() ? x + leaf1.v : x;
    };

    // Forward without a graph, keeping each layer's input (activation checkpointing); or, when
    // every layer's graph fits (keepGraphs), with each layer's graph kept, its input a leaf.
    std::vector<at::Tensor> inputs, outputs;
    at::Tensor x;
    {
        at::NoGradGuard g;
        x = embedStudent();
    }
    for (int l = 0; l < c.numLayers; ++l) {
        x = x.to(devOf(l));
        if (keepGraphs) {
            const auto xi = x.detach().requires_grad_(true);
            const auto out = model::decoderLayer(c, studentLayer(l), on(devOf(l)).student, xi, on(devOf(l)).rope, l);
            inputs.push_back(xi);
            outputs.push_back(out);
            x = out.detach();
        } else {
            at::NoGradGuard g;
            inputs.push_back(x);
            x = model::decoderLayer(c, studentLayer(l), on(devOf(l)).student, x, on(devOf(l)).rope, l);
        }
        model::releaseMappedLayer(original.layers[static_cast<size_t>(l)]);
    }

    // The top: final norm (γ folded into lm_head), T1⁻¹ on the hidden states, lm_head W·diag(γ)
    // a vocabulary chunk at a time. KL(p‖q) per token = lse_q − lse_p + Σ p (a − b)/τ with a, b
    // the teacher's and student's logits; its gradient w.r.t. b is (q − p)/τ, so the logits are
    // never formed whole and no [tokens, vocab] tensor is kept for the backward pass.
    // Block MSE has no top: its terms are formed block by block in the backward pass below.
    at::Tensor gradOut; // the gradient reaching the current layer's output
    Clock::time_point t2;
    const auto tLoss = Clock::now();
    if (!blockMse) {
        const auto xTop = x.detach().to(top).requires_grad_(true);
        auto u = model::rmsNorm(xTop, at::ones({c.hiddenSize}, topts), c.rmsNormEps).reshape({N, c.hiddenSize});
        const fold::AffineMatrices& t1Top = leaf1On(top);
        if (t1Top.defined()) u = at::matmul(t1Top.v.defined() ? u - t1Top.v : u, t1Top.aInv.t());
        const auto gamma = original.finalNorm.to(topts);
        auto lmChunk = [&](std::int64_t a, std::int64_t n) { return original.lmHead.narrow(0, a, n).to(topts); };
        auto biasChunk = [&](std::int64_t a, std::int64_t n) {
            return original.lmHeadBias.defined() ? original.lmHeadBias.narrow(0, a, n).to(topts) : at::Tensor();
        };
        auto logits = [](const at::Tensor& h, const at::Tensor& w, const at::Tensor& b) {
            auto z = at::matmul(h, w.t());
            return b.defined() ? z + b : z;
        };
        at::Tensor gradU = at::zeros({N, c.hiddenSize}, topts);
        double kl = 0;
        if (crossEntropy) {
            // Cross-entropy of the student against the next token of the data (paper Table 8's "CE";
            // SpinQuant's objective), mean over the B·(T−1) predicted tokens, at temperature 1. Its
            // gradient w.r.t. the logits is softmax − one-hot, formed a vocabulary chunk at a time.
            at::NoGradGuard g;
            const auto uv = u.detach();
            const std::int64_t B = tokens.size(0);
            const auto next = at::cat({tokens.narrow(1, 1, T - 1), at::full({B, 1}, -1, tokens.options())}, 1)
                                  .reshape({N})
                                  .to(top, at::kLong);
            const auto valid = next.ge(0).to(at::kFloat).unsqueeze(1);
            const double M = double(B * (T - 1));
            at::Tensor lseQ = at::full({N}, -std::numeric_limits<float>::infinity(), topts);
            for (std::int64_t a = 0; a < V; a += chunk) {
                const std::int64_t n = std::min(chunk, V - a);
                lseQ = at::logaddexp(lseQ, at::logsumexp(logits(uv, lmChunk(a, n) * gamma, biasChunk(a, n)), -1));
            }
            at::Tensor ceSum = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(top));
            for (std::int64_t a = 0; a < V; a += chunk) {
                const std::int64_t n = std::min(chunk, V - a);
                const auto wg = lmChunk(a, n) * gamma;
                const auto z = logits(uv, wg, biasChunk(a, n));
                const auto inChunk = next.ge(a).logical_and(next.lt(a + n)).to(at::kFloat).unsqueeze(1);
                const auto local = (next - a).clamp(0, n - 1).unsqueeze(1);
                const auto oneHot = at::zeros_like(z).scatter_(1, local, inChunk);
                ceSum -= (z.gather(1, local) * inChunk).sum().to(at::kDouble); // − the target's logit
                gradU.addmm_(((z - lseQ.unsqueeze(1)).exp() * valid - oneHot) / M, wg);
            }
            ceSum += (lseQ.unsqueeze(1) * valid).sum().to(at::kDouble);
            kl = ceSum.item<double>() / M;
        } else {
            at::NoGradGuard g;
            // γ on the hidden states instead of on lm_head's rows ((u ⊙ γ) Wᵀ = u (W diag γ)ᵀ), so the
            // table is read as it is; the gradient is then ((q − p) W) ⊙ γ.
            const auto ug = u.detach() * gamma;
            const float inf = std::numeric_limits<float>::infinity();
            at::Tensor lseP = at::full({N}, -inf, topts), lseQ = lseP.clone();
            at::Tensor mass = at::zeros({N}, topts), meanD = mass.clone(), expD = mass.clone();
            // Token blocks whose logits over the whole vocabulary (teacher's and student's) stay in
            // memory between the log-sum-exp pass and the KL pass: each of the three vocabulary
            // products (teacher, student, gradient) runs once, where vocabulary chunks alone
            // recomputed both models' logits (five products). A block holds 2·V logits per token
            // plus a chunk's temporaries, within the 6 chunk-widths per token the chunked form held
            // (run/MemoryEstimate's trainTopBytes); in place where a temporary can be reused.
            // Blocks of at most 256 tokens also keep each chunk's [tokens, 16384] float32 temporaries
            // at 16 MiB, under glibc's largest mmap threshold (32 MiB): freed, they stay in the heap
            // for the next block and step instead of being unmapped and faulted in again (3 in 4
            // of the step's page faults at brownpy-13M 4 x 256).
            const std::int64_t width = std::min(chunk, V);
            const std::int64_t block = std::max<std::int64_t>(
                1, std::min({N, 6 * N * width / (2 * V + 4 * width), (std::int64_t(16) << 20) / (4 * width)}));
            if (top.is_cpu()) {
                // One kernel instead of the passes below (train/KlKernelCpu.h): the logits of a
                // token block over the whole vocabulary go into two [block, V] buffers, chunk by
                // chunk of lm_head; the kernel leaves (q − p)/(τN) in the teacher's buffer for the
                // gradient. 1/τ is applied to the hidden states (nothing to do at τ = 1).
                const double invTau = 1.0 / tau;
                // The two buffers within the memory the chunked form held (6 chunk-widths per
                // token, run/MemoryEstimate's trainTopBytes) and 128 MiB each: longer products than
                // the ATen path's 16 MiB blocks (brownpy-13M: all 1024 tokens of a 4 × 256 batch in
                // one block, the loss 0.35 → 0.29 s), the same 256 tokens at a 128k vocabulary.
                const std::int64_t rowsCpu =
                    std::max<std::int64_t>(1, std::min({N, 3 * N * width / V, (std::int64_t(128) << 20) / (4 * V)}));
                at::Tensor za = at::empty({rowsCpu, V}, topts), zb = at::empty({rowsCpu, V}, topts);
                at::Tensor stats = at::empty({5, N}, topts); // lse_p, lse_q, mass, meanD, expD
                for (std::int64_t r0 = 0; r0 < N; r0 += rowsCpu) {
                    const std::int64_t nr = std::min(rowsCpu, N - r0);
                    at::Tensor tb = teacherNormed.narrow(0, r0, nr), sb = ug.narrow(0, r0, nr);
                    if (tau != 1.0) tb = tb * invTau, sb = sb * invTau;
                    auto zaB = za.narrow(0, 0, nr), zbB = zb.narrow(0, 0, nr);
                    // The teacher's logits, then the student's: timed apart so that `bench train`
                    // counts each model's lm_head product on its own side, as an eager forward does.
                    auto logitsInto = [&](at::Tensor& z, const at::Tensor& h) {
                        for (std::int64_t a = 0; a < V; a += chunk) {
                            const std::int64_t n = std::min(chunk, V - a);
                            const auto bias = biasChunk(a, n);
                            auto o = z.narrow(1, a, n);
                            at::mm_out(o, h, lmChunk(a, n).t());
                            if (bias.defined()) o.add_(bias * invTau);
                        }
                    };
                    const auto tTeacher = Clock::now();
                    logitsInto(zaB, tb);
                    r.teacherLogitsSeconds += since(tTeacher);
                    logitsInto(zbB, sb);
                    cpu::KlRowOutputs out;
                    out.lseA = stats[0].narrow(0, r0, nr).data_ptr<float>();
                    out.lseB = stats[1].narrow(0, r0, nr).data_ptr<float>();
                    out.mass = stats[2].narrow(0, r0, nr).data_ptr<float>();
                    out.meanD = stats[3].narrow(0, r0, nr).data_ptr<float>();
                    out.expD = stats[4].narrow(0, r0, nr).data_ptr<float>();
                    cpu::klRows(zaB.data_ptr<float>(), zbB.data_ptr<float>(), nr, V, zaB.stride(0),
                                static_cast<float>(invTau / double(N)), out);
                    auto gb = gradU.narrow(0, r0, nr);
                    const auto tGradient = Clock::now();
                    for (std::int64_t a = 0; a < V; a += chunk) {
                        const std::int64_t n = std::min(chunk, V - a);
                        gb.addmm_(zaB.narrow(1, a, n), lmChunk(a, n));
                    }
                    r.lossGradientSeconds += since(tGradient);
                }
                lseP = stats[0];
                lseQ = stats[1];
                mass = stats[2];
                meanD = stats[3];
                expD = stats[4];
            }
            for (std::int64_t r0 = 0; r0 < N && !top.is_cpu(); r0 += block) {
                const std::int64_t nr = std::min(block, N - r0);
                const auto tb = teacherNormed.narrow(0, r0, nr), sb = ug.narrow(0, r0, nr);
                auto lp = lseP.narrow(0, r0, nr), lq = lseQ.narrow(0, r0, nr);
                std::vector<at::Tensor> ra, rb; // per vocabulary chunk: [nr, n] logits
                for (std::int64_t a = 0; a < V; a += chunk) {
                    const std::int64_t n = std::min(chunk, V - a);
                    const auto w = lmChunk(a, n), b = biasChunk(a, n);
                    ra.push_back(logits(tb, w, b));
                    rb.push_back(logits(sb, w, b));
                    lp.copy_(at::logaddexp(lp, at::logsumexp(ra.back() / tau, -1)));
                    lq.copy_(at::logaddexp(lq, at::logsumexp(rb.back() / tau, -1)));
                }
                auto gb = gradU.narrow(0, r0, nr);
                for (std::size_t k = 0; k < ra.size(); ++k) {
                    const std::int64_t a = static_cast<std::int64_t>(k) * chunk, n = std::min(chunk, V - a);
                    auto d = (ra[k] - rb[k]).div_(tau); // close logits: the subtraction is exact (Sterbenz)
                    const auto p = ra[k].div_(tau).sub_(lp.unsqueeze(1)).exp_(); // ra[k] becomes p
                    const auto q = rb[k].div_(tau).sub_(lq.unsqueeze(1)).exp_(); // rb[k] becomes q
                    mass.narrow(0, r0, nr).add_(p.sum(1));
                    meanD.narrow(0, r0, nr).add_((p * d).sum(1));
                    expD.narrow(0, r0, nr).add_(d.neg_().expm1_().mul_(p).sum(1));
                    gb.addmm_(q.sub_(p).div_(tau * double(N)), lmChunk(a, n));
                    ra[k] = rb[k] = at::Tensor(); // freed as the pass goes
                }
            }
            gradU.mul_(gamma);
            auto perToken = meanD / mass + at::log1p(expD / mass);
            perToken = at::where(at::isfinite(perToken), perToken, meanD - (lseP - lseQ) * mass);
            kl = perToken.to(at::kDouble).sum().item<double>() / double(N);
        }
        r.objective = kl;
        r.studentSeconds = since(t1);
        r.lossSeconds = since(tLoss);
        t2 = Clock::now();

        // Backward: the top, then each layer recomputed with its graph from its saved input, then
        // the embedding rows, then T1's matrices and the volume term.
        u.backward(gradU);
        gradOut = xTop.grad();
    } else {
        r.studentSeconds = since(t1);
        t2 = Clock::now();
    }
    double mseSum = 0;
    for (int l = c.numLayers - 1; l >= 0; --l) {
        const c10::Device d = devOf(l);
        const auto xi = keepGraphs ? inputs[static_cast<size_t>(l)] : inputs[static_cast<size_t>(l)].detach().requires_grad_(true);
        inputs[static_cast<size_t>(l)] = at::Tensor();
        const auto out = keepGraphs ? outputs[static_cast<size_t>(l)]
                                    : model::decoderLayer(c, studentLayer(l), on(d).student, xi, on(d).rope, l);
        if (keepGraphs) outputs[static_cast<size_t>(l)] = at::Tensor(); // the graph goes with the backward
        if (blockMse) {
            // This block's term, mean((T1⁻¹(x'_l) − x_l)²) / L, differentiated together with
            // what the later blocks sent back through its output.
            auto mapped = out.reshape({N, c.hiddenSize});
            const fold::AffineMatrices& t1d = leaf1On(d);
            if (t1d.defined()) mapped = at::matmul(t1d.v.defined() ? mapped - t1d.v : mapped, t1d.aInv.t());
            const auto target = teacherBlocks[static_cast<size_t>(l)].reshape({N, c.hiddenSize}).to(fopts.device(d));
            teacherBlocks[static_cast<size_t>(l)] = at::Tensor();
            const auto term = (mapped - target).pow(2).mean() / double(c.numLayers);
            mseSum += term.item<double>();
            (gradOut.defined() ? term + (out * gradOut.to(d)).sum() : term).backward();
        } else {
            out.backward(gradOut.to(d));
        }
        gradOut = xi.grad();
        model::releaseMappedLayer(original.layers[static_cast<size_t>(l)]);
    }
    if (blockMse) r.objective = mseSum;
    if (leaf1.defined()) {
        embedStudent().backward(gradOut.to(device));
        at::Tensor s = at::zeros({}, fopts);
        std::vector<const fold::AffineMatrices*> leaves{&leaf1};
        for (const auto& [d, copy] : leafCopies) leaves.push_back(&copy);
        auto gradOf = [&](const at::Tensor& t) { return t.grad().to(device); };
        for (const fold::AffineMatrices* l1 : leaves) {
            if (l1->a.grad().defined()) s = s + (m1.a * gradOf(l1->a)).sum();
            if (l1->aInv.grad().defined()) s = s + (m1.aInv * gradOf(l1->aInv)).sum();
            if (l1->v.defined() && l1->v.grad().defined()) s = s + (m1.v * gradOf(l1->v)).sum();
        }
        if (s.requires_grad()) s.backward();
    }
    const auto vol = transforms.volume().to(device);
    r.vol = vol.item<double>();
    if (volumeWeight != 0 && vol.requires_grad()) (vol * volumeWeight).backward();
    r.loss = r.objective + volumeWeight * r.vol;
    r.backwardSeconds = since(t2);
    return r;
}

Objective objectiveOf(const std::string& name) {
    if (name == "kl") return Objective::Kl;
    if (name == "ce") return Objective::CrossEntropy;
    if (name == "block-mse") return Objective::BlockMse;
    throw std::invalid_argument("unknown --loss '" + name + "'; use kl, ce or block-mse");
}

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
std::string nonFiniteLossMessage(const model::ModelConfig& c, const model::LlamaWeights& original,
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
        return "distillation diverged at " + at + " (loss " + util::exactNumber(loss) +
               ") although the original model is finite on its calibration windows; lower the learning rate (--lr); "
               "the run folder keeps the state before this step (--resume)";
    // first.firstIndex is [row of the step's batch, token, channel].
    const auto row = first.firstIndex.empty() ? int64_t(-1) : first.firstIndex[0];
    const std::string window = row >= 0 && row < static_cast<int64_t>(windows.size())
                                   ? "calibration window " + std::to_string(windows[static_cast<size_t>(row)])
                                   : "this step's calibration windows";
    return at + ": the loss is not finite because the original model's " + where + " are not finite in " + window +
           " (" + first.describe() + " of [batch, tokens, width]) although its weights are: the model overflows in "
           "float32 on this text, which no learning rate fixes; check it with `latmix eval`, or calibrate on other text";
}

} // namespace

DistillResult distill(const model::ModelConfig& c, const model::LlamaWeights& original, const at::Tensor& calibration,
                      fold::ModelTransforms& transforms, const DistillOptions& o, JobContext& job) {
    if (calibration.dim() != 2 || calibration.size(0) < 1)
        throw std::invalid_argument("calibration must be [windows, tokens] with at least one window");
    if (o.steps < 1 || o.batch < 1) throw std::invalid_argument("steps and batch must be positive");
    if (o.temperature <= 0) throw std::invalid_argument("temperature must be positive");
    const auto params = transforms.parameters();
    if (params.empty()) throw std::invalid_argument("the transforms have nothing to learn (fixed kinds)");
    const auto start = Clock::now();
    const auto device = original.embed.device();
    const auto fopts = at::TensorOptions().dtype(at::kFloat).device(device);

    AdamW opt(params, o.weightDecay);
    DistillResult r;
    const int world = o.group ? o.group->size() : 1;
    const int rank = o.group ? o.group->rank() : 0;
    const bool root = rank == 0;
    const int n = static_cast<int>(calibration.size(0));
    if (world > 1 && n < o.batch * world)
        throw std::invalid_argument("data-parallel training over " + std::to_string(world) + " ranks with batch " +
                                    std::to_string(o.batch) + " needs " + std::to_string(o.batch * world) +
                                    " calibration windows, there are " + std::to_string(n) +
                                    "; raise --calib-samples or lower --batch");
    if (o.resume && root) {
        if (o.runFile.empty()) throw std::invalid_argument("resume needs a run file");
        restoreTrainFile(o.runFile, params, opt, r);
    }

    if (world > 1) {
        // Every rank starts from rank 0's parameters and optimizer state (fresh or resumed).
        at::NoGradGuard g;
        auto counters = at::tensor(std::vector<double>{double(opt.t), double(r.startStep)}, at::kDouble);
        std::vector<at::Tensor> state = params;
        state.insert(state.end(), opt.m.begin(), opt.m.end());
        state.insert(state.end(), opt.v.begin(), opt.v.end());
        state.push_back(counters);
        o.group->broadcast(state, 0);
        opt.t = static_cast<std::int64_t>(counters[0].item<double>());
        r.startStep = static_cast<int>(counters[1].item<double>());
    }

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
            guardMemory(stage, "rerun with a smaller --batch or a shorter --seqlen; the run folder is resumable with --resume",
                        [&] {
                // This rank's share of the step's global batch (all of it in one process).
                const auto global = batchOf(o.seed, k, n, o.batch * world);
                const std::vector<int64_t> mine(global.begin() + rank * o.batch,
                                                global.begin() + std::min<std::size_t>(global.size(), (rank + 1) * o.batch));
                const auto idx = at::tensor(mine, at::kLong);
                const auto tokens = calibration.index_select(0, idx).to(device);
                opt.zeroGrad();
                DistillLoss l =
                    distillationStep(c, original, transforms, o.activation, tokens, o.temperature, o.volumeWeight, o.objective);
                if (world > 1) {
                    // The mean gradient of the global batch: each rank's KL is a mean over its
                    // own equal share of the tokens (the volume term is the same on every rank).
                    std::vector<at::Tensor> grads;
                    for (auto& p : params) {
                        if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p.detach());
                        grads.push_back(p.grad());
                    }
                    auto terms = at::tensor(
                        std::vector<double>{l.loss, l.objective, l.vol, job.cancelRequested() ? 1.0 : 0.0}, at::kDouble);
                    grads.push_back(terms);
                    o.group->allreduceMean(grads);
                    l.loss = terms[0].item<double>();
                    l.objective = terms[1].item<double>();
                    l.vol = terms[2].item<double>();
                    cancelled = terms[3].item<double>() > 0; // any rank asked
                    if (cancelled) return;
                }
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
                s.lossSeconds = l.lossSeconds;
                s.teacherLogitsSeconds = l.teacherLogitsSeconds;
                s.lossGradientSeconds = l.lossGradientSeconds;
                s.loss = l.loss;
                s.objective = l.objective;
                s.vol = l.vol;
                s.teacherSeconds = l.teacherSeconds;
                s.studentSeconds = l.studentSeconds;
                s.backwardSeconds = l.backwardSeconds;
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
            throw std::runtime_error(nonFiniteLossMessage(c, original, stepTokens, stepWindows, s.step, o.steps, s.loss));
        }
        if (root && o.metricsEvery > 0 && (s.step % o.metricsEvery == 0 || s.step == o.steps || s.step == 1)) {
            const auto t3 = Clock::now();
            const auto m1 = matrixMetrics(transforms.t1(), transforms.spec().blockSize);
            const auto m2 = transforms.layers() > o.trackedLayer
                                ? matrixMetrics(transforms.t2(o.trackedLayer), transforms.spec().blockSize)
                                : MatrixMetrics{DistillStep::nan, DistillStep::nan, DistillStep::nan};
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
        if (trackFolded && (s.step == 1 || s.step % o.foldedEvalEvery == 0 || s.step == o.steps)) {
            const auto t4 = Clock::now();
            s.foldedPerplexity = o.foldedEval(transforms);
            s.metricsSeconds += since(t4);
        }
        s.seconds = since(t0);
        r.history.push_back(s);
        if (o.onStep) o.onStep(s);
        std::ostringstream msg;
        msg << "step " << s.step << "/" << o.steps << "  loss " << s.loss << "  " << objectiveName(o.objective) << " " << s.objective << "  lr " << s.lr;
        if (std::isfinite(s.foldedPerplexity)) msg << "  folded FP ppl " << s.foldedPerplexity;
        job.progress(static_cast<double>(s.step) / o.steps, msg.str());
        if (o.checkpointEvery > 0 && s.step % o.checkpointEvery == 0 && s.step < o.steps) save(s.step, "running");
    }
    save(o.steps, "finished");
    r.seconds = since(start);
    return r;
}

} // namespace latmix::train
