// train::distillationStep (Distillation.h) in its named pieces: the teacher's targets, the
// student's forward with its layers folded one at a time, the loss over the vocabulary (KL or
// cross-entropy; block MSE has none), the backward pass through the layers, and T1's gradient.
// A Step holds what they share: where each layer computes, T1's leaf copies, the saved inputs.
#include "train/Distillation.h"
#include "train/KlKernelCpu.h"

#include "fold/Fold.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>

namespace latmix::train {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
constexpr std::int64_t kVocabChunk = 16384; // lm_head rows per product

// The KL's per-token sums (see Step::klTop): log-sum-exps of both models, the teacher's mass,
// Σ p·d and Σ p·expm1(−d) with d the scaled logit difference.
struct KlSums {
    at::Tensor lseP, lseQ, mass, meanD, expD;
};

class Step {
public:
    Step(const model::ModelConfig& c, const model::LlamaWeights& original, const fold::ModelTransforms& transforms,
         const StudentQuantization& activation, const at::Tensor& tokens, double tau, Objective objective,
         bool keepGraphs, const at::Tensor& givenTeacher, at::ScalarType compute)
        : c(c), original(original), transforms(transforms), activation(activation), tokens(tokens), tau(tau),
          objective(objective), keepGraphs(keepGraphs), givenTeacher(givenTeacher), device(tokens.device()),
          fopts(at::TensorOptions().dtype(at::kFloat).device(device)), copts(fopts.dtype(compute)),
          top(lossDevice(original, device)), topts(fopts.device(top)),
          T(tokens.size(1)), N(tokens.numel()), V(c.vocabSize) {}

    DistillLoss run(double volumeWeight);

private:
    // Layers placed over several devices (`--devices`: the weights of layer l on its device, the
    // embedding with the first, lm_head with the last): each layer computes where its weights
    // are, the hidden states and gradients move between devices, the transforms stay on the
    // tokens' device and reach the others through copies whose gradients come back (backwardT1).
    // On one device (or with offloaded layers) all of this is the tokens' device.
    struct PerDevice {
        model::ForwardOptions student;
        model::RopeTables rope;
    };
    c10::Device devOf(int l) const { return model::layerComputeDevice(original.layers[static_cast<size_t>(l)], device); }
    PerDevice& on(c10::Device d);
    const fold::AffineMatrices& leaf1On(c10::Device d);
    model::LayerWeights studentLayer(int l);
    at::Tensor embedStudent();
    void teacherForward();
    at::Tensor studentForward();
    at::Tensor lmChunk(std::int64_t a, std::int64_t n) const { return original.lmHead.narrow(0, a, n).to(topts); }
    at::Tensor biasChunk(std::int64_t a, std::int64_t n) const {
        return original.lmHeadBias.defined() ? original.lmHeadBias.narrow(0, a, n).to(topts) : at::Tensor();
    }
    bool mixed() const { return copts.dtype() != fopts.dtype(); } // bfloat16 layers and lm_head
    at::Tensor chunkLogits(const at::Tensor& h, std::int64_t a, std::int64_t n) const;
    void addChunkGradient(at::Tensor& g, const at::Tensor& dz, std::int64_t a, std::int64_t n) const;
    double crossEntropyTop(const at::Tensor& u, at::Tensor& gradU);
    double klTop(const at::Tensor& u, at::Tensor& gradU);
    void klLogitsCpu(const at::Tensor& ug, at::Tensor& gradU, KlSums& s);
    void klLogitsBlocks(const at::Tensor& ug, at::Tensor& gradU, KlSums& s);
    at::Tensor backwardLayers(at::Tensor gradOut);
    void backwardT1(const at::Tensor& gradOut);

    const model::ModelConfig& c;
    const model::LlamaWeights& original;
    const fold::ModelTransforms& transforms;
    const StudentQuantization& activation;
    const at::Tensor& tokens;
    const double tau;
    const Objective objective;
    const bool keepGraphs;
    const at::Tensor& givenTeacher; // KL: the teacher's normed states kept from an earlier step, or undefined
    const c10::Device device;
    const at::TensorOptions fopts;
    const at::TensorOptions copts; // the layers' dtype (float32, or bfloat16: DistillOptions::compute)
    const c10::Device top; // where lm_head computes
    const at::TensorOptions topts;
    const std::int64_t T, N, V;

