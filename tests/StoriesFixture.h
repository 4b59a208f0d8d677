#pragma once
// The training tests' fixture: stories260K-hf (the real TinyStories Llama, LATMIX_DATA_DIR) in
// float32 and 8 random token windows of 32 tokens (no tokenizer needed to exercise a loss).
#include "TestData.h"

#include "model/Checkpoint.h"
#include "model/LlamaModel.h"

#include <ATen/ATen.h>
#include <QFile>

#include <memory>

namespace latmix::test {

struct StoriesFixture {
    std::unique_ptr<model::Checkpoint> ck;
    model::LlamaWeights w;
    at::Tensor calib;
};

// False when the model is not there (the caller skips with LATMIX_DATA_SKIP).
inline bool loadStoriesFixture(StoriesFixture& f) {
    const QString dir = dataDir() + "/models/stories260K-hf";
    if (!QFile::exists(dir + "/config.json")) return false;
    f.ck = std::make_unique<model::Checkpoint>(model::Checkpoint::load(dir.toStdString()));
    f.w = model::loadWeights(*f.ck);
    f.calib = at::randint(0, f.ck->config().vocabSize, {8, 32}, at::detail::createCPUGenerator(5), at::kLong);
    return true;
}

} // namespace latmix::test
