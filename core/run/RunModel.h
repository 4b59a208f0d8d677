#pragma once
// The model of a quantization run, RUN_DIR/model/ (SPEC §8). `latmix quantize` writes it, eval
// loads it like any Hugging Face folder (model::Checkpoint), `latmix export` turns it into an hf
// or compressed-tensors folder. Layout:
//
//   config.json           Hugging Face config of the folded model (attention_bias / mlp_bias set
//                         when biases exist, tie_word_embeddings false when lm_head was untied,
//                         torch_dtype float32) plus a "latmix" object:
//                           {"method": "latmix-lu",
//                            "weight_format": {"format": "mxfp4", "block": 32, "scale_mode": "floor"} | null,
//                            "activation_format": {same keys} | null,
//                            "t3": {"point": "mlp.down_proj.input", "block": 32, "seed": 1234} | null,
//                            "lm_head_bias": true | false}
//   model.safetensors     float32, Hugging Face names: the folded, dequantized weights and the
//                         biases. W_down is stored in the online-Hadamard basis: the runtime maps
//                         the down_proj input x ↦ x Hᵀ before quantizing it, and W_down here is
//                         W_down,orig · Hᵀ (then quantized); H = t3Transform(...).
//                         "lm_head.bias" is present iff lm_head_bias.
//   quantized.safetensors for every block linear P (q,k,v,o,gate,up,down of every layer) when
//                         weight_format is set: "P.weight_packed" uint8 (mx::PackedTensor codes),
//                         "P.weight_scale" uint8 (scale bytes: E8M0, NVFP4 E4M3), for NVFP4
//                         "P.weight_global_scale" float32 [1] (this workbench's g = amax/(448·6),
//                         SPEC §1). mx::unpack of these equals P.weight of model.safetensors bit
//                         for bit.
//   input_amax.safetensors  for every NVFP4 linear P of a run since issue 72: "P.input_amax"
//                         float32 [1], the largest |x| at its input over the calibration windows
//                         (compressed-tensors' static input_global_scale = 448·6 / it). Absent
//                         in older runs and runs without NVFP4.
//   tokenizer files       copied from the source model folder (tokenizerFileNames()).
#include "model/ModelConfig.h"
#include "mx/MxPack.h"
#include "transforms/BlockDiagonal.h"

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace latmix::run {

inline constexpr const char* kRunConfigFile = "config.json";
inline constexpr const char* kRunWeightsFile = "model.safetensors";
inline constexpr const char* kRunPackedFile = "quantized.safetensors";
inline constexpr const char* kRunInputAmaxFile = "input_amax.safetensors";

struct RunModel {
    // config.json text. writeRunModel takes any Hugging Face config of the model (the source
    // model's is fine) and sets what the tensors and `quant` determine: the "latmix" object,
    // tie_word_embeddings (false when "lm_head.weight" is given), attention_bias / mlp_bias and
    // torch_dtype; every other key is kept. readRunModel returns the file's text.
    std::string configJson;
    // The "latmix" object. lm_head_bias is not in it: it is true iff tensors has "lm_head.bias".
    model::LatmixQuantization quant;
    // Float32 tensors with Hugging Face names (other floating types are converted on write).
    // A bias group (q,k,v,o / gate,up,down) with some biases missing is completed with zeros on
    // write, because Hugging Face has one flag per group.
    std::map<std::string, at::Tensor> tensors;
    // Packed weights by linear prefix ("model.layers.0.self_attn.q_proj"); empty iff
    // quant.weightFormat is unset.
    std::map<std::string, mx::PackedTensor> packed;
    // WUSH's online input transforms (quant.inputTransforms "wush"), [layer][PointKind] as
    // model::ForwardOptions holds them, float32; empty otherwise (model/input_transforms.safetensors).
    std::vector<std::array<transforms::BlockDiagonal, 4>> inputTransforms;
    // NVFP4 linears' largest input magnitude over the calibration windows, by linear prefix
    // (input_amax.safetensors); empty for runs before issue 72.
    std::map<std::string, float> inputAmax;
};

// Writes dir (normally RUN_DIR/model) atomically: everything goes into a temporary sibling
// folder that replaces dir only once complete, so dir never holds a partial model. Validates
// first and throws std::runtime_error naming the tensor and what to do: tensors missing / extra /
// of the wrong shape for the config, packed weights that do not unpack to their float32 weight
// bit for bit, packed formats that differ from quant.weightFormat. tokenizerSourceDir: folder
// whose tokenizer files are copied ("" = none).
// The config keeps the source architecture and states the bias groups exactly in
// "latmix"."biases" (model/ConfigJson.h), so any family holds any bias folding creates (Qwen2
// with an o_proj bias, Qwen3 with MLP biases); what a Hugging Face runtime can load is decided
// by the export (export/Export.h).
void writeRunModel(const std::string& dir, const RunModel& run, const std::string& tokenizerSourceDir = "");

// The same a layer at a time, so a run model is written while its layers are quantized (run/
// QuantizeRun.cpp: one layer quantized, written, released): names lists the tensors that will
// exist (they decide the bias groups; a missing member of a group is written as zeros), checked
// in the constructor, which opens both files in a temporary sibling of dir. Then writeLayer for
// layers 0, 1, ... in order, writeTopLevel (embedding, final norm, lm_head), commit. Each
// packed weight is checked against its float32 weight and written to quantized.safetensors at
// once: neither file is held in memory. A writer destroyed before commit leaves dir untouched.
class RunModelWriter {
public:
    RunModelWriter(const std::string& dir, const std::string& configJson, const model::LatmixQuantization& quant,
                   const std::set<std::string>& names, const std::string& tokenizerSourceDir = "");
    ~RunModelWriter();
    RunModelWriter(const RunModelWriter&) = delete;
    RunModelWriter& operator=(const RunModelWriter&) = delete;
    int layers() const;
    // The tensors of decoder layer `layer` (looked up by name in tensors) and the packed weights
    // of its block linears (by prefix).
    void writeLayer(int layer, const std::map<std::string, at::Tensor>& tensors,
                    const std::map<std::string, mx::PackedTensor>& packed);
    void writeTopLevel(const std::map<std::string, at::Tensor>& tensors);
    // One layer's online input transforms by point name (WUSH), written with commit into
    // input_transforms.safetensors (model::loadInputTransforms reads it).
    void addInputTransforms(const std::map<std::string, transforms::BlockDiagonal>& byPoint);
    // Linears' input maxima (RunModel::inputAmax), written with commit into input_amax.safetensors.
    void addInputAmax(const std::map<std::string, float>& byLinear);
    void commit();

private:
    struct State;
    std::unique_ptr<State> m;
};

// Reads and validates dir: missing config.json / model.safetensors / quantized.safetensors, a
// config without "latmix" object, missing or extra tensors, non-float32 tensors and packed
// weights whose unpacked values differ from the float32 weight all throw std::runtime_error
// naming the file and tensor. Float32 tensors are memory-mapped views (read-only).
RunModel readRunModel(const std::string& dir);

// The parsed config of a run model (ModelConfig::fromJsonText of configJson).
model::ModelConfig runModelConfig(const RunModel& run);

// T3 of a run: transforms::blockHadamard(intermediate, block, seed), float64, orthogonal, kept
// as its blocks; undefined when quant has no online Hadamard.
transforms::BlockDiagonal t3Transform(const model::LatmixQuantization& quant, std::int64_t intermediateSize);

} // namespace latmix::run
