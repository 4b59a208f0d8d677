#include "train/TransformAnalysis.h"

#include "io/ActivationStore.h"
#include "model/Capture.h"
#include "model/LlamaModel.h"
#include "transforms/Blockwise.h"
#include "transforms/Wush.h"
#include "util/Text.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <stdexcept>

namespace latmix::train {
namespace {

// (layer, position in the layer) of a point name as model::pointName writes it, so that points
// read from a run file (stored alphabetically) come out in the order the model computes them.
std::pair<int, int> modelOrder(const std::string& point) {
    static const char* kinds[] = {"self_attn.qkv", "self_attn.o_proj", "mlp.gate_up", "mlp.down_proj"};
    const int layer = point.rfind("layers.", 0) == 0 ? std::atoi(point.c_str() + 7) : 0;
    for (int k = 0; k < 4; ++k)
        if (point.find(kinds[k]) != std::string::npos) return {layer, k};
    return {layer, 4};
}

bool isBlockKind(const std::string& kind) {
    return kind == "block-hadamard" || kind == "block-orthogonal" || kind == kWushKind;
}

// WUSH at a point (SPEC §2): its closed form from the point's activations x and the weights that
// read the point, block by block of `block`.
std::unique_ptr<transforms::AffineTransform> wushAt(const std::string& point, const at::Tensor& x, std::int64_t block,
                                                    const AnalysisOptions& o) {
    const auto w = o.pointWeights.find(point);
    if (w == o.pointWeights.end() || !w->second.defined())
        throw std::invalid_argument("wush needs the weights that read " + point +
                                    " besides its activations: analyze a model folder (--model), not an activation file");
    transforms::BlockMoments moments(x.size(1), block);
    moments.add(x);
    auto t = transforms::wushTransform(moments.mean(), w->second, point);
    std::string note = util::joinList(t.notes, "; ");
    auto m = std::make_unique<transforms::MatrixTransform>("wush(" + std::to_string(block) + ")", std::move(t.forward),
                                                           std::move(t.inverse), note);
    if (!x.device().is_cpu()) m->to(x.device());
    return m;
}

// The transform of a kind at a point: WUSH from its data, every other kind from makeTransform.
std::unique_ptr<transforms::AffineTransform> buildKind(const std::string& point, const at::Tensor& x, const std::string& kind,
                                                       const transforms::TransformOptions& to, const AnalysisOptions& o) {
    if (kind == kWushKind) return wushAt(point, x, to.blockSize, o);
    auto t = transforms::makeTransform(kind, x.size(1), to);
    if (!x.device().is_cpu()) t->to(x.device()); // transforms are built on the CPU
    return t;
}

at::Tensor cpuDouble(const at::Tensor& t) { return t.defined() ? t.detach().to(at::kCPU).to(at::kDouble) : t; }

// Paper Fig. 2a: the block transform follows the MX block size; other transforms stay as built.
std::vector<metrics::SweepPoint> sweep(const std::string& point, const at::Tensor& x, const transforms::AffineTransform& t,
                                       const std::string& kind, const AnalysisOptions& o) {
    if (!isBlockKind(kind)) return metrics::blockSizeSweep(x, t, o.mx, o.sweepBlocks);
    std::vector<metrics::SweepPoint> out;
    for (int b : o.sweepBlocks) {
        transforms::TransformOptions to = o.transform;
        to.blockSize = b;
        to.dtype = at::kDouble;
        auto tb = buildKind(point, x, kind, to, o);
        auto one = metrics::blockSizeSweep(x, *tb, o.mx, {b});
        out.insert(out.end(), one.begin(), one.end());
    }
    return out;
}

// T3's block (SPEC §4): the online block Hadamard on the down_proj input.
constexpr std::int64_t kT3Block = 32;

AnalysisEntry analyzeOne(const std::string& point, const at::Tensor& x, const std::string& kind,
                         const AnalysisOptions& o, JobContext& job) {
    AnalysisEntry e;
    e.point = point;
    e.kind = kind;
    e.learned = transforms::isLearnedKind(kind);
    const auto start = std::chrono::steady_clock::now();
    try {
        transforms::TransformOptions to = o.transform;
        to.blockSize = o.mx.blockSize;
        // Fixed matrices in float64 so that the metrics see them exactly (an orthogonal matrix
        // rounded to float32 is 1e-7 off orthogonal); learned ones train in the requested dtype.
        if (!e.learned) to.dtype = at::kDouble;
        e.learnedBlock = e.learned ? learnedBlockAt(point, x.size(1), o) : 0;
        std::unique_ptr<transforms::AffineTransform> t;
        if (e.learnedBlock > 0) {
            t = std::make_unique<transforms::BlockwiseTransform>(kind, x.size(1), e.learnedBlock, to);
            if (!x.device().is_cpu()) t->to(x.device());
        } else {
            t = buildKind(point, x, kind, to, o);
        }
        if (e.learned) {
            LayerLocalOptions lo = o.training;
            lo.mx = o.mx;
            e.training = LayerLocalTrainer(lo).train(*t, x, job, point);
        }
        at::NoGradGuard noGrad;
        e.report = metrics::analyzeTransform(point, x, *t, o.mx, {});
        e.report.sweep = sweep(point, x, *t, kind, o);
        if (e.learned) {
            if (const auto* blocks = e.learnedBlock > 0 ? t->blockStructure() : nullptr) {
                e.matrixBlocks = cpuDouble(blocks->blocks());
                e.matrixTail = cpuDouble(blocks->tail());
            } else {
                e.matrix = cpuDouble(t->matrix());
            }
            e.bias = cpuDouble(t->bias());
            e.logAbsScales = cpuDouble(t->logAbsScales());
        }
    } catch (const JobCancelled&) {
        throw;
    } catch (const std::exception& ex) {
        // SPEC §2: e.g. no Hadamard matrix of this width. The table shows it; the rest goes on.
        e.error = ex.what();
    }
    e.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return e;
}

} // namespace

std::int64_t learnedBlockAt(const std::string& point, std::int64_t dim, const AnalysisOptions& o) {
    if (!o.learnedAsMethod) return 0;
    auto endsWith = [&](const char* tail) {
        const std::string t(tail);
        return point.size() >= t.size() && point.compare(point.size() - t.size(), t.size(), t) == 0;
    };
    std::int64_t block = 0;
    if (endsWith("down_proj.input")) block = kT3Block;                        // T3, an expert's too
    else if (endsWith("self_attn.o_proj.input") && o.headDim > 0) block = o.headDim; // T2, per head
    return block > 0 && block < dim ? block : 0;                                // T1: full
}

PointActivations captureActivationsInMemory(const model::LlamaModel& model, const std::vector<int>& calibrationIds,
                                            const std::string& pointsRegex, int samples, int seqLen,
                                            std::uint64_t seed, std::int64_t maxRows, bool expertPoints,
                                            JobContext& job) {
    const auto names = model::capturePoints(model.config(), pointsRegex, expertPoints, "of the model");
    const auto windows = model::sampleCalibrationWindows(calibrationIds, samples, seqLen, seed);
    std::map<std::string, std::vector<at::Tensor>> parts;
    model::captureWindows(
        model, windows, names,
        [&](std::size_t, const std::string& point, const at::Tensor& rows) {
            parts[point].push_back(rows.to(at::kCPU).to(at::kFloat));
        },
        job, [&](std::size_t done) { return maxRows > 0 && static_cast<std::int64_t>(done) * seqLen >= maxRows; },
        // Windows together up to 4096 tokens: a bf16 checkpoint's layers are converted once per
        // pass, not once per window (the views' 8 × 64 tokens: one pass).
        4096);
    PointActivations out;
    for (const auto& name : names) {
        const auto got = parts.find(name);
        if (got == parts.end()) // only an expert's point can go without rows: no token chose the expert
            throw std::runtime_error("no calibration token was routed to the expert of " + name + " in " +
                                     std::to_string(windows.size()) + " windows of " + std::to_string(seqLen) +
                                     " tokens: choose another expert (the experts view and `latmix experts` show "
                                     "each expert's tokens) or take more windows");
        auto x = at::cat(got->second, 0);
        if (maxRows > 0 && x.size(0) > maxRows) x = x.narrow(0, 0, maxRows);
        out.emplace_back(name, x.contiguous());
    }
    return out;
}

PointActivations readActivations(const std::string& runFile, const std::string& pointsRegex, std::int64_t maxRows) {
    const io::ActivationReader reader(runFile);
    // Keep the model's order (layer, then kind) when the names are the usual ones.
    auto names = model::matchingPoints(reader.points(), pointsRegex, "in '" + runFile + "'");
    std::stable_sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
        return modelOrder(a) < modelOrder(b);
    });
    PointActivations out;
    for (const auto& name : names) out.emplace_back(name, reader.read(name, maxRows));
    return out;
}

