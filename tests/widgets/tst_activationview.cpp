// The activation tab on the demo model (offscreen): the activations it captured are exactly
// core's capture of the same point and windows, and every plotted series (channel maxima, token
// norms, histogram, the token's values, MX values and block errors, the named top channels) is
// core's profileActivations of them, drawn unchanged; changing the transform re-profiles the
// cached capture; a run's transforms show the point captured from the run's model; a point
// picked in the Model dock is selected in every view.
#include "import/DemoModel.h"
#include "metrics/ActivationProfile.h"
#include "model/Checkpoint.h"
#include "analysis/ModelAnalysis.h"
#include "fold/ModelTransforms.h"
#include "transforms/AffineTransform.h"
#include "transforms/LearnedTransforms.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
// Qt after ATen: Qt's `slots` macro breaks ATen headers.
#include "ActivationView.h"
#include "CalibrationView.h"
#include "ComparisonView.h"
#include "JobRunner.h"
#include "MainWindow.h"
#include "ModelSummaryView.h"
#include "BlockDiagramView.h"
#include "WeightView.h"
#include "MxExplorerView.h"
#include "util/Runtime.h"

#include "TestData.h"
#include "WidgetLookup.h"

#include <qcustomplot.h>

#include <QCheckBox>
#include <QDir>
#include <QLabel>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <cmath>

using namespace latmix;
using latmix::gui::ActivationView;
using latmix::gui::MainWindow;

namespace {

QVector<double> graphValues(QCustomPlot* p, int graph) {
    QVector<double> v;
    for (const auto& d : *p->graph(graph)->data()) v << d.value;
    return v;
}

QVector<double> graphKeys(QCustomPlot* p, int graph) {
    QVector<double> v;
    for (const auto& d : *p->graph(graph)->data()) v << d.key;
    return v;
}

QVector<double> values(const at::Tensor& t) {
    const auto c = t.to(at::kDouble).contiguous();
    return QVector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

// What the view draws on a log axis: zeros at the floor it chose (below every positive value).
bool sameOnLogAxis(const QVector<double>& drawn, const QVector<double>& core) {
    if (drawn.size() != core.size()) return false;
    for (int i = 0; i < core.size(); ++i) {
        if (core[i] > 0 ? drawn[i] != core[i] : !(drawn[i] > 0)) return false;
    }
    return true;
}

} // namespace

class TestActivationView : public QObject {
    Q_OBJECT

    QTemporaryDir m_tmp;
    QString m_model;

private slots:
    void initTestCase() {
        m_model = m_tmp.filePath("demo");
        importing::writeDemoModel(m_model.toStdString());
    }

