#pragma once
// The parts of a Hugging Face config.json the decoder needs (Llama family, SPEC §4).
#include "mx/MxFormat.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace latmix::model {

enum class Architecture { Llama, Mistral, Qwen2, Qwen3 };

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

    // Parse config.json text / file; throws std::runtime_error naming the file and the field,
    // and for an unsupported architecture naming it and listing the supported ones.
    static ModelConfig fromJsonText(const std::string& text, const std::string& source = "config.json");
    static ModelConfig fromFile(const std::string& path);
    std::string toJsonText() const; // a config.json that fromJsonText reads back to the same values
    // The weights of one decoder layer's seven linears (q, k, v, o, gate, up, down), biases aside:
    // the unit of the FLOP counts, progress shares and memory estimates.
    std::int64_t layerLinearWeights() const;

    static std::vector<std::string> supportedArchitectures();
};

} // namespace latmix::model
