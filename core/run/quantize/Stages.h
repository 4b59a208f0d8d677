#pragma once
// The stages of a quantize run (run/QuantizeRun.cpp lists them in order), one file each:
//   train      TrainStage.cpp      the method's transforms, trained for the learned methods
//   fold       FoldStage.cpp       γ, T3, T1, T2 folded into the weights, spilled to RUN_DIR/folded.partial
//   quantize   LayerQuantizer.cpp  GPTQ / RTN a layer at a time, written into RUN_DIR/model
//   evaluate   EvaluateStage.cpp   perplexities and zero-shot tasks of the reloaded run model
//   record     RunRecord.cpp       latmix.json
// Internal to core/run: the CLI, the workbench and the sweep see run/QuantizeRun.h.
#include "eval/Perplexity.h"
#include "model/LlamaModel.h"
#include "run/QuantizeRun.h"

#include <ATen/ATen.h>

#include <array>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace latmix::run {

// Rough seconds of each stage on the run's device (StageCost.cpp), the shares of the progress
// bar; evalTokens: the tokens one perplexity evaluation reads (0: none).
struct StageSeconds {
    double transforms = 0, folding = 0, check = 0, quantizing = 0, evaluating = 0;
};
StageSeconds stageSeconds(const model::ModelConfig& config, const QuantizeOptions& options, const MethodSpec& method,
                          bool cuda, std::int64_t evalTokens);

// Rough seconds of quantizing one weight [out, in] (StageCost.cpp): packing; with GPTQ its lazy
// updates and the Hessian's factorizations on the run's device and its column loop on the host's
// threads. The one model of a linear's cost: the quantize stage's share sums it over a layer's
// linears, and within a layer it gives the progress and the data-parallel owners.
struct LinearCostModel {
    bool gptq = true;
    bool cuda = false;
    int columnBlock = 128; // GptqOptions::columnBlock
    int threads = 1;       // the host's threads
};
double linearSeconds(std::int64_t out, std::int64_t in, const LinearCostModel& model);

// Data parallel: the rank that quantizes each weight [out, in] of a layer, the costliest first to
// the least loaded rank (by linearSeconds on one host thread, so that ranks with different thread
// counts agree without talking).
std::vector<int> linearOwners(const std::vector<std::array<std::int64_t, 2>>& shapes, int world, LinearCostModel model);

// What every stage reads: the options, the process's hooks, the resolved run (method, checkpoint, config) and where
// things live.
struct RunContext {
    const QuantizeOptions& options;
    const RunHooks& hooks;
    const ResolvedRun& resolved;
    const std::string& runDir;
    c10::Device device;       // where the computation runs
    c10::Device home;         // where the decoder layers live: the device, or the CPU with --offload
    at::TensorOptions fopts;  // float32 on the device
    int seqLen;               // the calibration window, at most the model's positions

    const MethodSpec& method() const { return resolved.method; }
    const model::ModelConfig& config() const { return resolved.config; }
    const model::Checkpoint& checkpoint() const { return *resolved.checkpoint; }
    bool root() const;        // this process writes the run folder (one process, or rank 0)
    bool parallel() const;    // data parallel over several ranks
};

// The model the weight quantization reads: the weights to quantize and what the forward pass
// must do online (T3). The layers stay where they are read from (the original as stored, or the
// folded model spilled to RUN_DIR/folded.partial, memory-mapped) and are brought to the device
// one at a time; the embedding, final norm and lm_head are in the compute options. The tensor
// names are those of the run model before quantization (zero biases completing a group included).
struct ModelToQuantize {
    model::ModelConfig config; // bias groups as folding made them
    model::LlamaWeights weights;
    std::set<std::string> names;
    model::ForwardOptions options;
};

eval::PerplexityOptions perplexityOptions(const QuantizeOptions& options);

// train: the method's transforms, trained by distillation for the learned methods (resumable
// from train.h5), saved to transforms.h5 by the root. Null for the methods without transforms.
std::unique_ptr<fold::ModelTransforms> trainTransforms(const RunContext& ctx, const model::LlamaWeights& original,
                                                       const at::Tensor& calib, const std::vector<int>& evalIds,
                                                       QuantizeResult& result, JobContext& job);

// fold: the model the weights are quantized from. Without transforms, the original as it is;
// else folded a layer at a time into runSpill (one process, rank 0) or, for a rank that cannot
// see rank 0's spill, into ownSpill, and read back mapped.
ModelToQuantize foldModel(const RunContext& ctx, const model::LlamaWeights& original, fold::ModelTransforms* transforms,
                          const std::string& runSpill, const std::string& ownSpill, JobContext& job);

// Paper Table 3's check: the perplexity of the folded full-precision model (nothing quantized).
double foldedPerplexity(const RunContext& ctx, const ModelToQuantize& folded, const std::vector<int>& evalIds,
                        JobContext& job);

// evaluate: perplexities of the FP model, the reloaded run model (W4A4) and its weights alone,
// then the zero-shot tasks of the W4A4 model.
void evaluateRun(const RunContext& ctx, const std::string& modelOut, const std::vector<int>& evalIds,
                 QuantizeResult& result, JobContext& job);

// record: latmix.json, enough to repeat the run.
std::string runRecordJson(const RunContext& ctx, const QuantizeResult& result, const fold::ModelTransforms* transforms);

} // namespace latmix::run
