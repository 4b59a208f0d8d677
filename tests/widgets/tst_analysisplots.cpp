// Analysis plots: the curves drawn are the numbers given, the analysis JSON of `latmix analyze`
// is read back into them, and the PNGs are written at the requested size. The log axes' ticker
// (PlotStyle::logTicker) spreads its ticks over the axis.
#include "AnalysisPlots.h"
#include "PlotStyle.h"

#include <qcustomplot.h>

#include <QFile>
#include <QImage>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <cmath>

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

// The ticks a ticker places in [lower, upper], in order, and the smallest gap between two of them
// on a log axis, in decades.
struct LogTicks {
    QVector<double> ticks;
    double smallestGap = INFINITY;
};
LogTicks logTicks(QCPAxisTicker& ticker, double lower, double upper) {
    QVector<double> all;
    QVector<QString> labels;
    ticker.generate(QCPRange(lower, upper), QLocale::c(), 'g', 2, all, nullptr, &labels);
    LogTicks r;
    for (double t : all)
        if (t >= lower && t <= upper) r.ticks << t;
    std::sort(r.ticks.begin(), r.ticks.end());
    for (int i = 1; i < r.ticks.size(); ++i) r.smallestGap = std::min(r.smallestGap, std::log10(r.ticks[i] / r.ticks[i - 1]));
    return r;
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

    void logTickerSpreadsTicks_data() {
        QTest::addColumn<double>("lower");
        QTest::addColumn<double>("upper");
        QTest::addColumn<int>("tickCount");
        QTest::addColumn<int>("maxTicks");
        QTest::addColumn<bool>("qcustomplotBunches"); // QCustomPlot's own log ticker fails the check
        // The first: the comparison's E(T) vs block size on brownpy-13M, where two labels overlapped.
        QTest::newRow("1.35 decades, 4 ticks") << 5.98697e-05 << 0.00132693 << 4 << 5 << true;
        QTest::newRow("1.35 decades, 1 tick") << 5.98697e-05 << 0.00132693 << 1 << 2 << false;
        QTest::newRow("0.6 decades") << 2e-4 << 8e-4 << 4 << 5 << true;
        QTest::newRow("0.4 decades") << 3e-4 << 7.5e-4 << 4 << 5 << false;
        QTest::newRow("3 decades") << 1e-5 << 1e-2 << 4 << 5 << false;
        // The training loss of a short calibration: 0.0125 … 0.0175 between 0.01 and 0.02, not 0.009.
        QTest::newRow("0.37 decades") << 0.009 << 0.021 << 4 << 5 << false;
        // Linear steps, QCustomPlot's nice 0.1 for a target of 4: 1.0, 1.1, … 1.6.
        QTest::newRow("a fifth of a decade") << 1.0 << 1.6 << 4 << 7 << false;
    }
    void logTickerSpreadsTicks() {
        QFETCH(double, lower);
        QFETCH(double, upper);
        QFETCH(int, tickCount);
        QFETCH(int, maxTicks);
        QFETCH(bool, qcustomplotBunches);
        // Labels far enough apart on the log axis: no gap under half of an even spread of
        // tickCount + 1 ticks (fitTicks asks for the count that fits labels evenly spread).
        const double evenGap = std::log10(upper / lower) / (tickCount + 1);
        const auto ticker = PlotStyle::logTicker(tickCount);
        const LogTicks r = logTicks(*ticker, lower, upper);
        QVERIFY2(r.ticks.size() >= 2 && r.ticks.size() <= maxTicks, qPrintable(QString::number(r.ticks.size())));
        QVERIFY2(r.smallestGap >= 0.5 * evenGap, qPrintable(QString("%1 < %2").arg(r.smallestGap).arg(0.5 * evenGap)));
        QCPAxisTickerLog plain;
        plain.setTickCount(tickCount);
        QCOMPARE(logTicks(plain, lower, upper).smallestGap < 0.5 * evenGap, qcustomplotBunches);
    }

    // Training steps: whole numbers, two of them at least inside the axis (issue 71: a three-step
    // run opened again showed "2" alone under every curve).
    void integerTicksTwoAtLeast_data() {
        QTest::addColumn<double>("lower");
        QTest::addColumn<double>("upper");
        QTest::addColumn<int>("tickCount");
        QTest::addColumn<int>("atLeast");
        // A narrow plot's label fitting (PlotStyle) asks for one or two ticks.
        QTest::newRow("steps 1 .. 3, 1 wanted") << 1.0 << 3.0 << 1 << 2;
        QTest::newRow("steps 1 .. 3, 2 wanted") << 1.0 << 3.0 << 2 << 2;
        QTest::newRow("steps 1 .. 3, 5 wanted") << 1.0 << 3.0 << 5 << 2;
        QTest::newRow("steps 0 .. 100") << 0.0 << 100.0 << 5 << 4;
    }
    void integerTicksTwoAtLeast() {
        QFETCH(double, lower);
        QFETCH(double, upper);
        QFETCH(int, tickCount);
        QFETCH(int, atLeast);
        QCustomPlot plot;
        plot.xAxis->ticker()->setTickCount(tickCount);
        PlotStyle::integerTicks(plot.xAxis);
        QVector<double> all;
        plot.xAxis->ticker()->generate(QCPRange(lower, upper), QLocale::c(), 'g', 6, all, nullptr, nullptr);
        QVector<double> inside;
        for (double t : all)
            if (t >= lower && t <= upper) inside << t;
        QVERIFY2(inside.size() >= atLeast, qPrintable(QString::number(inside.size())));
        for (double t : inside) QCOMPARE(t, std::round(t));
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
