#include "eval/KlDivergence.h"

#include "io/SafeTensors.h"
#include "model/LlamaModel.h"
#include "util/AtomicFile.h"
#include "util/OutOfMemory.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>

namespace latmix::eval {
namespace fs = std::filesystem;

struct ReferenceStates::Data {
    PerplexityResult perplexity;
    PerplexityOptions options;        // what the windows were cut with
    std::vector<float> nll;           // per predicted token, window after window
    std::string dir;                  // window-<w>.f32: [seqLen-1, hidden] float32, normed
    at::Tensor lmHead, lmHeadBias;    // the reference's, as it stores them
    at::ScalarType dtype = at::kFloat; // the reference's compute dtype
    std::int64_t hidden = 0;
    ~Data() {
        if (!dir.empty()) util::removeTreeQuietly(dir);
    }
};

namespace {

std::string windowFile(const std::string& dir, int w) { return (fs::path(dir) / ("window-" + std::to_string(w) + ".f32")).string(); }

at::Tensor finalNormed(const model::LlamaModel& m, const at::Tensor& hidden) {
    return model::rmsNorm(hidden, m.weights().finalNorm.to(hidden.options()), m.config().rmsNormEps);
}

void writeRows(const std::string& path, const at::Tensor& rows) {
    const auto cpu = rows.to(at::kCPU, at::kFloat).contiguous();
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(cpu.data_ptr<float>()), static_cast<std::streamsize>(cpu.numel() * sizeof(float)));
    if (!out.flush())
        throw std::runtime_error("cannot write the reference's hidden states to " + path +
                                 " (disk full?): free space there or evaluate fewer windows (--eval-windows, --max-windows)");
}

at::Tensor readRows(const std::string& path, std::int64_t rows, std::int64_t cols) {
    auto t = at::empty({rows, cols}, at::kFloat);
    std::ifstream in(path, std::ios::binary);
    in.read(reinterpret_cast<char*>(t.data_ptr<float>()), static_cast<std::streamsize>(t.numel() * sizeof(float)));
    if (!in || in.gcount() != static_cast<std::streamsize>(t.numel() * sizeof(float)))
        throw std::runtime_error("the reference's hidden states in " + path + " are missing or short: record the reference again");
    return t;
}

// Logits of vocabulary rows [v0, v0+n) for normed states x, as nextTokenScores forms them: the
// lm_head rows converted to x's dtype and device, the product in that dtype, then float32.
at::Tensor chunkLogits(const at::Tensor& x, const at::Tensor& lmHead, const at::Tensor& bias, std::int64_t v0, std::int64_t n) {
    const auto w = lmHead.narrow(0, v0, n).to(x.options());
    const auto b = bias.defined() ? bias.narrow(0, v0, n).to(x.options()) : at::Tensor();
    return (b.defined() ? at::linear(x, w, b) : at::linear(x, w)).to(at::kFloat);
}

// A running log-sum-exp in float64 over vocabulary chunks, with the running argmax (the first
// largest logit wins a tie across chunks).
struct RunningSoftmax {
    at::Tensor max, sum, best, bestIndex;
    explicit RunningSoftmax(std::int64_t n, const at::TensorOptions& o)
        : max(at::full({n}, -std::numeric_limits<double>::infinity(), o.dtype(at::kDouble))),
          sum(at::zeros({n}, o.dtype(at::kDouble))), best(at::full({n}, -std::numeric_limits<float>::infinity(), o.dtype(at::kFloat))),
          bestIndex(at::zeros({n}, o.dtype(at::kLong))) {}
    // Adds a chunk of logits (float32 [N, n], vocabulary offset v0); returns the rescaling factor
    // of the earlier sums and the chunk's exp(logit - max) for the caller's own weighted sums.
    std::pair<at::Tensor, at::Tensor> add(const at::Tensor& logits, std::int64_t v0) {
        const auto chunkMax = logits.max(1);
        const auto larger = std::get<0>(chunkMax) > best;
        best = at::where(larger, std::get<0>(chunkMax), best);
        bestIndex = at::where(larger, std::get<1>(chunkMax) + v0, bestIndex);
        const auto d = logits.to(at::kDouble);
        const auto newMax = at::maximum(max, std::get<0>(d.max(1)));
        const auto rescale = at::exp(max - newMax);
        const auto e = at::exp(d - newMax.unsqueeze(1));
        sum = sum * rescale + e.sum(1);
        max = newMax;
        return {rescale, e};
    }
    at::Tensor logSumExp() const { return max + at::log(sum); }
};

} // namespace

