// A model against a reference, as llama.cpp's KL mode (SPEC §7): hand-worked statistics, exact
// identities (a model against itself; the perplexities bit for bit evaluatePerplexity's), and
// stories260K with MX-quantized activations against a float64 KL of the same hidden states, to a
// bound worked out from float32's dot-product error.
#include "DeviceRows.h"
#include "TestSupport.h"

#include "eval/KlDivergence.h"
#include "eval/Perplexity.h"
#include "model/Checkpoint.h"
#include "model/LlamaModel.h"
#include "mx/MxFormat.h"

#include <ATen/ATen.h>
#include <QDir>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <limits>
#include "TestData.h" // after ATen: Qt's slots macro breaks ATen headers

using namespace latmix;
using latmix::test::addDeviceColumn;
using latmix::test::testDevices;

namespace {

struct Stories {
    std::unique_ptr<model::Checkpoint> ck;
    std::vector<int> ids;
};

bool loadStories(Stories& s) {
    const QString dir = test::dataDir() + "/models/stories260K-hf";
    if (!QFile::exists(dir + "/config.json")) return false;
    s.ck = std::make_unique<model::Checkpoint>(model::Checkpoint::load(dir.toStdString()));
    s.ids = test::randomIds(4 * 48 + 7, s.ck->config().vocabSize, 11);
    return true;
}

// The checkpoint's model on dev in float32, its activations fake-quantized in `format` (empty: none).
model::LlamaModel modelOf(const model::Checkpoint& ck, c10::Device dev, const QString& format) {
    model::ForwardOptions o;
    o.dtype = at::kFloat;
    if (!format.isEmpty()) o.activationQuant = mx::makeConfig(mx::parseFormat(format.toStdString()));
    return model::LlamaModel(ck.config(), model::convertWeights(model::loadWeights(ck), at::TensorOptions().device(dev)), o);
}

// Normed final states of one window's first T-1 positions, [T-1, hidden] float32.
at::Tensor normedStates(const model::LlamaModel& m, const at::Tensor& window) {
    const auto h = model::forwardHidden(m.config(), m.weights(), m.options(), window);
    const auto x = h.narrow(1, 0, window.size(1) - 1).reshape({window.size(1) - 1, h.size(2)});
    return model::rmsNorm(x, m.weights().finalNorm, m.config().rmsNormEps);
}

} // namespace

