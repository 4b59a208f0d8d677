#pragma once
// A run's model as one GGUF file for llama.cpp (docs/developer/gguf.md): the llama architecture
// (Llama, Mistral runs), MXFP4 weights from the run's own codes and scales, a SentencePiece
// tokenizer (tokenizer.model or a SentencePiece-style tokenizer.json), T3 folded back into
// down_proj stored in float32. Written under a temporary name, read back, renamed.
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

// Throws std::runtime_error naming the run or file and the way out, before writing anything:
// another architecture, weights not MXFP4, an lm_head bias (llama.cpp's llama loads none: train
// with --t1-bias off), a byte-level BPE tokenizer, an existing file without `overwrite`.
GgufReport exportGguf(const std::string& runDir, const std::string& file, JobContext& job, bool overwrite = false);

} // namespace latmix::exporting
