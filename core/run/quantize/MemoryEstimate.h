#pragma once
// Peak host memory (resident set) of `latmix eval` and `latmix quantize` on the CPU, estimated
// from the config alone before any work: what `latmix bench memory` and `quantize --dry-run`
// print, what the workbench shows before Run, and what runQuantize compares with the memory the
// machine has. Each stage's estimate is the sum of the buffers that are alive together at its
// peak (read from the code of that stage, see MemoryEstimate.cpp); the constants were checked
// against measured peaks on the Llama-3.2-1B shape (docs/research/results.md, "Scale").
#include "model/ModelConfig.h"
#include "run/quantize/Method.h"

#include <cstdint>
#include <string>
#include <vector>

namespace latmix::run {

struct MemoryStage {
    std::string name;   // "fold", "quantize", "eval (W4A4)" (the run's format), ...
    std::int64_t bytes = 0;
    std::string detail; // the largest terms, for the table
};

struct MemoryEstimate {
    std::vector<MemoryStage> stages;
    std::int64_t peakBytes = 0;
    std::string peakStage;
    std::string note; // what the estimate does not cover, when anything
};

// `latmix eval` of a model whose weights are stored with storedBytes per element (2: bf16/fp16,
// 4: float32), one window of seqLen tokens at a time.
MemoryEstimate estimateEvalMemory(const model::ModelConfig& config, int storedBytes, int seqLen);

// `latmix quantize` with these options (format, calibration windows, eval window) and the method
// they resolve to (runMethod(options), resolved once by the caller: preflight's ResolvedRun::method)
// on the CPU. Training (learned methods) is included as read from the code; it is not yet streamed.
MemoryEstimate estimateQuantizeMemory(const model::ModelConfig& config, int storedBytes, const RunConfig& options,
                                      const MethodSpec& method);

// `latmix quantize --device cuda[:N]` without --offload: the peak of PyTorch's allocator on that
// GPU per stage (what latmix.json's peak_gpu_mb measures). The frozen weights are on the device
// as stored (model::loadStoredWeights: bf16 stays bf16); the training's terms are those of
// planLayerPlacement with one device; the quantize stage holds the host estimate's buffers there
// (GPTQ runs where the model is). Not included: the CUDA context (kCudaContextBytes, outside the
// allocator), which memoryProblem adds.
MemoryEstimate estimateDeviceMemory(const model::ModelConfig& config, int storedBytes, const RunConfig& options,
                                    const MethodSpec& method);
// What a CUDA context takes on a GPU outside PyTorch's allocator (CUDA 12-13 on Hopper: 0.5 GiB).
constexpr std::int64_t kCudaContextBytes = std::int64_t(512) << 20;

// A quantize run's estimates before it starts, and the one it is checked against: preflight
// refuses a run over it, `--dry-run` and the workbench show it. A CPU run is checked against the
// host's memory, a run on one GPU without --offload / --devices against that GPU's; the other GPU
// runs are not checked (their weights move between the host and the devices).
struct RunMemory {
    MemoryEstimate host;       // estimateQuantizeMemory: the same run on the CPU
    MemoryEstimate gpu;        // estimateDeviceMemory, for a run on one GPU only (no stages otherwise)
    std::string checkedDevice; // "cpu", "cuda:N" (gpu above), or empty: not checked
    const MemoryEstimate* checked() const { return checkedDevice.empty() ? nullptr : checkedDevice == "cpu" ? &host : &gpu; }
};
// options.device is read from its name (model::deviceFromName: "auto" as this machine has it, a
// named GPU need not be here); throws std::invalid_argument for a name that is no device.
RunMemory estimateRunMemory(const model::ModelConfig& config, int storedBytes, const RunConfig& options,
                            const MethodSpec& method);
// What the checked device has: the host's available memory, or the GPU's total (0 when this
// machine has no such GPU, or nothing is checked).
std::int64_t checkedDeviceMemory(const RunMemory& memory);

// The estimate as a table (stage, bytes, largest terms) with the peak and, when available > 0,
// the memory available: what the CLI prints and the workbench shows before Run.
std::string memoryTable(const MemoryEstimate& estimate, std::int64_t available);

// Empty when the peak fits in `available` (or available is 0: unknown); otherwise a message with
// both numbers and the options that lower the peak, naming --force.
// gpu: the device's name when `available` is a GPU's memory (estimateDeviceMemory; the CUDA
// context is added and the way out is --offload or --devices).
std::string memoryProblem(const MemoryEstimate& estimate, std::int64_t available, const RunConfig& options,
                          const std::string& gpu = {});
// The same as a refusal: throws run::RunRefused (run/quantize/OptionTable.h) with the remedies as
// options, so that the workbench names its controls.
void refuseOverMemory(const MemoryEstimate& estimate, std::int64_t available, const RunConfig& options,
                      const std::string& gpu = {});
// The same for the checked estimate of a run against what its device has (checkedDeviceMemory),
// or against `available` when the caller has read it already.
std::string memoryProblem(const RunMemory& memory, const RunConfig& options);
std::string memoryProblem(const RunMemory& memory, std::int64_t available, const RunConfig& options);
void refuseOverMemory(const RunMemory& memory, const RunConfig& options);

// The element size the checkpoint's weights are stored with (file bytes / parameters, rounded).
int storedElementBytes(std::int64_t fileBytes, std::int64_t parameters);

// --gpu-memory: "80", "141 GiB", "80GB" (GiB either way: the cards' marketing "80 GB" is
// 80 GiB of HBM); throws std::invalid_argument naming the option.
std::int64_t parseGpuMemory(const std::string& text);

// Physical memory this machine has available now (MemAvailable of /proc/meminfo), 0 if unknown.
std::int64_t availableHostMemory();

// "2.36 GiB"
std::string gibText(std::int64_t bytes);

// `--devices D0,D1,...`: the decoder layers of the training split into contiguous runs over
// several devices, balanced by the bytes each device holds (the weights as stored: `stored`
// bytes per matrix element, storedElementBytes), the embedding with the first device and the
// final norm and lm_head with the last (a tied lm_head is a copy there unless one device holds
// both), and the
// training's peak on each device (the train stage's terms of estimateQuantizeMemory for the
// layers it holds; without the CUDA context).
struct DeviceShare {
    std::string device;
    int firstLayer = 0, layers = 0; // layers [firstLayer, firstLayer + layers)
    bool embedding = false, lmHead = false;
    std::int64_t weightBytes = 0; // weights held on the device, as stored
    std::int64_t peakBytes = 0;   // weights + checkpointed layer inputs + the larger working set
    std::string detail;
};
// "cuda:0,cuda:1" -> {"cuda:0", "cuda:1"}; throws std::invalid_argument on an empty entry. A
// device may repeat ("cuda:0,cuda:0": the split on one GPU, its transfers exercised).
std::vector<std::string> parseDeviceList(const std::string& list);

// The devices of a rank of a data-parallel world with --devices (layers split over devices, the
// paper's multi-GPU runs combined with data parallelism; --device: model::deviceOfLocalRank):
// "D0,D1;D2,D3" gives local rank r the
// r-th ';'-separated group; a single group names local rank 0's devices and rank r uses each
// CUDA index shifted by r times the group's size ("cuda:0,cuda:1" -> rank 1 on cuda:2,cuda:3);
// CPU entries stay. Throws std::invalid_argument when there are groups but none for this rank.
std::vector<std::string> devicesOfLocalRank(const std::string& list, int localRank);
// Throws std::invalid_argument when there are more devices than decoder layers. The split
// minimises the largest device's weight bytes (ties: the earlier split point).
std::vector<DeviceShare> planLayerPlacement(const model::ModelConfig& config, int storedBytes,
                                            const std::vector<std::string>& devices, const RunConfig& options);
std::string placementTable(const std::vector<DeviceShare>& plan);

} // namespace latmix::run
