#pragma once
// Private helpers shared by RunModel.cpp and Export.cpp (not installed, not for other modules:
// it includes nlohmann/json, which latmix_core links privately).
#include "model/ModelConfig.h"
#include "mx/MxFormat.h"

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace latmix::exporting::detail {

// Creates a hidden temporary folder next to `finalDir` (".NAME.tmp-XXXXXX"), creating the parent
// folders when needed. Throws naming the folder.
std::string makeTempSibling(const std::string& finalDir);

// Puts the complete folder `tmp` in place of `finalDir`: a plain rename when finalDir does not
// exist, else an atomic exchange (renameat2 RENAME_EXCHANGE; two renames where the file system
// lacks it) after which the old content is removed. finalDir never holds a partial folder.
void replaceDirectory(const std::string& tmp, const std::string& finalDir);

// Removes a folder tree, ignoring errors (cleanup paths).
void removeTreeQuietly(const std::string& dir) noexcept;

// Copies the tokenizer files (RunModel.h: tokenizerFileNames) that exist in `from` into `to`;
// returns their names.
std::vector<std::string> copyTokenizerFiles(const std::string& from, const std::string& to);

// Reads a whole text file; throws naming the file and `what` it is.
std::string readTextFile(const std::string& path, const std::string& what);
void writeTextFile(const std::string& path, const std::string& text);

// What adapting a config to the tensors of a folded model changed.
struct BiasFix {
    std::vector<std::pair<std::string, std::vector<std::int64_t>>> zeroBiases; // to add, float32 zeros
    std::string relabeledFrom; // architecture name when the config was rewritten as LlamaForCausalLM
};

// Sets, in the Hugging Face config j, what the tensors present (has(name)) determine:
// attention_bias / mlp_bias (one flag per group: q,k,v,o and gate,up,down), tie_word_embeddings
// false when lm_head.weight exists. Architectures whose Hugging Face class cannot hold the
// biases are rewritten as the equivalent LlamaForCausalLM: Qwen2 with o_proj or MLP biases, and,
// for Hugging Face runtimes (forHfRuntime), Mistral with any bias (MistralForCausalLM ignores
// attention_bias / mlp_bias; this workbench's decoder reads them). Qwen3 with MLP biases throws
// (Qwen3 needs its q/k norms, Llama has none). Returns the zero biases the group flags now
// require and that are missing.
BiasFix fixBiasFlags(nlohmann::ordered_json& j, const std::function<bool(const std::string&)>& has,
                     bool forHfRuntime, const std::string& source);


// "[a, b]" for error messages.
std::string shapeText(const std::vector<std::int64_t>& shape);

// Prefix of a block linear weight name ("…q_proj.weight" → "…q_proj"), or "" when the name is
// not the weight of a q,k,v,o,gate,up,down projection.
std::string blockLinearOfWeight(const std::string& name);

// The index and the two values of the first element where a and b (same shape, float32 after
// conversion) differ bitwise, NaN matching NaN; index -1 when they are equal.
struct Mismatch {
    std::int64_t index = -1;
    double a = 0, b = 0;
};
Mismatch firstBitMismatch(const at::Tensor& a, const at::Tensor& b);

} // namespace latmix::exporting::detail
