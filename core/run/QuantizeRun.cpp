// `latmix quantize` as a list of stages (QuantizeRun.h): preflight, then train, fold, quantize,
// evaluate and record, each in its own file under run/quantize/.
#include "run/QuantizeRun.h"

#include "dist/ProcessGroup.h"
#include "model/Capture.h"
#include "model/Checkpoint.h"
#include "run/RunModel.h"
#include "run/UnfinishedRun.h"
#include "run/quantize/LayerQuantizer.h"
#include "run/quantize/OptionTable.h"
#include "run/quantize/Stages.h"
#include "util/AtomicFile.h"
#include "util/FolderLock.h"
#include "util/Runtime.h"
#include "util/Text.h"
#include "util/TorchCompat.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <numeric>
#include <unistd.h>

namespace fs = std::filesystem;

namespace latmix::run {

bool RunContext::root() const { return !hooks.group || hooks.group->isRoot(); }
bool RunContext::parallel() const { return hooks.group && hooks.group->size() > 1; }

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A stage: the name the unfinished-run marker shows while it runs, the prefix of its progress
// messages and its share of the progress bar.
struct Stage {
    std::string name, prefix;
    double share;
    bool onDevice = true; // false: writes files only (no GPU peak of its own to report)
};

// The first stage's name: it trains the learned methods' transforms and builds the fixed ones.
const char* transformStage(const MethodSpec& m) { return m.learned ? "training" : "transforms"; }
constexpr const char* kCheckStage = "checking the folded model";

// The stages of a run in order, each with its share of the progress bar: its rough seconds on
// this device (stageSeconds), scaled to fill the bar. A stage that costs next to nothing still
// gets a sliver, so its messages move the bar.
std::vector<Stage> stagesOf(const MethodSpec& m, const StageSeconds& t, bool foldedCheck, bool evaluating, bool parallel) {
    std::vector<Stage> s;
    if (m.transformed) s.push_back({transformStage(m), "training: ", t.transforms});
    s.push_back({"folding", "folding: ", t.folding});
    const Stage check{kCheckStage, "perplexity folded FP: ", t.check};
    if (foldedCheck && !parallel) s.push_back(check); // data parallel: after GPTQ (rank 0 alone)
    s.push_back({"quantizing", "quantizing: ", t.quantizing});
    if (foldedCheck && parallel) s.push_back(check);
    if (evaluating) s.push_back({"evaluating", "", t.evaluating});
    s.push_back({"recording", "", 0.0, false}); // latmix.json: written last, it cannot hold a peak of its own
    double total = std::accumulate(s.begin(), s.end(), 0.0, [](double a, const Stage& x) { return a + x.share; });
    for (auto& x : s) x.share = x.onDevice ? std::max(x.share, 0.002 * total) : 0.0;
    total = std::accumulate(s.begin(), s.end(), 0.0, [](double a, const Stage& x) { return a + x.share; });
    for (auto& x : s) x.share = total > 0 ? x.share / total : 0.0;
    return s;
}

// Runs the stages in their order, each with the part of the progress bar its share gives it, and
// tells `mark` which stage begins. Each stage's peak resident memory goes to r.stagePeakRssMb
// and, on a CUDA device, its peak of the allocator to r.stagePeakGpuMb (both started again after
// each stage; the first stage's host peak includes the loading before it).
class StageRunner {
public:
    StageRunner(std::vector<Stage> stages, JobContext& job, std::function<void(const std::string&)> mark,
                c10::Device device, QuantizeResult& r)
        : m_stages(std::move(stages)), m_job(job), m_mark(std::move(mark)), m_device(device), m_result(r) {}

