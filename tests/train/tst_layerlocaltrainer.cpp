// Layer-local transform learning (paper §3 numerical analysis): on synthetic activations with
// planted outlier channels a learned affine transform beats identity and block Hadamard on
// E(T); the schedule, history, cancel and seeding behave as documented.
#include "TestSupport.h"

#include "metrics/TransformMetrics.h"
#include "train/LayerLocalTrainer.h"
#include "transforms/LearnedTransforms.h"

#include <ATen/ATen.h>
#include <QtTest>

#include <cmath>
#include <random>

using namespace latmix;

namespace {

// Rows shaped like an LLM residual stream: a Gaussian bulk with per-channel spread, two
// correlated massive-outlier channels in different MX blocks (5 and 37) driven by one latent
// factor, and a channel (50) with a large mean. Own generator: no libtorch RNG stream involved.
at::Tensor plantedOutliers(std::int64_t rows, std::int64_t d, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    auto gauss = [&rng] { // Box-Muller from raw draws
        const double u1 = (static_cast<double>(rng() >> 11) + 0.5) / 9007199254740992.0;
        const double u2 = static_cast<double>(rng() >> 11) / 9007199254740992.0;
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
    };
    auto x = at::empty({rows, d}, at::kFloat);
    auto a = x.accessor<float, 2>();
    for (std::int64_t i = 0; i < rows; ++i) {
        const double z = gauss();
        for (std::int64_t j = 0; j < d; ++j) a[i][j] = static_cast<float>((0.5 + 0.02 * j) * gauss());
        a[i][5] = static_cast<float>(25.0 * z + 0.5 * gauss());
        a[i][37] = static_cast<float>(-20.0 * z + 0.5 * gauss());
        a[i][50] += 12.0f;
    }
    return x;
}

mx::MxConfig mxfp4() { return mx::makeConfig(mx::Format::MxFp4); } // block 32, floor

train::LayerLocalOptions options(int steps) {
    train::LayerLocalOptions o;
    o.mx = mxfp4();
    o.steps = steps;
    o.batchRows = 256;
    o.seed = 7; // lr, schedule, λ: the defaults
    return o;
}

transforms::TransformOptions transformOptions() {
    transforms::TransformOptions t;
    t.blockSize = 32;
    t.seed = 3;
    return t;
}

} // namespace

class TestLayerLocalTrainer : public QObject {
    Q_OBJECT
    at::Tensor m_x = plantedOutliers(1024, 64, 11);

private slots:
    void learnedBeatsFixedTransforms_data() {
        QTest::addColumn<QString>("kind");
        QTest::newRow("learned-affine-lu") << "learned-affine-lu";
        QTest::newRow("learned-affine-qr") << "learned-affine-qr";
    }
    void learnedBeatsFixedTransforms() {
        QFETCH(QString, kind);
        const auto c = mxfp4();
        const auto identity = transforms::makeTransform("none", 64, transformOptions());
        const auto blockHadamard = transforms::makeTransform("block-hadamard", 64, transformOptions());
        const double eIdentity = metrics::transformationMse(m_x, *identity, c);
        const double eBlockHadamard = metrics::transformationMse(m_x, *blockHadamard, c);
        auto learned = transforms::makeTransform(kind.toStdString(), 64, transformOptions());
        const auto r = train::LayerLocalTrainer(options(200)).train(*learned, m_x);
        const double eLearned = metrics::transformationMse(m_x, *learned, c);
        qInfo("E(T): identity %.5g, block-hadamard %.5g, %s %.5g -> %.5g", eIdentity, eBlockHadamard,
              qPrintable(kind), r.initialMse, eLearned);
        QCOMPARE(r.finalMse, eLearned); // exact: the same function on the same rows and transform
        // effects (printed above): training must beat the fixed transforms and its own start
        QVERIFY2(eLearned < eIdentity, "learned transform no better than identity");
        QVERIFY2(eLearned < eBlockHadamard, "learned transform no better than block Hadamard");
        QVERIFY(eLearned < r.initialMse);
        // The loss goes down: last 20 steps against the first 20.
        QCOMPARE(int(r.history.size()), 200);
        double first = 0, last = 0;
        for (int i = 0; i < 20; ++i) first += r.history[i].loss, last += r.history[180 + i].loss;
        QVERIFY2(last < first, qPrintable(QString("loss %1 -> %2").arg(first / 20).arg(last / 20)));
        for (int i = 0; i < 200; ++i) QCOMPARE(r.history[i].step, i + 1);
    }

    // Issue 71: a learned transform never ends worse than its start. With a step size far too
    // large (lr 0.5: the factors jump around), training alone ends above the start; the trainer
    // keeps the best iterate on all rows, so E(T) + λ vol is at most the start's. Measured here:
    // the last iterate's objective above the start, the kept one at or below it.
    void neverEndsWorseThanItsStart_data() {
        QTest::addColumn<QString>("kind");
        QTest::newRow("learned-affine-lu") << "learned-affine-lu";
        QTest::newRow("learned-affine-qr") << "learned-affine-qr";
    }
    void neverEndsWorseThanItsStart() {
        QFETCH(QString, kind);
        auto t = transforms::makeTransform(kind.toStdString(), 64, transformOptions());
        auto o = options(40);
        o.lr = 0.5;
        double lastLoss = 0;
        o.onStep = [&](const train::TrainingStep& s) { lastLoss = s.loss; };
        const double scale = m_x.to(at::kDouble).pow(2).mean().item<double>();
        auto vol = [&] {
            const auto logS = t->logAbsScales();
            return logS.defined() ? std::pow(logS.sum().item<double>(), 2) : 0.0;
        };
        const double startVol = vol();
        const auto r = train::LayerLocalTrainer(o).train(*t, m_x);
        const double kept = r.finalMse / scale + o.volumeWeight * vol();
        const double start = r.initialMse / scale + o.volumeWeight * startVol;
        qInfo("%s at lr 0.5: start %.5g, last minibatch loss %.5g, kept (step %d) %.5g", qPrintable(kind), start, lastLoss,
              r.bestStep, kept);
        QVERIFY2(lastLoss > start, "lr 0.5 did not make the training worse: the check proves nothing here");
        QVERIFY2(kept <= start * (1 + 1e-12), qPrintable(QString("kept %1 > start %2").arg(kept).arg(start)));
    }