// The model's pass over the reference's windows (a friend of ReferenceStates).
struct KlPass {
    static KlResult run(const model::LlamaModel& m, const std::vector<int>& ids, const ReferenceStates& ref, JobContext& job,
                        std::int64_t vocabChunk) {
        const ReferenceStates::Data& r = *ref.m;
        const int seqLen = std::min(r.perplexity.seqLen, m.config().maxPositions);
        if (seqLen != r.perplexity.seqLen || static_cast<std::int64_t>(ids.size()) < std::int64_t{r.perplexity.windows} * seqLen)
            throw std::invalid_argument("the model cannot be compared on the reference's windows (" +
                                        std::to_string(r.perplexity.windows) + " of " + std::to_string(r.perplexity.seqLen) +
                                        " tokens): its maximum length or the evaluation text differs");
        if (m.config().vocabSize != r.lmHead.size(0))
            throw std::invalid_argument("the model's vocabulary (" + std::to_string(m.config().vocabSize) +
                                        " tokens) is not the reference's (" + std::to_string(r.lmHead.size(0)) +
                                        "): KL needs the same tokenizer");
        KlResult out;
        out.referencePerplexity = r.perplexity;
        // The reference's lm_head on the model's device for the pass (its stored dtype: converted a chunk at a time).
        const c10::Device dev = m.weights().lmHead.device();
        const at::Tensor refHead = r.lmHead.to(dev), refBias = r.lmHeadBias.defined() ? r.lmHeadBias.to(dev) : at::Tensor();
        std::vector<float> kl, nll;
        std::vector<std::uint8_t> same;
        PerplexityOptions windows = r.options;
        windows.maxWindows = r.perplexity.windows; // the reference's, even where the text goes on
        out.perplexity = evaluatePerplexity(m, ids, windows, job, [&](int w, const at::Tensor& hidden, const at::Tensor& windowNll) {
            const auto x = finalNormed(m, hidden);
            const auto xr = readRows(windowFile(r.dir, w), seqLen - 1, r.hidden).to(x.device());
            compareWindow(x, m.weights().lmHead, m.weights().lmHeadBias, xr, refHead, refBias, r.dtype, vocabChunk, kl, same);
            const auto n = windowNll.to(at::kCPU, at::kFloat).contiguous();
            nll.insert(nll.end(), n.data_ptr<float>(), n.data_ptr<float>() + n.numel());
        });
        summarizeKl(kl, same, nll, r.nll, out);
        return out;
    }

    // Per token of one window: KL(p_ref ‖ p_model) = E_ref[a − b] − lse(a) + lse(b) over the
    // vocabulary, a and b the two models' logits, accumulated chunk by chunk in float64.
    static void compareWindow(const at::Tensor& x, const at::Tensor& lmHead, const at::Tensor& bias, const at::Tensor& xr32,
                              const at::Tensor& refHead, const at::Tensor& refBias, at::ScalarType refDtype,
                              std::int64_t vocabChunk, std::vector<float>& kl, std::vector<std::uint8_t>& same) {
        const auto xr = xr32.to(refDtype); // the reference's normed states as its pass computed them
        const std::int64_t N = x.size(0), V = lmHead.size(0);
        const auto o = at::TensorOptions().device(x.device());
        RunningSoftmax ref(N, o), model(N, o);
        auto weighted = at::zeros({N}, o.dtype(at::kDouble)); // Σ exp(a − max_a)·(a − b)
        for (std::int64_t v0 = 0; v0 < V; v0 += vocabChunk) {
            const std::int64_t n = std::min(vocabChunk, V - v0);
            const auto a = chunkLogits(xr, refHead, refBias, v0, n);
            const auto b = chunkLogits(x, lmHead, bias, v0, n);
            const auto [rescale, e] = ref.add(a, v0);
            model.add(b, v0);
            weighted = weighted * rescale + (e * (a.to(at::kDouble) - b.to(at::kDouble))).sum(1);
        }
        io::releaseMappedPages(refHead);
        const auto perToken = (weighted / ref.sum - ref.logSumExp() + model.logSumExp()).to(at::kCPU, at::kFloat).contiguous();
        kl.insert(kl.end(), perToken.data_ptr<float>(), perToken.data_ptr<float>() + N);
        const auto agree = ref.bestIndex.eq(model.bestIndex).to(at::kCPU, at::kByte).contiguous();
        same.insert(same.end(), agree.data_ptr<std::uint8_t>(), agree.data_ptr<std::uint8_t>() + N);
    }
};

