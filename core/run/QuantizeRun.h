#pragma once
// `latmix quantize`: a Hugging Face model to a folded, W4A4 MX-quantized run with one of the
// paper's methods (SPEC §6), written to RUN_DIR:
//   RUN_DIR/model/         the quantized model (core/export/RunModel.h): loads with
//                          model::Checkpoint, evaluates with `latmix eval`, exports with `latmix export`
//   RUN_DIR/transforms.h5  T1, T2 per layer, T3 seed (learned and fixed methods)
//   RUN_DIR/train.h5       training series, state for --resume (learned methods)
//   RUN_DIR/latmix.json    the run's configuration, seeds, versions, per-layer GPTQ errors,
//                          perplexities and timings
#include "eval/ZeroShot.h"
#include "model/ModelConfig.h"
#include "mx/MxFormat.h"
#include "quant/WeightQuantizer.h"
#include "train/Distillation.h"
#include "train/ModelTransforms.h"
#include "util/Job.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace latmix::run {

// The methods of the paper (SPEC §6) and what each does.
struct MethodSpec {
    std::string name;
    std::string t1Kind, t2Kind, init; // "none": no transform
    bool learned = false;             // T1/T2 trained by distillation
    bool gptq = false;                // GPTQ (else RTN)
    bool transformed = false;         // γ folded, T1/T2/T3 in place (RTN and GPTQ: nothing folded)
    std::string description;
    int t3Block = 32;                 // the online block Hadamard on the down_proj input (0: none)
    double initNoise = 1e-3;          // "+noise" initialisations
    std::string granularity = "full"; // learned T1/T2 as full matrices or "block"-diagonal (Table 1)
};
const std::vector<MethodSpec>& methods();
const MethodSpec& methodSpec(const std::string& name); // throws std::invalid_argument listing the names
struct QuantizeOptions;
// The method a run uses: methodSpec(options.method) with the ablation options applied
// (QuantizeOptions::t1Kind ...; the paper's Tables 7 and 14). learned: a learned kind at T1 or
// T2; transformed: any of T1, T2, T3. Throws std::invalid_argument naming an unknown kind or
// initialisation (listing the valid ones) or an unknown loss.
MethodSpec runMethod(const QuantizeOptions& options);
// The calibration windows the weight quantization runs through the layers: all of them for GPTQ
// (its Hessians), for RTN the first --rtn-error-windows (0: none; its error is then in weight
// space). What LayerQuantizer runs, latmix.json's weight_quantization.relative_error names and
// the memory estimate counts.
int weightQuantizationWindows(const MethodSpec& m, const QuantizeOptions& options);
// The transforms of a run of method m with these options (train::ModelTransforms' spec): kinds,
// initialisation, MX block, T3 and the seeds. What `latmix quantize` and `latmix bench train` build.
train::TransformSpec transformSpecOf(const MethodSpec& m, const QuantizeOptions& options);
// --t3 / a grid's "t3": "none" -> 0 (no online Hadamard), "block-hadamard" -> 32 (SPEC §4's
// block); anything else throws std::invalid_argument naming the two.
int t3BlockOf(const std::string& t3);
std::string methodNameList();

struct QuantizeOptions {
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
    mx::MxConfig format;         // weights and activations (W4A4)
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
    bool resume = false;
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
    // Training with the decoder layers split over these devices (`--devices`, run/MemoryEstimate.h's
    // planLayerPlacement: balanced by bytes, embedding with the first, lm_head with the last);
    // empty: all on `device`. The stages after training run on the first device, a layer at a
    // time. Learned methods, one process per machine, without offload.
    std::vector<std::string> devices;
    // false: the learned T1 / T2 are trained without their bias (v = 0). A T1 bias folds into
    // q/k/v, gate/up and lm_head biases, a T2 bias into v and o_proj biases (SPEC §4).
    bool t1Bias = true, t2Bias = true;
    // Refuse, before any work, a run whose folded biases no Hugging Face / vLLM runtime can load
    // (Qwen3 with a T1 bias: MLP biases), naming --t1-bias off; false runs it anyway (the run
    // model still loads and evaluates in this workbench, `latmix export` refuses it).
    bool exportCheck = true;
    // Refuse, before any work, a CPU run whose estimated peak memory (run/MemoryEstimate.h)
    // exceeds the memory available; false (--force) runs anyway.
    bool memoryCheck = true;
    int trackedLayer = 0;        // whose A2 the training reports (metrics, live heatmap)
    // Live matrices during training (see train::DistillOptions::onMatrices).
    std::function<void(int step, const at::Tensor& a1, const at::Tensor& a2)> onMatrices;
    int evalSeqLen = 0;          // WikiText-2 perplexity of FP and quantized model; 0: none
    int evalWindows = 0;         // 0: all
    // > 0: the FP model's perplexity on these same windows, measured already (a sweep's earlier
    // cell on the same model, evaluation text, windows and device): recorded, not evaluated again.
    double knownFpPerplexity = 0;
    // Learned methods: the folded full-precision model's perplexity (the evaluation's windows)
    // before training, after step 1, every k steps and after the last (paper Table 2's check that
    // folding the trained transforms leaves the model as it was); 0: never. Needs evalSeqLen.
    // Each check folds a float32 copy of the whole model on the device.
    int foldedEvalEvery = 0;
    // Zero-shot tasks (eval/ZeroShot) scored on the reloaded quantized model (W4A4) after the
    // perplexities; empty: none. Loaded by the caller, so a bad task file stops the run before
    // any work.
    std::vector<eval::ZeroShotTask> evalTasks;
    eval::ZeroShotOptions zeroShot;
    // Data-parallel calibration (null: one process). Training: train::DistillOptions::group.
    // GPTQ/RTN: each rank runs its share of the calibration windows, the layers' Hessians are
    // summed over the ranks and each linear is quantized once, by one rank, and broadcast. Rank 0
    // alone writes the run folder (train.h5, transforms.h5, the run model, latmix.json with the
    // world size) and evaluates; the other ranks return once the last layer is quantized.
    std::shared_ptr<dist::Group> group;
    std::string commandLine;     // recorded in latmix.json
    std::string calibSource, evalSource; // file names, recorded
};

