#include "run/ModelAnalysis.h"

#include "model/Checkpoint.h"
#include "model/LlamaModel.h"
#include "tokenizer/Tokenizer.h"
#include "train/ModelTransforms.h"

#include <ATen/ATen.h>

#include <memory>
#include <stdexcept>

namespace latmix::run {

train::PointActivations captureModelActivations(const ModelCapture& r, JobContext& job) {
    const auto ck = model::Checkpoint::load(r.modelDir);
    const auto device = model::parseDevice(r.device);
    const auto ids = tokenizer::Tokenizer::loadFromDir(r.modelDir)->encode(r.calibrationText, false);
    if (r.transformsFile.empty()) {
        const model::LlamaModel m(ck, r.dtype, device);
        return train::captureActivationsInMemory(m, ids, r.pointsRegex, r.samples, r.seqLen, r.seed, r.maxRows, job);
    }
    std::unique_ptr<train::ModelTransforms> t;
    try {
        t = std::make_unique<train::ModelTransforms>(train::ModelTransforms::load(ck.config(), r.transformsFile));
    } catch (const std::exception& e) {
        throw std::runtime_error("cannot use the transforms in '" + r.transformsFile + "' with the model in '" + r.modelDir +
                                 "': " + e.what() + " (is it a run of this model?)");
    }
    const auto folded = train::foldedModel(ck.config(), model::loadWeights(ck, r.dtype, device), *t,
                                           at::TensorOptions().dtype(r.dtype).device(device));
    return train::captureActivationsInMemory(folded, ids, r.pointsRegex, r.samples, r.seqLen, r.seed, r.maxRows, job);
}

} // namespace latmix::run
