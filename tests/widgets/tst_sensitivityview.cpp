// The sensitivity tab (offscreen): measured on the built-in calibration text, its heat map holds,
// cell by cell, core's table for the same windows (run::measureSensitivity computed again here); a
// mixture of experts gets an experts column; the budget's scheme, read back from the rules the tab
// hands over, has the bits and the summed KL the tab says, within the budget; a table file that is
// not one is refused, naming it.
#include "model/Checkpoint.h"
#include "run/FormatScheme.h"
#include "run/Sensitivity.h"
#include "tokenizer/Tokenizer.h"

#include <ATen/ATen.h>
// Qt after ATen: Qt's `slots` macro breaks ATen headers.
#include "CalibrationView.h"
#include "SensitivityView.h"
#include "TestData.h"

#include <qcustomplot.h>

#include <QComboBox>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QSlider>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>

using namespace latmix;
using latmix::gui::SensitivityView;

namespace {

QCPColorMap* colourMap(QCustomPlot* p) {
    for (int i = 0; i < p->plottableCount(); ++i)
        if (auto* m = qobject_cast<QCPColorMap*>(p->plottable(i))) return m;
    return nullptr;
}

// The tab measured on `windows` windows of `tokens` tokens in `formats`, waited for.
bool measured(SensitivityView& v, const QString& model, int windows, int tokens, const QString& formats) {
    v.setModelDir(model);
    v.findChild<QSpinBox*>("sensitivityWindowsSpin")->setValue(windows);
    v.findChild<QSpinBox*>("sensitivitySeqLenSpin")->setValue(tokens);
    v.findChild<QLineEdit*>("sensitivityFormatsEdit")->setText(formats);
    QSignalSpy done(&v, &SensitivityView::tableReady);
    QString error;
    if (!v.measure(&error)) return false;
    return done.wait(120000) && done.first().at(0).toBool();
}

run::SensitivityTable coreTable(const QString& model, int windows, int tokens, const std::vector<std::string>& formats) {
    run::SensitivityRequest r;
    r.modelDir = model.toStdString();
    r.calibrationIds = tokenizer::Tokenizer::loadFromDir(r.modelDir)->encode(gui::builtInCalibrationText().toStdString(), false);
    r.windows = windows, r.seqLen = tokens, r.formats = formats;
    return run::measureSensitivity(r);
}

} // namespace

class TestSensitivityView : public QObject {
    Q_OBJECT

private slots:
    void heatmapDrawsTheTable_data() {
        QTest::addColumn<QString>("model");
        QTest::addColumn<QStringList>("columns");
        QTest::newRow("dense") << test::demoModelDir() << QStringList{"qkv", "o_proj", "gate_up", "down_proj"};
        QTest::newRow("experts") << test::smallMoeModelDir() << QStringList{"qkv", "o_proj", "experts"};
    }
    void heatmapDrawsTheTable() {
        QFETCH(QString, model);
        QFETCH(QStringList, columns);
        SensitivityView v;
        v.resize(1100, 700);
        QVERIFY(measured(v, model, 2, 32, "mxfp4,mxfp8"));
        const auto want = coreTable(model, 2, 32, {"mxfp4", "mxfp8"});
        const auto& got = v.table();
        QCOMPARE(got.groups.size(), want.groups.size());
        auto* map = colourMap(v.findChild<QCustomPlot*>("sensitivityMap"));
        QVERIFY(map);
        QCOMPARE(map->data()->keySize(), int(columns.size()));
        auto* shown = v.findChild<QComboBox*>("sensitivityShownCombo");
        for (int k = 0; k < 2; ++k) {
            shown->setCurrentIndex(k);
            map = colourMap(v.findChild<QCustomPlot*>("sensitivityMap"));
            for (std::size_t g = 0; g < want.groups.size(); ++g) {
                QCOMPARE(got.kl[g][std::size_t(k)], want.kl[g][std::size_t(k)]); // the same windows, the same bits
                const QString kind = QString::fromStdString(want.groups[g].name).section(QLatin1Char('.'), 3);
                const int column = columns.indexOf(kind == QLatin1String("qkv") || kind == QLatin1String("o_proj") ||
                                                           kind == QLatin1String("gate_up") || kind == QLatin1String("down_proj") ||
                                                           kind == QLatin1String("experts")
                                                       ? kind
                                                       : QString());
                QVERIFY2(column >= 0, qPrintable(kind));
                QCOMPARE(map->data()->cell(column, want.groups[g].layer), std::max(want.kl[g][std::size_t(k)], 1e-9));
            }
        }
    }

    // The budget's scheme as the tab hands it over: rules that resolve to formats whose average bits
    // and summed table KL are the tab's numbers, within the budget, never above.
    void budgetBuysTheScheme() {
        SensitivityView v;
        v.resize(1100, 700);
        QVERIFY(measured(v, test::demoModelDir(), 2, 32, "mxfp4,mxfp8"));
        const auto& t = v.table();
        const auto config = model::Checkpoint::load(t.model).config();
        QSignalSpy chosen(&v, &SensitivityView::schemeChosen);
        for (double budget : {4.5, 5.0, 6.0, 8.0}) {
            v.setBudget(budget);
            QCOMPARE(v.budget(), budget);
            v.findChild<QPushButton*>("sensitivityUseButton")->click();
            const QString rules = chosen.takeLast().at(0).toString();
            const auto groups = run::resolveScheme(config, run::parseSchemeRules(rules.toStdString()), std::nullopt);
            double kl = 0;
            for (std::size_t g = 0; g < groups.size(); ++g) {
                const std::string f = run::schemeFormatName(groups[g].format);
                const auto k = std::size_t(std::find(t.formats.begin(), t.formats.end(), f) - t.formats.begin());
                QVERIFY(k < t.formats.size());
                kl += t.kl[g][k];
            }
            QVERIFY(std::abs(run::averageBits(groups) - v.plan().bits) <= 1e-12);
            QVERIFY(v.plan().bits <= budget + 1e-12);
            QVERIFY(std::abs(kl - v.plan().predictedKl) <= 1e-12 * std::max(1.0, kl));
            QVERIFY(v.findChild<QLabel*>("sensitivityBudgetLabel")->text().contains(QString::number(v.plan().bits, 'f', 3)));
        }
        // Mapping another format keeps the budget and its scheme.
        const auto plan = v.plan();
        auto* shown = v.findChild<QComboBox*>("sensitivityShownCombo");
        shown->setCurrentIndex(1 - shown->currentIndex());
        QCOMPARE(v.budget(), 8.0);
        QCOMPARE(v.plan().bits, plan.bits);
    }

    void refusesWhatIsNoTable() {
        SensitivityView v;
        QTemporaryDir dir;
        const QString path = dir.filePath("not-a-table.json");
        QFile f(path);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("{\"model\": 3}");
        f.close();
        QString error;
        QVERIFY(!v.loadTable(path, &error));
        QVERIFY2(error.contains(path) && error.contains("latmix sensitivity"), qPrintable(error));
        QVERIFY(!v.findChild<QPushButton*>("sensitivityUseButton")->isEnabled());
    }
};

QTEST_MAIN(TestSensitivityView)
#include "tst_sensitivityview.moc"
