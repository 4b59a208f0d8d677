#pragma once
// The tensors of a Llama-family decoder (Hugging Face layout), read from a checkpoint, named,
// converted, offloaded and released a layer at a time; the forward pass (model/LlamaModel.h) runs
// them.
#include "model/ModelConfig.h"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <string>
#include <utility>
#include <vector>

namespace latmix::model {

class Checkpoint;

// One expert of a sparse MLP: SwiGLU without biases, [width, hidden] gate/up, [hidden, width] down.
struct ExpertWeights {
    at::Tensor wGate, wUp, wDown;
};

// The tensors of one decoder layer, Hugging Face layout ([out, in] weights). Undefined tensors
// are absent biases / norms (qNorm, kNorm: Qwen3 only). A sparse layer (ModelConfig::isSparseLayer)
// has a router [experts, hidden] and its experts instead of wGate/wUp/wDown.
struct LayerWeights {
    at::Tensor inputNorm, postNorm, qNorm, kNorm;
    at::Tensor wq, wk, wv, wo, bq, bk, bv, bo;
    at::Tensor wGate, wUp, wDown, bGate, bUp, bDown;
    at::Tensor router;
    std::vector<ExpertWeights> experts;
};

// Every tensor of the decoder. lmHead may share storage with embed (tied embeddings);
// lmHeadBias is undefined unless a folded T1 bias created one (SPEC §4).
struct LlamaWeights {
    at::Tensor embed, finalNorm, lmHead, lmHeadBias;
    std::vector<LayerWeights> layers;
};

// Reads the decoder's tensors (Hugging Face names) from a checkpoint. Float32 CPU tensors are
// the memory-mapped ones (read-only: clone before editing in place); other dtypes or devices
// are converted.
LlamaWeights loadWeights(const Checkpoint& checkpoint, at::ScalarType dtype = at::kFloat, c10::Device device = c10::kCPU);
// The matrices as stored (in the file's dtype: memory-mapped views on the CPU, copies on another
// device), the vectors (norms, biases) converted to dtype on that device: for a pass that
// converts one layer at a time (ForwardOptions::dtype), so a model costs its stored size plus
// one converted layer. A tied lm_head stays the embedding.
LlamaWeights loadStoredWeights(const Checkpoint& checkpoint, at::ScalarType dtype, c10::Device device = c10::kCPU);
// The same tensors under their Hugging Face names (ties resolved: lm_head.weight written when
// it is not the embedding itself or when the config does not tie).
std::vector<std::pair<std::string, at::Tensor>> namedTensors(const ModelConfig& config, const LlamaWeights& w);
// The defined tensors of one decoder layer under their names as layer `layer` ("model.layers.3.…";
// the config names a sparse layer's router and experts).
std::vector<std::pair<std::string, at::Tensor>> namedLayerTensors(const ModelConfig& config, const LayerWeights& y,
                                                                  int layer);
// Drops the resident pages of the layer's tensors that view a mapped file (io::releaseMappedPages):
// a pass over weights kept mapped holds one layer in memory, not the file.
void releaseMappedLayer(const LayerWeights& y);
// Every tensor converted (dtype and/or device).
LlamaWeights convertWeights(const LlamaWeights& w, const at::TensorOptions& options);
LayerWeights convertLayer(const LayerWeights& w, const at::TensorOptions& options);
ExpertWeights convertExpert(const ExpertWeights& x, const at::TensorOptions& options);
// Layer-wise offload for models larger than device memory: embeddings, final norm and lm_head
// converted to `compute`, the decoder layers kept in host memory (CPU, compute's dtype).
// forwardWith brings each layer to the device when it runs and drops it afterwards.
LlamaWeights offloadLayers(const LlamaWeights& w, const at::TensorOptions& compute);
// Where a layer computes: its own device when its weights sit on an accelerator (layers placed
// over several devices, `--devices`: the hidden states go to the layer), else `home` (weights in
// host memory, offloaded or mapped: the layer comes to the hidden states).
c10::Device layerComputeDevice(const LayerWeights& y, c10::Device home);

} // namespace latmix::model