    std::map<std::string, PerDevice> perDevice;
    fold::AffineMatrices m1, leaf1;                       // T1 with its graph, and the leaves every use differentiates
    std::map<std::string, fold::AffineMatrices> leafCopies; // T1's leaves on the other devices
    at::Tensor rows;                                      // the looked-up embedding rows
    at::Tensor teacherNormed;                             // KL: the teacher's normed final states
    std::vector<at::Tensor> teacherBlocks;                // block MSE: the teacher's block outputs
    std::vector<at::Tensor> inputs, outputs;              // each layer's input (and kept graph)
    double mseSum = 0;
    DistillLoss r;
};

Step::PerDevice& Step::on(c10::Device d) {
    auto it = perDevice.find(d.str());
    if (it != perDevice.end()) return it->second;
    PerDevice p;
    p.student.activationQuant = activation.activation;
    p.student.pointQuant = activation.pointQuant;   // a scheme's groups in their formats
    p.student.keptLinears = activation.keptLinears; // kept linears read their inputs unquantized
    if (transforms.t3().defined()) p.student.t3 = transforms.t3().to(copts.device(d));
    p.rope = model::ropeTables(c, T, copts.dtype().toScalarType(), d);
    return perDevice.emplace(d.str(), std::move(p)).first->second;
}

// Placed layers: a leaf copy of T1 on each other device, its gradient added to T1's in backwardT1.
const fold::AffineMatrices& Step::leaf1On(c10::Device d) {
    if (!leaf1.defined() || d == device) return leaf1;
    auto it = leafCopies.find(d.str());
    if (it != leafCopies.end()) return it->second;
    auto copy = [&](const at::Tensor& t) { return t.defined() ? t.detach().to(d).requires_grad_(true) : t; };
    return leafCopies.emplace(d.str(), fold::AffineMatrices{copy(leaf1.a), copy(leaf1.aInv), copy(leaf1.v)}).first->second;
}

// The student's layer l: γ folded, T3 on W_down, T1 and T2 folded, from the weights as stored
// (one layer converted at a time; nothing of the model is copied whole), on its device.
model::LayerWeights Step::studentLayer(int l) {
    const c10::Device d = devOf(l);
    model::LayerWeights y = model::convertLayer(original.layers[static_cast<size_t>(l)], fopts.device(d));
    fold::AffineMatrices m2 = transforms.t2Matrices(l);
    if (m2.defined() && d != device) {
        // A fixed Hadamard T2 keeps its diagonal: folded by butterflies there too, as on the home device.
        const auto to = [&](const at::Tensor& t) { return t.defined() ? t.to(d) : t; };
        m2 = {m2.a.to(d), m2.aInv.to(d), to(m2.v), to(m2.hadamardDiagonal)};
    }
    const auto& t3 = !transforms.t3().defined() || d == device ? transforms.t3() : on(d).student.t3;
    fold::foldLayer(c, y, l, t3, leaf1On(d), m2);
    // Mixed precision: folded in float32, then rounded to bfloat16 with the graph (as autocast
    // casts a float32 weight at each product), so the gradient reaches the float32 transforms.
    return mixed() ? model::convertLayer(y, copts.device(d)) : y;
}

// Embedding rows through T1 (e ↦ A1 e + v1) on the looked-up rows, not the table.
at::Tensor Step::embedStudent() {
    if (!leaf1.defined()) return rows.to(copts);
    auto x = at::matmul(rows, leaf1.a.t());
    return (leaf1.v.defined() ? x + leaf1.v : x).to(copts);
}

// The teacher's normed final hidden states (no graph); its logits are made a chunk at a time.
// Block MSE: the teacher's output of every block instead, each on its layer's device.
// Cross-entropy against the data needs no teacher.
void Step::teacherForward() {
    model::ForwardOptions teacherOptions;
    teacherOptions.dtype = copts.dtype().toScalarType();
    at::NoGradGuard g;
    if (objective == Objective::Kl) {
        teacherNormed = givenTeacher.defined() ? givenTeacher.to(topts)
                                               : teacherNormedStates(c, original, tokens, top, copts.dtype().toScalarType());
    } else if (objective == Objective::BlockMse) {
        model::forwardHidden(c, original, teacherOptions, tokens, nullptr, &teacherBlocks);
    }
}

// Forward without a graph, keeping each layer's input (activation checkpointing); or, when
// every layer's graph fits (keepGraphs), with each layer's graph kept, its input a leaf.
// Returns the last layer's output.
at::Tensor Step::studentForward() {
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
    return x;
}

at::Tensor logits(const at::Tensor& h, const at::Tensor& w, const at::Tensor& b) {
    auto z = at::matmul(h, w.t());
    return b.defined() ? z + b : z;
}

// h [rows, hidden] float32 times lm_head's rows [a, a + n) transposed: float32 logits without the
// bias. Mixed precision: the product in bfloat16 (h and the rows rounded to it), widened after.
at::Tensor Step::chunkLogits(const at::Tensor& h, std::int64_t a, std::int64_t n) const {
    if (!mixed()) return at::matmul(h, lmChunk(a, n).t());
    const auto ctop = copts.device(top);
    return at::matmul(h.to(ctop), original.lmHead.narrow(0, a, n).to(ctop).t()).to(at::kFloat);
}

// g [rows, hidden] += dz [rows, n] times lm_head's rows [a, a + n): the loss's gradient at the
// hidden states; in bfloat16 under mixed precision (the backward product autocast would run).
void Step::addChunkGradient(at::Tensor& g, const at::Tensor& dz, std::int64_t a, std::int64_t n) const {
    if (!mixed()) {
        g.addmm_(dz, lmChunk(a, n));
        return;
    }
    const auto ctop = copts.device(top);
    g.add_(at::mm(dz.to(ctop), original.lmHead.narrow(0, a, n).to(ctop)));
}

// Cross-entropy of the student against the next token of the data (paper Table 8's "CE";
// SpinQuant's objective), mean over the B·(T−1) predicted tokens, at temperature 1. Its
// gradient w.r.t. the logits is softmax − one-hot, formed a vocabulary chunk at a time.
double Step::crossEntropyTop(const at::Tensor& u, at::Tensor& gradU) {
    at::NoGradGuard g;
    const auto gamma = original.finalNorm.to(topts);
    const auto uv = u.detach();
    const std::int64_t B = tokens.size(0);
    const auto next =
        at::cat({tokens.narrow(1, 1, T - 1), at::full({B, 1}, -1, tokens.options())}, 1).reshape({N}).to(top, at::kLong);
    const auto valid = next.ge(0).to(at::kFloat).unsqueeze(1);
    const double M = double(B * (T - 1));
    at::Tensor lseQ = at::full({N}, -std::numeric_limits<float>::infinity(), topts);
    for (std::int64_t a = 0; a < V; a += kVocabChunk) {
        const std::int64_t n = std::min(kVocabChunk, V - a);
        lseQ = at::logaddexp(lseQ, at::logsumexp(logits(uv, lmChunk(a, n) * gamma, biasChunk(a, n)), -1));
    }
    at::Tensor ceSum = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(top));
    for (std::int64_t a = 0; a < V; a += kVocabChunk) {
        const std::int64_t n = std::min(kVocabChunk, V - a);
        const auto wg = lmChunk(a, n) * gamma;
        const auto z = logits(uv, wg, biasChunk(a, n));
        const auto inChunk = next.ge(a).logical_and(next.lt(a + n)).to(at::kFloat).unsqueeze(1);
        const auto local = (next - a).clamp(0, n - 1).unsqueeze(1);
        const auto oneHot = at::zeros_like(z).scatter_(1, local, inChunk);
        ceSum -= (z.gather(1, local) * inChunk).sum().to(at::kDouble); // − the target's logit
        gradU.addmm_(((z - lseQ.unsqueeze(1)).exp() * valid - oneHot) / M, wg);
    }
    ceSum += (lseQ.unsqueeze(1) * valid).sum().to(at::kDouble);
    return ceSum.item<double>() / M;
}

