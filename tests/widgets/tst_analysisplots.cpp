// Analysis plots: the curves drawn are the numbers given, the analysis JSON of `latmix analyze`
// is read back into them, and the PNGs are written at the requested size.
#include "AnalysisPlots.h"

#include <qcustomplot.h>

#include <QFile>
#include <QImage>
#include <QTemporaryDir>
#include <QtTest>

using namespace latmix::gui;

namespace {

PointCurves sample() {
    PointCurves c;
    c.point = "layers.0.mlp.down_proj.input";
    c.format = "mxfp4, block 32";
    c.transforms.push_back({"none", {0.5, 0.25, 2.0}, {8, 16, 32}, {0.1, 0.2, 0.4}});
    c.transforms.push_back({"block-hadamard", {0.3, 0.3, 0.3}, {8, 16, 32}, {0.05, 0.1, 0.2}});
    return c;
}

QVector<double> values(const QCPGraph* g) {
    QVector<double> v;
    for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it) v.push_back(it->value);
    return v;
}

} // namespace

class TestAnalysisPlots : public QObject {
    Q_OBJECT
private slots:
    void drawsTheGivenNumbers() {
        const PointCurves c = sample();
        QCustomPlot p;
        AnalysisPlots::drawPerBlockError(&p, c);
        QCOMPARE(p.graphCount(), 2);
        QCOMPARE(p.graph(0)->name(), QString("none"));
        QCOMPARE(values(p.graph(0)), c.transforms[0].perBlockError);
        QCOMPARE(values(p.graph(1)), c.transforms[1].perBlockError);
        AnalysisPlots::drawBlockSizeSweep(&p, c); // the same plot, redrawn
        QCOMPARE(p.graphCount(), 2);
        QCOMPARE(values(p.graph(1)), c.transforms[1].sweepMse);
    }

    void writesPngs_data() {
        QTest::addColumn<int>("width");
        QTest::addColumn<int>("height");
        QTest::newRow("default") << 1000 << 520;
        QTest::newRow("small") << 400 << 300;
    }
    void writesPngs() {
        QFETCH(int, width);
        QFETCH(int, height);
        QTemporaryDir dir;
        const QString a = dir.filePath("blocks.png"), b = dir.filePath("sweep.png");
        QVERIFY(AnalysisPlots::savePerBlockErrorPng(sample(), a, nullptr, width, height));
        QVERIFY(AnalysisPlots::saveBlockSizeSweepPng(sample(), b, nullptr, width, height));
        QCOMPARE(QImage(a).size(), QSize(width, height));
        QCOMPARE(QImage(b).size(), QSize(width, height));
        QString error;
        QVERIFY(!AnalysisPlots::savePerBlockErrorPng(sample(), "/nonexistent/dir/x.png", &error));
        QVERIFY(error.contains("/nonexistent/dir/x.png"));
    }

    void readsAnalysisJson() {
        QTemporaryDir dir;
        QFile f(dir.filePath("a.json"));
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(R"({"attributes": {"format": "mxfp4", "block": "32"}, "points": [
                   {"name": "layers.1.self_attn.qkv.input", "transforms": [
                     {"kind": "none", "per_block_error": [1, 2], "sweep": [{"block": 8, "mse": 0.5}, {"block": 16, "mse": 0.75}]},
                     {"kind": "hadamard", "error": "no Hadamard matrix of size 172"}]}]})");
        f.close();
        const auto points = AnalysisPlots::loadAnalysisJson(f.fileName());
        QCOMPARE(points.size(), 1);
        QCOMPARE(points[0].point, QString("layers.1.self_attn.qkv.input"));
        QCOMPARE(points[0].format, QString("mxfp4, block 32"));
        QCOMPARE(points[0].transforms.size(), 1); // the error entry has nothing to draw
        QCOMPARE(points[0].transforms[0].perBlockError, (QVector<double>{1, 2}));
        QCOMPARE(points[0].transforms[0].sweepBlocks, (QVector<double>{8, 16}));
        QCOMPARE(points[0].transforms[0].sweepMse, (QVector<double>{0.5, 0.75}));
        QVERIFY_THROWS_EXCEPTION(std::runtime_error, AnalysisPlots::loadAnalysisJson(dir.filePath("missing.json")));
    }
};

QTEST_MAIN(TestAnalysisPlots)
#include "tst_analysisplots.moc"
