#pragma once
// Zero-shot accuracy (SPEC §7) scored as lm-evaluation-harness scores its default tasks: the
// summed log-likelihood of each continuation given its context, tokenised as the harness's
// Hugging Face model does (no BOS unless asked; the context's trailing spaces moved to the
// continuation; the continuation's tokens are those of context + continuation after the
// context's), contexts longer than the model truncated from the left. A document's choices that
// share a context are scored in one packed row (the context once, then each choice's tokens
// seeing the context and their own earlier tokens only), so the context is computed once.
#include "eval/ZeroShotTasks.h"
#include "util/Job.h"

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <utility>
#include <vector>

namespace latmix::model {
class LlamaModel;
} // namespace latmix::model
namespace latmix::tokenizer {
class Tokenizer;
} // namespace latmix::tokenizer

namespace latmix::eval {

struct ZeroShotOptions {
    bool addBos = false;     // the harness's add_bos_token (off by default for causal models)
    int maxLength = 0;       // tokens a row may hold; 0: the model's maximum positions
    int batchTokens = 4096;  // rows of several documents go through one forward up to this many tokens
};

// The log-likelihood of one (context, continuation) request.
struct RequestScore {
    double logLikelihood = 0; // summed over the continuation's tokens (float64 sum of float32 terms)
    bool greedy = false;      // every continuation token is the largest-logit prediction
    int tokens = 0;           // the continuation's tokens
};
struct DocScores {
    std::vector<RequestScore> requests; // MultipleChoice: one a choice; PartialContext: one a context
    bool truncated = false;             // some request lost context tokens on the left
};

// The harness's pair encoding: trailing whitespace of the context moves to the continuation;
// context tokens = encode(context), continuation tokens = encode(context + continuation) after
// as many tokens. An empty context is the BOS (else EOS) token alone.
std::pair<std::vector<int>, std::vector<int>> encodePair(const tokenizer::Tokenizer& tok, const std::string& context,
                                                         const std::string& continuation, bool addBos);

// Every request of every document scored. Progress per document; cancel between forwards.
std::vector<DocScores> scoreDocuments(const model::LlamaModel& model, const tokenizer::Tokenizer& tok,
                                      const std::vector<ZeroShotDoc>& docs, const ZeroShotOptions& options,
                                      JobContext& job = silentJob());

struct MetricValue {
    std::string metric; // acc, acc_norm, perplexity
    double value = 0;
    double stderror = 0; // standard error of the mean over documents (sample std / sqrt(n)); NaN when n < 2
};
struct ZeroShotTaskResult {
    std::string task;
    int docs = 0;
    int truncated = 0; // documents whose context was cut on the left
    double seconds = 0;
    std::vector<MetricValue> metrics;
    // The accuracy the average uses: acc_norm where the task reports it, else acc.
    double headline() const;
};

// The harness's metrics of a task from its documents' scores: acc (argmax of the
// log-likelihoods, the first on ties), acc_norm (of log-likelihood / choice bytes), LAMBADA's acc
// (greedy) and perplexity (exp of minus the mean log-likelihood over documents; its standard
// error by the delta method, ppl x stderr(mean), where the harness bootstraps).
ZeroShotTaskResult taskMetrics(const ZeroShotTask& task, const std::vector<DocScores>& scores);

struct ZeroShotResult {
    std::vector<ZeroShotTaskResult> tasks;
    // Mean of the tasks' headline accuracies (acc_norm where reported, else acc), as QuaRot and
    // SpinQuant average the harness's results.
    double average = 0;
    double seconds = 0;
};

ZeroShotResult evaluateZeroShot(const model::LlamaModel& model, const tokenizer::Tokenizer& tok,
                                const std::vector<ZeroShotTask>& tasks, const ZeroShotOptions& options,
                                JobContext& job = silentJob());

// A table: task, metric, value, stderr, n (and truncated documents), then the average.
std::string zeroShotTable(const ZeroShotResult& result);
// {"tasks": {task: {metric: value, metric_stderr: value|null, "n", "truncated", "seconds"}},
//  "average": ..., "seconds": ...} (the harness's results keys, without its ",none" filter suffix).
nlohmann::json zeroShotJson(const ZeroShotResult& result);

} // namespace latmix::eval