// KL(p‖q) per token = lse_q − lse_p + Σ p (a − b)/τ with a, b the teacher's and student's
// logits; its gradient w.r.t. b is (q − p)/τ, so the logits are never formed whole and no
// [tokens, vocab] tensor is kept for the backward pass. γ goes on the hidden states instead of
// on lm_head's rows ((u ⊙ γ) Wᵀ = u (W diag γ)ᵀ), so the table is read as it is; the gradient
// is then ((q − p) W) ⊙ γ.
double Step::klTop(const at::Tensor& u, at::Tensor& gradU) {
    at::NoGradGuard g;
    const auto gamma = original.finalNorm.to(topts);
    const auto ug = u.detach() * gamma;
    const float inf = std::numeric_limits<float>::infinity();
    KlSums s;
    s.lseP = at::full({N}, -inf, topts);
    s.lseQ = s.lseP.clone();
    s.mass = at::zeros({N}, topts);
    s.meanD = s.mass.clone();
    s.expD = s.mass.clone();
    if (top.is_cpu())
        klLogitsCpu(ug, gradU, s);
    else
        klLogitsBlocks(ug, gradU, s);
    gradU.mul_(gamma);
    auto perToken = s.meanD / s.mass + at::log1p(s.expD / s.mass);
    perToken = at::where(at::isfinite(perToken), perToken, s.meanD - (s.lseP - s.lseQ) * s.mass);
    return perToken.to(at::kDouble).sum().item<double>() / double(N);
}

