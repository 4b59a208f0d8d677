#include "run/ModelAnalysis.h"

#include "model/Checkpoint.h"
#include "model/LlamaModel.h"
#include "tokenizer/Tokenizer.h"

namespace latmix::run {

train::PointActivations captureModelActivations(const ModelCapture& r, JobContext& job) {
    const auto ck = model::Checkpoint::load(r.modelDir);
    const model::LlamaModel m(ck, r.dtype, model::parseDevice(r.device));
    const auto ids = tokenizer::Tokenizer::loadFromDir(r.modelDir)->encode(r.calibrationText, false);
    return train::captureActivationsInMemory(m, ids, r.pointsRegex, r.samples, r.seqLen, r.seed, r.maxRows, job);
}

} // namespace latmix::run