class TestKlDivergence : public QObject {
    Q_OBJECT
private slots:
    // Four tokens worked by hand. KL {0.1, 0.3, 0.2, 0.2}: mean 0.2, sample variance 0.02/3, so the
    // standard error is sqrt(0.02/3/4); sorted {0.1, 0.2, 0.2, 0.3}, the 99th percentile lies at
    // 0.99·3 = 2.97: 0.2 + 0.97·0.1. Top-1 agreement 3/4, error sqrt(0.75·0.25/3). NLLs: model
    // {1, 2, 1, 2}, reference {1, 1, 1, 1}: Δppl = e^1.5 − e^1; the reference's NLL has no spread,
    // so the error is e^1.5 · sqrt(var(model)/4) with var = 1/3.
    void summaryWorkedByHand() {
        eval::KlResult r;
        eval::summarizeKl({0.1f, 0.3f, 0.2f, 0.2f}, {1, 0, 1, 1}, {1, 2, 1, 2}, {1, 1, 1, 1}, r);
        const double tol = 1e-7; // the inputs are float32: 0.1f, 0.2f, 0.3f carry 1e-8 of rounding
        QCOMPARE(r.tokens, int64_t(4));
        QVERIFY(std::abs(r.meanKl - 0.2) < tol);
        QVERIFY(std::abs(r.klStdErr - std::sqrt(0.02 / 3 / 4)) < tol);
        QVERIFY(std::abs(r.klP99 - (0.2 + 0.97 * 0.1)) < tol);
        QVERIFY(std::abs(r.klMax - 0.3) < tol);
        QCOMPARE(r.top1, 0.75);
        QVERIFY(std::abs(r.top1StdErr - std::sqrt(0.75 * 0.25 / 3)) < 1e-15);
        QVERIFY(std::abs(r.deltaPpl - (std::exp(1.5) - std::exp(1.0))) < 1e-12);
        QVERIFY(std::abs(r.deltaPplStdErr - std::exp(1.5) * std::sqrt(1.0 / 3 / 4)) < 1e-12);
        // Perfectly correlated NLLs that differ by a constant: the errors of the two means cancel
        // as far as the perplexities allow, (e^{m+1} − e^m)·sd/√n.
        eval::summarizeKl({0, 0}, {1, 1}, {2, 3}, {1, 2}, r);
        const double pq = std::exp(2.5), pr = std::exp(1.5), sd = std::sqrt(0.5);
        QVERIFY(std::abs(r.deltaPplStdErr - (pq - pr) * sd / std::sqrt(2.0)) < 1e-12);
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, eval::summarizeKl({0.1f}, {1, 1}, {1}, {1}, r));
    }

    void againstItself_data() {
        addDeviceColumn();
        QTest::addColumn<QString>("format");
        for (const QString& dev : testDevices()) {
            QTest::addRow("fp %s", qPrintable(dev)) << dev << QString();
            QTest::addRow("mxfp4 activations %s", qPrintable(dev)) << dev << QString("mxfp4");
        }
    }
    // A model against itself: every token's two distributions are the same floats, so the KL is
    // exactly 0, the most likely tokens agree and the perplexities are equal; both perplexities
    // are evaluatePerplexity's bit for bit; the spill folder goes with the states.
    void againstItself() {
        QFETCH(QString, device);
        QFETCH(QString, format);
        LATMIX_REQUIRE_DEVICE(dev, device);
        Stories s;
        if (!loadStories(s)) LATMIX_DATA_SKIP("stories260K-hf not in the data folder");
        const auto m = modelOf(*s.ck, dev, format);
        QTemporaryDir tmp;
        const std::string spill = tmp.filePath("reference").toStdString();
        const eval::PerplexityOptions p{48, 4};
        eval::KlResult r;
        {
            const auto ref = eval::ReferenceStates::record(m, s.ids, p, spill);
            QVERIFY(QDir(QString::fromStdString(spill)).exists());
            r = eval::evaluateAgainstReference(m, s.ids, ref, silentJob(), 100); // 512 = 5·100 + 12: a short chunk
            const auto direct = eval::evaluatePerplexity(m, s.ids, p);
            QCOMPARE(ref.perplexity().perplexity, direct.perplexity);
            QCOMPARE(r.perplexity.perplexity, direct.perplexity);
        }
        QVERIFY2(!QDir(QString::fromStdString(spill)).exists(), "the spill folder outlived its states");
        QCOMPARE(r.tokens, int64_t(4 * 47));
        QCOMPARE(r.meanKl, 0.0);
        QCOMPARE(r.klMax, 0.0);
        QCOMPARE(r.top1, 1.0);
        QCOMPARE(r.deltaPpl, 0.0);
        QCOMPARE(r.deltaPplStdErr, 0.0);
    }

    void againstFloat64_data() {
        addDeviceColumn();
        QTest::addColumn<QString>("format");
        for (const QString& dev : testDevices())
            for (const char* f : {"mxfp4", "nvfp4", "mxint4"}) QTest::addRow("%s %s", f, qPrintable(dev)) << dev << QString(f);
    }
    // FP stories260K against its activations quantized: each token's KL, from the same normed
    // states, against log_softmax in float64. Our logits are float32 products of length d, each
    // within ε = γ_d·Σ|x_j w_j| (γ_d = d·u/(1 − d·u), u = 2^-24) of the exact; a perturbation of
    // both logit vectors by at most ε moves each log-sum-exp by ε and the weights p by a factor
    // within e^{±2ε}, so |ΔKL| ≤ 4ε + 2ε·E_p|a − b| (with slack for float64's own rounding). The
    // most likely tokens must agree wherever both models' top two logits are more than 2ε apart.
    void againstFloat64() {
        QFETCH(QString, device);
        QFETCH(QString, format);
        LATMIX_REQUIRE_DEVICE(dev, device);
        Stories s;
        if (!loadStories(s)) LATMIX_DATA_SKIP("stories260K-hf not in the data folder");
        const auto fp = modelOf(*s.ck, dev, QString());
        const auto q = modelOf(*s.ck, dev, format);
        QTemporaryDir tmp;
        const eval::PerplexityOptions p{48, 4};
        const auto ref = eval::ReferenceStates::record(fp, s.ids, p, tmp.filePath("reference").toStdString());
        const auto r = eval::evaluateAgainstReference(q, s.ids, ref);
        QCOMPARE(r.perplexity.perplexity, eval::evaluatePerplexity(q, s.ids, p).perplexity);

        const auto W = fp.weights().lmHead.to(at::kCPU, at::kDouble);
        const int64_t d = W.size(1);
        const double u = std::ldexp(1.0, -24), gamma = d * u / (1 - d * u);
        std::vector<double> kl64;
        double sumKl = 0, sumBound = 0;
        int checkedTop1 = 0, sameTop1 = 0;
        auto all = at::tensor(std::vector<int64_t>(s.ids.begin(), s.ids.end()), at::kLong);
        for (int w = 0; w < 4; ++w) {
            const auto window = all.narrow(0, w * 48, 48).unsqueeze(0);
            const auto xa = normedStates(fp, window).to(at::kCPU, at::kDouble), xb = normedStates(q, window).to(at::kCPU, at::kDouble);
            const auto a = at::matmul(xa, W.t()), b = at::matmul(xb, W.t());
            const auto la = at::log_softmax(a, 1), lb = at::log_softmax(b, 1);
            const auto pa = la.exp();
            const auto kl = (pa * (la - lb)).sum(1);
            const auto eps = at::maximum(std::get<0>(at::matmul(xa.abs(), W.abs().t()).max(1)),
                                         std::get<0>(at::matmul(xb.abs(), W.abs().t()).max(1))) * gamma;
            const auto bound = eps * 4 + eps * 2 * (pa * (a - b).abs()).sum(1) + 1e-12;
            const auto topA = at::topk(a, 2, 1), topB = at::topk(b, 2, 1);
            for (int t = 0; t < 47; ++t) {
                const double want = kl[t].item<double>();
                kl64.push_back(want);
                sumKl += want;
                sumBound += bound[t].item<double>();
                const double e = eps[t].item<double>();
                const auto va = std::get<0>(topA)[t], vb = std::get<0>(topB)[t];
                if ((va[0] - va[1]).item<double>() > 2 * e && (vb[0] - vb[1]).item<double>() > 2 * e) {
                    ++checkedTop1;
                    sameTop1 += std::get<1>(topA)[t][0].item<int64_t>() == std::get<1>(topB)[t][0].item<int64_t>();
                }
            }
        }
        const double n = static_cast<double>(kl64.size());
        QCOMPARE(r.tokens, int64_t(kl64.size()));
        const double meanBound = sumBound / n + 1e-7 * sumKl / n; // + the per-token KLs' float32 storage
        QVERIFY2(std::abs(r.meanKl - sumKl / n) <= meanBound,
                 qPrintable(QString("mean KL %1, float64 %2, bound %3").arg(r.meanKl, 0, 'g', 10).arg(sumKl / n, 0, 'g', 10).arg(meanBound)));
        QVERIFY2(r.meanKl > 1e-4, qPrintable(QString("mean KL %1: the quantization must show").arg(r.meanKl)));
        std::sort(kl64.begin(), kl64.end());
        const double pos = 0.99 * (n - 1);
        const auto lo = static_cast<size_t>(pos);
        const double p99 = kl64[lo] + (pos - lo) * (kl64[lo + 1] - kl64[lo]);
        QVERIFY2(std::abs(r.klP99 - p99) <= 1e-3 * p99 + 1e-6, qPrintable(QString("p99 %1 vs %2").arg(r.klP99).arg(p99)));
        QVERIFY(r.klP99 >= r.meanKl && r.klMax >= r.klP99);
        // Most tokens' top two are far apart: the agreement is checked on them, exactly.
        QVERIFY2(checkedTop1 > n / 2, qPrintable(QString("%1 of %2 tokens have a clear top-1").arg(checkedTop1).arg(n)));
        const double agreeChecked = double(sameTop1) / checkedTop1;
        QVERIFY2(std::abs(r.top1 - agreeChecked) <= (n - checkedTop1) / n + 1e-12,
                 qPrintable(QString("top-1 agreement %1, float64 on clear tokens %2").arg(r.top1).arg(agreeChecked)));
        QVERIFY(r.top1 < 1.0 || format == "mxint4");
        QVERIFY(std::abs(r.deltaPpl - (r.perplexity.perplexity - r.referencePerplexity.perplexity)) <=
                1e-9 * r.perplexity.perplexity);
        QVERIFY(r.deltaPplStdErr > 0);
    }

    void refusals() {
        Stories s;
        if (!loadStories(s)) LATMIX_DATA_SKIP("stories260K-hf not in the data folder");
        const auto m = modelOf(*s.ck, c10::kCPU, QString());
        QTemporaryDir tmp;
        const std::string spill = tmp.filePath("reference").toStdString();
        QDir().mkpath(QString::fromStdString(spill));
        try {
            eval::ReferenceStates::record(m, s.ids, {48, 4}, spill);
            QFAIL("an existing spill folder was taken");
        } catch (const std::invalid_argument& e) {
            QVERIFY2(QString(e.what()).contains("exists already"), e.what());
        }
        QDir(QString::fromStdString(spill)).removeRecursively();
        const auto ref = eval::ReferenceStates::record(m, s.ids, {48, 4}, spill);
        // Fewer tokens than the reference's windows: refused before any window.
        const std::vector<int> shorter(s.ids.begin(), s.ids.begin() + 100);
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, eval::evaluateAgainstReference(m, shorter, ref));
        // A cancelled pass removes its folder.
        const std::string spill2 = tmp.filePath("cancelled").toStdString();
        test::CancelAfter cancel(2);
        QVERIFY_THROWS_EXCEPTION(JobCancelled, eval::ReferenceStates::record(m, s.ids, {48, 4}, spill2, cancel));
        QVERIFY(!QDir(QString::fromStdString(spill2)).exists());
    }
};

QTEST_GUILESS_MAIN(TestKlDivergence)
#include "tst_kldivergence.moc"
