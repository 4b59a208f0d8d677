// metrics/WeightProfile (the weights view's numbers): a hand-worked MXFP4 group, and on random
// weights of real-ish shapes every number against a float64 computation written here with loops
// and the scalar MX reference (mx/MxReference): column norms and maxima, the per-row group
// errors, their band and column means, the totals, a ragged last group. analysis::loadLinearWeights:
// the one-layer fold equals the whole-model fold (fold::foldedModel) and, for T3 alone,
// W_down·T3ᵀ worked here. Bad input names the linear.
#include "metrics/WeightProfile.h"
#include "model/Checkpoint.h"
#include "model/LlamaModel.h"
#include "model/TensorNames.h"
#include "mx/MxReference.h"
#include "analysis/ModelAnalysis.h"
#include "fold/ModelTransforms.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
// Qt after ATen: Qt's `slots` macro breaks ATen headers.
#include "TestData.h"
#include "TestSupport.h"

#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <vector>

using namespace latmix;

namespace {

mx::MxConfig config(mx::Format f, int block) {
    mx::MxConfig c = mx::makeConfig(f);
    c.blockSize = block;
    return c;
}

double maxAbsDiff(const at::Tensor& a, const at::Tensor& b) {
    return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

} // namespace

class TestWeightProfile : public QObject {
    Q_OBJECT

private slots:
    // One row of 32 values, MXFP4: max 6 gives shared exponent floor(log2 6) − 2 = 0 (scale 1);
    // 1.25 lies halfway between the E2M1 values 1 and 1.5 and rounds to even (1.0): error
    // 0.25² = 0.0625; 6 and the zeros are exact. Group error 0.0625 / 32; relative error
    // 0.0625 / (36 + 1.5625).
    void handWorkedGroup() {
        at::Tensor w = at::zeros({1, 32}, at::kFloat);
        w[0][0] = 6.0;
        w[0][5] = 1.25;
        metrics::WeightProfileOptions o;
        o.format = config(mx::Format::MxFp4, 32);
        const auto p = metrics::profileWeights(w, {}, o, "hand");
        // exact: dyadic values, and the same sums and one division as written here
        QCOMPARE(p.groups, std::int64_t(1));
        QCOMPARE(p.before.groupError.size(0), std::int64_t(1));
        QCOMPARE(p.before.groupError[0][0].item<double>(), 0.0625 / 32);
        QCOMPARE(p.before.mse, 0.0625 / 32);
        QCOMPARE(p.before.relativeError, 0.0625 / (36 + 1.5625));
        QCOMPARE(p.before.inputChannelNorm[5].item<double>(), 1.25);
        QCOMPARE(p.before.topChannels.at(0), std::int64_t(0));
        QCOMPARE(p.before.topChannels.at(1), std::int64_t(5));
        QCOMPARE(p.before.topChannels.at(2), std::int64_t(1)); // ties at 0: lower index first
        QVERIFY(!p.hasAfter);
    }

