#include "run/quantize/LayerQuantizer.h"

#include "dist/ProcessGroup.h"
#include "io/SafeTensors.h" // releaseMappedPages
#include "model/FusionGroups.h"
#include "model/Capture.h"
#include "model/TensorNames.h"
#include "transforms/Wush.h"
#include "util/OutOfMemory.h"
#include "util/Runtime.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <numeric>

namespace latmix::run {
namespace names = model::names;
namespace {

// Out of memory while quantizing a layer: the layer's activations of all calibration windows are
// on the device at once (GPTQ's Hessians need them); the run folder has no latmix.json yet.
const std::vector<util::Remedy> kLayerRemedies = {{"offload", "", "", "(one layer on the device at a time)"},
                                                   {"calib_samples", "", "fewer", ""}};
constexpr int kWindowChunk = 8; // calibration windows through a layer at once

} // namespace

struct LayerQuantizer::Linear {
    std::string name;  // the module after the layer prefix: "self_attn.q_proj", "mlp.experts.3.up_proj"
    at::Tensor* w;
    std::string point; // the input point whose Hessian it takes
    int width;         // that point's width
    int expert = -1;   // the expert it belongs to in a sparse layer
    bool kept = false; // --keep: left in full precision
    mx::MxConfig format; // its weights' format: --format, or its fusion group's under --scheme
};

namespace {

// The shapes [out, in] of a layer's linears (linearOwners).
template <class Linear>
std::vector<std::array<std::int64_t, 2>> shapesOf(const std::vector<Linear>& linears) {
    std::vector<std::array<std::int64_t, 2>> r;
    for (const auto& lin : linears) r.push_back({lin.w->size(0), lin.w->size(1)});
    return r;
}

} // namespace

LayerQuantizer::LayerQuantizer(const RunContext& ctx, const ModelToQuantize& source, const at::Tensor& calib,
                               QuantizeResult& result)
    : ctx(ctx), source(source), result(result), rope(model::ropeTables(ctx.config(), ctx.seqLen, at::kFloat, ctx.device)) {
    options = source.options;
    options.activationQuant = ctx.options.format;
    options.keptLinears = std::set<std::string>(ctx.resolved.keptLinears.begin(), ctx.resolved.keptLinears.end());
    // --scheme: the groups in another format, their weights here and their inputs in the forward.
    linearFormats = model::groupLinearFormats(ctx.config(), ctx.resolved.groupFormats);
    options.pointQuant = model::groupPointFormats(ctx.config(), ctx.resolved.groupFormats);
    if (ctx.method().wush) options.inputTransforms.resize(static_cast<std::size_t>(ctx.config().numLayers));
    group = ctx.parallel() ? ctx.hooks.group.get() : nullptr;
    // The linears' cost model by device kind, the same on every rank (owners are computed apart).
    costOnGpu = ctx.device.is_cuda();
    if (group) {
        const at::Tensor gpus = at::full({1}, costOnGpu ? 1.0 : 0.0, at::TensorOptions().dtype(at::kDouble));
        group->allreduceSum({gpus});
        costOnGpu = gpus.item<double>() == group->size();
    }
    // GPTQ needs every window's Hessians; RTN none (its error then in weight space) unless
    // --rtn-error-windows asks for the output-space error over the first windows. NVFP4 inputs
    // need their largest value over the calibration windows (the static input_global_scale
    // compressed-tensors runtimes read, as llm-compressor calibrates it): then the windows pass
    // the layers for RTN too (all of them; the first --rtn-error-windows where it asks for those).
    int64_t n = std::min<int64_t>(calib.size(0), weightQuantizationWindows(ctx.method(), ctx.options));
    calibrated = n > 0;
    bool nvfp4 = ctx.options.format.isNvfp4();
    for (const auto& [group, format] : ctx.resolved.groupFormats) nvfp4 = nvfp4 || format.isNvfp4();
    if (!calibrated && nvfp4) n = calib.size(0);
    flowing = n > 0;
    if (!flowing) return;
    layerTokens = n * calib.size(1); // every window's tokens pass every layer (all ranks)
    // This rank's windows: a contiguous share of the calibration windows (all of them alone).
    const int64_t world = group ? group->size() : 1, rank = group ? group->rank() : 0;
    const at::Tensor mine = calib.narrow(0, n * rank / world, n * (rank + 1) / world - n * rank / world);
    h = model::embedTokens(ctx.config(), source.weights, mine.to(source.weights.embed.device())).to(ctx.fopts).detach();
}

std::map<std::string, at::Tensor> LayerQuantizer::topLevel() const {
    std::map<std::string, at::Tensor> top;
    for (const auto& [name, t] : model::namedTensors(source.config, source.weights))
        if (names::layerOf(name) < 0) top[name] = t;
    return top;
}

// Data parallel: every rank stops at the same layer when any rank's job was cancelled.
void LayerQuantizer::agreeOnCancel(JobContext& job) {
    if (!group) return job.checkCancelled();
    const at::Tensor stop = at::full({1}, job.cancelRequested() ? 1.0 : 0.0, at::TensorOptions().dtype(at::kDouble));
    group->allreduceSum({stop});
    if (stop.item<double>() > 0) throw JobCancelled();
}

// The Hessians of the layer's input points from this rank's windows (summed over the ranks).
LayerQuantizer::Hessians LayerQuantizer::collectHessians(int l, const model::LayerWeights& y,
                                                         const std::vector<Linear>& linears) {
    Hessians acc;
    pointAmax.clear();
    if (!flowing) return acc;
    for (const Linear& lin : linears) {
        if (lin.kept) continue;
        if (calibrated && !acc.count(lin.point)) acc[lin.point] = std::make_unique<quant::HessianAccumulator>(lin.width);
        if (lin.format.isNvfp4()) pointAmax[lin.point] = 0.0f;
    }
    guardMemory("the calibration forward of layer " + std::to_string(l) + " (GPTQ Hessians)", kLayerRemedies, "", [&] {
        at::NoGradGuard g;
        for (int64_t b = 0; b < h.size(0); b += kWindowChunk) {
            const auto hb = h.narrow(0, b, std::min<int64_t>(kWindowChunk, h.size(0) - b));
            model::decoderLayer(source.config, y, options, hb, rope, l, [&](const std::string& point, const at::Tensor& a) {
                // The weights were checked at load: NaN/Inf here comes from the activations (an
                // overflow, a broken transform), named by point.
                auto overflow = [&](const std::string& what) {
                    return std::runtime_error("calibration windows " + std::to_string(b) + ".." +
                                              std::to_string(b + hb.size(0) - 1) + " at " + point + ": " + what +
                                              "; the folded model overflows there: try --device cpu (float32), or a "
                                              "method without learned transforms to see whether the transforms cause it");
                };
                if (const auto m = pointAmax.find(point); m != pointAmax.end() && a.numel() > 0) {
                    const float amax = a.abs().max().item<float>();
                    if (!std::isfinite(amax)) throw overflow("the activations are not finite");
                    m->second = std::max(m->second, amax);
                }
                const auto it = acc.find(point);
                if (it == acc.end()) return a;
                try {
                    it->second->add(a); // refuses NaN/Inf, naming the first one
                } catch (const std::invalid_argument& e) {
                    throw overflow(e.what());
                }
                return a;
            });
        }
    });
    if (group) {
        for (auto& [point, a] : acc) a->reduce([&](const at::Tensor& t) { group->allreduceSum({t}); });
        if (!pointAmax.empty()) { // every rank holds the same points (the layer's linears)
            at::Tensor m = at::empty({static_cast<int64_t>(pointAmax.size())}, at::kDouble);
            int64_t i = 0;
            for (const auto& [point, v] : pointAmax) m[i++].fill_(double(v));
            group->allreduceMax({m});
            i = 0;
            for (auto& [point, v] : pointAmax) v = static_cast<float>(m[i++].item<double>());
        }
    }
    pointRows.clear();
    for (const auto& [point, a] : acc) pointRows[point] = a->rows();
    return acc;
}

// An expert whose share of the layer's calibration tokens is below kStarvedShare.
bool LayerQuantizer::starved(const Linear& lin) const {
    if (lin.expert < 0 || !calibrated) return false;
    return double(pointRows.at(lin.point)) < kStarvedShare * double(layerTokens);
}

// The block linears of layer l with the point each reads: q/k/v, o_proj, and gate/up/down of the
// dense MLP or of every expert.
std::vector<LayerQuantizer::Linear> LayerQuantizer::layerLinears(int l, model::LayerWeights& y) const {
    const model::ModelConfig& c = source.config;
    using K = model::PointKind;
    const auto point = [&](K k) { return model::pointName(l, k); };
    const int hidden = c.hiddenSize, heads = c.numHeads * c.headDim;
    std::vector<Linear> r = {{names::kQProj, &y.wq, point(K::QkvInput), hidden},
                             {names::kKProj, &y.wk, point(K::QkvInput), hidden},
                             {names::kVProj, &y.wv, point(K::QkvInput), hidden},
                             {names::kOProj, &y.wo, point(K::OProjInput), heads}};
    if (!y.router.defined()) {
        r.push_back({names::kGateProj, &y.wGate, point(K::GateUpInput), hidden});
        r.push_back({names::kUpProj, &y.wUp, point(K::GateUpInput), hidden});
        r.push_back({names::kDownProj, &y.wDown, point(K::DownProjInput), c.intermediateSize});
        markLinears(l, r);
        return r;
    }
    using E = names::ExpertLinear;
    for (int e = 0; e < static_cast<int>(y.experts.size()); ++e) {
        model::ExpertWeights& x = y.experts[static_cast<size_t>(e)];
        const std::string in = model::expertPointName(l, e, K::GateUpInput), down = model::expertPointName(l, e, K::DownProjInput);
        r.push_back({names::expertModule(c, e, E::Gate), &x.wGate, in, hidden, e});
        r.push_back({names::expertModule(c, e, E::Up), &x.wUp, in, hidden, e});
        r.push_back({names::expertModule(c, e, E::Down), &x.wDown, down, c.moe->expertWidth, e});
    }
    markLinears(l, r);
    return r;
}

// Which of layer l's linears are kept (--keep, a scheme's bf16 groups) and each one's format.
void LayerQuantizer::markLinears(int l, std::vector<Linear>& linears) const {
    for (Linear& lin : linears) {
        const std::string module = names::layerPrefix(l) + lin.name;
        lin.kept = options.keptLinears.count(module) != 0;
        const auto own = linearFormats.find(module);
        lin.format = own != linearFormats.end() ? own->second : ctx.options.format;
    }
}

// GPTQ or RTN of this rank's linears of layer l; the others' are left empty.
std::vector<quant::QuantizedWeight> LayerQuantizer::quantizeLinears(int l, const std::vector<Linear>& linears,
                                                                    Hessians& acc, std::vector<double>& seconds,
                                                                    JobContext& job) {
    const QuantizeOptions& o = ctx.options;
    const bool gptq = ctx.method().gptq;
    const int rank = group ? group->rank() : 0;
    const LinearCostModel model{gptq, costOnGpu, o.gptq.columnBlock, threadCount()};
    const std::vector<int> owner = linearOwners(shapesOf(linears), group ? group->size() : 1, model);
    std::vector<quant::QuantizedWeight> done(linears.size());
    seconds.assign(linears.size(), 0.0);
    // This rank's progress through the layer, by each linear's rough cost.
    std::vector<double> cost(linears.size(), 0.0);
    for (std::size_t li = 0; li < linears.size(); ++li)
        if (owner[li] == rank) cost[li] = linearSeconds(linears[li].w->size(0), linears[li].w->size(1), model);
    const double total = std::accumulate(cost.begin(), cost.end(), 0.0);
    const std::vector<float> globals = fusedGlobalScales(linears);
    double before = 0;
    int quantizedHere = 0;
    for (std::size_t li = 0; li < linears.size(); ++li) {
        const Linear& lin = linears[li];
        if (owner[li] != rank) continue;
        job.progress(total > 0 ? before / total : 0.0, lin.name);
        before += cost[li];
        if (!group) job.checkCancelled(); // ranks agree on a cancel between layers only
        // The last linear of this rank reading a point takes its Hessian (no copy): at the
        // intermediate width a float64 Hessian is 0.5 GiB at 1B, 1.5 GiB at 8B.
        bool lastAtPoint = true;
        for (std::size_t lj = li + 1; lj < linears.size(); ++lj)
            if (linears[lj].point == lin.point && owner[lj] == rank && !linears[lj].kept) lastAtPoint = false;
        const auto t0 = std::chrono::steady_clock::now();
        const std::string prefix = names::layerPrefix(l) + lin.name;
        if (lin.kept) { // --keep: bf16, as every export stores it; no packed weight
            done[li].dequantized = lin.w->to(at::kBFloat16).to(at::kFloat);
            done[li].relativeError = (done[li].dequantized - *lin.w).square().sum().item<double>() /
                                     std::max(lin.w->square().sum().item<double>(), 1e-300);
            seconds[li] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            adoptResult(lin, done[li]);
            continue;
        }
        try {
            done[li] = guardMemory(std::string(gptq ? "GPTQ" : "RTN") + " of " + prefix + ".weight (layer " +
                                       std::to_string(l) + ")",
                                   kLayerRemedies, "", [&] {
                                       // No rows at all (an expert no token reached): nothing to take.
                                       const bool rows = calibrated && acc[lin.point]->rows() > 0;
                                       const auto hess = !rows        ? at::Tensor()
                                                         : lastAtPoint ? acc[lin.point]->take()
                                                                       : acc[lin.point]->hessian();
                                       return gptq && !starved(lin)
                                                  ? quant::quantizeGptq(*lin.w, hess, lin.format, o.gptq, globals[li])
                                                  : quant::quantizeRtn(*lin.w, lin.format, hess, globals[li]);
                                   });
        } catch (const OutOfMemory&) {
            throw;
        } catch (const std::exception& e) {
            throw std::runtime_error(prefix + ".weight: " + e.what());
        }
        seconds[li] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        adoptResult(lin, done[li]);
        // The heaps' free pages back every kTrimEvery linears: the temporaries freed between kept
        // results leave holes the heap cannot reuse (util/Runtime.h: trimHeaps).
        if (++quantizedHere % kTrimEvery == 0) trimHeaps();
    }
    if (group)
        for (std::size_t li = 0; li < linears.size(); ++li) shareLinear(done[li], seconds[li], owner[li], *linears[li].w, linears[li].format);
    return done;
}

// NVFP4: the tensor scale g each linear is quantized with, 0 for its own. The quantized linears
// reading one point (q/k/v, gate/up, an expert's gate/up) are the ones vLLM fuses into one
// weight with one g (the largest; it warns and mis-scales the others when they differ), so they
// share the g of their weights taken together, as llm-compressor's
// update_fused_layer_weight_global_scales makes it (SPEC §6). Read before any is quantized.
std::vector<float> LayerQuantizer::fusedGlobalScales(const std::vector<Linear>& linears) const {
    std::vector<float> g(linears.size(), 0.0f);
    std::map<std::string, std::vector<std::size_t>> byPoint; // a point's linears share one format (a fusion group)
    for (std::size_t li = 0; li < linears.size(); ++li)
        if (!linears[li].kept && linears[li].format.isNvfp4()) byPoint[linears[li].point].push_back(li);
    for (const auto& [point, members] : byPoint) {
        if (members.size() < 2) continue;
        std::vector<at::Tensor> weights;
        for (std::size_t li : members) weights.push_back(*linears[li].w);
        const float shared = quant::sharedGlobalScale(weights);
        for (std::size_t li : members) g[li] = shared;
    }
    return g;
}

// The linear's original is not read again once it is quantized: the result takes its place in
// the layer now rather than when the layer is done, so that the layer is held once (a mapped
// original's pages leave, a converted copy is freed) and not beside every result and its group
// scales (at the Qwen3-30B-A3B shape a layer is 2.4 GiB in float32).
void LayerQuantizer::adoptResult(const Linear& lin, quant::QuantizedWeight& q) const {
    io::releaseMappedPages(*lin.w);
    *lin.w = q.dequantized.to(ctx.fopts);
    q.dequantized = at::Tensor();
    q.scales = at::Tensor();
}

// WUSH (SPEC §2) for layer l: the second moments of each point's input as the layer receives it
// (the earlier layers quantized, nothing transformed or quantized here yet), one T per point from
// them and the stacked weights that read it (the fused form; kept linears left out), W ← W T⁻¹
// for those linears and T online from now on (options.inputTransforms). In float64, the weights
// rounded once to float32. Returns the transforms by point name for the run model.
std::map<std::string, transforms::BlockDiagonal> LayerQuantizer::wushLayer(int l, model::LayerWeights& y,
                                                                          const std::vector<Linear>& linears) {
    const model::ModelConfig& c = source.config;
    const std::int64_t block = ctx.options.format.blockSize;
    std::map<std::string, transforms::BlockMoments> moments;
    for (const Linear& lin : linears)
        if (!lin.kept && lin.expert < 0 && !moments.count(lin.point)) moments.emplace(lin.point, transforms::BlockMoments(lin.width, block));
    model::ForwardOptions plain = options; // this layer's points as they come: no transform, no quantization
    plain.activationQuant.reset();
    plain.inputTransforms[static_cast<std::size_t>(l)] = {};
    guardMemory("the calibration forward of layer " + std::to_string(l) + " (WUSH's second moments)", kLayerRemedies, "", [&] {
        at::NoGradGuard g;
        for (int64_t b = 0; b < h.size(0); b += kWindowChunk)
            model::decoderLayer(c, y, plain, h.narrow(0, b, std::min<int64_t>(kWindowChunk, h.size(0) - b)), rope, l,
                                [&](const std::string& point, const at::Tensor& a) {
                                    const auto it = moments.find(point);
                                    if (it != moments.end()) it->second.add(a);
                                    return a;
                                });
    });
    std::map<std::string, transforms::BlockDiagonal> out;
    auto& slots = options.inputTransforms[static_cast<std::size_t>(l)];
    for (auto& [point, m] : moments) {
        if (group) m.reduce([&](const at::Tensor& t) { group->allreduceSum({t}); });
        int kind = 0;
        while (kind < 4 && model::pointName(l, static_cast<model::PointKind>(kind)) != point) ++kind;
        const auto w = model::pointWeights(c, y, l, static_cast<model::PointKind>(kind), options.keptLinears);
        auto t = transforms::wushTransform(m.mean(), w, point);
        for (auto& note : t.notes) result.notes.push_back(std::move(note));
        const auto inverseT = t.inverse.transposed().to(ctx.fopts.dtype(at::kDouble));
        for (const Linear& lin : linears)
            if (lin.point == point && !lin.kept)
                *lin.w = inverseT.apply(lin.w->to(at::kDouble)).to(ctx.fopts); // rows w ↦ w T⁻¹
        slots[static_cast<std::size_t>(kind)] = t.forward.to(ctx.fopts);
        out[point] = t.forward;
    }
    return out;
}

QuantizedLayer LayerQuantizer::quantizeLayer(int l, JobContext& job) {
    agreeOnCancel(job);
    // The layer on the device (float32) for this step. When that is a copy (a bf16 checkpoint, a
    // GPU), the stored pages are not read again; else they are the layer's and leave with each
    // linear's result (adoptResult), the rest at the end.
    const model::LayerWeights& stored = source.weights.layers[static_cast<size_t>(l)];
    model::LayerWeights y = model::convertLayer(stored, ctx.fopts);
    if (y.wq.defined() && !y.wq.is_same(stored.wq)) model::releaseMappedLayer(stored);
    const std::vector<Linear> linears = layerLinears(l, y);
    QuantizedLayer out;
    if (ctx.method().wush) out.inputTransforms = wushLayer(l, y, linears);
    auto hessians = collectHessians(l, y, linears);
    std::vector<double> seconds;
    std::vector<quant::QuantizedWeight> done = quantizeLinears(l, linears, hessians, seconds, job);
    hessians.clear();
    for (std::size_t li = 0; li < linears.size(); ++li) {
        const Linear& lin = linears[li];
        const std::string prefix = names::layerPrefix(l) + lin.name;
        if (done[li].dequantized.defined()) adoptResult(lin, done[li]); // another rank's (shareLinear)
        if (!lin.kept) out.packed[prefix] = std::move(done[li].packed);
        if (const auto m = pointAmax.find(lin.point); !lin.kept && m != pointAmax.end()) out.inputAmax[prefix] = m->second;
        LinearReport report{l, lin.name, done[li].relativeError, seconds[li]};
        report.kept = lin.kept;
        if (lin.expert >= 0 && calibrated) {
            report.tokens = pointRows.at(lin.point);
            report.roundedToNearest = ctx.method().gptq && starved(lin);
        }
        result.linears.push_back(report);
        done[li] = {};
    }
    if (flowing) guardMemory("the quantized forward of layer " + std::to_string(l), kLayerRemedies, "", [&] {
        at::NoGradGuard g;
        std::vector<at::Tensor> next;
        for (int64_t b = 0; b < h.size(0); b += kWindowChunk)
            next.push_back(model::decoderLayer(source.config, y, options,
                                               h.narrow(0, b, std::min<int64_t>(kWindowChunk, h.size(0) - b)), rope, l));
        if (!next.empty()) h = at::cat(next, 0); // a rank without windows keeps its empty h
    });
    model::releaseMappedLayer(stored);
    for (auto& [n, t] : model::namedLayerTensors(source.config, y, l)) out.tensors[n] = t;
    return out;
}

// Data parallel: the owner's quantized linear to every rank (its packed codes, from which the
// others unpack the quantized weight, its error and time).
void LayerQuantizer::shareLinear(quant::QuantizedWeight& q, double& seconds, int owner, const at::Tensor& w,
                                 const mx::MxConfig& format) {
    const bool mine = group->rank() == owner;
    const at::Tensor head = at::zeros({7}, at::TensorOptions().dtype(at::kDouble));
    if (mine) {
        const auto cs = q.packed.codes.sizes(), ss = q.packed.scales.sizes();
        if (cs.size() != 2 || ss.size() != 2) throw std::logic_error("quantize: packed codes of a linear are not 2-D");
        const double v[] = {double(cs[0]), double(cs[1]), double(ss[0]), double(ss[1]), double(q.packed.globalScale),
                            q.relativeError, seconds};
        for (int i = 0; i < 7; ++i) head[i].fill_(v[i]);
    }
    group->broadcast({head}, owner);
    const auto size = [&](int i) { return static_cast<int64_t>(head[i].item<double>()); };
    if (!mine) {
        const auto u8 = at::TensorOptions().dtype(at::kByte);
        q.packed.config = format;
        q.packed.codes = at::empty({size(0), size(1)}, u8);
        q.packed.scales = at::empty({size(2), size(3)}, u8);
        q.packed.globalScale = static_cast<float>(head[4].item<double>());
        q.packed.lastDim = w.size(1);
        q.relativeError = head[5].item<double>();
        seconds = head[6].item<double>();
    }
    group->broadcast({q.packed.codes, q.packed.scales}, owner);
    if (!mine) q.dequantized = mx::unpack(q.packed);
}

} // namespace latmix::run