struct LinearReport {
    int layer = 0;
    std::string linear; // "q_proj", ...
    double relativeError = 0;
    double seconds = 0;
};

struct QuantizeResult {
    std::vector<LinearReport> linears;
    double fpPerplexity = 0, quantizedPerplexity = 0, weightOnlyPerplexity = 0; // 0: not evaluated
    double foldedPerplexity = 0; // transformed methods: folded, unquantized (paper Table 3 check)
    eval::ZeroShotResult zeroShot; // of the W4A4 model; no tasks: not evaluated
    double trainSeconds = 0, quantizeSeconds = 0, evalSeconds = 0, totalSeconds = 0;
    double peakRssMb = 0;
    double peakGpuMb = 0; // peak of libtorch's CUDA allocator on the run's device (0 on the CPU)
    // Data parallel: bytes this rank put into all-reduces and broadcasts during the training and
    // during the weight quantization (dist::Group::bytesCommunicated); 0 for one process.
    std::uint64_t trainBytes = 0, quantizeBytes = 0;
    train::DistillResult training;
    std::vector<std::string> notes; // what the user should know, e.g. a stale lock of the run folder taken over
};

// The token ids a run reads, tokenized with the model folder's tokenizer (the one sequence the
// CLI and the GUI both use): calibration ids from calibText (SPEC §5: a training-side split,
// never the text perplexity is measured on), evaluation ids from the WikiText-2 test file at
// wikiTestPath as SPEC §7 builds it (empty path: none). Throws std::runtime_error when the
// calibration text is shorter than one window of seqLen tokens.
struct RunTokens {
    std::vector<int> calibIds, evalIds;
};
RunTokens tokenizeRunInputs(const std::string& modelDir, const std::string& calibText, const std::string& wikiTestPath,
                            int seqLen);

// Stage 0, before any work: throws std::invalid_argument when options.exportCheck is set and
// the run's folded biases could not be exported for Hugging Face / vLLM runtimes (see above).
void checkExportable(const model::ModelConfig& config, const QuantizeOptions& options);

// Stage 0 too: throws std::invalid_argument when the method needs a full Hadamard matrix (QuaRot's
// T1/T2, SpinQuant's Hadamard start) of a width no construction here covers (e.g. 92 * 2^k),
// naming the width and the methods that work (block transforms).
void checkMethodFits(const model::ModelConfig& config, const QuantizeOptions& options);

// What the ranks of a data-parallel run must agree on (dist::Group::connect's run key), a line
// each: the model (config and weight files' names and sizes), the method and every option that
// changes what is computed, and a hash of the calibration and evaluation ids.
std::string runKey(const std::string& modelDir, const QuantizeOptions& options, const std::vector<int>& calibIds,
                   const std::vector<int>& evalIds);

// calibIds: tokenized calibration text (never the evaluation split); evalIds: tokenized
// WikiText-2 test (SPEC §7) or empty. Progress: training, then quantization layer by layer,
// then evaluation; cancel stops at the next step/layer, leaving a resumable train.h5 and no
// RUN_DIR/model.
QuantizeResult runQuantize(const std::string& modelDir, const std::vector<int>& calibIds, const std::vector<int>& evalIds,
                           const std::string& runDir, const QuantizeOptions& options, JobContext& job = silentJob(),
                           std::function<void(const train::DistillStep&)> onStep = nullptr);

} // namespace latmix::run