    void plotsAreCoresNumbers_data() {
        QTest::addColumn<QString>("model");
        QTest::addColumn<QString>("point");
        QTest::addColumn<QString>("transform");
        QTest::addColumn<QString>("format");
        QTest::addColumn<int>("token");
        QTest::newRow("down_proj, hadamard, mxfp4") << "demo" << "layers.1.mlp.down_proj.input" << "hadamard" << "mxfp4" << 17;
        QTest::newRow("qkv, block-hadamard, mxint4") << "demo" << "layers.0.self_attn.qkv.input" << "block-hadamard" << "mxint4" << 0;
        QTest::newRow("o_proj, none, mxfp6_e2m3") << "demo" << "layers.2.self_attn.o_proj.input" << "none" << "mxfp6_e2m3" << 63;
        // A mixture of experts: one expert's own down_proj input, the tokens routed to it.
        QTest::newRow("expert 5's down_proj, hadamard, mxfp4")
            << "moe" << "layers.1.mlp.experts.5.down_proj.input" << "hadamard" << "mxfp4" << 3;
    }
    void plotsAreCoresNumbers() {
        QFETCH(QString, model);
        QFETCH(QString, point);
        QFETCH(QString, transform);
        QFETCH(QString, format);
        QFETCH(int, token);
        const QString dir = model == QLatin1String("moe") ? test::smallMoeModelDir() : m_model;
        ActivationView v;
        v.resize(1280, 800);
        v.setModelDir(dir);
        QVERIFY(v.selectPoint(point));
        QVERIFY(v.setTransform(transform));
        v.setFormat(format);
        v.setCalibration(2, 32);
        v.setToken(token);
        QSignalSpy done(&v, &ActivationView::profileFinished);
        // "Update on every change" may have started a job already: wait for it, then analyse.
        while (v.runner()->isRunning()) QVERIFY(done.wait(60000));
        QString error;
        QVERIFY2(v.analyze(&error), qPrintable(error));
        QVERIFY(done.wait(60000));
        QVERIFY2(done.last().at(0).toBool(), qPrintable(done.last().at(1).toString()));

        // The capture, independently. Exact comparisons below: the same capture and profile code on
        // the same model, text and settings (the view's worker thread included).
        analysis::ModelCapture request;
        request.modelDir = dir.toStdString();
        request.calibrationText = gui::builtInCalibrationText().toStdString();
        QString exact = point;
        exact.replace(".", "\\.");
        request.pointsRegex = "^" + exact.toStdString() + "$";
        request.samples = 2;
        request.seqLen = 32;
        request.expertPoints = true;
        const auto acts = analysis::captureModelActivations(request);
        QCOMPARE(int(acts.size()), 1);
        QCOMPARE(QString::fromStdString(acts[0].first), point);
        QVERIFY(acts[0].second.size(0) > token); // an expert's point: the row's token is one of its own
        QVERIFY(at::equal(acts[0].second, v.lastActivations()));
        transforms::TransformOptions to;
        const auto config = mx::makeConfig(mx::parseFormat(format.toStdString()));
        to.blockSize = config.blockSize;
        const auto t = transforms::makeTransform(transform.toStdString(), acts[0].second.size(1), to);
        metrics::ActivationProfileOptions o;
        o.format = config;
        o.token = token;
        const auto p = metrics::profileActivations(acts[0].second, *t, o, point.toStdString());
        QCOMPARE(QString::fromStdString(v.lastProfile().transform), QString::fromStdString(p.transform));

        QVERIFY(sameOnLogAxis(graphValues(test::child<QCustomPlot>(&v, "activationChannelPlot"), 0), values(p.before.channelAbsMax)));
        QVERIFY(sameOnLogAxis(graphValues(test::child<QCustomPlot>(&v, "activationChannelPlot"), 1), values(p.after.channelAbsMax)));
        QCOMPARE(graphValues(test::child<QCustomPlot>(&v, "activationTokenNormPlot"), 0), values(p.before.tokenNorm));
        QCOMPARE(graphValues(test::child<QCustomPlot>(&v, "activationTokenNormPlot"), 1), values(p.after.tokenNorm));
        QVERIFY(sameOnLogAxis(graphValues(test::child<QCustomPlot>(&v, "activationHistogramPlot"), 1), values(p.after.histogramCounts)));
        const auto edges = values(p.after.histogramEdges);
        const auto centres = graphKeys(test::child<QCustomPlot>(&v, "activationHistogramPlot"), 1);
        for (int i = 0; i < centres.size(); ++i) QVERIFY(centres[i] > edges[i] && centres[i] < edges[i + 1]);
        QCOMPARE(graphValues(test::child<QCustomPlot>(&v, "activationBlocksPlot"), 0), values(p.after.tokenValues));
        QCOMPARE(graphValues(test::child<QCustomPlot>(&v, "activationBlocksPlot"), 1), values(p.after.tokenQuantized));
        QVERIFY(sameOnLogAxis(graphValues(test::child<QCustomPlot>(&v, "activationBlocksPlot"), 2), values(p.after.tokenBlockError)));
        QCOMPARE(test::child<QCustomPlot>(&v, "activationBlocksPlot")->graph(2)->valueAxis(), test::child<QCustomPlot>(&v, "activationBlocksPlot")->yAxis2);
        // The blocks shown first hold the token's worst block; the x range is theirs.
        const auto errs = values(p.after.tokenBlockError);
        const int worst = int(std::max_element(errs.begin(), errs.end()) - errs.begin());
        const auto shown = v.blocksShown();
        QVERIFY(shown.first <= worst && worst <= shown.second && shown.second - shown.first + 1 == std::min<int>(4, errs.size()));
        QCOMPARE(test::child<QCustomPlot>(&v, "activationBlocksPlot")->xAxis->range().lower, shown.first * o.format.blockSize - 0.5);
        // The largest channels before the transform are named on the channel plot: a name for
        // each of core's top channels, in its order, above its maximum; at most five shown, the
        // largest always, none overlapping another.
        test::child<QCustomPlot>(&v, "activationChannelPlot")->replot();
        QStringList labels, named;
        QVector<QRectF> rects;
        for (int i = 0; i < test::child<QCustomPlot>(&v, "activationChannelPlot")->itemCount(); ++i)
            if (auto* text = qobject_cast<QCPItemText*>(test::child<QCustomPlot>(&v, "activationChannelPlot")->item(i))) {
                labels << text->text();
                QCOMPARE(text->position->key(), text->text().toDouble());
                if (!text->visible()) continue;
                named << text->text();
                const QPointF at = text->position->pixelPosition();
                const double w = QFontMetricsF(text->font()).horizontalAdvance(text->text());
                const QRectF r(at.x() - w / 2, at.y() - 10, w, 10);
                for (const QRectF& o : rects) QVERIFY2(!o.intersects(r), qPrintable(named.join(",")));
                rects << r;
            }
        QStringList want;
        for (auto c : p.before.topChannels) want << QString::number(c);
        QCOMPARE(labels, want);
        QVERIFY(!named.isEmpty() && named.size() <= 5 && named.first() == want.first());
        for (int i = 1; i < named.size(); ++i) QVERIFY(want.indexOf(named[i]) > want.indexOf(named[i - 1]));
        QVERIFY(test::child<QLabel>(&v, "activationSummary")->text().contains(QString::number(p.after.mse, 'g', 4)));
    }

