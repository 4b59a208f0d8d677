#pragma once
// Where the perplexity checks of folded models get their tolerance, and what they need for it:
// the trained student a learned run describes, rebuilt here from its transforms.h5 with float32
// folding (the run folds in float64), and the largest |logit| a model gives on the evaluation
// windows.
//
// The bound. tst_fold's exactFolds: a float32 forward of folded weights stays within 1e-4 of the
// largest |logit| L of the model it should equal (two float32 forwards, ~1e-6 each, plus the
// float32 rounding of the folded weights). A token's NLL is its target's logit minus the
// log-sum-exp of its logits; each moves by at most the largest logit change, so the NLL by at most
// twice that, and so does the mean over the tokens: |log(perplexity a / perplexity b)| <= 2e-4 L.
// A wrong fold moves the logits by O(L).
#include "eval/Perplexity.h"
#include "fold/ModelTransforms.h"
#include "model/Checkpoint.h"
#include "model/LlamaModel.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <string>
#include <vector>

namespace latmix::test {

constexpr double kFoldedLogitBound = 1e-4; // tst_fold's exactFolds, relative to the largest |logit|

inline double foldedLogPerplexityBound(double largestLogit) { return 2 * kFoldedLogitBound * largestLogit; }

// The student of a run: base's weights in float32 folded with the run's transforms.h5
// (fold::foldedModel: γ, T3, T1/T2 folded in float32; T3 online), where the run folds in float64.
inline model::LlamaModel foldedStudent(const model::Checkpoint& base, const std::string& transformsPath) {
    const auto t = fold::ModelTransforms::load(base.config(), transformsPath);
    return fold::foldedModel(base.config(), model::loadWeights(base, at::kFloat), t, at::TensorOptions().dtype(at::kFloat));
}

// The largest |logit| of m over the first `windows` non-overlapping windows of seqLen tokens of
// ids: the windows eval::evaluatePerplexity scores.
inline double largestLogit(const model::LlamaModel& m, const std::vector<int>& ids, int seqLen, int windows) {
    at::NoGradGuard noGrad;
    double largest = 0;
    for (int w = 0; w < windows && std::size_t(w + 1) * std::size_t(seqLen) <= ids.size(); ++w) {
        const std::vector<int64_t> window(ids.begin() + std::ptrdiff_t(w) * seqLen, ids.begin() + std::ptrdiff_t(w + 1) * seqLen);
        largest = std::max(largest, m.forward(at::tensor(window, at::kLong).reshape({1, seqLen})).abs().max().item<double>());
    }
    return largest;
}

} // namespace latmix::test
