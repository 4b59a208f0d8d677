#pragma once
// A run's model as one GGUF file for llama.cpp (docs/developer/gguf.md): work in progress for
// issue 36 — the llama architecture (Llama, Mistral), MXFP4 weights from the run's own codes and
// scales, a SentencePiece tokenizer, T3 folded back into down_proj stored in float32.
#include "util/Job.h"

#include <cstdint>
#include <string>
#include <vector>

namespace latmix::exporting {

struct GgufReport {
    std::string file;
    int tensors = 0, mxfp4Tensors = 0;
    std::uint64_t bytes = 0;
    std::vector<std::string> notes;
};

// Throws std::runtime_error naming the run and the way out: another architecture, weights not
// MXFP4, an lm_head bias (llama.cpp's llama loads none: train with --t1-bias off), a tokenizer
// other than SentencePiece's tokenizer.model.
GgufReport exportGguf(const std::string& runDir, const std::string& file, JobContext& job);

} // namespace latmix::exporting
