#pragma once
// A run's model as one GGUF file for llama.cpp (docs/developer/gguf.md): llama.cpp's llama
// (Llama, Mistral), qwen2 and qwen3 architectures, MXFP4 weights from the run's own codes and
// scales, the tokenizer (export/GgufVocabulary.h), T3 folded back into down_proj stored in
// float32. Written under a temporary name, read back, renamed.
#include "model/ModelConfig.h"
#include "util/Job.h"

#include <cstdint>
#include <string>
#include <vector>

namespace latmix::exporting {

struct GgufReport {
    std::string file;
    int tensors = 0, fp4Tensors = 0; // the linears written in the run's 4-bit type
    std::string fp4Type;             // "MXFP4" or "NVFP4"
    std::uint64_t bytes = 0;
    std::vector<std::string> notes;
};

// Throws std::runtime_error naming the run or file and the way out, before writing anything:
// weights not MXFP4, a non-zero bias the architecture does not load (util::RemediedError with
// t1_bias / t2_bias off), a tokenizer llama.cpp would read differently, an existing file
// without `overwrite`.
// exact: the matrices that are no 4-bit linear in F32 as the run holds them; else BF16 (the
// default target, as llama.cpp's converter writes a model's float tensors).
GgufReport exportGguf(const std::string& runDir, const std::string& file, JobContext& job, bool overwrite = false,
                      bool exact = false);

// The refusals of exportGguf that a run's config.json decides (runConfig: ModelConfig of
// RUN_DIR/model/config.json): the architecture, weights not MXFP4 / NVFP4 (a util::RemediedError
// naming the format), experts llama.cpp lays out otherwise, RoPE scaling. The biases and the
// tokenizer are checked by the export, which reads them.
void checkGgufConfig(const model::ModelConfig& runConfig, const std::string& runDir);

} // namespace latmix::exporting
