// report/SvgPlot: axes worked by hand (niceAxis) and an SVG line plot whose plot box, axis
// mapping, polylines, gaps and tick labels are computed here by hand; text escaped; a series with
// no finite point says so.
#include "report/SvgPlot.h"

#include "SvgReading.h"

#include <QtTest>

#include <cmath>
#include <limits>

using namespace latmix;
using latmix::test::attributes;
using latmix::test::xmlError;

class TestSvgPlot : public QObject {
    Q_OBJECT

private slots:
    void niceAxis_data() {
        QTest::addColumn<double>("lo");
        QTest::addColumn<double>("hi");
        QTest::addColumn<int>("ticks");
        QTest::addColumn<bool>("extend");
        QTest::addColumn<bool>("integer");
        QTest::addColumn<double>("min");
        QTest::addColumn<double>("max");
        QTest::addColumn<double>("step");
        QTest::addColumn<int>("count");
        // raw step 0.00208 -> 0.002; floor(3.15)·0.002, ceil(8.35)·0.002; 0.006..0.018: 7 ticks.
        QTest::newRow("loss") << 0.0063 << 0.0167 << 5 << true << false << 0.006 << 0.018 << 0.002 << 7;
        // raw 16.5 -> 20; x axes keep the data range: ticks 20..100.
        QTest::newRow("steps") << 1.0 << 100.0 << 6 << false << true << 1.0 << 100.0 << 20.0 << 5;
        // empty range widened by 10 %: [4.5, 5.5], raw 0.25 -> 0.2, [4.4, 5.6]: 7 ticks.
        QTest::newRow("constant") << 5.0 << 5.0 << 4 << true << false << 4.4 << 5.6 << 0.2 << 7;
        // raw 2 -> 2: [-4, 8], 7 ticks.
        QTest::newRow("negative") << -3.0 << 7.0 << 5 << true << false << -4.0 << 8.0 << 2.0 << 7;
        // one step: integer axes widen by 1.
        QTest::newRow("one step") << 1.0 << 1.0 << 5 << false << true << 0.0 << 2.0 << 1.0 << 3;
    }
    void niceAxis() {
        QFETCH(double, lo);
        QFETCH(double, hi);
        QFETCH(int, ticks);
        QFETCH(bool, extend);
        QFETCH(bool, integer);
        QFETCH(double, min);
        QFETCH(double, max);
        QFETCH(double, step);
        QFETCH(int, count);
        const report::Axis a = report::niceAxis(lo, hi, ticks, extend, integer);
        QCOMPARE(a.min, min);
        QCOMPARE(a.max, max);
        QCOMPARE(a.step, step);
        QCOMPARE(int(a.ticks.size()), count);
        for (double t : a.ticks) QVERIFY(t >= a.min - 1e-12 && t <= a.max + 1e-12); // k·step rounding
    }

    // Points worked by hand: plot box left 72, top 30, 510 x 224 px (600 x 300, one series);
    // x in [0, 4] (the data), y in [0, 40] (ticks every 10). (1, 10) -> (72 + 510/4, 254 − 224/4).
    // A NaN splits the line; connectGaps draws through it.
    void svgPointsByHand_data() {
        QTest::addColumn<bool>("connect");
        QTest::addColumn<QStringList>("lines");
        QTest::newRow("gap") << false << QStringList{"72.000,254.000 199.500,198.000", "454.500,86.000 582.000,30.000"};
        QTest::newRow("connected") << true << QStringList{"72.000,254.000 199.500,198.000 454.500,86.000 582.000,30.000"};
    }
    void svgPointsByHand() {
        QFETCH(bool, connect);
        QFETCH(QStringList, lines);
        report::PlotSeries s;
        s.name = "a<b & \"c\"";
        s.key = "k";
        s.x = {0, 1, 2, 3, 4};
        s.y = {0, 10, std::numeric_limits<double>::quiet_NaN(), 30, 40};
        s.connectGaps = connect;
        report::PlotOptions o;
        o.title = "T <1> & \"2\"";
        o.xLabel = "step";
        o.yLabel = "y";
        o.integerX = true; // ticks 0, 1, .., 4
        const QString svg = QString::fromStdString(report::svgLinePlot({s}, o));
        QVERIFY2(xmlError(svg).isEmpty(), qPrintable(xmlError(svg)));
        const auto a = attributes(svg.left(svg.indexOf('>') + 1));
        QCOMPARE(a.value("data-left"), QString("72.000"));
        QCOMPARE(a.value("data-top"), QString("30.000"));
        QCOMPARE(a.value("data-width"), QString("510.000"));
        QCOMPARE(a.value("data-height"), QString("224.000"));
        QCOMPARE(a.value("data-xmin").toDouble(), 0.0);
        QCOMPARE(a.value("data-xmax").toDouble(), 4.0);
        QCOMPARE(a.value("data-ymin").toDouble(), 0.0);
        QCOMPARE(a.value("data-ymax").toDouble(), 40.0);
        QCOMPARE(a.value("data-title"), QString("T <1> & \"2\""));
        QVERIFY(svg.contains("<title>T &lt;1&gt; &amp; &quot;2&quot;</title>"));
        QStringList got;
        static const QRegularExpression re("<polyline [^>]*>");
        for (auto it = re.globalMatch(svg); it.hasNext();) {
            const auto p = attributes(it.next().captured(0));
            QCOMPARE(p.value("data-series"), QString("k"));
            got << p.value("points");
        }
        QCOMPARE(got, lines);
        // Tick labels of both axes: 0..4 on x, 0..40 on y.
        QCOMPARE(svg.count("class=\"tick x-tick\""), 5);
        QCOMPARE(svg.count("class=\"tick y-tick\""), 5);
        for (const char* t : {">0</text>", ">4</text>", ">40</text>", ">20</text>"}) QVERIFY2(svg.contains(t), t);
        // No finite point: the box says so, no polyline.
        report::PlotSeries none{"n", "n", {1, 2}, {std::nan(""), std::nan("")}};
        const QString empty = QString::fromStdString(report::svgLinePlot({none}, o));
        QVERIFY(empty.contains("no data") && !empty.contains("<polyline"));
    }
};

QTEST_GUILESS_MAIN(TestSvgPlot)
#include "tst_svgplot.moc"