    void againstFloat64Loops_data() {
        QTest::addColumn<int>("format");
        QTest::addColumn<int>("block");
        QTest::addColumn<int>("rows");
        QTest::addColumn<int>("cols");
        QTest::addColumn<int>("bands");
        QTest::newRow("mxfp4 96x256, 8 bands") << int(mx::Format::MxFp4) << 32 << 96 << 256 << 8;
        QTest::newRow("mxint4 50x128, 7 uneven bands") << int(mx::Format::MxInt4) << 32 << 50 << 128 << 7;
        QTest::newRow("mxfp4 ragged last group 20x40") << int(mx::Format::MxFp4) << 32 << 20 << 40 << 128;
        QTest::newRow("mxfp8 1100x64 (more rows than a chunk)") << int(mx::Format::MxFp8E4M3) << 32 << 1100 << 64 << 16;
        QTest::newRow("nvfp4 40x64") << int(mx::Format::NvFp4) << 16 << 40 << 64 << 5;
    }
    void againstFloat64Loops() {
        QFETCH(int, format);
        QFETCH(int, block);
        QFETCH(int, rows);
        QFETCH(int, cols);
        QFETCH(int, bands);
        auto gen = at::detail::createCPUGenerator(rows * 31 + cols);
        // Heavy-tailed columns (a few channels 20x larger), like real weights after γ folding.
        at::Tensor before = at::randn({rows, cols}, gen, at::kFloat);
        before.narrow(1, 3, 2).mul_(20);
        const at::Tensor after = at::randn({rows, cols}, gen, at::kFloat) * 0.7;
        metrics::WeightProfileOptions o;
        o.format = config(mx::Format(format), block);
        o.heatmapRows = bands;
        o.topChannels = 4;
        const auto p = metrics::profileWeights(before, after, o, "layers.0.mlp.up_proj");
        QVERIFY(p.hasAfter);
        const int groups = (cols + block - 1) / block;
        QCOMPARE(p.groups, std::int64_t(groups));
        for (const auto* side : {&p.before, &p.after}) {
            const at::Tensor& w = side == &p.before ? before : after;
            const auto wc = w.contiguous();
            const std::vector<float> x(wc.data_ptr<float>(), wc.data_ptr<float>() + wc.numel());
            const auto q = mx::ref::fakeQuantize(x, cols, o.format);
            std::vector<double> colSq(cols, 0), colMax(cols, 0), rowGroup(std::size_t(rows) * groups, 0);
            double err = 0, norm = 0;
            for (int i = 0; i < rows; ++i)
                for (int j = 0; j < cols; ++j) {
                    const double v = x[std::size_t(i) * cols + j], d = v - q[std::size_t(i) * cols + j];
                    colSq[j] += v * v;
                    colMax[j] = std::max(colMax[j], std::abs(v));
                    err += d * d;
                    norm += v * v;
                    const int g = j / block, size = std::min(block, cols - g * block);
                    rowGroup[std::size_t(i) * groups + g] += d * d / size;
                }
            // The MX values are those of the same float32 input (exact); every sum is float64 on both
            // sides, so 1e-9 relative only absorbs summation order. Maxima are exact.
            for (int j = 0; j < cols; ++j) {
                QVERIFY(std::abs(side->inputChannelNorm[j].item<double>() - std::sqrt(colSq[j])) <= 1e-9 * std::sqrt(colSq[j]));
                QCOMPARE(side->inputChannelAbsMax[j].item<double>(), colMax[j]);
            }
            QVERIFY(std::abs(side->mse - err / (double(rows) * cols)) <= 1e-9 * side->mse);
            QVERIFY(std::abs(side->relativeError - err / norm) <= 1e-9 * side->relativeError);
            const int nb = std::min(bands, rows);
            QCOMPARE(side->groupError.size(0), std::int64_t(nb));
            QCOMPARE(int(side->bandStart.size()), nb + 1);
            QCOMPARE(side->bandStart.back(), std::int64_t(rows));
            for (int k = 0; k < nb; ++k) {
                const auto a = side->bandStart[std::size_t(k)], b = side->bandStart[std::size_t(k + 1)];
                QVERIFY(b > a);
                for (int g = 0; g < groups; ++g) {
                    double s = 0;
                    for (auto i = a; i < b; ++i) s += rowGroup[std::size_t(i) * groups + g];
                    const double want = s / double(b - a), got = side->groupError[k][g].item<double>();
                    QVERIFY2(std::abs(got - want) <= 1e-9 * std::max(want, 1e-30),
                             qPrintable(QString("band %1 group %2: %3 vs %4").arg(k).arg(g).arg(got).arg(want)));
                }
            }
            for (int g = 0; g < groups; ++g) {
                double s = 0;
                for (int i = 0; i < rows; ++i) s += rowGroup[std::size_t(i) * groups + g];
                QVERIFY(std::abs(side->columnGroupError[g].item<double>() - s / rows) <= 1e-9 * std::max(s / rows, 1e-30));
            }
            // Top channels: the largest norms, descending.
            std::vector<int> order(cols);
            for (int j = 0; j < cols; ++j) order[j] = j;
            std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return colSq[a] > colSq[b]; });
            QCOMPARE(int(side->topChannels.size()), 4);
            for (int k = 0; k < 4; ++k) QCOMPARE(side->topChannels[std::size_t(k)], std::int64_t(order[std::size_t(k)]));
        }
        // The two heavy columns are the two largest before; after, they are not special.
        QVERIFY((p.before.topChannels[0] == 3 || p.before.topChannels[0] == 4));
    }

    void badInput_data() {
        QTest::addColumn<int>("which");
        QTest::addColumn<QString>("message");
        QTest::newRow("not a matrix") << 0 << "must be a non-empty [out, in] matrix";
        QTest::newRow("NaN") << 1 << "NaN or infinite";
        QTest::newRow("shapes differ") << 2 << "the folded weight is 8x32, the original 8x64";
        QTest::newRow("no bands") << 3 << "at least one row band";
    }
    void badInput() {
        QFETCH(int, which);
        QFETCH(QString, message);
        metrics::WeightProfileOptions o;
        at::Tensor w = at::ones({8, 64}), after;
        if (which == 0) w = at::ones({64});
        if (which == 1) w[2][3] = std::nan("");
        if (which == 2) after = at::ones({8, 32});
        if (which == 3) o.heatmapRows = 0;
        try {
            metrics::profileWeights(w, after, o, "layers.2.self_attn.k_proj");
            QFAIL("no exception");
        } catch (const std::invalid_argument& e) {
            const QString what = QString::fromUtf8(e.what());
            QVERIFY2(what.contains(message) && what.contains("layers.2.self_attn.k_proj"), e.what());
        }
    }

    // The weights view's folded weight of one linear (one layer folded alone) against the whole
    // model folded by fold::foldedModel (the fold every run and the activation view use).
    void oneLayerFoldMatchesModelFold_data() {
        QTest::addColumn<QString>("linear");
        QTest::addColumn<int>("layer");
        QTest::newRow("q_proj (γ, T1)") << QString(model::names::kQProj) << 0;
        QTest::newRow("v_proj (γ, T1, T2)") << QString(model::names::kVProj) << 1;
        QTest::newRow("o_proj (T1, T2)") << QString(model::names::kOProj) << 2;
        QTest::newRow("up_proj (γ, T1)") << QString(model::names::kUpProj) << 3;
        QTest::newRow("down_proj (T1, T3)") << QString(model::names::kDownProj) << 1;
    }
    void oneLayerFoldMatchesModelFold() {
        QFETCH(QString, linear);
        QFETCH(int, layer);
        const QString dir = test::modelFolder("demo");
        const auto ck = model::Checkpoint::load(dir.toStdString());
        const auto& c = ck.config();
        fold::TransformSpec spec;
        spec.t1Kind = "learned-affine-lu";
        spec.t2Kind = "learned-affine-qr";
        spec.t3Block = 32;
        spec.seed = 5;
        spec.t3Seed = 13;
        fold::ModelTransforms t(c, spec);
        {
            at::NoGradGuard g;
            auto gen = at::detail::createCPUGenerator(23);
            for (auto& p : t.parameters()) p.add_(at::randn(p.sizes(), gen, p.options()) * 0.05);
        }
        QTemporaryDir tmp;
        const std::string file = tmp.filePath("transforms.h5").toStdString();
        t.save(file);
        const auto got = analysis::loadLinearWeights(dir.toStdString(), layer, linear.toStdString(), file);
        const auto loaded = model::loadWeights(ck, at::kDouble);
        const auto whole = fold::foldedModel(c, loaded, t, at::TensorOptions().dtype(at::kDouble));
        const auto& y = whole.weights().layers[std::size_t(layer)];
        const std::string l = linear.toStdString();
        const at::Tensor want = l == model::names::kQProj ? y.wq : l == model::names::kVProj ? y.wv
                              : l == model::names::kOProj ? y.wo : l == model::names::kUpProj ? y.wUp : y.wDown;
        const double scale = want.abs().max().item<double>();
        // Both folds are float64; got.folded is then rounded to float32 (≤ 2^-24 ≈ 6e-8 of the
        // largest entry): 1e-6 leaves 16×. The original is a float32 copy of the stored weight: exact.
        QVERIFY2(maxAbsDiff(got.folded, want) <= 1e-6 * scale, qPrintable(QString::number(maxAbsDiff(got.folded, want) / scale)));
        // The original is the stored weight, untouched.
        const auto& o = loaded.layers[std::size_t(layer)];
        const at::Tensor orig = l == model::names::kQProj ? o.wq : l == model::names::kVProj ? o.wv
                              : l == model::names::kOProj ? o.wo : l == model::names::kUpProj ? o.wUp : o.wDown;
        QCOMPARE(maxAbsDiff(got.original, orig), 0.0);
        QVERIFY(maxAbsDiff(got.folded, got.original) > 1e-3 * scale); // the fold did something (1000× the bound above)
    }

    // With T3 alone the folded W_down is W_down·T3ᵀ (no γ after down_proj), worked here.
    void t3AloneByHand() {
        const QString dir = test::modelFolder("demo");
        const auto ck = model::Checkpoint::load(dir.toStdString());
        fold::TransformSpec spec;
        spec.t1Kind = "none";
        spec.t2Kind = "none";
        spec.t3Block = 32;
        spec.t3Seed = 3;
        fold::ModelTransforms t(ck.config(), spec);
        QTemporaryDir tmp;
        const std::string file = tmp.filePath("transforms.h5").toStdString();
        t.save(file);
        const auto got = analysis::loadLinearWeights(dir.toStdString(), 2, model::names::kDownProj, file);
        const auto h = t.t3().dense().to(at::kDouble);
        const auto want = got.original.to(at::kDouble).mm(h.t());
        // float64 W·T3ᵀ both ways, got.folded rounded to float32 (≤ 2^-24 of the largest entry)
        QVERIFY(maxAbsDiff(got.folded, want) <= 1e-6 * want.abs().max().item<double>());
        // Without a transforms file there is no folded weight.
        QVERIFY(!analysis::loadLinearWeights(dir.toStdString(), 2, model::names::kDownProj).folded.defined());
    }

    void loadErrors_data() {
        QTest::addColumn<int>("layer");
        QTest::addColumn<QString>("linear");
        QTest::addColumn<QString>("message");
        QTest::newRow("layer out of range") << 99 << QString(model::names::kQProj) << "layer 99 is not a layer";
        QTest::newRow("not a linear") << 0 << QString("self_attn.rotary") << "'self_attn.rotary' is not a linear of layer 0 (self_attn.q_proj";
    }
    void loadErrors() {
        QFETCH(int, layer);
        QFETCH(QString, linear);
        QFETCH(QString, message);
        const QString dir = test::modelFolder("demo");
        try {
            analysis::loadLinearWeights(dir.toStdString(), layer, linear.toStdString());
            QFAIL("no exception");
        } catch (const std::exception& e) {
            QVERIFY2(QString::fromUtf8(e.what()).contains(message), e.what());
        }
    }
};

QTEST_GUILESS_MAIN(TestWeightProfile)
#include "tst_weightprofile.moc"
