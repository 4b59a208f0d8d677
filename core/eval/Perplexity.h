#pragma once
// WikiText-2 perplexity with the GPTQ-lineage protocol (SPEC §7).
#include "util/Job.h"

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace latmix::model {
class LlamaModel;
} // namespace latmix::model
namespace latmix::tokenizer {
class Tokenizer;
} // namespace latmix::tokenizer

namespace latmix::eval {

// The test text exactly as Hugging Face's wikitext-2-raw-v1 test rows joined with "\n\n": each
// line of wiki.test.raw keeps its "\n", whitespace-only lines become "", then all are joined.
std::string wikiText2TestText(const std::string& rawPath);

// Tokenize once, with BOS only if the tokenizer adds one by default (once at the start).
std::vector<int> tokenizeForEvaluation(const tokenizer::Tokenizer& tok, const std::string& text);

struct PerplexityOptions {
    int seqLen = 2048;    // capped at the model's max positions
    int maxWindows = 0;   // 0: all full windows
};

struct PerplexityResult {
    double perplexity = 0;
    double meanNll = 0;          // token-weighted mean cross-entropy (nats)
    std::int64_t tokens = 0;     // predicted tokens
    int windows = 0;
    int seqLen = 0;
    double seconds = 0;
    double tokensPerSecond = 0;  // forward tokens per second
};

// The windows a text of `tokens` tokens is cut into: seqLen (options.seqLen, at most the model's
// maxPositions) and how many (at most options.maxWindows when > 0). Throws std::invalid_argument
// for a seqLen below 2 or a text shorter than one window.
struct EvaluationWindows {
    int seqLen = 0;
    int count = 0;
};
EvaluationWindows evaluationWindows(int maxPositions, std::size_t tokens, const PerplexityOptions& options);

// What a pass over the windows shows of each one, for a comparison with another model
// (eval/KlDivergence): the states before the final norm of its first seqLen-1 positions
// [seqLen-1, hidden] and their NLLs [seqLen-1] (float32), on the model's device.
using WindowVisitor = std::function<void(int window, const at::Tensor& hidden, const at::Tensor& nll)>;

// Non-overlapping windows of seqLen tokens, tail dropped; each window predicts tokens 2..L from
// their prefixes. Reports progress per window; honours cancel between windows. visit, when
// given, sees every window; the result is the same with or without it.
PerplexityResult evaluatePerplexity(const model::LlamaModel& model, const std::vector<int>& ids,
                                    const PerplexityOptions& options, JobContext& job = silentJob(),
                                    const WindowVisitor& visit = nullptr);

} // namespace latmix::eval