    // Another transform and another token: profiled again from the cached capture.
    void reprofilesTheCachedCapture() {
        ActivationView v;
        QSignalSpy done(&v, &ActivationView::profileFinished);
        v.setModelDir(m_model);
        v.setCalibration(2, 32); // before the point: its selection starts the capture
        QVERIFY(v.selectPoint("layers.1.mlp.down_proj.input"));
        QSignalSpy progress(v.runner(), &gui::JobRunner::progressed);
        while (v.runner()->isRunning()) QVERIFY(done.wait(60000));
        QVERIFY(v.analyze());
        QVERIFY(done.wait(60000));
        QCOMPARE(v.cachedCaptures(), 1);
        const at::Tensor first = v.lastActivations();
        progress.clear();
        QVERIFY(v.setTransform("orthogonal")); // "update on every change": analyses at once
        QVERIFY(done.wait(60000));
        QVERIFY(done.last().at(0).toBool());
        QCOMPARE(v.cachedCaptures(), 1);
        QVERIFY(v.lastActivations().is_same(first)); // the very tensor, not a new capture
        for (const auto& args : progress) QVERIFY2(!args.at(1).toString().contains("window"), qPrintable(args.at(1).toString()));
        QVERIFY(QString::fromStdString(v.lastProfile().transform).contains("orthogonal"));
        QVERIFY(v.selectPoint("layers.0.mlp.down_proj.input")); // another point: a second capture
        QVERIFY(done.wait(60000));
        QCOMPARE(v.cachedCaptures(), 2);
    }