    template <class Body>
    void run(const std::string& name, Body&& body) {
        while (m_next < m_stages.size() && m_stages[m_next].name != name) m_begin += m_stages[m_next++].share;
        if (m_next == m_stages.size()) throw std::logic_error("quantize: stage '" + name + "' is not in the run's list");
        const Stage& s = m_stages[m_next++];
        m_mark(s.name);
        SubJob sub(m_job, m_begin, std::min(1.0, m_begin + s.share), s.prefix);
        body(static_cast<JobContext&>(sub));
        m_begin += s.share;
        if (!s.onDevice) return;
        const double host = peakResidentMiB();
        m_result.stagePeakRssMb.push_back({s.name, host});
        m_result.peakRssMb = std::max(m_result.peakRssMb, host);
        // The next stage's blocks have other sizes: what the allocators kept of this one's goes
        // back first, so that the next peak starts from what the run still holds.
        releaseFreeHostMemory();
        resetPeakResident();
        if (m_device.is_cuda()) {
            m_result.stagePeakGpuMb.push_back({s.name, compat::cudaPeakAllocatedBytes(m_device.index()) / 1048576.0});
            compat::resetCudaPeakMemory(m_device.index());
        }
    }

private:
    std::vector<Stage> m_stages;
    JobContext& m_job;
    std::function<void(const std::string&)> m_mark;
    c10::Device m_device;
    QuantizeResult& m_result;
    std::size_t m_next = 0;
    double m_begin = 0;
};

// The run folder while a run writes it (the root alone: one process, or rank 0): locked against a
// second writer (a second `latmix quantize --out` of the same folder stops, naming the first) and
// marked unfinished (run/UnfinishedRun.h) with the stage that runs, so that a run stopped at any
// moment reads as unfinished (and resumable) in the workbench, the runs catalog and --resume.
class RunFolder {
public:
    RunFolder(const RunContext& ctx, QuantizeResult& result)
        : m_dir(ctx.runDir), m_root(ctx.root()),
          m_marker{ctx.options.commandLine, ctx.options.method, ctx.resolved.modelDir, util::hostName(),
                   util::utcTimestamp(), static_cast<long long>(::getpid()), "", configJson(ctx.options).dump()} {
        if (!m_root) return;
        m_lock = std::make_unique<util::FolderLock>(m_dir, "run folder", ctx.options.commandLine);
        if (!m_lock->staleNote().empty()) result.notes.push_back(m_lock->staleNote());
        const bool existed = fs::exists(m_dir);
        fs::create_directories(m_dir);
        try {
            claimRunFolder(m_dir, m_marker, ctx.options.resume);
        } catch (...) {
            std::error_code ec;
            if (!existed) fs::remove(m_dir, ec); // a refused run leaves nothing
            throw;
        }
    }
    void mark(const std::string& stage) {
        if (!m_root) return;
        m_marker.stage = stage;
        writeUnfinishedMarker(m_dir, m_marker);
    }
    // latmix.json, then the marker goes: killed in between, the run is finished.
    void finish(const std::string& record) {
        util::writeFileAtomically((fs::path(m_dir) / "latmix.json").string(), record);
        removeUnfinishedMarker(m_dir);
    }

private:
    std::string m_dir;
    bool m_root;
    UnfinishedRun m_marker;
    std::unique_ptr<util::FolderLock> m_lock;
};

at::Tensor calibrationWindows(const RunContext& ctx, const std::vector<int>& calibIds) {
    const int n = ctx.options.calibSamples;
    const auto windows = model::sampleCalibrationWindows(calibIds, n, ctx.seqLen, ctx.options.seed);
    std::vector<int64_t> flat;
    for (const auto& w : windows) flat.insert(flat.end(), w.begin(), w.end());
    return at::tensor(flat, at::kLong).reshape({n, ctx.seqLen});
}

// --devices: the weights (mapped as stored) copied in their dtype onto the plan's devices, a
// layer at a time: the embedding on the first, the layers on theirs, final norm and lm_head on
// the last (a tied lm_head is a copy there unless that is the first device too).
model::LlamaWeights placeLayers(const model::LlamaWeights& stored, const std::vector<DeviceShare>& plan) {
    model::LlamaWeights w = stored; // shallow; every tensor is replaced below
    const auto on = [](const std::string& d) { return at::TensorOptions().device(model::parseDevice(d)); }; // dtype kept
    w.embed = stored.embed.to(on(plan.front().device));
    for (const auto& p : plan)
        for (int l = p.firstLayer; l < p.firstLayer + p.layers; ++l) {
            w.layers[static_cast<size_t>(l)] = model::convertLayer(stored.layers[static_cast<size_t>(l)], on(p.device));
            model::releaseMappedLayer(stored.layers[static_cast<size_t>(l)]);
        }
    const auto last = on(plan.back().device);
    w.finalNorm = stored.finalNorm.to(last);
    const bool tiedHere = stored.lmHead.is_same(stored.embed) && w.embed.device() == last.device();
    w.lmHead = tiedHere ? w.embed : stored.lmHead.to(last);
    if (stored.lmHeadBias.defined()) w.lmHeadBias = stored.lmHeadBias.to(last);
    return w;
}

// The frozen weights stay in the checkpoint's dtype (bf16 for most Hugging Face models): mapped
// on the CPU, copied as they are onto a GPU (half the memory of float32) or onto the devices of
// --devices; every stage converts the layer it works on to float32 (the teacher, the student's
// folded layer, GPTQ's layer) and the lm_head a vocabulary chunk at a time. Norms and biases are
// float32 from the start. Float64 is kept where precision decides the result: the folding of the
// transforms into the weights, the GPTQ Hessians and their factorisations, and the data-parallel
// gradient sums. With --offload the layers wait in host memory in float32.
model::LlamaWeights loadOriginal(const RunContext& ctx) {
    const model::Checkpoint& ck = ctx.checkpoint();
    if (!ctx.resolved.placement.empty()) return placeLayers(model::loadStoredWeights(ck, at::kFloat), ctx.resolved.placement);
    if (ctx.options.offload) return model::offloadLayers(model::loadWeights(ck, at::kFloat, ctx.home), ctx.fopts);
    return model::loadStoredWeights(ck, at::kFloat, ctx.device);
}

// The "latmix" object of the run model's config.json.
model::LatmixQuantization runQuantization(const RunContext& ctx, const fold::ModelTransforms* transforms) {
    model::LatmixQuantization q;
    q.method = ctx.method().name;
    q.weightFormat = ctx.options.format;
    q.activationFormat = ctx.options.format;
    if (transforms) {
        q.t3Block = transforms->spec().t3Block;
        q.t3Seed = transforms->spec().t3Seed;
    }
    if (ctx.method().wush) q.inputTransforms = "wush";
    q.keptLinears = ctx.resolved.keptLinears;
    q.groupFormats = ctx.resolved.groupFormats;
    return q;
}

// quantize: the layers in order, each quantized, written into RUN_DIR/model by the root and
// released before the next. Returns the model folder ("" on the other ranks).
std::string quantizeLayers(const RunContext& ctx, const ModelToQuantize& toQuantize, const at::Tensor& calib,
                           const fold::ModelTransforms* transforms, QuantizeResult& result, JobContext& job) {
    LayerQuantizer quantizer(ctx, toQuantize, calib, result);
    const std::string modelOut = (fs::path(ctx.runDir) / "model").string();
    std::unique_ptr<RunModelWriter> out;
    if (ctx.root())
        out = std::make_unique<RunModelWriter>(modelOut, ctx.config().toJsonText(), runQuantization(ctx, transforms),
                                               toQuantize.names, ctx.resolved.modelDir);
    const int layers = toQuantize.config.numLayers;
    for (int l = 0; l < layers; ++l) {
        const std::string name = "layer " + std::to_string(l + 1) + "/" + std::to_string(layers);
        SubJob layerJob(job, double(l) / layers, double(l + 1) / layers, name + ": ");
        {
            const QuantizedLayer q = quantizer.quantizeLayer(l, layerJob);
            if (ctx.hooks.onLayerQuantized) {
                std::vector<std::pair<std::string, double>> errors;
                for (const LinearReport& r : result.linears)
                    if (r.layer == l) errors.emplace_back(r.linear, r.relativeError);
                ctx.hooks.onLayerQuantized(l, errors);
            }
            if (out) out->writeLayer(l, q.tensors, q.packed);
            if (out) out->addInputAmax(q.inputAmax);
            if (out && !q.inputTransforms.empty()) out->addInputTransforms(q.inputTransforms);
        }
        releaseFreeHostMemory(); // the written layer's small tensors (an MoE's experts) leave the heaps
        job.progress(double(l + 1) / layers, name);
    }
    if (!out) return "";
    out->writeTopLevel(quantizer.topLevel());
    out->commit();
    return modelOut;
}

} // namespace

