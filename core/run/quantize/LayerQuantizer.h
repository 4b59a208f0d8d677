#pragma once
// The quantize stage of a run (run/quantize/Stages.h): the weights quantized a decoder layer at a
// time, each layer's inputs taken from the already quantized layers with the activations
// quantized as the deployed W4A4 model computes them. The Hessian of a linear is taken from
// exactly what it receives there (after T3 and activation quantization). All linears of a layer
// are collected in one pass before any of them is quantized (GPTQ's default, not
// "true-sequential"). Only one layer's activations and weights live at a time.
//
// Mixture-of-experts layers: each expert's gate/up and down_proj are quantized with the Hessians
// of the tokens routed to it in the already quantized model (its rows of the shared input, its own
// down_proj input). An expert that received fewer than kStarvedShare of the layer's calibration
// tokens is rounded to nearest instead (GPTQModel's fallback rule, its default 0.5%): GPTQ on a
// handful of rows fits those rows, not the expert; the tokens of every expert and the fallbacks
// are reported (LinearReport, latmix.json).
//
// Data parallel (RunHooks::group of several ranks): each rank runs its share of the
// calibration windows through the layer, the Hessians' sums x xᵀ and row counts are summed over
// the ranks (an all-reduce: the Hessian of all windows, as one process computes it up to the
// order of float64 additions), and each linear is quantized once, by the rank it is assigned to
// (the layer's GPTQ work balanced over the ranks); its owner broadcasts the packed codes and
// every rank unpacks them (mx::unpack gives the quantized weight bit for bit) to carry its
// windows on to the next layer.
#include "run/quantize/Stages.h"

#include <map>
#include <string>

namespace latmix::run {

// One quantized layer: its tensors (Hugging Face names, the quantized linears dequantized, on the
// device) and the packed weights of its block linears by prefix.
struct QuantizedLayer {
    std::map<std::string, at::Tensor> tensors;
    std::map<std::string, mx::PackedTensor> packed; // none for the linears kept in full precision
    std::map<std::string, transforms::BlockDiagonal> inputTransforms; // WUSH's, by point name
    // Each NVFP4 linear's largest |x| at its input over the calibration windows, by module name
    // (RunModel::inputAmax: compressed-tensors' static input_global_scale, docs/spec.md §6).
    std::map<std::string, float> inputAmax;
};

// The share of a layer's calibration tokens below which an expert falls back to RTN.
inline constexpr double kStarvedShare = 0.005;

class LayerQuantizer {
public:
    // Embeds this rank's share of the calibration windows (GPTQ: all; RTN: the first
    // --rtn-error-windows, none by default).
    LayerQuantizer(const RunContext& ctx, const ModelToQuantize& source, const at::Tensor& calib, QuantizeResult& result);
    // Layer `layer` (0, 1, ... in order): its linears quantized, their reports appended to the
    // result, the windows carried through the quantized layer. job's progress is the layer's
    // part, reported before each linear by the linear's name ("mlp.down_proj"). Every rank of a
    // data-parallel run calls it for every layer; a cancel on any rank stops them all at the
    // same layer; one process stops before the next linear. Each linear's result takes the
    // original's place as soon as it is quantized, so a layer is held once in float32, not as
    // the original beside all its results.
    QuantizedLayer quantizeLayer(int layer, JobContext& job);
    // The embedding, final norm, lm_head (and its bias) as they are: not quantized.
    std::map<std::string, at::Tensor> topLevel() const;

private:
    struct Linear;
    // Hessian accumulators by input point name (model::pointName, model::expertPointName).
    using Hessians = std::map<std::string, std::unique_ptr<quant::HessianAccumulator>>;
    Hessians collectHessians(int layer, const model::LayerWeights& y, const std::vector<Linear>& linears);
    std::map<std::string, transforms::BlockDiagonal> wushLayer(int layer, model::LayerWeights& y, const std::vector<Linear>& linears);
    std::vector<quant::QuantizedWeight> quantizeLinears(int layer, const std::vector<Linear>& linears, Hessians& hessians,
                                                        std::vector<double>& seconds, JobContext& job);
    std::vector<float> fusedGlobalScales(const std::vector<Linear>& linears) const;
    void shareLinear(quant::QuantizedWeight& q, double& seconds, int owner, const at::Tensor& w, const mx::MxConfig& format);
    void adoptResult(const Linear& linear, quant::QuantizedWeight& q) const;
    std::vector<Linear> layerLinears(int layer, model::LayerWeights& y) const;
    void markLinears(int layer, std::vector<Linear>& linears) const;
    bool starved(const Linear& linear) const;
    void agreeOnCancel(JobContext& job);

    const RunContext& ctx;
    const ModelToQuantize& source; // the model whose layers are quantized
    QuantizeResult& result;
    model::RopeTables rope;
    model::ForwardOptions options;
    std::map<std::string, mx::MxConfig> linearFormats; // --scheme: the linears in another format than --format
    dist::Group* group = nullptr; // several ranks, else null
    at::Tensor h;                 // this rank's windows at the input of the next layer
    bool flowing = false;         // windows pass through the layers (h holds them)
    bool calibrated = false;      // and feed Hessians (GPTQ's, or RTN's output-space error)
    std::map<std::string, float> pointAmax; // this layer's NVFP4 input points: largest |x| (all ranks)
    bool costOnGpu = false;       // every rank on a GPU: the linears' cost model (linearSeconds)
    std::map<std::string, std::int64_t> pointRows; // this layer's calibration rows per point (all ranks)
    std::int64_t layerTokens = 0;                  // the calibration tokens through each layer (all ranks)
};

} // namespace latmix::run
