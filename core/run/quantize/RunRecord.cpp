// The record stage of a quantize run (run/quantize/Stages.h): latmix.json; and the run key the
// ranks of a data-parallel run agree on.
#include "dist/ProcessGroup.h"
#include "model/ConfigJson.h"
#include "mx/MxKernelCpu.h"
#include "run/quantize/OptionTable.h"
#include "run/quantize/LayerQuantizer.h"
#include "run/quantize/Stages.h"
#include "transforms/LearnedTransforms.h"
#include "util/AtomicFile.h"
#include "util/Runtime.h"
#include "util/Text.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

namespace fs = std::filesystem;

namespace latmix::run {
namespace {

// What a linear's relative_error measures: "outputs (N windows)" (tr(dW H dW^T) / tr(W H W^T)
// over the calibration windows) or "weights" (RTN without --rtn-error-windows).
std::string relativeErrorKind(const RunContext& ctx) {
    const int n = weightQuantizationWindows(ctx.method(), ctx.options);
    return n > 0 ? "outputs (" + std::to_string(n) + " windows)" : "weights";
}

// latmix.json: the configuration, the method, the versions and runtime, and every number measured.
nlohmann::ordered_json runRecord(const RunContext& ctx, const QuantizeResult& r, const fold::ModelTransforms* transforms) {
    const QuantizeOptions& o = ctx.options;
    nlohmann::ordered_json j;
    j["latmix_version"] = latmixVersion();
    j["libtorch_version"] = libtorchVersion();
    j["created"] = util::utcTimestamp();
    // What decides float32 summation order, and so whether a rerun gives the same bits
    // (docs/reproducibility.md): the build, the thread count and the CPU paths taken.
    j["runtime"] = {{"build", buildDescription()},
                    {"threads", threadCount()},
                    {"aten_cpu_capability", atenCpuCapability()},
                    {"blas", blasLibrary()},
                    {"blas_core", blasCoreName()},
                    {"mx_kernel", mx::cpu::kernelPathName(mx::cpu::kernelPath())}};
    j["command"] = o.commandLine;
    j["options"] = configJson(o); // every option (run/quantize/OptionTable.h): what the run was asked to do
    j["model"] = fs::absolute(ctx.resolved.modelDir).string();
    j["method"] = ctx.method().name;
    j["method_description"] = ctx.method().description;
    j["format"] = model::mxConfigJson(o.format);
    j["seed"] = o.seed;
    j["device"] = o.device;
    j["tf32"] = o.tf32 && ctx.device.is_cuda();
    if (ctx.method().learned) // the training's arithmetic as resolved for the device (`--precision auto`)
        j["precision"] = train::precisionName(train::precisionOf(o.precision, ctx.device.is_cuda()));
    j["world_size"] = ctx.hooks.group ? ctx.hooks.group->size() : 1; // data-parallel ranks (training and GPTQ)
    if (ctx.parallel()) // what rank 0 sent, in MiB
        j["communicated_mib"] = {{"train", r.trainBytes / 1048576.0}, {"quantize", r.quantizeBytes / 1048576.0}};
    j["offload"] = o.offload;
    if (!o.devices.empty()) j["devices"] = o.devices; // the training's layers split over these
    j["calibration"] = {{"source", o.calibSource}, {"samples", o.calibSamples}, {"seqlen", ctx.seqLen}};
    if (transforms)
        j["transforms"] = {{"t1", ctx.method().t1Kind}, {"t2", ctx.method().t2Kind}, {"init", ctx.method().init},
                           {"init_noise", ctx.method().initNoise}, {"granularity", ctx.method().granularity},
                           {"t1_bias", transforms::kindHasBias(ctx.method().t1Kind) && ctx.method().t1Bias},
                           {"t2_bias", transforms::kindHasBias(ctx.method().t2Kind) && o.t2Bias},
                           {"block", o.format.blockSize}, {"t3_block", transforms->spec().t3Block},
                           {"t3_seed", transforms->spec().t3Seed}, {"file", "transforms.h5"}};
    if (ctx.method().learned) {
        nlohmann::ordered_json t = {{"steps", o.steps}, {"batch", o.batch}, {"lr", o.lr}, {"temperature", o.temperature},
                                    {"loss", o.loss}, {"volume_weight", o.volumeWeight}, {"weight_decay", o.weightDecay}, {"warmup_steps", train::effectiveWarmupSteps(o.warmupSteps, o.steps)},
                                    {"resumed_from_step", r.training.startStep}, {"file", "train.h5"}};
        if (!r.training.history.empty()) {
            t["first_objective"] = r.training.history.front().objective; // the term training.loss names
            t["final_objective"] = r.training.history.back().objective;
        }
        if (o.foldedEvalEvery > 0) { // [step, perplexity] pairs, step 0 = before training
            nlohmann::ordered_json f = nlohmann::ordered_json::array();
            if (std::isfinite(r.training.foldedPerplexityStart)) f.push_back({0, r.training.foldedPerplexityStart});
            for (const auto& s : r.training.history)
                if (std::isfinite(s.foldedPerplexity)) f.push_back({s.step, s.foldedPerplexity});
            t["folded_fp_perplexity"] = f;
        }
        j["training"] = t;
    }
    j["weight_quantization"] = {{"algorithm", ctx.method().gptq ? "gptq" : "rtn"}, {"damping", o.gptq.damping},
                                {"column_block", o.gptq.columnBlock}, {"act_order", o.gptq.actOrder},
                                {"relative_error", relativeErrorKind(ctx)}};
    nlohmann::ordered_json layers = nlohmann::ordered_json::array();
    int starved = 0;
    for (const auto& L : r.linears) {
        nlohmann::ordered_json e = {{"layer", L.layer}, {"linear", L.linear}, {"relative_error", L.relativeError},
                                    {"seconds", L.seconds}};
        if (L.tokens >= 0) {
            e["tokens"] = L.tokens;
            e["algorithm"] = L.roundedToNearest ? "rtn" : ctx.method().gptq ? "gptq" : "rtn";
            starved += L.roundedToNearest ? 1 : 0;
        }
        if (L.kept) e["algorithm"] = "kept in bf16"; // --keep; relative_error: its bf16 rounding
        layers.push_back(e);
    }
    if (!ctx.resolved.keptLinears.empty())
        j["weight_quantization"]["kept"] = {{"regex", o.keep}, {"linears", ctx.resolved.keptLinears},
                                            {"precision", "bf16 weights, unquantized inputs"}};
    if (!o.scheme.empty()) {
        nlohmann::ordered_json groups = nlohmann::ordered_json::object();
        for (const auto& [name, f] : ctx.resolved.groupFormats) groups[name] = f.describe();
        j["weight_quantization"]["scheme"] = {{"rules", o.scheme}, {"bits_per_weight", ctx.resolved.schemeBits},
                                              {"groups_in_other_formats", groups},
                                              {"bits", "block linears, element bits + 8 per block scale, bf16 16 (docs/spec.md)"}};
    }
    if (ctx.method().wush)
        j["weight_quantization"]["input_transforms"] = {
            {"kind", "wush"}, {"block", o.format.blockSize}, {"file", "model/input_transforms.safetensors"},
            {"form", "one transform per layer and input, from the stacked weights that read it"}};
    if (ctx.config().moe)
        j["weight_quantization"]["experts"] = {
            {"hessian", "tokens routed to the expert in the quantized model"},
            {"fallback", "rtn below this share of the layer's calibration tokens"},
            {"fallback_share", kStarvedShare},
            {"linears_rounded_to_nearest", starved}};
    j["linears"] = layers;
    if (r.fpPerplexity > 0)
        j["perplexity"] = {{"dataset", "wikitext-2 test"}, {"source", o.evalSource}, {"seqlen", o.evalSeqLen},
                           {"windows", o.evalWindows}, {"fp", r.fpPerplexity}, {"folded_fp", r.foldedPerplexity}, {"w4a4", r.quantizedPerplexity},
                           {"weights_only", r.weightOnlyPerplexity}};
    if (r.fpPerplexity > 0 && r.kl.tokens > 0) // SPEC §7: KL(FP ‖ W4A4) per token over the same windows
        j["perplexity"]["kl"] = {{"reference", "fp"},          {"tokens", r.kl.tokens},
                                 {"mean", r.kl.meanKl},        {"stderr", r.kl.klStdErr},
                                 {"p99", r.kl.klP99},          {"max", r.kl.klMax},
                                 {"top1_agreement", r.kl.top1}, {"top1_stderr", r.kl.top1StdErr},
                                 {"delta_ppl", r.kl.deltaPpl}, {"delta_ppl_stderr", r.kl.deltaPplStdErr}};
    if (!r.zeroShot.tasks.empty()) {
        auto z = nlohmann::ordered_json::parse(eval::zeroShotJson(r.zeroShot).dump());
        z["model"] = "w4a4";
        z["bos"] = o.zeroShot.addBos;
        j["zeroshot"] = z;
    }
    j["seconds"] = {{"train", r.trainSeconds}, {"quantize", r.quantizeSeconds}, {"eval", r.evalSeconds},
                    {"total", r.totalSeconds}};
    j["peak_rss_mb"] = r.peakRssMb;
    nlohmann::ordered_json hostByStage = nlohmann::ordered_json::object();
    for (const auto& [stage, mib] : r.stagePeakRssMb) hostByStage[stage] = mib;
    j["peak_rss_mb_by_stage"] = hostByStage;
    if (ctx.device.is_cuda()) {
        j["peak_gpu_mb"] = r.peakGpuMb;
        nlohmann::ordered_json byStage = nlohmann::ordered_json::object();
        for (const auto& [stage, mib] : r.stagePeakGpuMb) byStage[stage] = mib;
        j["peak_gpu_mb_by_stage"] = byStage;
    }
    return j;
}

} // namespace

std::string runRecordJson(const RunContext& ctx, const QuantizeResult& result, const fold::ModelTransforms* transforms) {
    return runRecord(ctx, result, transforms).dump(2) + "\n";
}

std::string runKey(const ResolvedRun& resolved, const QuantizeOptions& o, const std::vector<int>& calibIds,
                   const std::vector<int>& evalIds) {
    auto fnv = [](const std::vector<int>& v) { // FNV-1a over the ids
        std::uint64_t h = 1469598103934665603ULL;
        for (int id : v) {
            h ^= static_cast<std::uint32_t>(id);
            h *= 1099511628211ULL;
        }
        return h;
    };
    std::ostringstream k;
    const std::string& modelDir = resolved.modelDir;
    k << "model config " << util::readTextFile((fs::path(modelDir) / "config.json").string(), "model config") << "\n";
    std::vector<std::pair<std::string, std::uintmax_t>> files;
    for (const auto& e : fs::directory_iterator(modelDir))
        if (e.is_regular_file() && e.path().extension() == ".safetensors") files.emplace_back(e.path().filename().string(), e.file_size());
    std::sort(files.begin(), files.end());
    for (const auto& [name, size] : files) k << "weights " << name << " " << size << " bytes\n";
    // Every option that changes what is computed (run/quantize/OptionTable.h), and the method
    // they resolve to.
    const MethodSpec& m = resolved.method;
    k << "resolved method " << m.t1Kind << " " << m.t2Kind << " init " << m.init << " noise " << m.initNoise << " t3 "
      << m.t3Block << " granularity " << m.granularity << "\n";
    for (const auto& f : optionFields())
        if (f.changesResult) k << f.key << " " << optionValue(o, f.key).dump() << "\n";
    k << "resume " << o.resume << "\ncalibration ids " << calibIds.size() << " hash " << fnv(calibIds)
      << "\nevaluation ids " << evalIds.size() << " hash " << fnv(evalIds) << "\n";
    return k.str();
}

} // namespace latmix::run