    // A run's transforms: the after side is the point captured from the run's model (its
    // transforms folded in), profiled as it is; a folder without transforms.h5 removes the choice.
    void runTransformsShowTheRunsModel() {
        const auto ck = model::Checkpoint::load(m_model.toStdString());
        fold::TransformSpec spec;
        spec.t1Kind = "learned-affine-lu";
        spec.t2Kind = "none";
        spec.t3Block = 32;
        fold::ModelTransforms t(ck.config(), spec);
        {
            at::NoGradGuard g;
            auto gen = at::detail::createCPUGenerator(5);
            for (auto& p : t.parameters()) p.add_(at::randn(p.sizes(), gen, p.options()) * 0.05);
        }
        const QString runDir = m_tmp.filePath("run");
        QVERIFY(QDir().mkpath(runDir));
        t.save((runDir + "/transforms.h5").toStdString());

        ActivationView v;
        QSignalSpy done(&v, &ActivationView::profileFinished);
        v.findChild<QCheckBox*>("activationAutoCheck")->setChecked(false);
        v.setModelDir(m_model);
        v.setCalibration(2, 32);
        v.setToken(5);
        QVERIFY(v.selectPoint("layers.1.mlp.down_proj.input"));
        QVERIFY(!v.setTransform(ActivationView::runTransformName()));
        v.setRun(runDir);
        QVERIFY(v.setTransform(ActivationView::runTransformName()));
        QVERIFY(v.analyze());
        QVERIFY(done.wait(60000));
        QVERIFY2(done.last().at(0).toBool(), qPrintable(done.last().at(1).toString()));
        QCOMPARE(v.cachedCaptures(), 2); // the original model's and the run model's

        analysis::ModelCapture request;
        request.modelDir = m_model.toStdString();
        request.calibrationText = gui::builtInCalibrationText().toStdString();
        request.pointsRegex = "^layers\\.1\\.mlp\\.down_proj\\.input$";
        request.samples = 2;
        request.seqLen = 32;
        const auto before = analysis::captureModelActivations(request).at(0).second;
        request.transformsFile = (runDir + "/transforms.h5").toStdString();
        const auto after = analysis::captureModelActivations(request).at(0).second;
        QVERIFY(!at::allclose(before, after)); // T1 and T3 reach the down_proj input
        metrics::ActivationProfileOptions o;
        o.format = mx::makeConfig(mx::Format::MxFp4);
        o.token = 5;
        const auto p = metrics::profileActivationPair(before, after, "run", o, "p");
        QCOMPARE(graphValues(test::child<QCustomPlot>(&v, "activationTokenNormPlot"), 0), values(p.before.tokenNorm));
        QCOMPARE(graphValues(test::child<QCustomPlot>(&v, "activationTokenNormPlot"), 1), values(p.after.tokenNorm));
        QVERIFY(sameOnLogAxis(graphValues(test::child<QCustomPlot>(&v, "activationChannelPlot"), 1), values(p.after.channelAbsMax)));
        QCOMPARE(graphValues(test::child<QCustomPlot>(&v, "activationBlocksPlot"), 1), values(p.after.tokenQuantized));
        QVERIFY(test::child<QLabel>(&v, "activationSummary")->text().contains("MX error at the point"));
        QVERIFY(test::child<QLabel>(&v, "activationSummary")->text().contains(QString::number(p.after.mse, 'g', 4)));

        v.setRun(m_tmp.filePath("no-such-run")); // RTN-like: no transforms.h5
        QVERIFY(!v.setTransform(ActivationView::runTransformName()));
        QCOMPARE(v.transform(), QStringLiteral("none"));
    }

    void badSettingsAreRefused() {
        ActivationView v;
        QString error;
        QVERIFY(!v.analyze(&error));
        QCOMPARE(error, QStringLiteral("Open a model first"));
        v.setModelDir(m_model);
        v.setCalibration(1, 8);
        v.setToken(100); // clamped to the 8 captured tokens
        QCOMPARE(v.token(), 7);
    }

    // The Model dock's point tree drives the views: the activation view comes forward from the
    // explorer, the comparison view selects the same point.
    void pointTreeSelectsEverywhere() {
        MainWindow w;
        QVERIFY(w.openCheckpoint(m_model, false));
        w.activationView()->findChild<QCheckBox*>("activationAutoCheck")->setChecked(false);
        w.viewTabs()->setCurrentWidget(w.explorerView());
        QVERIFY(test::child<latmix::gui::ModelSummaryView>(&w)->selectPoint("layers.3.self_attn.o_proj.input"));
        QCOMPARE(w.activationView()->currentPoint(), QStringLiteral("layers.3.self_attn.o_proj.input"));
        QCOMPARE(w.comparisonView()->currentPoint(), QStringLiteral("layers.3.self_attn.o_proj.input"));
        QCOMPARE(w.viewTabs()->currentWidget(), static_cast<QWidget*>(w.activationView()));
        w.viewTabs()->setCurrentWidget(w.comparisonView()); // from a view that shows points, no switch
        QVERIFY(test::child<latmix::gui::ModelSummaryView>(&w)->selectPoint("layers.0.mlp.gate_up.input"));
        QCOMPARE(w.viewTabs()->currentWidget(), static_cast<QWidget*>(w.comparisonView()));
        QCOMPARE(w.activationView()->currentPoint(), QStringLiteral("layers.0.mlp.gate_up.input"));
        QVERIFY(!test::child<latmix::gui::ModelSummaryView>(&w)->selectPoint("layers.9.mlp.gate_up.input"));
    }

