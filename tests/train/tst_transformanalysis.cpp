// The analysis job behind `latmix analyze`: entries per point × transform, error rows for
// transforms that cannot be built, the block-size sweep, and the HDF5 / JSON results.
#include "TestSupport.h"

#include "analysis/AnalysisStore.h"
#include "train/TransformAnalysis.h"
#include "transforms/Blockwise.h"
#include "transforms/FixedTransforms.h"

#include <ATen/ATen.h>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

using namespace latmix;

namespace {

at::Tensor rows(std::int64_t n, std::int64_t d, double seedShift) {
    auto i = at::arange(n, at::kDouble).unsqueeze(1), j = at::arange(d, at::kDouble).unsqueeze(0);
    auto x = at::sin(i * 0.37 + j * 1.13 + seedShift) * (1.0 + 0.1 * j);
    x.select(1, 1).mul_(30.0); // an outlier channel
    return x.to(at::kFloat);
}

train::AnalysisOptions options(std::vector<std::string> kinds) {
    train::AnalysisOptions o;
    o.mx = mx::makeConfig(mx::Format::MxFp4);
    o.kinds = std::move(kinds);
    o.training.steps = 4;
    o.training.batchRows = 32;
    return o;
}

} // namespace

class TestTransformAnalysis : public QObject {
    Q_OBJECT

private slots:
    void entriesPerPointAndTransform() {
        const train::PointActivations acts{{"layers.0.self_attn.qkv.input", rows(64, 64, 0)},
                                           {"layers.0.mlp.down_proj.input", rows(64, 128, 1)}};
        const auto r = train::analyzeTransforms(acts, options({"none", "block-hadamard", "learned-affine-lu"}));
        QCOMPARE(int(r.points.size()), 2);
        QCOMPARE(r.points[1].second.second, int64_t(128));
        QCOMPARE(int(r.entries.size()), 6);
        const char* kinds[] = {"none", "block-hadamard", "learned-affine-lu"};
        for (int i = 0; i < 6; ++i) {
            const auto& e = r.entries[i];
            QCOMPARE(QString::fromStdString(e.point), QString::fromStdString(acts[i / 3].first));
            QCOMPARE(QString::fromStdString(e.kind), QString(kinds[i % 3]));
            QVERIFY2(e.error.empty(), e.error.c_str());
            QVERIFY(e.report.mse > 0);
            QCOMPARE(e.learned, i % 3 == 2);
        }
        // Learned kinds as large as the method's transform (issue 71): full at qkv's input (T1),
        // blocks of 32 at down_proj's (T3's size), kept as the blocks.
        const auto& full = r.entries[2];
        QCOMPARE(full.learnedBlock, int64_t(0));
        QCOMPARE(full.matrix.size(0), int64_t(64));
        QCOMPARE(full.matrix.scalar_type(), at::kDouble);
        const auto& learned = r.entries[5];
        QCOMPARE(int(learned.training.history.size()), 4);
        QCOMPARE(learned.learnedBlock, int64_t(32));
        QVERIFY(!learned.matrix.defined() && !learned.matrixTail.defined());
        QCOMPARE(learned.matrixBlocks.sizes().vec(), (std::vector<int64_t>{4, 32, 32}));
        QVERIFY(learned.bias.defined());
        QCOMPARE(learned.report.transform, std::string("learned-affine-lu, blocks of 32"));
        // Sweep: 8..128 for d = 128 (256 skipped); at B = 32 it is E(T) itself.
        QCOMPARE(int(r.entries[4].report.sweep.size()), 5);
        for (const auto& e : {r.entries[3], r.entries[5]})
            for (const auto& s : e.report.sweep)
                if (s.blockSize == 32) QVERIFY(std::fabs(s.mse - e.report.mse) <= 1e-12 * e.report.mse); // same float64 sums
    }

    // Where a learned kind is built block by block: T3's 32 at any down_proj input (an expert's
    // too), T2's head_dim at o_proj's, full at the residual's points, at unknown names, when the
    // point is no wider than the block, and with learnedAsMethod off.
    void learnedBlockFollowsTheMethod_data() {
        QTest::addColumn<QString>("point");
        QTest::addColumn<int>("dim");
        QTest::addColumn<bool>("asMethod");
        QTest::addColumn<int>("block");
        QTest::newRow("down_proj") << "layers.7.mlp.down_proj.input" << 8192 << true << 32;
        QTest::newRow("an expert's down_proj") << "layers.1.mlp.experts.5.down_proj.input" << 768 << true << 32;
        QTest::newRow("o_proj, head_dim 64") << "layers.0.self_attn.o_proj.input" << 2048 << true << 64;
        QTest::newRow("qkv") << "layers.0.self_attn.qkv.input" << 2048 << true << 0;
        QTest::newRow("gate_up") << "layers.0.mlp.gate_up.input" << 2048 << true << 0;
        QTest::newRow("unknown name") << "p" << 2048 << true << 0;
        QTest::newRow("as wide as the block") << "layers.0.mlp.down_proj.input" << 32 << true << 0;
        QTest::newRow("full asked") << "layers.7.mlp.down_proj.input" << 8192 << false << 0;
    }
    void learnedBlockFollowsTheMethod() {
        QFETCH(QString, point);
        QFETCH(int, dim);
        QFETCH(bool, asMethod);
        QFETCH(int, block);
        train::AnalysisOptions o;
        o.learnedAsMethod = asMethod;
        o.headDim = 64;
        QCOMPARE(train::learnedBlockAt(point.toStdString(), dim, o), std::int64_t(block));
    }