QuantizeResult runQuantize(const std::string& modelDir, const std::vector<int>& calibIds, const std::vector<int>& evalIds,
                           const std::string& runDir, const QuantizeOptions& o, JobContext& job,
                           const RunHooks& hooks) {
    return runQuantize(preflight(modelDir, o), calibIds, evalIds, runDir, o, job, hooks);
}

QuantizeResult runQuantize(const ResolvedRun& resolved, const std::vector<int>& calibIds, const std::vector<int>& evalIds,
                           const std::string& runDir, const QuantizeOptions& o, JobContext& job,
                           const RunHooks& hooks) {
    const auto start = Clock::now();
    if (!resolved.checkpoint)
        throw std::invalid_argument(resolved.modelDir + " is a config alone: a run needs the model folder with its weights");
    const c10::Device device = model::parseDevice(resolved.device);
    {
        // Before anything is written: a NaN weight would otherwise end as "perplexity nan" or a
        // distillation that looks diverged.
        SubJob check(job, 0.0, 0.0, "");
        model::checkWeightsFinite(*resolved.checkpoint, check);
    }
    // With offload the layers live on the CPU (memory-mapped float32) and visit the device one
    // at a time; the embeddings, final norm and lm_head stay on the device.
    const RunContext ctx{o, hooks, resolved, runDir, device, o.offload ? c10::Device(c10::kCPU) : device,
                         at::TensorOptions().dtype(at::kFloat).device(device),
                         std::min(o.seqLen, resolved.config.maxPositions)};
    QuantizeResult r;
    RunFolder folder(ctx, r);
    if (device.is_cuda()) compat::resetCudaPeakMemory(device.index());
    compat::allowTf32Matmuls(o.tf32 && device.is_cuda()); // process-wide; every run sets it
    const at::Tensor calib = calibrationWindows(ctx, calibIds);
    model::LlamaWeights original = loadOriginal(ctx);
    const bool perplexities = o.evalSeqLen > 0 && !evalIds.empty();
    const bool foldedCheck = perplexities && resolved.method.transformed;
    const std::int64_t evalTokens =
        !perplexities ? 0
        : o.evalWindows > 0 ? std::min<std::int64_t>(evalIds.size(), std::int64_t(o.evalWindows) * o.evalSeqLen)
                            : std::int64_t(evalIds.size());
    const StageSeconds seconds = stageSeconds(resolved.config, o, resolved.method, device.is_cuda(), evalTokens);
    StageRunner stages(stagesOf(resolved.method, seconds, foldedCheck, perplexities || !o.evalTasks.empty(), ctx.parallel()), job,
                       [&](const std::string& stage) { folder.mark(stage); }, device, r);
    const auto sentSoFar = [&] { return hooks.group ? hooks.group->bytesCommunicated() : std::uint64_t(0); };

    std::unique_ptr<fold::ModelTransforms> transforms;
    if (resolved.method.transformed)
        stages.run(transformStage(resolved.method),
                   [&](JobContext& j) { transforms = trainTransforms(ctx, original, calib, evalIds, r, j); });
    r.trainBytes = sentSoFar();
    // The folded model's spill folder: removed when the run ends, however it ends. A data-parallel
    // rank that cannot see rank 0's spill folds its own copy into a temporary folder.
    const std::string spillDir = (fs::path(runDir) / "folded.partial").string();
    const std::string ownSpill = (fs::temp_directory_path() / ("latmix-folded-" + std::to_string(::getpid()) + "-rank" +
                                                               std::to_string(hooks.group ? hooks.group->rank() : 0)))
                                     .string();
    struct Cleanup {
        std::string dir;
        ~Cleanup() { util::removeTreeQuietly(dir); }
    } cleanup{ctx.root() ? spillDir : ownSpill}; // never rank 0's spill from another rank
    std::string modelOut;
    {
        ModelToQuantize toQuantize;
        stages.run("folding", [&](JobContext& j) { toQuantize = foldModel(ctx, original, transforms.get(), spillDir, ownSpill, j); });
        if (transforms) original = {}; // on a GPU: the float32 teacher weights leave the device
        // Paper Table 3's check, rank 0's (data parallel: after GPTQ, which needs every rank).
        const auto check = [&](JobContext& j) {
            if (!ctx.root()) return;
            const auto te = Clock::now();
            r.foldedPerplexity = foldedPerplexity(ctx, toQuantize, evalIds, j);
            r.evalSeconds += since(te);
        };
        if (foldedCheck && !ctx.parallel()) stages.run(kCheckStage, check);
        const auto tq = Clock::now();
        stages.run("quantizing", [&](JobContext& j) { modelOut = quantizeLayers(ctx, toQuantize, calib, transforms.get(), r, j); });
        r.quantizeSeconds = since(tq);
        r.quantizeBytes = sentSoFar() - r.trainBytes;
        if (foldedCheck && ctx.parallel()) stages.run(kCheckStage, check);
    }
    original = {}; // the evaluation loads its own models: the frozen weights leave the device
    if (!ctx.root()) { // the run folder, its evaluation and latmix.json are rank 0's
        r.totalSeconds = since(start);
        r.peakRssMb = std::max(r.peakRssMb, peakResidentMiB());
        return r;
    }
    util::removeTreeQuietly(spillDir);
    if (perplexities || !o.evalTasks.empty())
        stages.run("evaluating", [&](JobContext& j) {
            const auto te = Clock::now();
            evaluateRun(ctx, modelOut, evalIds, r, j);
            r.evalSeconds += since(te);
        });
    r.totalSeconds = since(start);
    r.peakRssMb = std::max(r.peakRssMb, peakResidentMiB()); // the stages' peaks and what followed them
    for (const auto& [stage, mib] : r.stagePeakGpuMb) r.peakGpuMb = std::max(r.peakGpuMb, mib);
    stages.run("recording", [&](JobContext&) { folder.finish(runRecordJson(ctx, r, transforms.get())); });
    return r;
}

} // namespace latmix::run