    // An expert's own point picked by name is selected in every view: the activation and comparison
    // views' layer item and expert number, the weights tab's expert down_proj, the diagram's experts
    // marker; the dock's experts row of another layer keeps the expert shown. After a capture the
    // token spin goes no further than the expert's tokens, and the summary says whose they are.
    void expertPointSelectsEverywhere() {
        MainWindow w;
        QVERIFY(w.openCheckpoint(test::smallMoeModelDir(), false));
        ActivationView* a = w.activationView();
        a->findChild<QCheckBox*>("activationAutoCheck")->setChecked(false);
        auto* expertSpin = a->findChild<QSpinBox*>("activationExpertSpin");
        QVERIFY(expertSpin && !expertSpin->isEnabled()); // the first point, layer 0's qkv input
        const QString five = QStringLiteral("layers.1.mlp.experts.5.down_proj.input");
        QVERIFY(test::child<latmix::gui::ModelSummaryView>(&w)->selectPoint(five));
        QCOMPARE(a->currentPoint(), five);
        QVERIFY(expertSpin->isEnabled());
        QCOMPARE(expertSpin->value(), 5);
        QCOMPARE(w.comparisonView()->currentPoint(), five);
        QCOMPARE(w.weightView()->layer(), 1);
        QCOMPARE(w.weightView()->linear(), QStringLiteral("mlp.experts.5.down_proj"));
        QCOMPARE(w.blockDiagramView()->currentPoint(), QStringLiteral("layers.1.mlp.experts.E.down_proj.input"));
        QVERIFY(test::child<latmix::gui::ModelSummaryView>(&w)->selectPoint(QStringLiteral("layers.2.mlp.experts.E.down_proj.input")));
        QCOMPARE(a->currentPoint(), QStringLiteral("layers.2.mlp.experts.5.down_proj.input"));
        QCOMPARE(w.comparisonView()->currentPoint(), QStringLiteral("layers.2.mlp.experts.5.down_proj.input"));
        QCOMPARE(w.weightView()->layer(), 2);
        QCOMPARE(w.weightView()->linear(), QStringLiteral("mlp.experts.5.down_proj"));
        QVERIFY(!test::child<latmix::gui::ModelSummaryView>(&w)->selectPoint(QStringLiteral("layers.1.mlp.experts.8.down_proj.input"))); // experts 0-7
        QVERIFY(!test::child<latmix::gui::ModelSummaryView>(&w)->selectPoint(QStringLiteral("layers.1.mlp.down_proj.input"))); // sparse: no such point
        QVERIFY(test::child<latmix::gui::ModelSummaryView>(&w)->selectPoint(QStringLiteral("layers.0.mlp.gate_up.input")));
        QVERIFY(!expertSpin->isEnabled());

        QVERIFY(a->selectPoint(five));
        a->setCalibration(2, 32);
        a->setToken(63);
        QSignalSpy done(a, &ActivationView::profileFinished);
        QVERIFY(a->analyze());
        QVERIFY(done.wait(60000));
        QVERIFY2(done.last().at(0).toBool(), qPrintable(done.last().at(1).toString()));
        const auto rows = a->lastActivations().size(0);
        QVERIFY(rows > 0 && rows < 63);
        QCOMPARE(a->token(), int(rows - 1));
        QCOMPARE(a->lastProfile().token, rows - 1);
        QVERIFY2(test::child<QLabel>(a, "activationSummary")->text().contains(QStringLiteral("%1 tokens routed to expert 5 (of 64 captured)").arg(rows)),
                 qPrintable(test::child<QLabel>(a, "activationSummary")->text()));
    }
};

QTEST_MAIN(TestActivationView)
#include "tst_activationview.moc"
