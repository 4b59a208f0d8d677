#include "analysis/ModelAnalysis.h"

#include "model/Checkpoint.h"
#include "model/Capture.h"
#include "model/LlamaModel.h"
#include "model/TensorNames.h"
#include "tokenizer/Tokenizer.h"
#include "fold/ModelTransforms.h"

#include <ATen/ATen.h>

#include <memory>
#include <stdexcept>

namespace latmix::analysis {

train::PointActivations captureModelActivations(const ModelCapture& r, JobContext& job) {
    const auto ck = model::Checkpoint::load(r.modelDir);
    const auto device = model::parseDevice(r.device);
    const auto ids = tokenizer::Tokenizer::loadFromDir(r.modelDir)->encode(r.calibrationText, false);
    if (r.checkWeights) {
        model::capturePoints(ck.config(), r.pointsRegex, r.expertPoints, "of the model"); // refused first
        SubJob check(job, 0.0, 0.0, "");
        model::checkWeightsFinite(ck, check);
    }
    if (r.transformsFile.empty()) {
        const model::LlamaModel m(ck, r.dtype, device);
        return train::captureActivationsInMemory(m, ids, r.pointsRegex, r.samples, r.seqLen, r.seed, r.maxRows, r.expertPoints, job);
    }
    std::unique_ptr<fold::ModelTransforms> t;
    try {
        t = std::make_unique<fold::ModelTransforms>(fold::ModelTransforms::load(ck.config(), r.transformsFile));
    } catch (const std::exception& e) {
        throw std::runtime_error("cannot use the transforms in '" + r.transformsFile + "' with the model in '" + r.modelDir +
                                 "': " + e.what() + " (is it a run of this model?)");
    }
    const auto folded = fold::foldedModel(ck.config(), model::loadWeights(ck, r.dtype, device), *t,
                                           at::TensorOptions().dtype(r.dtype).device(device));
    return train::captureActivationsInMemory(folded, ids, r.pointsRegex, r.samples, r.seqLen, r.seed, r.maxRows, r.expertPoints, job);
}

eval::ExpertLoad measureModelExpertLoad(const ModelCapture& r, JobContext& job) {
    const auto ck = model::Checkpoint::load(r.modelDir);
    if (!ck.config().moe)
        throw std::invalid_argument(r.modelDir + " (" + ck.config().architectureName +
                                    ") has no experts: the expert load is a mixture-of-experts model's (Qwen3-MoE, Mixtral)");
    const auto ids = tokenizer::Tokenizer::loadFromDir(r.modelDir)->encode(r.calibrationText, false);
    const auto windows = model::sampleCalibrationWindows(ids, r.samples, r.seqLen, r.seed);
    const model::LlamaModel m(ck, r.dtype, model::parseDevice(r.device));
    return eval::measureExpertLoad(m, windows, job);
}

namespace {

// The weight of module `linear` ("self_attn.q_proj", a sparse layer's "mlp.gate" router or
// "mlp.experts.5.up_proj") of layer `layer`.
at::Tensor linearOf(const model::ModelConfig& c, const model::LayerWeights& y, int layer, const std::string& linear) {
    const std::string name = model::names::layerPrefix(layer) + linear + ".weight";
    for (const auto& [n, t] : model::namedLayerTensors(c, y, layer))
        if (n == name && t.dim() == 2) return t;
    std::string known;
    for (const char* n : {model::names::kQProj, model::names::kKProj, model::names::kVProj, model::names::kOProj})
        known += std::string(known.empty() ? "" : ", ") + n;
    if (c.isSparseLayer(layer))
        known += ", " + model::names::routerModule(c) + " (the router), " +
                 model::names::expertModule(c, 0, model::names::ExpertLinear::Gate) + " … (experts 0.." +
                 std::to_string(c.moe->numExperts - 1) + ")";
    else
        known += ", mlp.gate_proj, mlp.up_proj, mlp.down_proj";
    throw std::invalid_argument("'" + linear + "' is not a linear of layer " + std::to_string(layer) + " (" + known + ")");
}

} // namespace

std::map<std::string, at::Tensor> capturedPointWeights(const ModelCapture& request, const train::PointActivations& points) {
    const auto ck = model::Checkpoint::load(request.modelDir);
    const auto& c = ck.config();
    const auto stored = model::loadStoredWeights(ck, at::kFloat);
    std::unique_ptr<fold::ModelTransforms> t;
    if (!request.transformsFile.empty())
        t = std::make_unique<fold::ModelTransforms>(fold::ModelTransforms::load(c, request.transformsFile));
    std::map<std::string, at::Tensor> r;
    for (int l = 0; l < c.numLayers; ++l) {
        std::vector<std::string> wanted;
        for (const auto& [name, x] : points)
            if (name.rfind("layers." + std::to_string(l) + ".", 0) == 0) wanted.push_back(name);
        if (wanted.empty()) continue;
        const auto& y0 = stored.layers[static_cast<std::size_t>(l)];
        const model::LayerWeights y = t ? fold::foldedLayer(c, y0, *t, l, at::TensorOptions().dtype(at::kDouble),
                                                            at::TensorOptions().dtype(at::kFloat))
                                        : model::convertLayer(y0, at::TensorOptions().dtype(at::kFloat));
        for (const auto& name : wanted) {
            for (int k = 0; k < 4; ++k) {
                const auto kind = static_cast<model::PointKind>(k);
                if (name == model::pointName(l, kind) && !(c.isSparseLayer(l) && k >= 2))
                    r[name] = model::pointWeights(c, y, l, kind).contiguous();
            }
            for (int e = 0; e < static_cast<int>(y.experts.size()); ++e)
                if (name == model::expertPointName(l, e, model::PointKind::DownProjInput))
                    r[name] = y.experts[static_cast<std::size_t>(e)].wDown.contiguous();
        }
        model::releaseMappedLayer(y0);
    }
    return r;
}

LinearWeights loadLinearWeights(const std::string& modelDir, int layer, const std::string& linear,
                                const std::string& transformsFile) {
    const auto ck = model::Checkpoint::load(modelDir);
    const auto& c = ck.config();
    if (layer < 0 || layer >= c.numLayers)
        throw std::invalid_argument("layer " + std::to_string(layer) + " is not a layer of the model in '" + modelDir +
                                    "' (it has " + std::to_string(c.numLayers) + ": 0.." + std::to_string(c.numLayers - 1) + ")");
    // The stored matrices are memory-mapped; only this layer is converted.
    const auto stored = model::loadStoredWeights(ck, at::kFloat);
    const auto& y = stored.layers[static_cast<std::size_t>(layer)];
    LinearWeights r;
    r.original = linearOf(c, y, layer, linear).to(at::kFloat).contiguous();
    if (transformsFile.empty()) return r;
    std::unique_ptr<fold::ModelTransforms> t;
    try {
        t = std::make_unique<fold::ModelTransforms>(fold::ModelTransforms::load(c, transformsFile));
    } catch (const std::exception& e) {
        throw std::runtime_error("cannot use the transforms in '" + transformsFile + "' with the model in '" + modelDir +
                                 "': " + e.what() + " (is it a run of this model?)");
    }
    // float64 like the pipeline's final fold, then float32 as the quantizer gets it.
    const auto folded =
        fold::foldedLayer(c, y, *t, layer, at::TensorOptions().dtype(at::kDouble), at::TensorOptions().dtype(at::kFloat));
    r.folded = linearOf(c, folded, layer, linear).contiguous();
    return r;
}

} // namespace latmix::analysis
