#include "eval/Perplexity.h"

#include "model/LlamaModel.h"
#include "tokenizer/Tokenizer.h"
#include "util/AtomicFile.h"
#include "util/OutOfMemory.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace latmix::eval {

std::string wikiText2TestText(const std::string& rawPath) {
    const std::string raw = util::readTextFile(rawPath, "WikiText-2 test text");
    std::string out;
    out.reserve(raw.size() * 2);
    size_t pos = 0;
    bool first = true;
    while (pos < raw.size()) {
        size_t end = raw.find('\n', pos);
        end = end == std::string::npos ? raw.size() : end + 1; // keep the line's "\n"
        std::string line = raw.substr(pos, end - pos);
        pos = end;
        if (line.find_first_not_of(" \t\r\n\f\v") == std::string::npos) line.clear(); // HF drops blank rows' text
        if (!first) out += "\n\n";
        out += line;
        first = false;
    }
    return out;
}

std::vector<int> tokenizeForEvaluation(const tokenizer::Tokenizer& tok, const std::string& text) {
    return tok.encode(text, tok.addsBosByDefault());
}

EvaluationWindows evaluationWindows(int maxPositions, std::size_t tokens, const PerplexityOptions& options) {
    EvaluationWindows e;
    e.seqLen = std::min(options.seqLen, maxPositions);
    if (e.seqLen < 2) throw std::invalid_argument("perplexity needs a sequence length of at least 2");
    e.count = static_cast<int>(tokens / static_cast<size_t>(e.seqLen));
    if (options.maxWindows > 0) e.count = std::min(e.count, options.maxWindows);
    if (e.count == 0)
        throw std::invalid_argument("the text has " + std::to_string(tokens) + " tokens, fewer than one window of " +
                                    std::to_string(e.seqLen));
    return e;
}

PerplexityResult evaluatePerplexity(const model::LlamaModel& model, const std::vector<int>& ids,
                                    const PerplexityOptions& options, JobContext& job, const WindowVisitor& visit) {
    PerplexityResult r;
    const EvaluationWindows e = evaluationWindows(model.config().maxPositions, ids.size(), options);
    r.seqLen = e.seqLen;
    const int windows = e.count;
    auto all = at::tensor(std::vector<int64_t>(ids.begin(), ids.end()), at::kLong);
    double nllSum = 0;
    const auto start = std::chrono::steady_clock::now();
    at::NoGradGuard noGrad;
    for (int w = 0; w < windows; ++w) {
        job.checkCancelled();
        const std::string stage = "evaluation window " + std::to_string(w + 1) + "/" + std::to_string(windows);
        nllSum += guardMemory(stage, "evaluate with a shorter window (latmix eval --seqlen, latmix quantize --eval-seqlen) or, in latmix "
                                    "quantize, with --offload (one layer on the device at a time)", [&] {
            // Chunked over the vocabulary: never [seqLen, vocab] logits at once (LlamaModel::sequenceNll).
            const auto tokens = all.narrow(0, static_cast<int64_t>(w) * r.seqLen, r.seqLen).unsqueeze(0);
            if (!visit) return model.sequenceNll(tokens);
            // sequenceNll's steps, the states kept for the visitor.
            const auto h = model::forwardHidden(model.config(), model.weights(), model.options(), tokens);
            const auto hidden = h.narrow(1, 0, r.seqLen - 1).reshape({r.seqLen - 1, h.size(2)});
            const auto nll = model::nextTokenNll(model.config(), model.weights(), hidden, tokens.narrow(1, 1, r.seqLen - 1).reshape({-1}));
            visit(w, hidden, nll);
            return nll.to(at::kDouble).sum().item<double>();
        });
        r.tokens += r.seqLen - 1;
        job.progress(double(w + 1) / windows, "window " + std::to_string(w + 1) + "/" + std::to_string(windows));
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    r.windows = windows;
    r.meanNll = nllSum / static_cast<double>(r.tokens);
    r.perplexity = std::exp(r.meanNll);
    r.tokensPerSecond = static_cast<double>(windows) * r.seqLen / r.seconds;
    return r;
}

} // namespace latmix::eval
