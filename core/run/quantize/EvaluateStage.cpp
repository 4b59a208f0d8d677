// The evaluate stage of a quantize run (run/quantize/Stages.h), and the folded model's check.
#include "eval/KlDivergence.h"
#include "eval/Perplexity.h"
#include "model/Checkpoint.h"
#include "mx/MxFormat.h"
#include "run/quantize/Stages.h"
#include "tokenizer/Tokenizer.h"
#include "util/AtomicFile.h"
#include "util/Runtime.h"

#include <filesystem>
#include <memory>

namespace latmix::run {

double foldedPerplexity(const RunContext& ctx, const ModelToQuantize& folded, const std::vector<int>& evalIds,
                        JobContext& job) {
    const model::LlamaModel m(folded.config, folded.weights, folded.options);
    return eval::evaluatePerplexity(m, evalIds, perplexityOptions(ctx.options), job).perplexity;
}

// Three perplexities, then the zero-shot tasks (the last 70% of the stage when there are tasks).
void evaluateRun(const RunContext& ctx, const std::string& modelOut, const std::vector<int>& evalIds,
                 QuantizeResult& result, JobContext& job) {
    const QuantizeOptions& o = ctx.options;
    const auto p = perplexityOptions(o);
    const std::string precision = mx::precisionLabel(o.format.format); // "W4A4", "W8A8", ...
    // After a --devices training the model may not fit the first device: a layer at a time.
    const bool offload = o.offload || !o.devices.empty();
    const auto quantized = model::Checkpoint::load(modelOut);
    const double end = o.evalTasks.empty() ? 1.0 : 0.3, step = end / 3;
    if (o.evalSeqLen > 0 && !evalIds.empty()) {
        // The FP model's pass: its perplexity and the states the KL compares with (SPEC §7), or a
        // sweep's earlier cell's. A folder left by an interrupted evaluation of this (locked) run goes first.
        const auto& shared = ctx.hooks.fpReference;
        std::shared_ptr<const eval::ReferenceStates> reference = shared ? shared->states : nullptr;
        if (!reference) {
            const std::string spill =
                shared ? shared->spillDir : (std::filesystem::path(ctx.runDir) / "fp-reference.partial").string();
            util::removeTreeQuietly(spill);
            SubJob fp(job, 0, step, "perplexity FP: ");
            reference = std::make_shared<const eval::ReferenceStates>(eval::ReferenceStates::record(
                model::LlamaModel(ctx.checkpoint(), at::kFloat, ctx.device, true, offload), evalIds, p, spill, fp));
            if (shared) shared->states = reference;
        }
        result.fpPerplexity = reference->perplexity().perplexity;
        // The FP model's float32 layers were freed between other blocks of glibc's heaps: given
        // back before the quantized model is read (its pages are mapped), else they stay resident
        // through both evaluations (a Qwen3-MoE shape: 2.4 GiB more than --dry-run's estimate).
        releaseFreeHostMemory();
        SubJob w4a4(job, step, 2 * step, "perplexity and KL " + precision + ": ");
        result.kl = eval::evaluateAgainstReference(model::LlamaModel(quantized, at::kFloat, ctx.device, true, offload), evalIds,
                                                   *reference, w4a4);
        result.quantizedPerplexity = result.kl.perplexity.perplexity;
        releaseFreeHostMemory();
        SubJob weights(job, 2 * step, end, "perplexity weights only: ");
        result.weightOnlyPerplexity =
            eval::evaluatePerplexity(model::LlamaModel(quantized, at::kFloat, ctx.device, false, offload), evalIds, p, weights)
                .perplexity;
    }
    if (!o.evalTasks.empty()) {
        releaseFreeHostMemory();
        SubJob tasks(job, end, 1.0, "zero-shot " + precision + ": ");
        const auto tok = tokenizer::Tokenizer::loadFromDir(modelOut);
        result.zeroShot = eval::evaluateZeroShot(model::LlamaModel(quantized, at::kFloat, ctx.device, true, offload), *tok,
                                                 o.evalTasks, o.zeroShot, tasks);
    }
}

} // namespace latmix::run