ReferenceStates::ReferenceStates(std::shared_ptr<Data> d) : m(std::move(d)) {}
ReferenceStates::ReferenceStates(ReferenceStates&&) noexcept = default;
ReferenceStates& ReferenceStates::operator=(ReferenceStates&&) noexcept = default;
ReferenceStates::~ReferenceStates() = default;
const PerplexityResult& ReferenceStates::perplexity() const { return m->perplexity; }
int ReferenceStates::windows() const { return m->perplexity.windows; }
int ReferenceStates::seqLen() const { return m->perplexity.seqLen; }
const std::string& ReferenceStates::spillDir() const { return m->dir; }

ReferenceStates ReferenceStates::record(const model::LlamaModel& reference, const std::vector<int>& ids,
                                        const PerplexityOptions& options, const std::string& spillDir, JobContext& job) {
    if (fs::exists(spillDir))
        throw std::invalid_argument("the folder for the reference's hidden states, " + spillDir +
                                    ", exists already: remove it (a run interrupted while evaluating leaves it)");
    evaluationWindows(reference.config().maxPositions, ids.size(), options); // refused before the folder is made
    auto d = std::make_shared<Data>();
    fs::create_directories(spillDir);
    d->dir = spillDir; // removed from here on when d goes
    // Kept in host memory (mapped where the reference's is): a sweep holds the states across its
    // cells, and the comparison brings lm_head to its device once per pass.
    d->lmHead = reference.weights().lmHead.device().is_cpu() ? reference.weights().lmHead : reference.weights().lmHead.cpu();
    d->lmHeadBias = reference.weights().lmHeadBias.defined() ? reference.weights().lmHeadBias.cpu() : at::Tensor();
    d->dtype = reference.dtype();
    d->hidden = reference.config().hiddenSize;
    d->options = options;
    d->perplexity = evaluatePerplexity(reference, ids, options, job, [&](int w, const at::Tensor& hidden, const at::Tensor& nll) {
        const auto n = nll.to(at::kCPU, at::kFloat).contiguous();
        d->nll.insert(d->nll.end(), n.data_ptr<float>(), n.data_ptr<float>() + n.numel());
        writeRows(windowFile(spillDir, w), finalNormed(reference, hidden));
    });
    return ReferenceStates(std::move(d));
}

KlResult evaluateAgainstReference(const model::LlamaModel& model, const std::vector<int>& ids,
                                  const ReferenceStates& reference, JobContext& job, std::int64_t vocabChunk) {
    return KlPass::run(model, ids, reference, job, vocabChunk);
}

void summarizeKl(const std::vector<float>& kl, const std::vector<std::uint8_t>& sameTop1, const std::vector<float>& nllModel,
                 const std::vector<float>& nllReference, KlResult& out) {
    const std::size_t n = kl.size();
    if (n == 0 || sameTop1.size() != n || nllModel.size() != n || nllReference.size() != n)
        throw std::invalid_argument("summarizeKl: per-token series of different lengths (or none)");
    out.tokens = static_cast<std::int64_t>(n);
    const double N = static_cast<double>(n);
    // Two passes in float64: the means, then the centred sums.
    double klSum = 0, same = 0, q = 0, r = 0;
    for (std::size_t i = 0; i < n; ++i) klSum += kl[i], same += sameTop1[i], q += nllModel[i], r += nllReference[i];
    const double klMean = klSum / N, qMean = q / N, rMean = r / N;
    double klVar = 0, qVar = 0, rVar = 0, cov = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const double dk = kl[i] - klMean, dq = nllModel[i] - qMean, dr = nllReference[i] - rMean;
        klVar += dk * dk, qVar += dq * dq, rVar += dr * dr, cov += dq * dr;
    }
    const double dof = n > 1 ? N - 1 : 1; // sample (co)variances
    out.meanKl = klMean;
    out.klStdErr = std::sqrt(klVar / dof / N);
    std::vector<float> sorted(kl);
    std::sort(sorted.begin(), sorted.end());
    const double pos = 0.99 * (N - 1);
    const auto lo = static_cast<std::size_t>(std::floor(pos));
    const std::size_t hi = std::min(lo + 1, n - 1);
    out.klP99 = sorted[lo] + (pos - static_cast<double>(lo)) * (double(sorted[hi]) - sorted[lo]);
    out.klMax = sorted.back();
    out.top1 = same / N;
    out.top1StdErr = std::sqrt(out.top1 * (1 - out.top1) / dof);
    // PPL = exp(mean NLL); d(PPL_q − PPL_r) = PPL_q dq − PPL_r dr, the tokens' means correlated.
    const double pq = std::exp(qMean), pr = std::exp(rMean);
    out.deltaPpl = pq - pr;
    const double var = (pq * pq * qVar + pr * pr * rVar - 2 * pq * pr * cov) / dof / N;
    out.deltaPplStdErr = std::sqrt(std::max(var, 0.0));
}

} // namespace latmix::eval
