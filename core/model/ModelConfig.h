#pragma once
// The parts of a Hugging Face config.json the decoder needs (Llama family, SPEC §4; the
// mixture-of-experts members Qwen3-MoE and Mixtral, docs/spec.md "Mixture of experts").
#include "mx/MxFormat.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace latmix::model {

enum class Architecture { Llama, Mistral, Qwen2, Qwen3, Qwen3Moe, Mixtral };

// rope_scaling of type "llama3" (Llama 3.1+); other types are rejected with a clear error.
struct RopeScaling {
    std::string type = "llama3";
    double factor = 8.0;
    double lowFreqFactor = 1.0;
    double highFreqFactor = 4.0;
    int originalMaxPositions = 8192;
};

// The "latmix" object of a quantized run's config.json (core/export/RunModel): what a forward
// pass must do online to reproduce the quantized model: the online block Hadamard T3 on the
// down_proj input and the activation fake quantization at the four points of SPEC §4.
struct LatmixQuantization {
    std::string method;                         // "rtn", "latmix-lu", ...
    std::optional<mx::MxConfig> weightFormat;   // how the stored weights were quantized
    std::optional<mx::MxConfig> activationFormat;
    int t3Block = 0;                // T3 (SPEC §4: online block Hadamard on the down_proj input); 0: none
    std::uint64_t t3Seed = 0;
    // Online transforms of the points' inputs, "wush" (SPEC §2/§4): the model folder's
    // input_transforms.safetensors holds each layer's and point's blocks; empty: none.
    std::string inputTransforms;
    // The linears kept in full precision (--keep, SPEC §4 "Kept linears"): module names
    // ("model.layers.0.self_attn.q_proj"); neither their weights nor their inputs are quantized.
    std::vector<std::string> keptLinears;
    // A mixed-precision scheme's groups in another MX format than weightFormat (docs/spec.md,
    // "Mixed precision"): fusion group name ("layers.0.self_attn.qkv", model/FusionGroups.h) →
    // the format of its weights and of its input points' activations. Groups in bf16 are kept
    // linears instead; the rest take weightFormat / activationFormat.
    std::map<std::string, mx::MxConfig> groupFormats;
};

// The sparse MLP of a mixture-of-experts model: a router (hidden -> numExperts, no bias) picks
// expertsPerToken experts per token, each a SwiGLU MLP of expertWidth. Keys: Qwen3MoeConfig
// (num_experts, num_experts_per_tok, moe_intermediate_size, norm_topk_prob, decoder_sparse_step,
// mlp_only_layers) and MixtralConfig (num_local_experts, num_experts_per_tok; intermediate_size is
// the expert width, every layer sparse, the top-k always renormalised).
struct MoeConfig {
    int numExperts = 0;
    int expertsPerToken = 0;
    int expertWidth = 0;
    bool normTopK = true;          // divide the top-k probabilities by their sum
    int sparseStep = 1;            // decoder_sparse_step: layer i is sparse when (i + 1) % step == 0 ...
    std::vector<int> denseLayers;  // ... and i is not in mlp_only_layers (a dense MLP of intermediate_size)
};

struct ModelConfig {
    Architecture architecture = Architecture::Llama;
    std::string architectureName = "LlamaForCausalLM";
    int hiddenSize = 0;
    int intermediateSize = 0;
    int numLayers = 0;
    int numHeads = 0;
    int numKvHeads = 0;  // defaults to numHeads
    int headDim = 0;     // defaults to hiddenSize / numHeads
    int vocabSize = 0;
    int maxPositions = 2048;
    double rmsNormEps = 1e-6;
    double ropeTheta = 10000.0;
    std::optional<RopeScaling> ropeScaling;
    bool tieWordEmbeddings = false;
    bool qkvBias = false;   // Llama attention_bias / Qwen2 (always true there)
    bool oProjBias = false; // Llama attention_bias (not Qwen2)
    bool mlpBias = false;
    bool qkNorm = false;    // Qwen3 per-head RMSNorm on q and k
    int bosTokenId = -1;
    int eosTokenId = -1;
    std::string torchDtype = "float32";
    // lm_head carries a bias (a folded T1 with v1 != 0, SPEC §4); not a Hugging Face field: it
    // lives in the "latmix" object.
    bool lmHeadBias = false;
    std::optional<LatmixQuantization> latmix;
    std::optional<MoeConfig> moe; // Qwen3-MoE, Mixtral

    // Whether decoder layer `layer` has the sparse (router + experts) MLP; false for dense models.
    bool isSparseLayer(int layer) const;
    // The width of the down_proj inputs, T3's size: intermediate_size, or the experts' width in a
    // mixture-of-experts model. Throws std::invalid_argument when the model's dense layers
    // (mlp_only_layers) and experts differ in width, which no one T3 covers.
    int downProjWidth() const;

    // Parse config.json text / file; throws std::runtime_error naming the file and the field,
    // and for an unsupported architecture naming it and listing the supported ones.
    static ModelConfig fromJsonText(const std::string& text, const std::string& source = "config.json");
    static ModelConfig fromFile(const std::string& path);
    std::string toJsonText() const; // a config.json that fromJsonText reads back to the same values
    // The weights of one decoder layer's seven linears (q, k, v, o, gate, up, down), biases aside:
    // the unit of the FLOP counts, progress shares and memory estimates. A mixture-of-experts
    // model counts its largest layer: attention, router and every expert.
    std::int64_t layerLinearWeights() const;
    // The weights one token meets in a layer: the same for a dense model; attention, router and
    // expertsPerToken experts in a sparse layer (FLOPs of a forward pass).
    std::int64_t layerActiveWeights() const;

    static std::vector<std::string> supportedArchitectures();
};

} // namespace latmix::model
