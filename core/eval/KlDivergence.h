#pragma once
// A model against a reference on the perplexity windows, as llama.cpp's `llama-perplexity
// --kl-divergence` compares a quantized model with its base (SPEC §7, "Against a reference"):
// the mean KL(reference ‖ model) per predicted token and its 99th percentile, how often both
// pick the same most likely token, and the perplexity difference with its standard error.
//
// Two passes, so that the two models are never in memory together: the reference's pass keeps
// its final normed hidden states of every window (float32, spilled to a folder) and its lm_head;
// the model's pass then forms both distributions a vocabulary chunk at a time.
#include "eval/Perplexity.h"
#include "util/Job.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace latmix::model {
class LlamaModel;
} // namespace latmix::model

namespace latmix::eval {

// What the reference's pass leaves: its perplexity on the windows, the per-token NLL and what
// the model's pass needs to rebuild its distributions. Move-only; the spill folder is removed
// when the last owner goes.
class ReferenceStates {
public:
    // Runs `reference` over the windows of ids (evaluatePerplexity's windows and NLL, bit for
    // bit) and writes each window's normed final hidden states to spillDir (created; must not
    // exist). Honours cancel between windows; a cancelled or failed pass removes the folder.
    static ReferenceStates record(const model::LlamaModel& reference, const std::vector<int>& ids,
                                  const PerplexityOptions& options, const std::string& spillDir,
                                  JobContext& job = silentJob());
    ReferenceStates(ReferenceStates&&) noexcept;
    ReferenceStates& operator=(ReferenceStates&&) noexcept;
    ~ReferenceStates();

    const PerplexityResult& perplexity() const; // the reference's own
    int windows() const;
    int seqLen() const;
    const std::string& spillDir() const;

private:
    struct Data;
    explicit ReferenceStates(std::shared_ptr<Data> d);
    std::shared_ptr<Data> m;
    friend struct KlPass;
};

struct KlResult {
    PerplexityResult perplexity;       // the model's, bit for bit evaluatePerplexity's
    PerplexityResult referencePerplexity;
    std::int64_t tokens = 0;           // predicted tokens compared
    double meanKl = 0, klStdErr = 0;   // nats per token; standard error of the mean
    double klP99 = 0, klMax = 0;       // 99th percentile (linear between order statistics), largest
    double top1 = 0, top1StdErr = 0;   // fraction of tokens whose most likely token both models share
    double deltaPpl = 0, deltaPplStdErr = 0; // PPL(model) − PPL(reference), delta method with covariance
};

// The model over the reference's windows (the same ids and options it recorded with; a window
// length or count that differs is refused). Each window's logits are formed vocabChunk rows at
// a time for both models, never [tokens, vocab] at once.
KlResult evaluateAgainstReference(const model::LlamaModel& model, const std::vector<int>& ids,
                                  const ReferenceStates& reference, JobContext& job = silentJob(),
                                  std::int64_t vocabChunk = 4096);

// The statistics of KlResult from per-token values (float64 throughout): KL(ref ‖ model),
// whether the most likely tokens agree, and both NLLs. Exposed for the tests' hand-worked rows.
void summarizeKl(const std::vector<float>& kl, const std::vector<std::uint8_t>& sameTop1,
                 const std::vector<float>& nllModel, const std::vector<float>& nllReference, KlResult& out);

} // namespace latmix::eval
