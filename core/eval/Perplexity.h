#pragma once
// WikiText-2 perplexity with the GPTQ-lineage protocol (SPEC §7).
#include "util/Job.h"

#include <cstdint>
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

// Non-overlapping windows of seqLen tokens, tail dropped; each window predicts tokens 2..L from
// their prefixes. Reports progress per window; honours cancel between windows.
PerplexityResult evaluatePerplexity(const model::LlamaModel& model, const std::vector<int>& ids,
                                    const PerplexityOptions& options, JobContext& job = silentJob());

} // namespace latmix::eval
