#pragma once
// Everything a quantize run checks before it writes anything, done once and in one place for the
// CLI (`latmix quantize`, its --dry-run and --nproc), the workbench's Calibration tab and every
// cell of a sweep: the method resolved with its ablations, the checkpoint opened, the options
// checked against the model (export, Hadamard widths, tracked layer, --devices), the layer
// placement planned and the memory estimated and compared with what the machine has.
#include "model/Checkpoint.h"
#include "run/quantize/MemoryEstimate.h"
#include "run/quantize/Method.h"
#include "util/Remedy.h"

#include <memory>
#include <map>
#include <string>
#include <vector>

namespace latmix::run {

// A run that passed the checks: what runQuantize needs besides the options and the token ids.
struct ResolvedRun {
    std::string modelDir;
    MethodSpec method; // runMethod(options)
    // The opened checkpoint; null when preflight was given a config.json alone (a model not
    // downloaded yet): the estimates below hold, the run cannot start.
    std::shared_ptr<const model::Checkpoint> checkpoint;
    model::ModelConfig config;
    int storedBytes = 4;                // bytes per stored weight element (bf16: 2)
    std::vector<DeviceShare> placement; // --devices: the training's layers over the devices
    std::string device;                 // where the run computes: the placement's first device, else options.device
    RunMemory memory;                   // the estimates, and the one the run is checked against
    // The block linears --keep leaves in full precision, by module name, in the model's order
    // (resolveKeptLinears); empty without --keep.
    std::vector<std::string> keptLinears;
    // --scheme: the fusion groups in an MX format other than --format (its bf16 groups are in
    // keptLinears), and the scheme's average bits per weight (0 without a scheme).
    std::map<std::string, mx::MxConfig> groupFormats;
    double schemeBits = 0;
    // What preflight chose for the user, each with its way back (--t1-bias auto's choice): the
    // CLI and the workbench say them through run::messageFor.
    std::vector<util::RemediedError> notes;
};

// The block linears (model::names::blockLinearPrefixes) whose module name `regex` finds
// (std::regex ECMAScript search). Throws std::invalid_argument naming the regex when it is not
// one, matches none, matches every block linear (nothing would be quantized), or matches an
// expert's linear of a mixture of experts (experts share their layer's quantized input: not kept).
std::vector<std::string> resolveKeptLinears(const model::ModelConfig& config, const std::string& regex);

// What the preflight is for: a run (every check), or the estimates alone (`--dry-run`: the
// devices need not be on this machine and a run that does not fit is not refused).
enum class PreflightFor { Run, Estimate };

// Throws std::invalid_argument naming the option, its value and the way out (or
// std::runtime_error from Checkpoint::load naming the file) when the run cannot go ahead.
// modelPath: a Hugging Face model folder, or a config.json (its torch_dtype standing for the
// stored weights) for the estimates alone. A run's devices must exist here, and its memory is
// compared with the host's (CPU runs) or the GPU's (one device, no offload) when
// options.memoryCheck is set.
ResolvedRun preflight(const std::string& modelPath, const RunConfig& options, PreflightFor purpose = PreflightFor::Run);
// The same for a checkpoint already open (a sweep opens its model once for all cells).
ResolvedRun preflight(std::shared_ptr<const model::Checkpoint> checkpoint, const RunConfig& options,
                      PreflightFor purpose = PreflightFor::Run);

// Throws std::invalid_argument when options.exportCheck is set and the run's folded biases could
// not be exported for Hugging Face / vLLM runtimes (Qwen3 with a learned T1 bias: MLP biases),
// naming --t1-bias off and --skip-export-check. Part of preflight.
void checkExportable(const model::ModelConfig& config, const MethodSpec& method, const RunConfig& options);

// Throws std::invalid_argument when the method needs a full Hadamard matrix (QuaRot's T1/T2,
// SpinQuant's Hadamard start) of a width no construction here covers (e.g. 92 * 2^k), naming the
// width and the methods that work (block transforms). Part of preflight.
void checkMethodFits(const model::ModelConfig& config, const MethodSpec& method, const RunConfig& options);

} // namespace latmix::run