// On the CPU, one kernel instead of klLogitsBlocks' passes (train/KlKernelCpu.h): the logits of a
// token block over the whole vocabulary go into two [block, V] buffers, chunk by chunk of
// lm_head; the kernel leaves (q − p)/(τN) in the teacher's buffer for the gradient. 1/τ is
// applied to the hidden states (nothing to do at τ = 1).
void Step::klLogitsCpu(const at::Tensor& ug, at::Tensor& gradU, KlSums& s) {
    const double invTau = 1.0 / tau;
    // The two buffers within the memory the chunked form held (6 chunk-widths per token,
    // run/quantize/MemoryEstimate's trainTopBytes) and 128 MiB each: longer products than the ATen path's
    // 16 MiB blocks (brownpy-13M: all 1024 tokens of a 4 × 256 batch in one block, the loss
    // 0.35 → 0.29 s), the same 256 tokens at a 128k vocabulary.
    const std::int64_t width = std::min(kVocabChunk, V);
    const std::int64_t rowsCpu = std::max<std::int64_t>(1, std::min({N, 3 * N * width / V, (std::int64_t(128) << 20) / (4 * V)}));
    at::Tensor za = at::empty({rowsCpu, V}, topts), zb = at::empty({rowsCpu, V}, topts);
    at::Tensor stats = at::empty({5, N}, topts); // lse_p, lse_q, mass, meanD, expD
    for (std::int64_t r0 = 0; r0 < N; r0 += rowsCpu) {
        const std::int64_t nr = std::min(rowsCpu, N - r0);
        at::Tensor tb = teacherNormed.narrow(0, r0, nr), sb = ug.narrow(0, r0, nr);
        if (tau != 1.0) tb = tb * invTau, sb = sb * invTau;
        auto zaB = za.narrow(0, 0, nr), zbB = zb.narrow(0, 0, nr);
        // The teacher's logits, then the student's: timed apart so that `bench train` counts
        // each model's lm_head product on its own side, as an eager forward does.
        auto logitsInto = [&](at::Tensor& z, const at::Tensor& h) {
            for (std::int64_t a = 0; a < V; a += kVocabChunk) {
                const std::int64_t n = std::min(kVocabChunk, V - a);
                const auto bias = biasChunk(a, n);
                auto o = z.narrow(1, a, n);
                if (mixed())
                    o.copy_(chunkLogits(h, a, n));
                else
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
        for (std::int64_t a = 0; a < V; a += kVocabChunk) {
            const std::int64_t n = std::min(kVocabChunk, V - a);
            addChunkGradient(gb, zaB.narrow(1, a, n), a, n);
        }
        r.lossGradientSeconds += since(tGradient);
    }
    s = {stats[0], stats[1], stats[2], stats[3], stats[4]};
}

// On a GPU: token blocks whose logits over the whole vocabulary (teacher's and student's) stay
// in memory between the log-sum-exp pass and the KL pass, so each of the three vocabulary
// products (teacher, student, gradient) runs once, where vocabulary chunks alone recomputed both
// models' logits (five products). A block holds 2·V logits per token plus a chunk's temporaries,
// within the 6 chunk-widths per token the chunked form held (run/quantize/MemoryEstimate's
// trainTopBytes); in place where a temporary can be reused. Blocks of at most 256 tokens also
// keep each chunk's [tokens, 16384] float32 temporaries at 16 MiB, under glibc's largest mmap
// threshold (32 MiB): freed, they stay in the heap for the next block and step instead of being
// unmapped and faulted in again (3 in 4 of the step's page faults at brownpy-13M 4 x 256).
void Step::klLogitsBlocks(const at::Tensor& ug, at::Tensor& gradU, KlSums& s) {
    const std::int64_t width = std::min(kVocabChunk, V);
    const std::int64_t block =
        std::max<std::int64_t>(1, std::min({N, 6 * N * width / (2 * V + 4 * width), (std::int64_t(16) << 20) / (4 * width)}));
    for (std::int64_t r0 = 0; r0 < N; r0 += block) {
        const std::int64_t nr = std::min(block, N - r0);
        const auto tb = teacherNormed.narrow(0, r0, nr), sb = ug.narrow(0, r0, nr);
        auto lp = s.lseP.narrow(0, r0, nr), lq = s.lseQ.narrow(0, r0, nr);
        std::vector<at::Tensor> ra, rb; // per vocabulary chunk: [nr, n] logits
        for (std::int64_t a = 0; a < V; a += kVocabChunk) {
            const std::int64_t n = std::min(kVocabChunk, V - a);
            const auto b = biasChunk(a, n);
            ra.push_back(b.defined() ? chunkLogits(tb, a, n) + b : chunkLogits(tb, a, n));
            rb.push_back(b.defined() ? chunkLogits(sb, a, n) + b : chunkLogits(sb, a, n));
            lp.copy_(at::logaddexp(lp, at::logsumexp(ra.back() / tau, -1)));
            lq.copy_(at::logaddexp(lq, at::logsumexp(rb.back() / tau, -1)));
        }
        auto gb = gradU.narrow(0, r0, nr);
        for (std::size_t k = 0; k < ra.size(); ++k) {
            const std::int64_t a = static_cast<std::int64_t>(k) * kVocabChunk, n = std::min(kVocabChunk, V - a);
            auto d = (ra[k] - rb[k]).div_(tau); // close logits: the subtraction is exact (Sterbenz)
            const auto p = ra[k].div_(tau).sub_(lp.unsqueeze(1)).exp_(); // ra[k] becomes p
            const auto q = rb[k].div_(tau).sub_(lq.unsqueeze(1)).exp_(); // rb[k] becomes q
            s.mass.narrow(0, r0, nr).add_(p.sum(1));
            s.meanD.narrow(0, r0, nr).add_((p * d).sum(1));
            s.expD.narrow(0, r0, nr).add_(d.neg_().expm1_().mul_(p).sum(1));
            addChunkGradient(gb, q.sub_(p).div_(tau * double(N)), a, n);
            ra[k] = rb[k] = at::Tensor(); // freed as the pass goes
        }
    }
}

// Each layer, last to first, recomputed with its graph from its saved input (or its kept graph),
// differentiated against the gradient reaching its output; block MSE adds its term here.
// Returns the gradient reaching the embedding rows.
at::Tensor Step::backwardLayers(at::Tensor gradOut) {
    const bool blockMse = objective == Objective::BlockMse;
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
            auto mapped = out.to(at::kFloat).reshape({N, c.hiddenSize});
            const fold::AffineMatrices& t1d = leaf1On(d);
            if (t1d.defined()) mapped = at::matmul(t1d.v.defined() ? mapped - t1d.v : mapped, t1d.aInv.t());
            const auto target = teacherBlocks[static_cast<size_t>(l)].reshape({N, c.hiddenSize}).to(fopts.device(d));
            teacherBlocks[static_cast<size_t>(l)] = at::Tensor();
            const auto term = (mapped - target).pow(2).mean() / double(c.numLayers);
            mseSum += term.item<double>();
            (gradOut.defined() ? term + (out * gradOut.to(out.options())).sum() : term).backward();
        } else {
            out.backward(gradOut.to(out.options())); // the top's float32 gradient meets bfloat16 layers
        }
        gradOut = xi.grad();
        model::releaseMappedLayer(original.layers[static_cast<size_t>(l)]);
    }
    return gradOut;
}

