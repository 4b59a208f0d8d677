// The experts tab and the weights tab on a mixture-of-experts model (offscreen): the heat map
// draws, cell by cell, core's expert load (analysis::measureModelExpertLoad, computed again here on the
// same windows) over the balanced share; every layer's counts add up to its tokens times k; a dense
// model leaves the tab disabled, saying why. The weights tab reaches the router and any expert's
// linear, and what it profiles is that expert's weight as the checkpoint stores it.
#include "model/Checkpoint.h"
#include "model/TensorNames.h"
#include "analysis/ModelAnalysis.h"

#include <ATen/ATen.h>
// Qt after ATen: Qt's `slots` macro breaks ATen headers.
#include "CalibrationView.h"
#include "ExpertLoadView.h"
#include "JobRunner.h"
#include "TestData.h"
#include "WidgetLookup.h"
#include "WeightView.h"

#include <qcustomplot.h>

#include <QDir>
#include <QLabel>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QCheckBox>
#include <QComboBox>
#include <QtTest>

#include <cmath>
#include <numeric>

using namespace latmix;
using latmix::gui::ExpertLoadView;
using latmix::gui::WeightView;

namespace {

QCPColorMap* colourMap(QCustomPlot* p) {
    for (int i = 0; i < p->plottableCount(); ++i)
        if (auto* m = qobject_cast<QCPColorMap*>(p->plottable(i))) return m;
    return nullptr;
}

} // namespace

class TestExpertLoadView : public QObject {
    Q_OBJECT

    QString m_moe;

private slots:
    void initTestCase() {
        m_moe = test::smallMoeModelDir();
    }

    void heatmapDrawsTheLoad() {
        ExpertLoadView v;
        v.resize(1000, 600);
        v.setModelDir(m_moe);
        auto* windows = v.findChild<QSpinBox*>("expertWindowsSpin");
        auto* seqLen = v.findChild<QSpinBox*>("expertSeqLenSpin");
        QVERIFY(windows && seqLen);
        windows->setValue(3);
        seqLen->setValue(40);
        QSignalSpy done(&v, &ExpertLoadView::loadFinished);
        QString error;
        QVERIFY2(v.measure(&error), qPrintable(error));
        QVERIFY(done.wait(60000));
        QVERIFY2(done.first().at(0).toBool(), qPrintable(done.first().at(1).toString()));

        analysis::ModelCapture request;
        request.modelDir = m_moe.toStdString();
        request.calibrationText = gui::builtInCalibrationText().toStdString();
        request.samples = 3;
        request.seqLen = 40;
        const auto want = analysis::measureModelExpertLoad(request);
        const auto& got = v.lastLoad();
        QCOMPARE(got.tokens, want.tokens);
        QCOMPARE(got.tokensPerLayer, std::int64_t(3 * 40));
        for (const auto& row : got.tokens)
            QCOMPARE(std::accumulate(row.begin(), row.end(), std::int64_t(0)), got.tokensPerLayer * 2);

        QCPColorMap* map = colourMap(test::child<QCustomPlot>(&v, "expertLoadPlot"));
        QVERIFY(map);
        QCOMPARE(map->data()->keySize(), 8);
        QCOMPARE(map->data()->valueSize(), 3);
        const double balanced = double(got.tokensPerLayer) * 2 / 8;
        for (int l = 0; l < 3; ++l)
            for (int e = 0; e < 8; ++e)
                QCOMPARE(map->data()->cell(e, l),
                         std::max(double(got.tokens[size_t(l)][size_t(e)]) / balanced, ExpertLoadView::kShareFloor));
        QVERIFY(test::child<QLabel>(&v, "expertSummary")->text().contains("3 layers × 8 experts"));

        // Layers and experts are counted: on a 600 px axis over three layers, ticks at whole
        // numbers only (QCustomPlot's own steps there were 0.5: layer -0.5, 1.5).
        v.show(); // laid out: the plot gets its share of the 1000 × 600
        QVERIFY(QTest::qWaitForWindowExposed(&v));
        test::child<QCustomPlot>(&v, "expertLoadPlot")->replot();
        for (QCPAxis* axis : {test::child<QCustomPlot>(&v, "expertLoadPlot")->xAxis, test::child<QCustomPlot>(&v, "expertLoadPlot")->yAxis}) {
            QVector<double> shown;
            for (double t : axis->tickVector())
                if (axis->range().contains(t)) shown << t;
            QVERIFY2(shown.size() >= 2, qPrintable(axis->label() + QString(" %1 ticks, %2 px").arg(shown.size()).arg(test::child<QCustomPlot>(&v, "expertLoadPlot")->height())));
            for (double t : shown) QVERIFY2(t == std::round(t), qPrintable(axis->label() + ": " + QString::number(t)));
        }
    }

    void denseModelSaysWhy() {
        ExpertLoadView v;
        v.setModelDir(test::demoModelDir());
        QVERIFY(!v.findChild<QPushButton*>("expertAnalyzeButton")->isEnabled());
        QString error;
        QVERIFY(!v.measure(&error));
        QVERIFY2(error.contains("has no experts"), qPrintable(error));
    }

    // The weights tab: the router and a chosen expert's linear, profiled from the stored weight.
    void weightsReachTheExperts() {
        WeightView w;
        w.findChild<QCheckBox*>("weightAutoCheck")->setChecked(false); // one analysis, started below
        w.setModelDir(m_moe);
        auto* linear = w.findChild<QComboBox*>("weightLinearCombo");
        auto* expert = w.findChild<QSpinBox*>("weightExpertSpin");
        QVERIFY(linear && expert && expert->isEnabled());
        QCOMPARE(expert->maximum(), 7);
        QVERIFY(linear->findText("mlp.gate") >= 0);
        linear->setCurrentIndex(linear->findText("mlp.experts.E.down_proj"));
        expert->setValue(5);
        QCOMPARE(w.linear(), QString("mlp.experts.5.down_proj"));
        QSignalSpy done(&w, &WeightView::profileFinished);
        QString error;
        QVERIFY2(w.analyze(&error), qPrintable(error));
        QVERIFY(done.wait(60000));
        QVERIFY2(done.first().at(0).toBool(), qPrintable(done.first().at(1).toString()));
        const auto ck = model::Checkpoint::load(m_moe.toStdString());
        const auto stored = ck.weight("model.layers." + std::to_string(w.layer()) + ".mlp.experts.5.down_proj.weight");
        const auto& profile = w.lastProfile();
        QCOMPARE(profile.before.inputChannelNorm.numel(), stored.size(1)); // [hidden, expert width]: 32 inputs
        QVERIFY(at::allclose(profile.before.inputChannelNorm.to(at::kDouble),
                             stored.to(at::kDouble).norm(2, {0}), 1e-6, 1e-9));
    }
};

QTEST_MAIN(TestExpertLoadView)
#include "tst_expertloadview.moc"
