// The MX format explorer plots exactly what core computes. Each row picks a format, block size
// and scale mode through the combo boxes, as a user would, and compares the data the plots hold
// with latmix::mx::fakeQuantize and latmix::metrics::perBlockError run here independently.
#include "MxExplorerView.h"

#include "metrics/BlockError.h"
#include "mx/MxQuantizer.h"
#include "mx/SyntheticActivations.h"

// Qt's `slots` macro (from the Qt headers above) breaks ATen's IValue::slots(); QCustomPlot
// needs Qt's keywords, so hide the macro just for ATen instead of building with QT_NO_KEYWORDS.
#pragma push_macro("slots")
#undef slots
#include <ATen/ATen.h>
#pragma pop_macro("slots")

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QtTest>

#include <cmath>
#include <vector>

using latmix::gui::MxExplorerView;

namespace {

std::vector<double> toDoubles(const at::Tensor& t) {
    const at::Tensor c = t.to(at::kDouble).contiguous();
    return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

template <typename T>
T* child(QWidget& parent, const char* name) {
    auto* w = parent.findChild<T*>(QLatin1String(name));
    if (!w) qFatal("no child %s", name);
    return w;
}

} // namespace

class TestMxExplorerView : public QObject {
    Q_OBJECT

private slots:
    void plotsMatchCore_data();
    void plotsMatchCore();
    void nvfp4ForcesBlock16();
    void eachChangeRecomputesOnce();
    void logScaleKeepsData();
};

void TestMxExplorerView::plotsMatchCore_data() {
    QTest::addColumn<QString>("format");
    QTest::addColumn<int>("block");
    QTest::addColumn<QString>("scaleMode");
    QTest::addColumn<int>("length");
    QTest::addColumn<int>("seed");
    QTest::addColumn<double>("outlierScale");

    QTest::newRow("mxfp4 b32 floor (defaults)") << "mxfp4" << 32 << "floor" << 256 << 1 << 40.0;
    QTest::newRow("mxfp4 b8 ceil") << "mxfp4" << 8 << "ceil" << 256 << 7 << 40.0;
    QTest::newRow("mxfp6_e2m3 b64 even") << "mxfp6_e2m3" << 64 << "even" << 512 << 3 << 25.0;
    QTest::newRow("mxfp6_e3m2 b16 floor, partial block") << "mxfp6_e3m2" << 16 << "floor" << 100 << 2 << 40.0;
    QTest::newRow("mxfp8_e4m3 b128 even, partial block") << "mxfp8_e4m3" << 128 << "even" << 1000 << 11 << 80.0;
    QTest::newRow("mxfp8_e5m2 b32 ceil") << "mxfp8_e5m2" << 32 << "ceil" << 256 << 5 << 40.0;
    QTest::newRow("mxint8 b256 floor, block > length") << "mxint8" << 256 << "floor" << 100 << 1 << 40.0;
    QTest::newRow("mxint4 b16 floor") << "mxint4" << 16 << "floor" << 256 << 1 << 40.0;
    QTest::newRow("mxint4 b16 even, partial block") << "mxint4" << 16 << "even" << 100 << 9 << 12.5;
    QTest::newRow("nvfp4 (block forced to 16)") << "nvfp4" << 16 << "floor" << 256 << 1 << 40.0;
    QTest::newRow("nvfp4, partial block") << "nvfp4" << 16 << "floor" << 100 << 4 << 300.0;
    QTest::newRow("nvfp4 four-over-six") << "nvfp4" << 16 << "four-over-six" << 256 << 3 << 40.0;
    QTest::newRow("mxfp4 b32 floor, no outliers") << "mxfp4" << 32 << "floor" << 64 << 1 << 0.0;
}

void TestMxExplorerView::plotsMatchCore() {
    QFETCH(QString, format);
    QFETCH(int, block);
    QFETCH(QString, scaleMode);
    QFETCH(int, length);
    QFETCH(int, seed);
    QFETCH(double, outlierScale);

    MxExplorerView view;
    auto* formatCombo = child<QComboBox>(view, "formatCombo");
    auto* blockCombo = child<QComboBox>(view, "blockCombo");
    auto* scaleCombo = child<QComboBox>(view, "scaleModeCombo");

    // As a user would: type-select the format, pick block and mode from the lists.
    formatCombo->setCurrentText(format);
    QCOMPARE(formatCombo->currentText(), format);
    if (blockCombo->isEnabled()) blockCombo->setCurrentIndex(blockCombo->findText(QString::number(block)));
    QCOMPARE(blockCombo->currentText(), QString::number(block));
    scaleCombo->setCurrentIndex(scaleCombo->findText(scaleMode));
    child<QSpinBox>(view, "lengthSpin")->setValue(length);
    child<QSpinBox>(view, "seedSpin")->setValue(seed);
    child<QDoubleSpinBox>(view, "outlierScaleSpin")->setValue(outlierScale);

    // The same inputs, built here without the view.
    latmix::mx::SyntheticSpec spec;
    spec.length = length;
    spec.seed = static_cast<std::uint64_t>(seed);
    spec.outlierScale = outlierScale;
    QCOMPARE(child<QSpinBox>(view, "outlierCountSpin")->value(), spec.outlierChannels);
    latmix::mx::MxConfig cfg;
    cfg.format = latmix::mx::parseFormat(format.toStdString());
    cfg.blockSize = block;
    cfg.scaleMode = latmix::mx::parseScaleMode(scaleMode.toStdString());

    const latmix::mx::MxConfig shown = view.config();
    QCOMPARE(shown.format, cfg.format);
    QCOMPARE(shown.blockSize, cfg.blockSize);
    QCOMPARE(shown.scaleMode, cfg.scaleMode);
    QVERIFY2(!view.hasError(), qPrintable(view.summaryText()));
    QVERIFY2(view.summaryText().contains(QString::fromStdString(shown.describe())), qPrintable(view.summaryText()));

    std::vector<float> x = latmix::mx::syntheticActivations(spec);
    const at::Tensor xt = at::from_blob(x.data(), {static_cast<std::int64_t>(x.size())}, at::kFloat).clone();
    const at::Tensor xq = latmix::mx::fakeQuantize(xt, cfg);
    const std::vector<double> wantDeq = toDoubles(xq);
    const std::vector<double> wantErr = toDoubles(latmix::metrics::perBlockError(xt, xq, block));

    const QVector<double> original = view.originalValues();
    QCOMPARE(original.size(), length);
    for (int i = 0; i < length; ++i)
        if (original[i] != static_cast<double>(x[static_cast<size_t>(i)]))
            QFAIL(qPrintable(QStringLiteral("original[%1]: plotted %2, synthetic %3")
                                 .arg(i).arg(original[i], 0, 'g', 17).arg(x[static_cast<size_t>(i)], 0, 'g', 9)));

    const QVector<double> deq = view.dequantizedValues();
    QCOMPARE(deq.size(), length);
    for (int i = 0; i < length; ++i) {
        const bool same = deq[i] == wantDeq[i] || (std::isnan(deq[i]) && std::isnan(wantDeq[i]));
        if (!same)
            QFAIL(qPrintable(QStringLiteral("dequantized[%1] (x=%2): plotted %3, fakeQuantize %4")
                                 .arg(i).arg(x[static_cast<size_t>(i)], 0, 'g', 9)
                                 .arg(deq[i], 0, 'g', 17).arg(wantDeq[i], 0, 'g', 17)));
    }

    const QVector<double> err = view.blockErrors();
    QCOMPARE(err.size(), static_cast<int>(wantErr.size()));
    QCOMPARE(err.size(), (length + block - 1) / block);
    // float64 per-block errors of the same MX values: 1e-12 only absorbs summation order
    for (int b = 0; b < err.size(); ++b) {
        const double want = wantErr[static_cast<size_t>(b)];
        if (!(std::abs(err[b] - want) <= 1e-12 * std::abs(want)))
            QFAIL(qPrintable(QStringLiteral("block error %1: plotted %2, perBlockError %3")
                                 .arg(b).arg(err[b], 0, 'g', 17).arg(want, 0, 'g', 17)));
    }
}

void TestMxExplorerView::nvfp4ForcesBlock16() {
    MxExplorerView view;
    auto* formatCombo = child<QComboBox>(view, "formatCombo");
    auto* blockCombo = child<QComboBox>(view, "blockCombo");
    auto* scaleCombo = child<QComboBox>(view, "scaleModeCombo");
    QVERIFY(blockCombo->isEnabled());
    blockCombo->setCurrentText(QStringLiteral("64"));
    QCOMPARE(view.config().blockSize, 64);

    formatCombo->setCurrentText(QStringLiteral("nvfp4"));
    QCOMPARE(blockCombo->currentText(), QStringLiteral("16"));
    QVERIFY(!blockCombo->isEnabled());
    // nvfp4 takes its standard rule (floor) and four-over-six; the MX rules are offered disabled.
    const auto* modes = qobject_cast<const QStandardItemModel*>(scaleCombo->model());
    QVERIFY(modes);
    auto offered = [&](const char* mode) { return modes->item(scaleCombo->findText(QString(mode)))->isEnabled(); };
    QVERIFY(offered("floor") && offered("four-over-six") && !offered("ceil") && !offered("even"));
    QCOMPARE(view.config().blockSize, 16);
    QVERIFY(view.config().isNvfp4());
    QVERIFY2(!view.hasError(), qPrintable(view.summaryText()));
    QCOMPARE(view.blockErrors().size(), 256 / 16);

    // Leaving nvfp4 gives the user's block size back.
    scaleCombo->setCurrentText(QStringLiteral("four-over-six"));
    QCOMPARE(view.config().scaleMode, latmix::mx::ScaleMode::FourOverSix);
    formatCombo->setCurrentText(QStringLiteral("mxint4"));
    QVERIFY(blockCombo->isEnabled());
    QVERIFY(offered("floor") && offered("ceil") && offered("even") && !offered("four-over-six"));
    // The mode mxint4 does not take gave way to floor.
    QCOMPARE(scaleCombo->currentText(), QStringLiteral("floor"));
    QVERIFY2(!view.hasError(), qPrintable(view.summaryText()));
    QCOMPARE(blockCombo->currentText(), QStringLiteral("64"));
    QCOMPARE(view.blockErrors().size(), 256 / 64);
}

void TestMxExplorerView::eachChangeRecomputesOnce() {
    MxExplorerView view;
    QSignalSpy spy(&view, &MxExplorerView::recomputed);
    const QVector<double> before = view.originalValues();

    child<QSpinBox>(view, "seedSpin")->setValue(42);
    QCOMPARE(spy.count(), 1);
    QCOMPARE(spy.takeFirst().at(0).toBool(), true);
    QVERIFY(view.originalValues() != before);

    // Forcing the block to 16 must not recompute a second time.
    child<QComboBox>(view, "formatCombo")->setCurrentText(QStringLiteral("nvfp4"));
    QCOMPARE(spy.count(), 1);
    child<QComboBox>(view, "formatCombo")->setCurrentText(QStringLiteral("mxfp8_e4m3"));
    QCOMPARE(spy.count(), 2);
}

void TestMxExplorerView::logScaleKeepsData() {
    // The axis scale is presentation only: the plotted errors stay those of perBlockError.
    MxExplorerView view;
    const QVector<double> logErrors = view.blockErrors();
    child<QCheckBox>(view, "logScaleCheck")->setChecked(false);
    QCOMPARE(view.blockErrors(), logErrors);
    QVERIFY(!logErrors.isEmpty());
}

QTEST_MAIN(TestMxExplorerView)
#include "tst_mxexplorerview.moc"