    void scheduleWarmsUpThenDecays_data() {
        QTest::addColumn<int>("step");
        QTest::addColumn<double>("factor");
        // 100 steps, warmup 10 from 0.1: linear 0.1 + 0.09 k, then 0.5 (1 + cos(pi (k - 10) / 90)).
        QTest::newRow("first") << 0 << 0.1;
        QTest::newRow("mid warmup") << 5 << 0.55;
        QTest::newRow("warmup done") << 10 << 1.0;
        QTest::newRow("cosine half") << 55 << 0.5;
        QTest::newRow("last") << 99 << 0.5 * (1 + std::cos(M_PI * 89.0 / 90.0));
    }
    void scheduleWarmsUpThenDecays() {
        QFETCH(int, step);
        QFETCH(double, factor);
        QVERIFY(std::fabs(train::scheduleFactor(step, 100, 10, 0.1) - factor) < 1e-12); // scalar float64
    }

    void historyRecordsLearningRateAndMatrixMetrics() {
        auto t = transforms::makeTransform("learned-affine-lu", 64, transformOptions());
        auto o = options(20);
        o.matrixMetricsEvery = 5;
        int observed = 0;
        o.onStep = [&observed](const train::TrainingStep&) { ++observed; };
        const auto r = train::LayerLocalTrainer(o).train(*t, m_x);
        QCOMPARE(int(r.history.size()), 20);
        QCOMPARE(observed, 20);
        QVERIFY(std::fabs(r.history[0].lr - 1e-3 * 0.1) < 1e-15); // warmup 20/10 = 2 steps from 0.1
        QVERIFY(std::fabs(r.history[2].lr - 1e-3) < 1e-15);
        const double meanSquare = m_x.to(at::kDouble).pow(2).mean().item<double>();
        for (const auto& s : r.history) {
            QCOMPARE(std::isnan(s.conditionNumber), s.step % 5 != 0);
            // the trainer forms the float32 loss from the same mse and vol: a few float32 roundings
            // (~2e-7, both terms ≥ 0) against 1e-5
            QVERIFY(std::fabs(s.loss - (s.mse / meanSquare + 0.1 * s.vol)) < 1e-5 * s.loss); // relative E(T)
        }
        QVERIFY(r.history[4].conditionNumber >= 1.0);
        QVERIFY(r.history[4].offBlockNorm > 0.0); // noise off the blocks at init, then training
    }

    void rawMseLoss() {
        auto t = transforms::makeTransform("learned-affine-lu", 64, transformOptions());
        auto o = options(3);
        o.relativeMse = false;
        for (const auto& s : train::LayerLocalTrainer(o).train(*t, m_x).history)
            QVERIFY(std::fabs(s.loss - (s.mse + 0.1 * s.vol)) < 1e-5 * s.loss); // float32 roundings, as above
    }

    void cancelStopsEarly() {
        auto t = transforms::makeTransform("learned-affine-lu", 64, transformOptions());
        test::CancelAfter job(5);
        QVERIFY_THROWS_EXCEPTION(JobCancelled, train::LayerLocalTrainer(options(200)).train(*t, m_x, job));
        QCOMPARE(job.reports(), 5);
    }

    void sameSeedSameResult() {
        auto a = transforms::makeTransform("learned-affine-lu", 64, transformOptions());
        auto b = transforms::makeTransform("learned-affine-lu", 64, transformOptions());
        const auto ra = train::LayerLocalTrainer(options(30)).train(*a, m_x);
        const auto rb = train::LayerLocalTrainer(options(30)).train(*b, m_x);
        for (int i = 0; i < 30; ++i) QCOMPARE(ra.history[i].loss, rb.history[i].loss); // exact: same code and inputs
        QVERIFY(at::equal(a->matrix(), b->matrix()));
        auto o = options(30);
        o.seed = 8; // other minibatches
        auto c = transforms::makeTransform("learned-affine-lu", 64, transformOptions());
        const auto rc = train::LayerLocalTrainer(o).train(*c, m_x);
        QVERIFY(rc.history[1].loss != ra.history[1].loss);
    }

    void rejectsBadInput() {
        auto fixed = transforms::makeTransform("block-hadamard", 64, transformOptions());
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, train::LayerLocalTrainer(options(5)).train(*fixed, m_x));
        auto t = transforms::makeTransform("learned-affine-lu", 32, transformOptions());
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, train::LayerLocalTrainer(options(5)).train(*t, m_x));
        auto x = m_x.clone();
        x[3][7] = std::nanf("");
        auto u = transforms::makeTransform("learned-affine-lu", 64, transformOptions());
        try {
            train::LayerLocalTrainer(options(5)).train(*u, x, silentJob(), "layers.0.mlp.down_proj.input");
            QFAIL("no error for NaN activations");
        } catch (const std::invalid_argument& e) {
            QVERIFY2(QString(e.what()).contains("layers.0.mlp.down_proj.input"), e.what());
        }
    }
};

QTEST_GUILESS_MAIN(TestLayerLocalTrainer)
#include "tst_layerlocaltrainer.moc"
