#pragma once
// The options of one `latmix quantize` run (SPEC §6). RunConfig is what the run is asked to do,
// every field of it in the option table (run/quantize/OptionTable.h) from which the CLI's flags,
// a sweep's keys, the workbench's settings, latmix.json's "options" and the run key come;
// QuantizeOptions adds the resume decision and the loaded data, RunHooks what only the running
// process has (callbacks, the process group).
#include "eval/ZeroShot.h"
#include "mx/MxFormat.h"
#include "quant/WeightQuantizer.h"

#include <cstdint>
#include <functional>
#include <utility>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace latmix::eval {
class ReferenceStates;
} // namespace latmix::eval
namespace latmix::dist {
class Group;
}
namespace latmix::train {
struct DistillStep;
}

namespace latmix::run {

struct RunConfig {
    std::string method = "latmix-lu";
    // Ablations: the method's transforms replaced place by place (empty / negative: the method's).
    // t1Kind, t2Kind: any transforms::transformKinds() kind ("none": no transform there); init:
    // any transforms::initKinds() initialisation of the learned kinds; t3Block: 0 turns the online
    // block Hadamard T3 off, > 0 its block; initNoise: the "+noise" standard deviation.
    std::string t1Kind, t2Kind, init;
    int t3Block = -1;
    double initNoise = -1;
    // "full" or "block": the learned T1/T2 as full matrices (the paper's LATMiX) or block-diagonal
    // with the MX block size (paper Table 1's "Block"); empty: the method's (full).
    std::string granularity;
    mx::MxConfig format;         // weights and activations (W4A4 for a 4-bit format)
    // Linears kept in full precision (`--keep REGEX`, SPEC §4 "Kept linears"): every block linear
    // whose module name ("model.layers.0.mlp.down_proj") the regex finds (a search, not a full
    // match) keeps its weights and input in bf16 through every method, the fold and the exports.
    // Empty: none. A regex matching no linear, or every one, is refused naming it.
    std::string keep;
    // A mixed-precision scheme (`--scheme`, docs/spec.md "Mixed precision"): rules "REGEX = FORMAT"
    // inline (';'-separated) or a file of them; fusion groups a rule takes get its format (bf16:
    // kept), the rest `format`. Empty: none. Every method but WUSH's honours it (the training's
    // student quantizes each group's points in its format).
    std::string scheme;
    int steps = 1000;            // training steps (learned methods)
    int batch = 4;
    double lr = 1e-3;
    double temperature = 1.5;
    double volumeWeight = 0.1;
    // AdamW's decoupled weight decay on the transforms' parameters. The paper trains "with
    // weight-decay" without a value (PyTorch's AdamW default is 0.01); 0 keeps SPEC §5's runs.
    double weightDecay = 0;
    // What the learned methods minimise (paper Table 8): "kl" to the teacher (SPEC §5), "ce", the
    // cross-entropy against the calibration text (SpinQuant's loss, paper Table 5), or
    // "block-mse", the MSE of every decoder block's output against the teacher's (FlatQuant's
    // loss, summed over the blocks of one end-to-end pass; train::Objective::BlockMse).
    std::string loss = "kl";
    int warmupSteps = 100;
    int metricsEvery = 10;
    int checkpointEvery = 50;
    int calibSamples = 64;       // calibration windows (training and GPTQ)
    int seqLen = 256;
    std::uint64_t seed = 0;      // windows, transforms init, batch draws; T3 uses seed too
    quant::GptqOptions gptq;
    // The methods with RTN weights (rtn, quarot-rtn) need no calibration: each linear's relative
    // error is then in weight space, ||Q(W) - W||^2 / ||W||^2. With N > 0 the first N calibration
    // windows go through the layers as for GPTQ and the error is GPTQ's output-space one,
    // tr(dW H dW^T) / tr(W H W^T) (`--rtn-error-windows N`). GPTQ methods ignore it.
    int rtnErrorWindows = 0;
    std::string device = "cpu";
    // Layer-wise offload: the decoder layers stay in host memory and go to the device one at a
    // time for training (train::distillationStep converts a layer when it runs), folding, GPTQ
    // and evaluation, so a model larger than device memory can be quantized.
    bool offload = false;
    // Float32 matrix products on a CUDA device in TF32 (compat::allowTf32Matmuls; `--tf32`): the
    // training's and GPTQ's products several times faster on tensor cores, with a 10-bit mantissa.
    // Off by default: the results then match the CPU's within the tests' float32 bounds. The KL,
    // AdamW's state and the Hessians keep their own precision (float32 / float64 sums).
    bool tf32 = false;
    // The training's arithmetic (train::Precision, `--precision`): auto (bf16 on CUDA, fp32 on the
    // CPU), bf16 (mixed precision), tf32 or fp32. The other stages keep theirs (`--tf32` above).
    std::string precision = "auto";
    // Training with the decoder layers split over these devices (`--devices`, run/quantize/MemoryEstimate.h's
    // planLayerPlacement: balanced by bytes, embedding with the first, lm_head with the last);
    // empty: all on `device`. The stages after training run on the first device, a layer at a
    // time. Learned methods, one process per machine, without offload.
    std::vector<std::string> devices;
    // false: the learned T1 / T2 are trained without their bias (v = 0). A T1 bias folds into
    // q/k/v, gate/up and lm_head biases, a T2 bias into v and o_proj biases (SPEC §4).
    // The learned T1 bias: on, off, or unset for auto (on where the family's hf / compressed-tensors
    // exports load the biases it folds into, off for Qwen3; preflight resolves it into MethodSpec).
    std::optional<bool> t1Bias;
    bool t2Bias = true;
    // Refuse, before any work, a run whose folded biases no Hugging Face / vLLM runtime can load
    // (Qwen3 with a T1 bias: MLP biases), naming --t1-bias off; false runs it anyway (the run
    // model still loads and evaluates in this workbench, `latmix export` refuses it).
    bool exportCheck = true;
    // Refuse, before any work, a CPU run whose estimated peak memory (run/quantize/MemoryEstimate.h)
    // exceeds the memory available; false (--force) runs anyway.
    bool memoryCheck = true;
    int trackedLayer = 0;        // whose A2 the training reports (metrics, live heatmap)
    int evalSeqLen = 0;          // WikiText-2 perplexity of FP and quantized model; 0: none
    int evalWindows = 0;         // 0: all
    // Learned methods: the folded full-precision model's perplexity (the evaluation's windows)
    // before training, after step 1, every k steps and after the last (paper Table 2's check that
    // folding the trained transforms leaves the model as it was); 0: never. Needs evalSeqLen.
    // Each check folds a float32 copy of the whole model on the device.
    int foldedEvalEvery = 0;
    eval::ZeroShotOptions zeroShot;
    std::string calibSource, evalSource; // file names, recorded
    // Zero-shot tasks of the W4A4 model by name ("arc_easy,piqa"; empty: none) and the first
    // evalLimit documents of each (0: all); QuantizeOptions::evalTasks holds them loaded.
    std::string evalTaskNames;
    int evalLimit = 0;
};

// What the run is given besides its options: the decision to continue its folder and the data
// loaded for it (run/PrepareRun.h's prepareRun fills both). Plain data: copied freely, recorded.
struct QuantizeOptions : RunConfig {
    // Continue the unfinished run in the run folder (its train.h5, run/UnfinishedRun.h).
    bool resume = false;
    // The zero-shot tasks of evalTaskNames (eval/ZeroShot), loaded before any work so that a bad
    // task file stops the run first; scored on the reloaded quantized model (W4A4) after the
    // perplexities.
    std::vector<eval::ZeroShotTask> evalTasks;
    std::string commandLine;     // recorded in latmix.json
};

// What only the running process has, passed to runQuantize beside the options and never part of
// them (so that copying or recording the options loses nothing): callbacks, state shared with
// other runs of the process and the process group.
struct RunHooks {
    // Live matrices during training (see train::DistillOptions::onMatrices).
    std::function<void(int step, const at::Tensor& a1, const at::Tensor& a2)> onMatrices;
    // Each training step's record, as it ends (the workbench's live dashboard).
    std::function<void(const train::DistillStep&)> onStep;
    // Each layer's linears as their quantization ends, in the layers' order: the module after the
    // layer prefix ("self_attn.q_proj", "mlp.experts.3.up_proj") and its relative error against
    // the FP weights (LinearReport::relativeError: in output space over the calibration windows,
    // or in weight space for RTN without them). The workbench draws them while the run goes on.
    std::function<void(int layer, const std::vector<std::pair<std::string, double>>& errors)> onLayerQuantized;
    // The FP model's pass over the evaluation windows (its perplexity and what the KL to it needs,
    // eval::ReferenceStates), shared by a sweep's cells on the same model, evaluation text, windows
    // and device: the first cell's evaluation records it into spillDir, the later ones reuse it.
    // Null: each run records its own, in RUN_DIR/fp-reference.partial, removed after.
    struct FpReference {
        std::string spillDir;
        std::shared_ptr<const eval::ReferenceStates> states;
    };
    std::shared_ptr<FpReference> fpReference;
    // Data-parallel calibration (null: one process). Training: train::DistillOptions::group.
    // GPTQ/RTN: each rank runs its share of the calibration windows, the layers' Hessians are
    // summed over the ranks and each linear is quantized once, by one rank, and broadcast. Rank 0
    // alone writes the run folder (train.h5, transforms.h5, the run model, latmix.json with the
    // world size) and evaluates; the other ranks return once the last layer is quantized.
    std::shared_ptr<dist::Group> group;
};

} // namespace latmix::run
