#pragma once
// The Llama-family decoder in libtorch (Llama, Mistral, Qwen2, Qwen3; GQA; tied embeddings;
// llama3 RoPE scaling), float32 or bfloat16, CPU or CUDA, with named hooks at every
// activation quantization point of SPEC §4.
#include "model/ModelConfig.h"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <functional>
#include <string>
#include <vector>

namespace latmix::model {

class Checkpoint;

// The four activation quantization points of a layer (SPEC §4).
enum class PointKind { QkvInput, OProjInput, GateUpInput, DownProjInput };

// "layers.3.self_attn.qkv.input", "layers.3.self_attn.o_proj.input",
// "layers.3.mlp.gate_up.input", "layers.3.mlp.down_proj.input"
std::string pointName(int layer, PointKind kind);
std::vector<std::string> quantizationPointNames(const ModelConfig& config);
// Width of the activation at a point: hidden, heads*head_dim, hidden, intermediate.
int pointWidth(const ModelConfig& config, PointKind kind);

// Called with the activation entering the linear layer(s) of a point, shape [B, T, width];
// returns what the linear layers get (return x unchanged to observe only).
using ActivationHook = std::function<at::Tensor(const std::string& point, const at::Tensor& x)>;

class LlamaModel {
public:
    // Float32 weights on the CPU are used in place (memory-mapped, no copy); other dtypes or
    // devices are converted once.
    LlamaModel(const Checkpoint& checkpoint, at::ScalarType dtype = at::kFloat, c10::Device device = c10::kCPU);
    ~LlamaModel();
    LlamaModel(LlamaModel&&) noexcept;

    const ModelConfig& config() const { return m_config; }
    at::ScalarType dtype() const { return m_dtype; }
    c10::Device device() const { return m_device; }

    // tokens: int64 [B, T] with T <= max positions. Returns float32 logits [B, T, vocab].
    at::Tensor forward(const at::Tensor& tokens, const ActivationHook& hook = nullptr) const;

    // FLOPs of one forward pass over T tokens (2 per multiply-add, attention included).
    double forwardFlops(std::int64_t tokens) const;

private:
    struct Layer;
    ModelConfig m_config;
    at::ScalarType m_dtype;
    c10::Device m_device;
    at::Tensor m_embed, m_finalNorm, m_lmHead, m_invFreq;
    std::vector<Layer> m_layers;

    at::Tensor attention(const Layer& w, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                         int layer, const ActivationHook& hook) const;
    at::Tensor mlp(const Layer& w, const at::Tensor& x, int layer, const ActivationHook& hook) const;
};

// Resolves "cpu", "cuda", "cuda:N" or "auto" (CUDA when available); throws with the choices.
c10::Device parseDevice(const std::string& name);
at::ScalarType parseDtype(const std::string& name); // "float32" | "bfloat16"

} // namespace latmix::model
