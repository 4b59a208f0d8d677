// The train stage of a quantize run (run/quantize/Stages.h).
#include "dist/ProcessGroup.h"
#include "eval/Perplexity.h"
#include "io/SafeTensors.h"
#include "model/FusionGroups.h"
#include "run/quantize/Stages.h"
#include "util/TorchCompat.h"

#include <ATen/core/grad_mode.h>

#include <chrono>
#include <filesystem>

namespace fs = std::filesystem;

namespace latmix::run {
namespace {

// SPEC §5's recipe with the run's options.
train::DistillOptions distillOptions(const RunContext& ctx) {
    const QuantizeOptions& o = ctx.options;
    train::DistillOptions d;
    d.activation = o.format;
    // --scheme and --keep: the student quantizes each group's points in its format, kept linears not at all.
    d.pointQuant = model::groupPointFormats(ctx.config(), ctx.resolved.groupFormats);
    d.keptLinears = std::set<std::string>(ctx.resolved.keptLinears.begin(), ctx.resolved.keptLinears.end());
    d.steps = o.steps;
    d.batch = o.batch;
    d.lr = o.lr;
    d.temperature = o.temperature;
    d.volumeWeight = o.volumeWeight;
    d.weightDecay = o.weightDecay;
    d.objective = train::objectiveOf(o.loss);
    d.compute = train::computeDtype(train::precisionOf(o.precision, ctx.device.is_cuda()));
    d.warmupSteps = o.warmupSteps;
    d.metricsEvery = o.metricsEvery;
    d.checkpointEvery = o.checkpointEvery;
    d.seed = o.seed;
    d.runFile = (fs::path(ctx.runDir) / "train.h5").string();
    // An unfinished run stopped before its first checkpoint has no train.h5: it starts afresh.
    d.resume = o.resume && fs::exists(d.runFile);
    d.group = ctx.hooks.group;
    d.onMatrices = ctx.hooks.onMatrices;
    d.trackedLayer = o.trackedLayer;
    return d;
}

} // namespace

eval::PerplexityOptions perplexityOptions(const QuantizeOptions& o) {
    eval::PerplexityOptions p;
    p.seqLen = o.evalSeqLen;
    p.maxWindows = o.evalWindows;
    return p;
}

std::unique_ptr<fold::ModelTransforms> trainTransforms(const RunContext& ctx, const model::LlamaWeights& original,
                                                       const at::Tensor& calib, const std::vector<int>& evalIds,
                                                       QuantizeResult& result, JobContext& job) {
    if (!ctx.method().transformed) return nullptr;
    auto transforms = std::make_unique<fold::ModelTransforms>(ctx.config(), transformSpecOf(ctx.method(), ctx.options));
    transforms->to(ctx.device);
    if (ctx.method().learned) {
        const auto t0 = std::chrono::steady_clock::now();
        train::DistillOptions d = distillOptions(ctx);
        d.onStep = ctx.hooks.onStep;
        if (ctx.options.foldedEvalEvery > 0) {
            d.foldedEvalEvery = ctx.options.foldedEvalEvery;
            // The whole model folded in float32 with the current transforms (γ, T3 on W_down, T1,
            // T2), evaluated without quantization on the run's evaluation windows.
            d.foldedEval = [&ctx, &original, &evalIds](const fold::ModelTransforms& t) {
                at::NoGradGuard g;
                const auto folded = fold::foldedModel(ctx.config(), original, t, ctx.fopts);
                return eval::evaluatePerplexity(folded, evalIds, perplexityOptions(ctx.options)).perplexity;
            };
        }
        // The teacher and student run in the precision's dtype on the device, a layer converted at a
        // time from the weights as they are (mapped as stored on the CPU; host memory with --offload).
        // TF32 for the training's float32 products where the precision asks (bf16's folds, tf32),
        // whatever `--tf32` set for the other stages; set back after, cancelled or failed too.
        const train::Precision precision = train::precisionOf(ctx.options.precision, ctx.device.is_cuda());
        const compat::Tf32Matmuls tf32(ctx.options.tf32 || train::usesTf32(precision, ctx.device.is_cuda()));
        result.training = train::distill(ctx.config(), original, calib, *transforms, d, job);
        // Every step read the embedding and lm_head tables whole: their mapped pages go (the
        // fold reads them once more, a block of rows at a time), 1.2 GiB at a Qwen3-MoE shape.
        io::releaseMappedPages(original.embed);
        io::releaseMappedPages(original.lmHead);
        result.trainSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    if (ctx.root())
        transforms->save((fs::path(ctx.runDir) / "transforms.h5").string(), {{"method", ctx.method().name}});
    return transforms;
}

} // namespace latmix::run
