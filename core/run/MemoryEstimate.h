#pragma once
// Peak host memory (resident set) of `latmix eval` and `latmix quantize` on the CPU, estimated
// from the config alone before any work: what `latmix bench memory` and `quantize --dry-run`
// print, what the workbench shows before Run, and what runQuantize compares with the memory the
// machine has. Each stage's estimate is the sum of the buffers that are alive together at its
// peak (read from the code of that stage, see MemoryEstimate.cpp); the constants were checked
// against measured peaks on the Llama-3.2-1B shape (docs/results.md, "Scale").
#include "model/ModelConfig.h"
#include "run/QuantizeRun.h"

#include <cstdint>
#include <string>
#include <vector>

namespace latmix::run {

struct MemoryStage {
    std::string name;   // "fold", "quantize", "eval (W4A4)", ...
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

// `latmix quantize` with these options (method, format, calibration windows, eval window) on the
// CPU. Training (learned methods) is included as read from the code; it is not yet streamed.
MemoryEstimate estimateQuantizeMemory(const model::ModelConfig& config, int storedBytes, const QuantizeOptions& options);

// The estimate as a table (stage, bytes, largest terms) with the peak and, when available > 0,
// the memory available: what the CLI prints and the workbench shows before Run.
std::string memoryTable(const MemoryEstimate& estimate, std::int64_t available);

// Empty when the peak fits in `available` (or available is 0: unknown); otherwise a message with
// both numbers and the options that lower the peak, naming --force.
std::string memoryProblem(const MemoryEstimate& estimate, std::int64_t available, const QuantizeOptions& options);

// The element size the checkpoint's weights are stored with (file bytes / parameters, rounded).
int storedElementBytes(std::int64_t fileBytes, std::int64_t parameters);

// Physical memory this machine has available now (MemAvailable of /proc/meminfo), 0 if unknown.
std::int64_t availableHostMemory();

// "2.36 GiB"
std::string gibText(std::int64_t bytes);

} // namespace latmix::run
