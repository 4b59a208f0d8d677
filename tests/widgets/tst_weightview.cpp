// The weights tab on the demo model (offscreen): every drawn number is core's profileWeights of
// the linear loaded independently here (analysis::loadLinearWeights): the per-input-channel norms, the
// per-group column means, every cell of both heat maps (one colour range over both), the named
// channels; with a run's transforms.h5 the folded side appears, without one it stays empty; an
// activation point selects the linear that reads it.
#include "import/DemoModel.h"
#include "metrics/WeightProfile.h"
#include "model/Checkpoint.h"
#include "model/LlamaModel.h"
#include "model/TensorNames.h"
#include "mx/MxFormat.h"
#include "analysis/ModelAnalysis.h"
#include "fold/ModelTransforms.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
// Qt after ATen: Qt's `slots` macro breaks ATen headers.
#include "JobRunner.h"
#include "WeightView.h"
#include "WidgetLookup.h"

#include <qcustomplot.h>

#include <QDir>
#include <QLabel>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <cmath>

using namespace latmix;
using latmix::gui::WeightView;

namespace {

QVector<double> graphValues(QCustomPlot* p, int graph) {
    QVector<double> v;
    for (const auto& d : *p->graph(graph)->data()) v << d.value;
    return v;
}

QVector<double> values(const at::Tensor& t) {
    const auto c = t.to(at::kDouble).contiguous();
    return QVector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

QCPColorMap* colourMap(QCustomPlot* p) {
    for (int i = 0; i < p->plottableCount(); ++i)
        if (auto* m = qobject_cast<QCPColorMap*>(p->plottable(i))) return m;
    return nullptr;
}

bool waitFor(WeightView& v, QSignalSpy& done) {
    while (v.runner()->isRunning())
        if (!done.wait(60000)) return false;
    return true;
}

} // namespace

class TestWeightView : public QObject {
    Q_OBJECT

    QTemporaryDir m_tmp;
    QString m_model, m_run;

private slots:
    void initTestCase() {
        m_model = m_tmp.filePath("demo");
        importing::writeDemoModel(m_model.toStdString());
        // A run folder holding only transforms.h5 (learned T1/T2 moved off their init, T3 block 32).
        m_run = m_tmp.filePath("run");
        QVERIFY(QDir().mkpath(m_run));
        const auto ck = model::Checkpoint::load(m_model.toStdString());
        fold::TransformSpec spec;
        spec.t1Kind = "learned-affine-lu";
        spec.t2Kind = "learned-affine-lu";
        spec.t3Block = 32;
        spec.seed = 2;
        spec.t3Seed = 9;
        fold::ModelTransforms t(ck.config(), spec);
        at::NoGradGuard g;
        auto gen = at::detail::createCPUGenerator(31);
        for (auto& p : t.parameters()) p.add_(at::randn(p.sizes(), gen, p.options()) * 0.05);
        t.save(QDir(m_run).filePath("transforms.h5").toStdString());
    }

