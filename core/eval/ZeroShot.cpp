#include "eval/ZeroShot.h"

#include "model/LlamaModel.h"
#include "tokenizer/Tokenizer.h"
#include "util/OutOfMemory.h"
#include "util/Stats.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <stdexcept>

namespace latmix::eval {
namespace {

// One row of a forward: tokens, their RoPE positions, their segment (0: the context; s > 0: the
// s-th continuation, which sees the context and its own earlier tokens; -1: padding), and the
// predictions read from it.
struct Scored {
    int doc, request;
    int at;     // the row position whose output predicts the token
    int target; // the token
};
struct Row {
    std::vector<std::int64_t> tokens, positions, segment;
    std::vector<Scored> scored;
};

// The requests of a document: (context index, continuation index) pairs in the order the
// metrics read them (one a choice or one a context).
std::vector<std::pair<int, int>> requestsOf(const ZeroShotDoc& d) {
    std::vector<std::pair<int, int>> r;
    if (d.contexts.size() == 1)
        for (int c = 0; c < static_cast<int>(d.continuations.size()); ++c) r.emplace_back(0, c);
    else
        for (int x = 0; x < static_cast<int>(d.contexts.size()); ++x) r.emplace_back(x, 0);
    return r;
}

// The rows scoring one document. Requests with the same context tokens share one packed row when
// it fits in maxLength; otherwise each request gets its own row, cut on the left as the harness
// cuts it ((context + continuation)[-(maxLength + 1):][:-1]).
std::vector<Row> rowsOf(const tokenizer::Tokenizer& tok, const ZeroShotDoc& d, int doc, int maxLength, bool addBos,
                        bool& truncated) {
    const auto requests = requestsOf(d);
    std::vector<std::pair<std::vector<int>, std::vector<int>>> enc;
    for (const auto& [x, c] : requests) enc.push_back(encodePair(tok, d.contexts[static_cast<std::size_t>(x)],
                                                                 d.continuations[static_cast<std::size_t>(c)], addBos));
    std::vector<Row> rows;
    std::map<std::vector<int>, std::vector<int>> byContext; // context tokens -> requests
    for (int r = 0; r < static_cast<int>(enc.size()); ++r) byContext[enc[static_cast<std::size_t>(r)].first].push_back(r);
    for (const auto& [context, members] : byContext) {
        const int L = static_cast<int>(context.size());
        int packed = L;
        for (int r : members) packed += std::max(0, static_cast<int>(enc[static_cast<std::size_t>(r)].second.size()) - 1);
        if (packed <= maxLength) {
            Row row;
            for (int i = 0; i < L; ++i) {
                row.tokens.push_back(context[static_cast<std::size_t>(i)]);
                row.positions.push_back(i);
                row.segment.push_back(0);
            }
            int segment = 0;
            for (int r : members) {
                const auto& cont = enc[static_cast<std::size_t>(r)].second;
                ++segment;
                int previous = L - 1; // the context's last token predicts the first
                for (std::size_t j = 0; j < cont.size(); ++j) {
                    row.scored.push_back({doc, r, previous, cont[j]});
                    if (j + 1 == cont.size()) break; // the last token predicts nothing scored
                    previous = static_cast<int>(row.tokens.size());
                    row.tokens.push_back(cont[j]);
                    row.positions.push_back(L + static_cast<std::int64_t>(j));
                    row.segment.push_back(segment);
                }
            }
            rows.push_back(std::move(row));
            continue;
        }
        for (int r : members) { // one row a request, the harness's left truncation
            std::vector<int> all = context;
            const auto& cont = enc[static_cast<std::size_t>(r)].second;
            all.insert(all.end(), cont.begin(), cont.end());
            const int keep = std::min(static_cast<int>(all.size()), maxLength + 1);
            if (keep < static_cast<int>(all.size())) truncated = true;
            if (static_cast<int>(cont.size()) > maxLength)
                throw std::invalid_argument("document at line " + std::to_string(d.line) + ": a continuation of " +
                                            std::to_string(cont.size()) + " tokens does not fit the model's " +
                                            std::to_string(maxLength) + " positions");
            Row row;
            const int first = static_cast<int>(all.size()) - keep;
            for (int i = first; i + 1 < static_cast<int>(all.size()); ++i) {
                row.tokens.push_back(all[static_cast<std::size_t>(i)]);
                row.positions.push_back(i - first);
                row.segment.push_back(0);
            }
            const int T = static_cast<int>(row.tokens.size());
            for (std::size_t j = 0; j < cont.size(); ++j)
                row.scored.push_back({doc, r, T - static_cast<int>(cont.size()) + static_cast<int>(j), cont[j]});
            rows.push_back(std::move(row));
        }
    }
    return rows;
}

// The rows through the model at once (padded to the longest), their scored tokens' log-likelihoods
// and greedy flags added to the documents' scores.
void runRows(const model::LlamaModel& model, const std::vector<Row>& rows, std::vector<DocScores>& out) {
    const int B = static_cast<int>(rows.size());
    int T = 1;
    for (const auto& r : rows) T = std::max(T, static_cast<int>(r.tokens.size()));
    std::vector<std::int64_t> tokens(static_cast<std::size_t>(B) * T, 0), positions(tokens.size(), 0),
        segment(tokens.size(), -1);
    std::vector<std::int64_t> index, targets;
    for (int b = 0; b < B; ++b) {
        const Row& r = rows[static_cast<std::size_t>(b)];
        std::copy(r.tokens.begin(), r.tokens.end(), tokens.begin() + static_cast<std::ptrdiff_t>(b) * T);
        std::copy(r.positions.begin(), r.positions.end(), positions.begin() + static_cast<std::ptrdiff_t>(b) * T);
        std::copy(r.segment.begin(), r.segment.end(), segment.begin() + static_cast<std::ptrdiff_t>(b) * T);
        for (const auto& s : r.scored) {
            index.push_back(static_cast<std::int64_t>(b) * T + s.at);
            targets.push_back(s.target);
        }
    }
    if (index.empty()) return;
    const auto device = model.device();
    const auto seg = at::tensor(segment, at::kLong).view({B, T});
    // Query q sees key k <= q that is in the context (for a real token) or in q's own segment;
    // padding sees padding only, and nothing real sees padding.
    const auto q = seg.unsqueeze(2), k = seg.unsqueeze(1);
    const auto order = at::arange(T, at::kLong);
    const auto earlier = order.unsqueeze(0) <= order.unsqueeze(1); // [q, k]: k <= q
    const auto visible = earlier.unsqueeze(0).logical_and(k.eq(q).logical_or(k.eq(0).logical_and(q.ge(0))));
    model::ForwardOptions o = model.options();
    o.positions = at::tensor(positions, at::kLong).view({B, T}).to(device);
    o.visible = visible.to(device);
    const auto h = model::forwardHidden(model.config(), model.weights(), o, at::tensor(tokens, at::kLong).view({B, T}).to(device));
    const auto rowsAt = at::tensor(index, at::kLong).to(h.device());
    const auto scores = model::nextTokenScores(model.config(), model.weights(), h.reshape({B * T, h.size(2)}).index_select(0, rowsAt),
                                               at::tensor(targets, at::kLong));
    const auto nll = scores.nll.to(at::kDouble).cpu().contiguous();
    const auto greedy = scores.greedy.cpu().contiguous();
    const double* n = nll.data_ptr<double>();
    const bool* g = greedy.data_ptr<bool>();
    std::size_t i = 0;
    for (const auto& r : rows)
        for (const auto& s : r.scored) {
            RequestScore& rs = out[static_cast<std::size_t>(s.doc)].requests[static_cast<std::size_t>(s.request)];
            rs.logLikelihood -= n[i];
            rs.greedy = rs.greedy && g[i];
            ++i;
        }
}

// The harness's mean_stderr: sample standard deviation / sqrt(n); NaN for fewer than two.
double stderrOf(const std::vector<double>& x) {
    return util::sampleStd(x) / std::sqrt(static_cast<double>(x.size()));
}

int argmax(const std::vector<double>& v) { // numpy's: the first of equal maxima
    return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

} // namespace

std::pair<std::vector<int>, std::vector<int>> encodePair(const tokenizer::Tokenizer& tok, const std::string& context,
                                                         const std::string& continuation, bool addBos) {
    if (context.empty()) {
        const int prefix = tok.bosId() >= 0 ? tok.bosId() : tok.eosId();
        if (prefix < 0) throw std::invalid_argument("an empty context needs a BOS or EOS token, and the tokenizer has neither");
        return {{prefix}, tok.encode(continuation, addBos)};
    }
    const std::size_t kept = context.find_last_not_of(" \t\n\r\f\v") + 1; // Python's rstrip()
    const std::string ctx = context.substr(0, kept), cont = context.substr(kept) + continuation;
    auto whole = tok.encode(ctx + cont, addBos);
    auto first = tok.encode(ctx, addBos);
    const std::size_t n = std::min(first.size(), whole.size());
    return {std::move(first), std::vector<int>(whole.begin() + static_cast<std::ptrdiff_t>(n), whole.end())};
}

std::vector<DocScores> scoreDocuments(const model::LlamaModel& model, const tokenizer::Tokenizer& tok,
                                      const std::vector<ZeroShotDoc>& docs, const ZeroShotOptions& o, JobContext& job) {
    const int maxLength = o.maxLength > 0 ? std::min(o.maxLength, model.config().maxPositions) : model.config().maxPositions;
    std::vector<DocScores> out(docs.size());
    at::NoGradGuard noGrad;
    std::vector<Row> batch;
    std::size_t batchLongest = 0;
    std::size_t done = 0; // documents whose rows have run
    std::size_t pendingDocs = 0;
    auto flush = [&] {
        if (batch.empty()) return;
        job.checkCancelled();
        guardMemory("zero-shot scoring (" + std::to_string(batch.size()) + " rows of up to " + std::to_string(batchLongest) +
                        " tokens)",
                    "score with fewer tokens per forward (--batch-tokens)", [&] { runRows(model, batch, out); });
        done += pendingDocs;
        pendingDocs = 0;
        batch.clear();
        batchLongest = 0;
        job.progress(static_cast<double>(done) / static_cast<double>(docs.size()),
                     "document " + std::to_string(done) + "/" + std::to_string(docs.size()));
    };
    for (std::size_t d = 0; d < docs.size(); ++d) {
        out[d].requests.assign(requestsOf(docs[d]).size(), RequestScore{0, true, 0});
        auto rows = rowsOf(tok, docs[d], static_cast<int>(d), maxLength, o.addBos, out[d].truncated);
        for (const auto& r : rows)
            for (const auto& s : r.scored) ++out[d].requests[static_cast<std::size_t>(s.request)].tokens;
        std::size_t longest = batchLongest;
        for (const auto& r : rows) longest = std::max(longest, r.tokens.size());
        // The batch's padded size if this document joins it.
        if (!batch.empty() && (batch.size() + rows.size()) * longest > static_cast<std::size_t>(o.batchTokens)) flush();
        for (auto& r : rows) {
            batchLongest = std::max(batchLongest, r.tokens.size());
            batch.push_back(std::move(r));
        }
        ++pendingDocs;
    }
    flush();
    return out;
}

double ZeroShotTaskResult::headline() const {
    for (const auto& m : metrics)
        if (m.metric == "acc_norm") return m.value;
    for (const auto& m : metrics)
        if (m.metric == "acc") return m.value;
    return 0;
}

ZeroShotTaskResult taskMetrics(const ZeroShotTask& task, const std::vector<DocScores>& scores) {
    if (scores.size() != task.docs.size())
        throw std::invalid_argument("task " + task.name + ": " + std::to_string(scores.size()) + " scored documents for " +
                                    std::to_string(task.docs.size()));
    ZeroShotTaskResult r;
    r.task = task.name;
    r.docs = static_cast<int>(scores.size());
    std::vector<double> acc, accNorm, ll;
    for (std::size_t d = 0; d < scores.size(); ++d) {
        const ZeroShotDoc& doc = task.docs[d];
        const auto& req = scores[d].requests;
        r.truncated += scores[d].truncated ? 1 : 0;
        if (task.kind == TaskKind::Completion) {
            ll.push_back(req.at(0).logLikelihood);
            acc.push_back(req.at(0).greedy ? 1.0 : 0.0);
            continue;
        }
        std::vector<double> lls, normed;
        for (std::size_t i = 0; i < req.size(); ++i) {
            lls.push_back(req[i].logLikelihood);
            if (task.kind == TaskKind::MultipleChoice)
                normed.push_back(req[i].logLikelihood / static_cast<double>(std::max<std::size_t>(1, doc.choices.at(i).size())));
        }
        acc.push_back(argmax(lls) == doc.gold ? 1.0 : 0.0);
        if (task.accNorm) accNorm.push_back(argmax(normed) == doc.gold ? 1.0 : 0.0);
    }
    r.metrics.push_back({"acc", util::mean(acc), stderrOf(acc)});
    if (task.accNorm) r.metrics.push_back({"acc_norm", util::mean(accNorm), stderrOf(accNorm)});
    if (task.kind == TaskKind::Completion) {
        const double ppl = std::exp(-util::mean(ll));
        r.metrics.push_back({"perplexity", ppl, ppl * stderrOf(ll)});
    }
    return r;
}

ZeroShotResult evaluateZeroShot(const model::LlamaModel& model, const tokenizer::Tokenizer& tok,
                                const std::vector<ZeroShotTask>& tasks, const ZeroShotOptions& options, JobContext& job) {
    ZeroShotResult out;
    std::size_t total = 0, before = 0;
    for (const auto& t : tasks) total += t.docs.size();
    const auto start = std::chrono::steady_clock::now();
    for (const auto& t : tasks) {
        const auto taskStart = std::chrono::steady_clock::now();
        const double a = static_cast<double>(before) / static_cast<double>(total),
                     b = static_cast<double>(before + t.docs.size()) / static_cast<double>(total);
        SubJob sub(job, a, b, t.name + ": ");
        auto r = taskMetrics(t, scoreDocuments(model, tok, t.docs, options, sub));
        r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - taskStart).count();
        out.average += r.headline() / static_cast<double>(tasks.size());
        out.tasks.push_back(std::move(r));
        before += t.docs.size();
    }
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return out;
}

std::string zeroShotTable(const ZeroShotResult& result) {
    std::string s;
    char line[256];
    std::snprintf(line, sizeof line, "%-16s %-11s %12s %12s %7s\n", "task", "metric", "value", "stderr", "n");
    s += line;
    for (const auto& t : result.tasks) {
        for (const auto& m : t.metrics) {
            char err[32];
            if (std::isnan(m.stderror)) std::snprintf(err, sizeof err, "%12s", "-");
            else std::snprintf(err, sizeof err, "%12.4f", m.stderror);
            std::snprintf(line, sizeof line, "%-16s %-11s %12.4f %s %7d %s\n", t.task.c_str(), m.metric.c_str(), m.value, err,
                          t.docs, t.truncated > 0 && &m == &t.metrics.front()
                                      ? ("(" + std::to_string(t.truncated) + " cut on the left)").c_str()
                                      : "");
            s += line;
        }
    }
    std::snprintf(line, sizeof line, "%-16s %-11s %12.4f   (acc_norm where reported, else acc; %zu tasks)\n", "average",
                  "acc", result.average, result.tasks.size());
    s += line;
    return s;
}

nlohmann::json zeroShotJson(const ZeroShotResult& result) {
    nlohmann::json tasks = nlohmann::json::object();
    for (const auto& t : result.tasks) {
        nlohmann::json j = {{"n", t.docs}, {"truncated", t.truncated}, {"seconds", t.seconds}};
        for (const auto& m : t.metrics) {
            j[m.metric] = m.value;
            j[m.metric + "_stderr"] = std::isnan(m.stderror) ? nlohmann::json(nullptr) : nlohmann::json(m.stderror);
        }
        tasks[t.task] = j;
    }
    return {{"tasks", tasks}, {"average", result.average}, {"seconds", result.seconds}};
}

} // namespace latmix::eval