    // A blockwise learned transform is the block-diagonal matrix of its blocks: its dense A is
    // their block_diag, its forward x Aᵀ + v of that A (float64 of float32 parameters: within
    // float32 rounding), its inverse undoes it, its volume the blocks' log|s| together.
    void blockwiseIsItsBlockDiagonal() {
        transforms::TransformOptions to;
        to.seed = 5;
        to.noiseStd = 0.05;
        transforms::BlockwiseTransform t("learned-affine-lu", 80, 32, to); // 32, 32 and a tail of 16
        QCOMPARE(t.name(), std::string("learned-affine-lu, blocks of 32"));
        const auto* blocks = t.blockStructure();
        QVERIFY(blocks && blocks->blocks().size(0) == 2 && blocks->tail().size(0) == 16);
        const auto a = t.matrix().to(at::kDouble);
        QVERIFY(at::equal(a, at::block_diag({blocks->blocks()[0], blocks->blocks()[1], blocks->tail()}).to(at::kDouble)));
        QVERIFY(at::equal(a.narrow(0, 0, 32).narrow(1, 32, 48), at::zeros({32, 48}, at::kDouble))); // off the blocks: 0
        const auto x = rows(16, 80, 3).to(at::kDouble);
        t.initBiasFromMean(x.mean(0));
        const auto want = at::matmul(x, a.t()) + t.bias().to(at::kDouble);
        const auto got = t.forward(x).to(at::kDouble);
        QVERIFY2((got - want).abs().max().item<double>() <= 1e-5 * want.abs().max().item<double>(), "forward");
        QVERIFY2((t.inverse(got) - x).abs().max().item<double>() <= 1e-4 * x.abs().max().item<double>(), "inverse");
        QCOMPARE(t.logAbsScales().numel(), int64_t(80));
        QCOMPARE(int(t.parameters().size()), 3 * 4); // L, U, log|s|, v of each block
    }

    void blockTransformsFollowTheSweepBlock() {
        const auto x = rows(64, 64, 2);
        const auto r = train::analyzeTransforms({{"p", x}}, options({"block-hadamard"}));
        for (const auto& s : r.entries[0].report.sweep) {
            auto c = mx::makeConfig(mx::Format::MxFp4);
            c.blockSize = s.blockSize;
            const auto t = transforms::makeBlockHadamard(64, s.blockSize, 0, at::kDouble);
            QVERIFY(std::fabs(s.mse - metrics::transformationMse(x, *t, c)) <= 1e-12 * s.mse); // same float64 computation
        }
    }

    void unbuildableTransformIsAnErrorRow() {
        // No Hadamard matrix of order 22 (not a multiple of 4): an error row, the rest goes on.
        const auto r = train::analyzeTransforms({{"odd", rows(32, 22, 3)}}, options({"hadamard", "none"}));
        QCOMPARE(int(r.entries.size()), 2);
        QVERIFY(!r.entries[0].error.empty());
        QVERIFY2(QString::fromStdString(r.entries[0].error).contains("22"), r.entries[0].error.c_str());
        QVERIFY(r.entries[1].error.empty());
    }

    void invalidInputIsRejected() {
        auto x = rows(16, 32, 4);
        x[2][5] = std::nanf("");
        try {
            train::analyzeTransforms({{"layers.4.mlp.gate_up.input", x}}, options({"none"}));
            QFAIL("NaN activations accepted");
        } catch (const std::invalid_argument& e) {
            QVERIFY2(QString(e.what()).contains("layers.4.mlp.gate_up.input"), e.what());
        }
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, train::validateAnalysisOptions(options({"none", "fancy"})));
        auto o = options({"none"});
        o.sweepBlocks = {8, 12};
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, train::validateAnalysisOptions(o));
    }

    void cancelStops() {
        test::CancelAfter job(3);
        QVERIFY_THROWS_EXCEPTION(JobCancelled, train::analyzeTransforms({{"p", rows(64, 64, 5)}},
                                                                        options({"learned-affine-lu"}), job));
    }

    void writesHdf5AndJson() {
        QTemporaryDir dir;
        const auto r = train::analyzeTransforms({{"layers.0.mlp.down_proj.input", rows(64, 64, 6)}, {"odd", rows(16, 22, 7)}},
                                                options({"hadamard", "learned-affine-lu"}));
        const std::string h5 = dir.filePath("a.h5").toStdString(), js = dir.filePath("a.json").toStdString();
        analysis::writeAnalysisHdf5(h5, r, {{"format", "mxfp4"}});
        analysis::writeAnalysisJson(js, r, {{"format", "mxfp4"}});
        QVERIFY(!QFile::exists(dir.filePath("a.h5.partial")));
        const auto entries = analysis::analysisFileEntries(h5);
        QCOMPARE(int(entries.size()), 4);
        QVERIFY(std::find(entries.begin(), entries.end(), "layers.0.mlp.down_proj.input/learned-affine-lu") != entries.end());
        QFile f(dir.filePath("a.json"));
        QVERIFY(f.open(QIODevice::ReadOnly));
        const auto doc = QJsonDocument::fromJson(f.readAll());
        const auto points = doc.object()["points"].toArray();
        QCOMPARE(points.size(), 2);
        const auto odd = points[1].toObject()["transforms"].toArray();
        QVERIFY(odd[0].toObject().contains("error"));
        QVERIFY(odd[1].toObject()["mse"].toDouble() > 0);
        const auto learned = points[0].toObject()["transforms"].toArray()[1].toObject();
        QCOMPARE(learned["training"].toObject()["history"].toObject()["mse"].toArray().size(), 4);
        // An unwritable place: an error naming the file, nothing left behind.
        QVERIFY_THROWS_EXCEPTION(std::runtime_error, analysis::writeAnalysisHdf5("/nonexistent/dir/a.h5", r, {}));
    }
};

QTEST_GUILESS_MAIN(TestTransformAnalysis)
#include "tst_transformanalysis.moc"