    void plotsAreCoresNumbers_data() {
        QTest::addColumn<int>("layer");
        QTest::addColumn<QString>("linear");
        QTest::addColumn<QString>("format");
        QTest::addColumn<bool>("withRun");
        QTest::newRow("down_proj, run, mxfp4") << 1 << QString(model::names::kDownProj) << "mxfp4" << true;
        QTest::newRow("q_proj, no run, mxint4") << 0 << QString(model::names::kQProj) << "mxint4" << false;
        QTest::newRow("o_proj, run, mxfp6_e2m3") << 2 << QString(model::names::kOProj) << "mxfp6_e2m3" << true;
    }
    void plotsAreCoresNumbers() {
        QFETCH(int, layer);
        QFETCH(QString, linear);
        QFETCH(QString, format);
        QFETCH(bool, withRun);
        WeightView v;
        v.resize(1280, 800);
        v.show();
        QSignalSpy done(&v, &WeightView::profileFinished);
        v.setModelDir(m_model);
        v.setRun(withRun ? m_run : QString());
        v.setFormat(format);
        QVERIFY(waitFor(v, done));
        QVERIFY(v.selectLinear(layer, linear));
        QVERIFY(waitFor(v, done));
        QString error;
        QVERIFY2(v.analyze(&error), qPrintable(error));
        QVERIFY(done.wait(60000));
        QVERIFY2(done.last().at(0).toBool(), qPrintable(done.last().at(1).toString()));

        // The same numbers, independently of the view: the same code on the same weights, so exact.
        const auto w = analysis::loadLinearWeights(m_model.toStdString(), layer, linear.toStdString(),
                                              withRun ? QDir(m_run).filePath("transforms.h5").toStdString() : std::string());
        metrics::WeightProfileOptions o;
        o.format = mx::makeConfig(mx::parseFormat(format.toStdString()));
        const auto want = metrics::profileWeights(w.original, w.folded, o, "x");
        const auto& got = v.lastProfile();
        QCOMPARE(got.hasAfter, withRun);
        QCOMPARE(got.name, "layers." + std::to_string(layer) + "." + linear.toStdString());
        QVERIFY(at::equal(got.before.groupError, want.before.groupError));

        QCustomPlot* ch = test::child<QCustomPlot>(&v, "weightChannelPlot");
        QCOMPARE(ch->graphCount(), withRun ? 2 : 1);
        QCOMPARE(graphValues(ch, 0), values(want.before.inputChannelNorm));
        if (withRun) QCOMPARE(graphValues(ch, 1), values(want.after.inputChannelNorm));
        QCustomPlot* gp = test::child<QCustomPlot>(&v, "weightGroupPlot");
        QCOMPARE(gp->graphCount(), withRun ? 2 : 1);
        QCOMPARE(graphValues(gp, 0), values(want.before.columnGroupError));
        if (withRun) QCOMPARE(graphValues(gp, 1), values(want.after.columnGroupError));
        // The named channels are the largest norms of the original weight.
        int named = 0;
        for (int i = 0; i < ch->itemCount(); ++i)
            if (auto* t = qobject_cast<QCPItemText*>(ch->item(i))) {
                const auto c = t->text().toLongLong();
                QVERIFY(std::find(want.before.topChannels.begin(), want.before.topChannels.end(), c) != want.before.topChannels.end());
                ++named;
            }
        QVERIFY(named >= 1);

        // Heat maps: cell (group, band) is the band's mean group error; one colour range.
        const metrics::WeightSide* sides[2] = {&want.before, withRun ? &want.after : nullptr};
        QCustomPlot* maps[2] = {test::child<QCustomPlot>(&v, "weightHeatmapBefore"), test::child<QCustomPlot>(&v, "weightHeatmapAfter")};
        QCPRange range;
        for (int s = 0; s < 2; ++s) {
            QCPColorMap* m = colourMap(maps[s]);
            if (!sides[s]) {
                QVERIFY(!m);
                continue;
            }
            QVERIFY(m);
            const auto e = sides[s]->groupError;
            QCOMPARE(m->data()->keySize(), int(e.size(1)));
            QCOMPARE(m->data()->valueSize(), int(e.size(0)));
            for (int k = 0; k < e.size(0); ++k)
                for (int g = 0; g < e.size(1); ++g)
                    QCOMPARE(m->data()->cell(g, k), std::max(e[k][g].item<double>(), WeightView::kErrorFloor));
            if (s == 0) range = m->dataRange();
            else QCOMPARE(m->dataRange(), range);
        }
        // The colour range spans exactly the smallest positive and the largest group error.
        double lo = 1e300, hi = 0;
        for (const auto* side : sides) {
            if (!side) continue;
            for (double x : values(side->groupError)) {
                if (x > 0) lo = std::min(lo, x);
                hi = std::max(hi, x);
            }
        }
        QCOMPARE(range.lower, lo);
        QCOMPARE(range.upper, hi);
        QVERIFY(test::child<QLabel>(&v, "weightSummary")->text().contains(QString::number(want.before.relativeError, 'g', 4)));
    }

    void pointSelectsItsLinear_data() {
        QTest::addColumn<QString>("point");
        QTest::addColumn<int>("layer");
        QTest::addColumn<QString>("linear");
        QTest::newRow("qkv") << QString::fromStdString(model::pointName(3, model::PointKind::QkvInput)) << 3 << QString(model::names::kQProj);
        QTest::newRow("o_proj") << QString::fromStdString(model::pointName(0, model::PointKind::OProjInput)) << 0 << QString(model::names::kOProj);
        QTest::newRow("gate_up") << QString::fromStdString(model::pointName(2, model::PointKind::GateUpInput)) << 2 << QString(model::names::kGateProj);
        QTest::newRow("down_proj") << QString::fromStdString(model::pointName(1, model::PointKind::DownProjInput)) << 1 << QString(model::names::kDownProj);
        QTest::newRow("no such layer") << QString::fromStdString(model::pointName(99, model::PointKind::QkvInput)) << -1 << QString();
        QTest::newRow("not a point") << "layers.1.mlp.act" << -1 << QString();
    }
    void pointSelectsItsLinear() {
        QFETCH(QString, point);
        QFETCH(int, layer);
        QFETCH(QString, linear);
        WeightView v;
        v.setModelDir(m_model);
        QCOMPARE(v.selectPoint(point), layer >= 0);
        if (layer >= 0) {
            QCOMPARE(v.layer(), layer);
            QCOMPARE(v.linear(), linear);
        }
        QSignalSpy done(&v, &WeightView::profileFinished);
        QVERIFY(waitFor(v, done));
    }

    void errorsAreShown() {
        WeightView v;
        QString error;
        QVERIFY(!v.analyze(&error));
        QVERIFY(error.contains("Open a model"));
        // A run whose transforms do not fit the model: the error names the file and the way out.
        QTemporaryDir other;
        const QString bad = other.filePath("run");
        QDir().mkpath(bad);
        {
            const auto ck = model::Checkpoint::load(m_model.toStdString());
            auto c = ck.config();
            c.hiddenSize *= 2; // another model's T1
            fold::TransformSpec spec;
            spec.t1Kind = "learned-affine-lu";
            spec.t2Kind = "none";
            spec.t3Block = 0;
            fold::ModelTransforms(c, spec).save(QDir(bad).filePath("transforms.h5").toStdString());
        }
        v.setModelDir(m_model);
        v.setRun(bad);
        QSignalSpy done(&v, &WeightView::profileFinished);
        QVERIFY(waitFor(v, done));
        QVERIFY(v.analyze(&error));
        QVERIFY(done.wait(60000));
        QVERIFY(!done.last().at(0).toBool());
        const QString message = done.last().at(1).toString();
        QVERIFY2(message.contains("transforms.h5") && message.contains("is it a run of this model"), qPrintable(message));
    }
};

QTEST_MAIN(TestWeightView)
#include "tst_weightview.moc"