// The embedding rows' backward into T1's leaves, then every leaf's gradient (the copies' too)
// through T1's matrices (m1) to its parameters.
void Step::backwardT1(const at::Tensor& gradOut) {
    if (!leaf1.defined()) return;
    embedStudent().backward(gradOut.to(copts));
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

DistillLoss Step::run(double volumeWeight) {
    const auto t0 = Clock::now();
    teacherForward();
    r.teacherSeconds = since(t0);
    const auto t1 = Clock::now();

    // T1 once per step: its matrices with their graph (m1), and leaf copies every use below
    // differentiates against; their gradients go back through m1 at the end.
    m1 = transforms.t1Matrices();
    auto leafOf = [](const at::Tensor& t) { return t.defined() ? t.detach().requires_grad_(true) : t; };
    if (m1.defined()) leaf1 = {leafOf(m1.a), leafOf(m1.aInv), leafOf(m1.v)};
    rows = model::embedTokens(c, original, tokens).to(fopts).detach();
    const at::Tensor x = studentForward();

    // The top: final norm (γ folded into lm_head), A1⁻¹ on the hidden states (T1's bias is not
    // taken out here: lm_head gets no bias, fold/Fold.cpp), lm_head W·diag(γ) a vocabulary chunk at
    // a time, the loss and its gradient at the hidden states; then the backward pass from there.
    // Block MSE has no top: its terms are formed in backwardLayers.
    at::Tensor gradOut; // the gradient reaching the current layer's output
    Clock::time_point t2;
    const auto tLoss = Clock::now();
    if (objective != Objective::BlockMse) {
        const auto xTop = x.detach().to(top, at::kFloat).requires_grad_(true); // the top in float32
        auto u = model::rmsNorm(xTop, at::ones({c.hiddenSize}, topts), c.rmsNormEps).reshape({N, c.hiddenSize});
        const fold::AffineMatrices& t1Top = leaf1On(top);
        if (t1Top.defined()) u = at::matmul(u, t1Top.aInv.t());
        at::Tensor gradU = at::zeros({N, c.hiddenSize}, topts);
        r.objective = objective == Objective::CrossEntropy ? crossEntropyTop(u, gradU) : klTop(u, gradU);
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
    gradOut = backwardLayers(gradOut);
    if (objective == Objective::BlockMse) r.objective = mseSum;
    backwardT1(gradOut);
    const auto vol = transforms.volume().to(device);
    r.vol = vol.item<double>();
    if (volumeWeight != 0 && vol.requires_grad()) (vol * volumeWeight).backward();
    r.loss = r.objective + volumeWeight * r.vol;
    r.backwardSeconds = since(t2);
    return r;
}

} // namespace

DistillLoss distillationStep(const model::ModelConfig& c, const model::LlamaWeights& original,
                             const fold::ModelTransforms& transforms, const StudentQuantization& activation,
                             const at::Tensor& tokens, double tau, double volumeWeight, Objective objective,
                             std::optional<bool> keepLayerGraphs, const at::Tensor& teacherNormed,
                             at::ScalarType compute) {
    const bool keepGraphs = keepLayerGraphs ? *keepLayerGraphs : keepsLayerGraphs(c, tokens.size(0), tokens.size(1));
    return Step(c, original, transforms, activation, tokens, tau, objective, keepGraphs, teacherNormed, compute)
        .run(volumeWeight);
}

c10::Device lossDevice(const model::LlamaWeights& original, c10::Device tokensDevice) {
    return original.lmHead.device().is_cpu() ? tokensDevice : original.lmHead.device();
}

at::Tensor teacherNormedStates(const model::ModelConfig& c, const model::LlamaWeights& original, const at::Tensor& tokens,
                               c10::Device device, at::ScalarType compute) {
    model::ForwardOptions teacherOptions;
    teacherOptions.dtype = compute;
    at::NoGradGuard g;
    const auto gamma = original.finalNorm.to(at::TensorOptions().dtype(at::kFloat).device(device));
    // A window at a time: a matrix product's rows depend on how many rows it multiplies at once
    // (BLAS blocking), so a window's states are the same bits whichever batch draws it, and
    // distill may keep them from one draw to the next (teacherCacheBytes).
    std::vector<at::Tensor> windows;
    for (int64_t b = 0; b < tokens.size(0); ++b) {
        const auto h = model::forwardHidden(c, original, teacherOptions, tokens.narrow(0, b, 1)).to(device, at::kFloat);
        windows.push_back(model::rmsNorm(h, gamma, c.rmsNormEps).reshape({tokens.size(1), c.hiddenSize}));
    }
    return windows.size() == 1 ? windows.front() : at::cat(windows, 0);
}

} // namespace latmix::train