std::vector<std::string> analysisKinds() {
    auto k = transforms::transformKinds();
    k.push_back(kWushKind);
    return k;
}

void validateAnalysisOptions(const AnalysisOptions& o) {
    o.mx.validate();
    const auto known = analysisKinds();
    if (o.kinds.empty()) throw std::invalid_argument("no transforms to analyze");
    for (const auto& k : o.kinds)
        if (std::find(known.begin(), known.end(), k) == known.end())
            throw std::invalid_argument("unknown transform '" + k + "'; choose from " + util::joinList(known));
    for (int b : o.sweepBlocks)
        if (b < 1 || (b & (b - 1)) != 0)
            throw std::invalid_argument("sweep block size " + std::to_string(b) + " is not a power of two");
    LayerLocalOptions lo = o.training;
    lo.mx = o.mx;
    LayerLocalTrainer check(lo); // throws on bad training settings
    (void)check;
}

AnalysisResult analyzeTransforms(const PointActivations& activations, const AnalysisOptions& o, JobContext& job) {
    validateAnalysisOptions(o);
    for (const auto& [point, x] : activations) metrics::requireFiniteActivations(x, point);

    // Progress weights in multiply-adds, so that the ETA holds across kinds and widths (issue 71:
    // it said 14 s for 8 minutes when each transform had an equal share): a product with A costs
    // rows·d·w, w the width A mixes (1 for none, log2 d for the fast Hadamard, the block for the
    // block kinds and blockwise learned ones, d for a dense A); the metrics take ~2 products a
    // sweep size, a training step ~6 on a minibatch, the best-iterate checks 2 on all rows each.
    auto weight = [&](const std::string& point, const at::Tensor& x, const std::string& kind) {
        const double rows = double(x.size(0)), d = double(x.size(1));
        const bool learned = transforms::isLearnedKind(kind);
        double w = d;
        if (kind == "none") w = 1;
        else if (kind == "hadamard") w = std::log2(std::max(2.0, d));
        else if (isBlockKind(kind)) w = double(std::min<std::int64_t>(x.size(1), o.mx.blockSize));
        else if (learned && learnedBlockAt(point, x.size(1), o) > 0) w = double(learnedBlockAt(point, x.size(1), o));
        const double eval = 2.0 * (double(o.sweepBlocks.size()) + 2.0) * rows * d * w;
        if (!learned) return eval;
        const double batch = std::min(rows, double(o.training.batchRows));
        return eval + double(o.training.steps) * 6.0 * batch * d * w + 11.0 * 2.0 * rows * d * w;
    };
    double total = 0;
    for (const auto& [point, x] : activations)
        for (const auto& k : o.kinds) total += weight(point, x, k);

    const auto start = std::chrono::steady_clock::now();
    AnalysisResult r;
    double done = 0;
    for (const auto& [point, xCpu] : activations) {
        const at::Tensor x = xCpu.to(o.device);
        r.points.push_back({point, {x.size(0), x.size(1)}});
        for (const auto& kind : o.kinds) {
            job.checkCancelled();
            const double w = weight(point, xCpu, kind);
            SubJob sub(job, done / total, (done + w) / total, point + " " + kind + " ");
            sub.progress(0.0, "started");
            r.entries.push_back(analyzeOne(point, x, kind, o, sub));
            done += w;
            job.progress(done / total, point + " " + kind + " done");
        }
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return r;
}

} // namespace latmix::train
