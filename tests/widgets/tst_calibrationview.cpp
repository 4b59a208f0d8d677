// The workbench's calibration workflow as a user drives it (offscreen): open a model, run a
// short LATMiX calibration from the Calibration tab, check that the dashboard's curves hold
// exactly the values the core reported (the run's train.h5) and its heatmap the trained A1
// (transforms.h5), pause / cancel, reopen the run as an overlay, and export through
// File › Export quantized model… with the export reloading.
#include "export/Export.h"
#include "model/Checkpoint.h"
#include "model/QuantizationPoints.h"
#include "import/DemoModel.h"
#include "train/Distillation.h"
#include "metrics/TransformMetrics.h"
#include "run/RunCatalog.h"
#include "run/Sweep.h"
#include "run/UnfinishedRun.h"
#include "run/quantize/OptionTable.h"
#include "run/quantize/Preflight.h"
#include "util/Text.h"
#include "fold/ModelTransforms.h"
#include "transforms/AffineTransform.h"

#include <ATen/ATen.h>

#include "CliRunner.h"
#include "TestData.h"
#include "WidgetLookup.h"

#include "CalibrationView.h"
#include "ElidedLabel.h"
#include "ExportDialog.h"
#include "export/GgufFile.h"
#include "JobRunner.h"
#include "BlockDiagramView.h"
#include "MainWindow.h"
#include "ModelSummaryView.h"
#include "TrainingDashboard.h"
#include "LayerErrorPlot.h"

#include <QAction>
#include <QComboBox>
#include <QSpinBox>
#include <QCheckBox>
#include <QFormLayout>
#include <QLabel>
#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProgressBar>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>
#include <qcustomplot.h>

#include <cmath>
#include <filesystem>

using namespace latmix;
using latmix::gui::CalibrationView;
using latmix::gui::ElidedLabel;
using latmix::gui::ExportDialog;
using latmix::gui::JobRunner;
using latmix::gui::MainWindow;
using latmix::gui::LayerErrorPlot;
using latmix::gui::TrainingDashboard;

class TestCalibrationView : public QObject {
    Q_OBJECT

    QTemporaryDir m_tmp;
    QString m_model;
    QString m_stories; // stories260K imported from LATMIX_DATA_DIR, empty when the data is absent
    QString m_cancelled; // a cancelled LATMiX-LU run (cancelledRun), made by initTestCase
    QString m_resumable, m_otherModel; // the same with a calibration text file, and a copy of the demo model

    void configure(CalibrationView* v, const QString& runDir, const QString& method, int steps) {
        v->setMethod(method);
        v->setFormat(QStringLiteral("mxfp4"));
        v->setSteps(steps);
        v->setCalibration(4, 32, 2);
        v->setEvalWindows(0);
        v->setCalibrationText(QString()); // the built-in text: no ../shared needed
        v->setRunDir(runDir);
    }

    // Runs a calibration to the end; returns the run folder.
    QString runCalibration(MainWindow& w, const QString& name, const QString& method, int steps) {
        CalibrationView* v = w.calibrationView();
        const QString runDir = m_tmp.filePath(name);
        configure(v, runDir, method, steps);
        QSignalSpy done(v, &CalibrationView::runFinished);
        QString error;
        if (!v->start(&error)) qFatal("cannot start: %s", qPrintable(error));
        if (!done.wait(300000)) qFatal("calibration did not finish");
        const auto args = done.takeFirst();
        if (!args.at(0).toBool()) qFatal("calibration failed: %s", qPrintable(args.at(2).toString()));
        return runDir;
    }

    // A LATMiX-LU run cancelled after its second step, as Cancel leaves it: train.h5 with the
    // finished steps, the unfinished-run marker, no latmix.json. Returns the run folder.
    QString cancelledRun(const QString& name, const QString& calibText = {}) {
        MainWindow w;
        if (!w.openCheckpoint(m_model, false)) qFatal("cannot open the demo model");
        CalibrationView* v = w.calibrationView();
        const QString runDir = m_tmp.filePath(name);
        configure(v, runDir, QStringLiteral("latmix-lu"), 500);
        v->setCalibrationText(calibText);
        QSignalSpy done(v, &CalibrationView::runFinished);
        QString error;
        if (!v->start(&error)) qFatal("cannot start: %s", qPrintable(error));
        QSignalSpy progressed(v->runner(), &JobRunner::progressed);
        while (v->dashboard()->plottedValues(0, "loss").size() < 2 && done.isEmpty())
            if (!progressed.wait(120000)) qFatal("no progress from the calibration");
        v->runner()->cancel();
        if (done.isEmpty() && !done.wait(120000)) qFatal("the cancelled calibration did not end");
        return runDir;
    }

private slots:
    // The form's controls carry the option table's names (run/quantize/OptionTable.h), which a
    // refused run's message uses: "Learned T1 bias: off" is what the form shows.
    // The form remembers its options under the option table's keys, and reads the keys it used
    // before (a user's settings survive the change).
    void settingsRememberedByOptionKey() {
        QSettings(QStringLiteral("LATMiX"), QStringLiteral("Workbench")).clear();
        {
            CalibrationView view;
            view.setCalibration(11, 48, 3);
            view.setMethod(QStringLiteral("mr-gptq"));
        }
        QSettings settings(QStringLiteral("LATMiX"), QStringLiteral("Workbench"));
        QCOMPARE(settings.value("calibration/calib_samples").toInt(), 11);
        QCOMPARE(settings.value("calibration/seqlen").toInt(), 48);
        QCOMPARE(settings.value("calibration/method").toString(), QString("mr-gptq"));
        {
            CalibrationView view;
            QCOMPARE(view.findChild<QSpinBox*>("samplesSpin")->value(), 11);
            QCOMPARE(view.findChild<QSpinBox*>("batchSpin")->value(), 3);
            QCOMPARE(view.findChild<QComboBox*>("methodCombo")->currentText(), QString("mr-gptq"));
        }
        settings.clear();
        settings.setValue("calibration/samples", 9); // the key before the option table
        settings.sync();
        CalibrationView earlier;
        QCOMPARE(earlier.findChild<QSpinBox*>("samplesSpin")->value(), 9);
        settings.clear();
    }

    void controlsAreNamedAsTheOptionTable() {
        CalibrationView view;
        int checked = 0;
        for (QWidget* w : view.findChildren<QWidget*>()) {
            const QString key = w->property("optionKey").toString();
            if (key.isEmpty()) continue;
            QString label;
            if (auto* box = qobject_cast<QCheckBox*>(w)) label = box->text();
            for (auto* form : view.findChildren<QFormLayout*>())
                if (auto* l = qobject_cast<QLabel*>(form->labelForField(w))) label = l->text();
            label.remove(QLatin1Char('&'));
            if (label.endsWith(QLatin1Char(':'))) label.chop(1);
            QCOMPARE(label, QString::fromStdString(latmix::run::optionName(key.toStdString(), latmix::run::Face::Workbench)));
            ++checked;
        }
        QVERIFY2(checked >= 15, qPrintable(QString::number(checked)));
    }

    void initTestCase() {
        QSettings(QStringLiteral("LATMiX"), QStringLiteral("Workbench")).clear();
        QVERIFY(m_tmp.isValid());
        m_model = m_tmp.filePath(QStringLiteral("demo"));
        importing::writeDemoModel(m_model.toStdString());
        // The real pretrained stories260K, when ../shared/data is there: imported as a user would.
        const QString bin = test::dataDir() + "/models/stories260K/stories260K.bin";
        if (QFile::exists(bin)) {
            const auto r = test::runLatmixInProcess({"import-llama2c", bin,
                                                     test::dataDir() + "/models/stories260K/tok512.bin",
                                                     m_tmp.filePath("stories260K")});
            QVERIFY2(r.exitCode == 0, qPrintable(r.err));
            m_stories = m_tmp.filePath("stories260K");
        }
        m_cancelled = cancelledRun(QStringLiteral("run-cancelled"));
        QVERIFY(QFile::exists(m_cancelled + "/train.h5"));
        QVERIFY(!QFile::exists(m_cancelled + "/latmix.json"));
    }
    void cleanupTestCase() { QSettings(QStringLiteral("LATMiX"), QStringLiteral("Workbench")).clear(); }

    // The curves received exactly the core's per-step values; the heatmap shows the trained A1.
    void curvesEqualCoreValues_data() {
        QTest::addColumn<QString>("model");
        QTest::addColumn<QString>("method");
        QTest::newRow("demo latmix-lu") << "demo" << "latmix-lu";
        QTest::newRow("demo latmix-qr") << "demo" << "latmix-qr";
        QTest::newRow("stories260K latmix-lu") << "stories260K" << "latmix-lu";
    }
    void curvesEqualCoreValues() {
        QFETCH(QString, model);
        QFETCH(QString, method);
        const QString dir = model == "demo" ? m_model : m_stories;
        if (dir.isEmpty())
            LATMIX_DATA_SKIP(qPrintable("stories260K not found under " + test::dataDir() + "/models (set LATMIX_DATA_DIR)"));
        MainWindow w;
        QVERIFY(w.openCheckpoint(dir, false));
        QVERIFY(!test::child<QAction>(&w, "actionExport")->isEnabled());
        TrainingDashboard* board = w.calibrationView()->dashboard();
        board->setHeatmapInterval(0);
        const QString run = runCalibration(w, "run-" + model + "-" + method, method, 6);

        const auto series = train::readDistillSeries((run + "/train.h5").toStdString());
        QCOMPARE(int(series.size()), 6);
        const QVector<double> loss = board->plottedValues(0, "loss"), kl = board->plottedValues(0, "objective"),
                              lr = board->plottedValues(0, "lr"), vol = board->plottedValues(0, "vol");
        QCOMPARE(loss.size(), 6);
        for (int i = 0; i < 6; ++i) {
            QCOMPARE(loss[i], series[size_t(i)].loss);
            QCOMPARE(kl[i], series[size_t(i)].objective);
            QCOMPARE(lr[i], series[size_t(i)].lr);
            QCOMPARE(vol[i], series[size_t(i)].vol);
        }
        // Matrix metrics only on the metrics steps (1, every 10th, the last): 1 and 6 here.
        QCOMPARE(board->plottedSteps(0, "a1_orth"), (QVector<double>{1, 6}));
        QCOMPARE(board->plottedValues(0, "a1_orth").last(), series.back().a1Orthogonality);
        QCOMPARE(board->plottedValues(0, "a2_cond").last(), series.back().a2Condition);

        // Heatmap: the final A1, as saved in transforms.h5 (float32 copy of the float64 matrix).
        QTRY_COMPARE(board->heatmapStep(), 6);
        const auto ck = model::Checkpoint::load(dir.toStdString());
        const auto t = fold::ModelTransforms::load(ck.config(), (run + "/transforms.h5").toStdString());
        const at::Tensor a1 = t.t1()->matrix().detach().to(at::kDouble);
        const QVector<double> cells = board->heatmapValues(false);
        QCOMPARE(cells.size(), int(a1.numel()));
        const int n = int(a1.size(0));
        double worst = 0;
        for (int r = 0; r < n; ++r)
            for (int c = 0; c < n; ++c) worst = std::max(worst, std::abs(cells[r * n + c] - a1[r][c].item<double>()));
        QVERIFY2(worst < 1e-6, qPrintable(QString("heatmap vs A1: %1").arg(worst)));
        // The off-block map is A1 with its 32×32 diagonal blocks zeroed.
        const QVector<double> off = board->heatmapValues(true);
        QCOMPARE(off[0], 0.0);
        QCOMPARE(off[n - 1], n > 32 ? cells[n - 1] : 0.0); // row 0, last column: outside the first block

        // The layers' quantization errors, drawn as the run went: for every layer and kind of
        // linear the mean of what latmix.json records for that layer's linears of the kind.
        const run::RunSummary summary = run::readRunSummary(run.toStdString());
        std::map<std::pair<QString, int>, std::pair<double, int>> recorded;
        for (const auto& e : summary.linears) {
            auto& m = recorded[{LayerErrorPlot::kindOf(QString::fromStdString(e.linear)), e.layer}];
            m.first += e.relativeError;
            ++m.second;
        }
        QVERIFY(!recorded.empty());
        for (const auto& [key, m] : recorded) {
            const auto points = board->layerErrorPlot()->points(key.first);
            const auto it = std::find_if(points.begin(), points.end(), [&](const auto& p) { return p.first == key.second; });
            QVERIFY2(it != points.end(), qPrintable(QString("layer %1 %2 not drawn").arg(key.second).arg(key.first)));
            QCOMPARE(it->second, m.first / m.second);
        }

        // The finished run is what File › Export exports.
        QVERIFY(test::child<QAction>(&w, "actionExport")->isEnabled());
        QCOMPARE(w.exportRunDir(), QDir(run).absolutePath());
    }

    // The Model dock's Format column follows the form: the Format for every point, a Mixed
    // precision rule's format for the groups it takes; a rule that takes nothing empties the column
    // and says why under the field, naming the rule.
    void modelDockShowsEachPointsFormat() {
        MainWindow w;
        QVERIFY(w.openCheckpoint(m_model, false));
        auto* dock = w.findChild<latmix::gui::ModelSummaryView*>();
        QVERIFY(dock);
        CalibrationView* v = w.calibrationView();
        const QString qkv0 = QString::fromStdString(model::pointName(0, model::PointKind::QkvInput)),
                      qkv1 = QString::fromStdString(model::pointName(1, model::PointKind::QkvInput));
        QCOMPARE(dock->pointFormatShown(qkv0), QString("mxfp4"));
        v->setScheme("layers\\.0\\.self_attn\\.qkv = mxfp8");
        QCOMPARE(dock->pointFormatShown(qkv0), QString("mxfp8"));
        QCOMPARE(dock->pointFormatShown(qkv1), QString("mxfp4"));
        // The block diagram's weight tags, layer 0 then layer 1.
        auto* diagram = w.blockDiagramView();
        diagram->resize(900, 600);
        diagram->setLayer(0);
        QCOMPARE(diagram->weightTagShown("q_proj"), QString("W: MXFP8"));
        QCOMPARE(diagram->weightTagShown("o_proj"), QString("W: MXFP4"));
        diagram->setLayer(1);
        QCOMPARE(diagram->weightTagShown("v_proj"), QString("W: MXFP4"));
        auto* info = test::child<QLabel>(v, "schemeInfo");
        QVERIFY2(info->text().contains("bits per weight"), qPrintable(info->text()));
        v->setScheme("layers\\.99\\. = mxfp8");
        QCOMPARE(dock->pointFormatShown(qkv0), QString());
        QVERIFY2(info->text().contains("layers\\.99\\."), qPrintable(info->text()));
        v->setScheme(QString());
        QCOMPARE(dock->pointFormatShown(qkv0), QString("mxfp4"));
    }

    // A method that learns nothing (GPTQ, RTN) has no training curves: the dashboard hides their
    // empty plots and gives the layers' errors the width; a learned run, or an overlay of one,
    // brings them back.
    void trainingPlotsOnlyWhenSomethingLearns() {
        TrainingDashboard board;
        board.resize(1000, 700);
        board.show();
        board.beginRun("gptq", 0, 32);
        QVERIFY(board.lossPlot()->isHidden() && board.a1Plot()->isHidden());
        QVERIFY(!board.layerErrorPlot()->plot()->isHidden());
        board.addLayerErrors(0, {{"self_attn.q_proj", 0.5}, {"mlp.experts.0.up_proj", 0.25}, {"mlp.experts.1.up_proj", 0.75}});
        QCOMPARE(board.layerErrorPlot()->points("q_proj"), (QVector<QPair<int, double>>{{0, 0.5}}));
        QCOMPARE(board.layerErrorPlot()->points("experts.up_proj"), (QVector<QPair<int, double>>{{0, 0.5}})); // their mean
        board.beginRun("latmix-lu", 10, 32);
        QVERIFY(!board.lossPlot()->isHidden() && !board.a1Plot()->isHidden());
        QVERIFY(board.layerErrorPlot()->points("q_proj").isEmpty()); // a new run starts empty
    }

    // The folded FP perplexity (paper Table 2) is drawn on the loss plot's right axis at the
    // steps that have it, and the axis shows only when some run tracked it.
    void foldedPerplexityCurve() {
        TrainingDashboard board;
        board.beginRun(QStringLiteral("tracked"), 5, 32);
        for (int k = 1; k <= 5; ++k) {
            train::DistillStep s;
            s.step = k;
            s.loss = s.objective = 1.0 / k;
            if (k == 1 || k == 4 || k == 5) s.foldedPerplexity = 100.0 + k;
            board.addStep(s);
        }
        QTRY_COMPARE(board.plottedSteps(0, "folded_ppl"), (QVector<double>{1, 4, 5}));
        QCOMPARE(board.plottedValues(0, "folded_ppl"), (QVector<double>{101, 104, 105}));
        QVERIFY(board.lossPlot()->yAxis2->visible());
        TrainingDashboard plain;
        plain.beginRun(QStringLiteral("untracked"), 2, 32);
        train::DistillStep s;
        s.step = 1;
        s.loss = s.objective = 1;
        plain.addStep(s);
        QTRY_COMPARE(plain.plottedValues(0, "loss").size(), 1);
        QVERIFY(plain.plottedValues(0, "folded_ppl").isEmpty());
        QVERIFY(!plain.lossPlot()->yAxis2->visible());
    }

    // The A2 the dashboard follows is the chosen layer's: its final orthogonality deviation is
    // that of layer 2's trained T2 in transforms.h5, computed here from the matrix.
    void trackedLayerA2() {
        MainWindow w;
        QVERIFY(w.openCheckpoint(m_model, false));
        CalibrationView* v = w.calibrationView();
        v->setTrackedLayer(2);
        const QString run = runCalibration(w, "run-track2", "latmix-qr", 3);
        const auto ck = model::Checkpoint::load(m_model.toStdString());
        const auto t = fold::ModelTransforms::load(ck.config(), (run + "/transforms.h5").toStdString());
        const at::Tensor a2 = t.t2(2)->matrix().detach().to(at::kDouble);
        const double want = metrics::orthogonalityDeviation(a2);
        const double got = v->dashboard()->plottedValues(0, "a2_orth").last();
        QVERIFY2(std::abs(got - want) <= 1e-9 * std::max(1.0, want), qPrintable(QString("%1 vs %2").arg(got).arg(want)));
        const double layer0 = metrics::orthogonalityDeviation(t.t2(0)->matrix().detach().to(at::kDouble));
        QVERIFY(std::abs(got - layer0) > 1e-9); // really another layer's matrix
    }

    // Cancel stops the run at the next step and keeps a consistent run file; pause holds it.
    void pauseAndCancel() {
        MainWindow w;
        QVERIFY(w.openCheckpoint(m_model, false));
        CalibrationView* v = w.calibrationView();
        TrainingDashboard* board = v->dashboard();
        configure(v, m_tmp.filePath("run-cancel"), "latmix-lu", 500);
        QSignalSpy done(v, &CalibrationView::runFinished);
        QVERIFY(v->start());
        QTRY_VERIFY_WITH_TIMEOUT(board->plottedValues(0, "loss").size() >= 2, 120000);
        QSignalSpy workerHeld(v->runner(), &JobRunner::held);
        board->findChild<QPushButton*>("pauseButton")->click();
        QVERIFY(v->runner()->isPaused());
        // A step in flight finishes, then the worker waits at its next safe point and says so
        // (JobRunner::held): every step it finished was posted before that signal, and none can
        // follow until it is resumed.
        QVERIFY(workerHeld.wait(120000));
        const int held = board->plottedValues(0, "loss").size();
        QCoreApplication::processEvents();
        QCOMPARE(board->plottedValues(0, "loss").size(), held);
        QCOMPARE(workerHeld.count(), 1);
        board->findChild<QPushButton*>("pauseButton")->click();
        QVERIFY(!v->runner()->isPaused());
        QTRY_VERIFY_WITH_TIMEOUT(board->plottedValues(0, "loss").size() > held, 60000);
        board->findChild<QPushButton*>("cancelButton")->click();
        QVERIFY(done.wait(120000));
        QCOMPARE(done.first().at(0).toBool(), false);
        QVERIFY(board->statusText().startsWith("Cancelled"));
        QVERIFY(!test::child<QAction>(&w, "actionExport")->isEnabled()); // nothing finished to export
        const auto series = train::readDistillSeries(m_tmp.filePath("run-cancel/train.h5").toStdString());
        QVERIFY(series.size() >= size_t(held));
        QVERIFY(!QFile::exists(m_tmp.filePath("run-cancel/latmix.json")));
    }

    // Issue 17.4: the cancelled run's folder is unfinished (run/UnfinishedRun.h). Opened as a
    // run it says so and how to continue it; Run into it with another method is refused naming
    // it; Run with its method continues its training from the saved step to the end.
    void cancelledRunResumes() {
        const QString runDir = m_cancelled;
        const int saved = int(train::readDistillSeries((runDir + "/train.h5").toStdString()).size());
        MainWindow w;
        QVERIFY(!w.openRun(runDir));
        QVERIFY(w.isErrorBannerShown());
        QVERIFY2(w.errorBannerText().contains("is an unfinished run of latmix-lu") &&
                     w.errorBannerText().contains("Continue it in Calibration"),
                 qPrintable(w.errorBannerText()));
        QVERIFY(w.openCheckpoint(m_model, false));
        CalibrationView* v = w.calibrationView();
        configure(v, runDir, "latmix-qr", saved + 2);
        QString error;
        QVERIFY(!v->start(&error));
        QVERIFY2(error.contains("unfinished run of latmix-lu") && error.contains("choose its method"), qPrintable(error));
        configure(v, runDir, "latmix-lu", saved + 2);
        QSignalSpy done(v, &CalibrationView::runFinished);
        QVERIFY2(v->start(&error), qPrintable(error));
        QVERIFY(done.wait(300000));
        QVERIFY2(done.first().at(0).toBool(), qPrintable(done.first().at(2).toString()));
        QVERIFY(!run::hasUnfinishedMarker(runDir.toStdString()));
        QFile f(runDir + "/latmix.json");
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QJsonObject training = QJsonDocument::fromJson(f.readAll()).object()["training"].toObject();
        QCOMPARE(training["resumed_from_step"].toInt(), saved);
        QCOMPARE(training["steps"].toInt(), saved + 2);
    }

    // A run whose weights a target has no type for (MXINT8: no compressed-tensors form, no GGUF
    // type): before anything runs, the dialog says so in the workbench's words (the Format
    // control, not the flag) and keeps Export off; hf stays open.
    void exportDialogSaysWhatATargetCannotHold() {
        const QString calib = m_tmp.filePath("calib-8bit.txt"), run = m_tmp.filePath("run-8bit");
        QVERIFY(test::writeCalibrationText(calib));
        const auto r = test::runLatmixInProcess({"quantize", "--model", m_model, "--method", "rtn", "--format", "mxint8",
                                                 "--calib", calib, "--calib-samples", "2", "--seqlen", "32", "--device",
                                                 "cpu", "--out", run});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        ExportDialog dialog(run);
        auto* button = dialog.findChild<QPushButton*>(QStringLiteral("exportButton"));
        QVERIFY(button);
        for (const QString format : {"compressed-tensors", "gguf", "hf"}) {
            dialog.setFormat(format);
            const bool refused = format != "hf";
            QCOMPARE(button->isEnabled(), !refused);
            QVERIFY2(dialog.targetText().startsWith("Cannot export " + run) == refused, qPrintable(dialog.targetText()));
            if (format == "gguf")
                QVERIFY2(dialog.targetText().contains("Format") && !dialog.targetText().contains("--format"),
                         qPrintable(dialog.targetText()));
            if (refused) {
                QVERIFY(!dialog.startExport()); // no job: the reason again in the result line
                QVERIFY(!dialog.isRunning() && !dialog.resultText().isEmpty());
            }
        }
    }

    // A finished run reopened from its folder joins the dashboard as an overlay; export through
    // the File menu's action writes a folder that reloads and verifies against the run.
    void reopenRunAndExport_data() {
        QTest::addColumn<QString>("format");
        QTest::newRow("hf") << "hf";
        QTest::newRow("compressed-tensors") << "compressed-tensors";
        QTest::newRow("gguf") << "gguf";
    }
    void reopenRunAndExport() {
        QFETCH(QString, format);
        const QString run = m_tmp.filePath("run-export");
        if (!QFile::exists(run + "/latmix.json")) {
            MainWindow first;
            QVERIFY(first.openCheckpoint(m_model, false));
            runCalibration(first, "run-export", "latmix-lu", 3);
        }
        MainWindow w;
        QVERIFY(!test::child<QAction>(&w, "actionExport")->isEnabled());
        QVERIFY(w.openRun(run));
        TrainingDashboard* board = w.calibrationView()->dashboard();
        QCOMPARE(board->runCount(), 1);
        const auto series = train::readDistillSeries((run + "/train.h5").toStdString());
        QCOMPARE(board->plottedValues(0, "objective").size(), int(series.size()));
        QCOMPARE(board->plottedValues(0, "objective").last(), series.back().objective);
        // Opened again (a recent run, then the same run from the command line): its curves once,
        // the header names it (issue 71: in a real X window the legends held it twice, the header
        // said "no run yet").
        QVERIFY(w.openRun(run));
        QCOMPARE(board->runCount(), 1);
        QVERIFY2(test::child<ElidedLabel>(board, "dashboardTitle")->fullText().contains("run-export"),
                 qPrintable(test::child<ElidedLabel>(board, "dashboardTitle")->fullText()));

        QVERIFY(test::child<QAction>(&w, "actionExport")->isEnabled());
        test::child<QAction>(&w, "actionExport")->trigger();
        auto* dialog = w.findChild<ExportDialog*>();
        QVERIFY(dialog);
        const QString out = m_tmp.filePath("export-" + format);
        dialog->setFormat(format);
        // What the dialog says of the target before the export: who loads it, what is online and
        // folded, and the size.
        QVERIFY2(dialog->targetText().contains(format == "gguf" ? "llama.cpp" : format == "hf" ? "transformers" : "vLLM") &&
                     dialog->targetText().contains("Size on disk: about"),
                 qPrintable(dialog->targetText()));
        if (format == "gguf") {
            QVERIFY(dialog->destination().endsWith(".gguf")); // one file: the suggested name follows the format
            // The run learned a T1 bias (Auto (on) on a Llama): it is folded into q/k/v and gate/up,
            // which llama.cpp's llama loads, and never into lm_head (issue 71: that bias made the
            // default run's GGUF export fail after the click). The file parses as GGUF
            // (tests/export/GgufFile.h, not the writer's code) with the run's MXFP4 linears and
            // those biases.
            dialog->setDestination(out + ".gguf");
            QSignalSpy exported(dialog, &ExportDialog::exportFinished);
            QVERIFY(dialog->startExport());
            QVERIFY(exported.wait(120000));
            QVERIFY2(exported.first().at(0).toBool(), qPrintable(dialog->resultText()));
            const auto file = test::GgufFile::read((out + ".gguf").toStdString());
            QCOMPARE(file.string("general.architecture"), std::string("llama"));
            int mxfp4 = 0;
            for (const auto& [name, t] : file.tensors) mxfp4 += t.type == 39;
            QVERIFY2(mxfp4 > 0 && dialog->resultText().contains(QString("(%1 MXFP4").arg(mxfp4)), qPrintable(dialog->resultText()));
            QVERIFY(file.tensors.count("blk.0.attn_q.bias") && file.tensors.count("blk.0.ffn_up.bias"));
            QVERIFY(!file.tensors.count("output.bias"));
            return;
        }
        dialog->setDestination(out);
        QSignalSpy finished(dialog, &ExportDialog::exportFinished);
        QVERIFY(dialog->startExport());
        QVERIFY(finished.wait(120000));
        QVERIFY2(finished.first().at(0).toBool(), qPrintable(dialog->resultText()));
        QVERIFY(dialog->resultText().contains("Verified"));
        // Independently of the dialog: the folder reloads and matches the run.
        exporting::verifyExport(out.toStdString(), run.toStdString());
        QVERIFY(QFile::exists(out + "/config.json") && QFile::exists(out + "/latmix.json"));
        if (format == "hf") {
            const auto ck = model::Checkpoint::load(out.toStdString());
            QCOMPARE(ck.config().numLayers, 4);
        }
        // A second export to the same folder without "replace" fails and leaves it intact; the
        // dialog names its own Replace box (not the CLI's --overwrite) and shows no full bar
        // beside "failed" (issue 71); another target clears the old result.
        QSignalSpy again(dialog, &ExportDialog::exportFinished);
        QVERIFY(dialog->startExport());
        QVERIFY(again.wait(120000));
        QCOMPARE(again.first().at(0).toBool(), false);
        QVERIFY(QFile::exists(out + "/config.json"));
        QVERIFY2(dialog->resultText().contains("Replace an existing folder or file") &&
                     !dialog->resultText().contains("--overwrite"),
                 qPrintable(dialog->resultText()));
        QCOMPARE(dialog->findChild<QProgressBar*>("exportProgress")->value(), 0);
        dialog->setFormat(format == "hf" ? "compressed-tensors" : "hf");
        QVERIFY(dialog->resultText().isEmpty());
    }

    // A model whose weights hold NaNs: the run stops with a message in the window's banner that
    // names the cause, the window keeps working and nothing is offered for export.
    void nanWeightsShowInBanner() {
        const QString dir = m_tmp.filePath("nan-model");
        importing::writeDemoModel(dir.toStdString());
        QFile f(dir + "/model.safetensors");
        QVERIFY(f.open(QIODevice::ReadWrite));
        quint64 headerLen = 0;
        QCOMPARE(f.read(reinterpret_cast<char*>(&headerLen), 8), qint64(8)); // little-endian u64
        // Every float of the tensor data from the middle of the file on becomes NaN.
        const qint64 start = 8 + qint64(headerLen), size = f.size();
        const qint64 from = start + ((size - start) / 2) / 4 * 4;
        QByteArray nan;
        const quint32 bits = 0x7fc00000u;
        for (qint64 i = from; i + 4 <= size; i += 4) nan.append(reinterpret_cast<const char*>(&bits), 4);
        QVERIFY(f.seek(from));
        QCOMPARE(f.write(nan), qint64(nan.size()));
        f.close();

        MainWindow w;
        QVERIFY(w.openCheckpoint(dir, false));
        CalibrationView* v = w.calibrationView();
        configure(v, m_tmp.filePath("run-nan"), "latmix-lu", 5);
        QSignalSpy done(v, &CalibrationView::runFinished);
        QVERIFY(v->start());
        QVERIFY(done.wait(120000));
        QCOMPARE(done.first().at(0).toBool(), false);
        QVERIFY(w.isErrorBannerShown());
        const QString text = w.errorBannerText();
        QVERIFY2(text.startsWith("Calibration failed") &&
                     (text.contains("diverged") || text.contains("finite") || text.contains("NaN")),
                 qPrintable(text));
        QVERIFY(!test::child<QAction>(&w, "actionExport")->isEnabled());
        QVERIFY(v->start()); // the workbench is still usable: a new run starts
        QVERIFY(done.wait(120000));
    }

    // A folder that is not a run: banner, nothing enabled, the window keeps working.
    void badRunShowsBanner() {
        MainWindow w;
        QVERIFY(!w.openRun(m_model));
        QVERIFY(w.isErrorBannerShown());
        QVERIFY(w.errorBannerText().contains("latmix.json"));
        QVERIFY(!test::child<QAction>(&w, "actionExport")->isEnabled());
    }

    // The memory line under the method is the estimate the run is checked against, as the CLI's
    // preflight computes it: the host's on the CPU, the GPU's on each CUDA device this machine has.
    void memoryLineShowsTheCheckedEstimate() {
        CalibrationView view;
        view.setModelDir(m_model);
        auto* devices = view.findChild<QComboBox*>(QStringLiteral("deviceCombo"));
        auto* label = view.findChild<QLabel*>(QStringLiteral("memoryEstimateLabel"));
        QVERIFY(devices && label && devices->count() >= 1);
        for (int i = 0; i < devices->count(); ++i) {
            devices->setCurrentIndex(i);
            const auto resolved = run::preflight(m_model.toStdString(), view.options(), run::PreflightFor::Estimate);
            const run::RunMemory& m = resolved.memory;
            QCOMPARE(QString::fromStdString(m.checkedDevice), devices->currentText());
            const bool cpu = devices->currentText() == "cpu";
            const run::MemoryEstimate& e = cpu ? m.host : m.gpu;
            const QString want = (cpu ? QString("Memory: about ") : "GPU memory (" + devices->currentText() + "): about ") +
                                 QString::fromStdString(run::gibText(e.peakBytes)) + " at peak (" +
                                 QString::fromStdString(e.peakStage) + ")";
            QVERIFY2(label->text().startsWith(want), qPrintable(label->text() + " vs " + want));
        }
    }

    // Issue 63: one preparation (run/PrepareRun.h) for the three front ends that start a run, so
    // the same folder gets the same answer from each: an unfinished LATMiX-LU run (Cancel after its
    // second step, a calibration text file) is continued from its saved step by `latmix quantize
    // --resume`, by Run in Calibration and by `latmix sweep` whose cell it is; and each refuses,
    // before writing anything, to continue it on another model, naming the run. Issue 71: and
    // under an option that changes the result set otherwise (the format for the CLI and the form;
    // the learning rate for a sweep, whose format is in the cell's folder name), naming the option
    // in the front end's words with the recorded and the asked value.
    void oneResumeRuleForEveryFrontEnd_data() {
        QTest::addColumn<QString>("frontEnd");
        QTest::addColumn<QString>("change"); // "", "model", "option"
        for (const char* face : {"latmix quantize --resume", "workbench", "latmix sweep"}) {
            QTest::newRow((QString(face) + ", same model").toUtf8()) << QString(face) << QString();
            QTest::newRow((QString(face) + ", another model").toUtf8()) << QString(face) << QString("model");
            QTest::newRow((QString(face) + ", another result option").toUtf8()) << QString(face) << QString("option");
        }
    }
    void oneResumeRuleForEveryFrontEnd() {
        QFETCH(QString, frontEnd);
        QFETCH(QString, change);
        const bool otherModel = change == "model", otherOption = change == "option";
        if (m_resumable.isEmpty()) {
            const QString calib = m_tmp.filePath("resume-calib.txt");
            QVERIFY(test::writeCalibrationText(calib));
            m_resumable = cancelledRun(QStringLiteral("run-resumable"), calib);
            m_otherModel = m_tmp.filePath(QStringLiteral("demo-copy"));
            std::filesystem::copy(m_model.toStdString(), m_otherModel.toStdString(), std::filesystem::copy_options::recursive);
        }
        const int saved = int(train::readDistillSeries((m_resumable + "/train.h5").toStdString()).size());
        QVERIFY(saved >= 2);
        const QString model = otherModel ? m_otherModel : m_model;
        const QByteArray marker = [&] {
            QFile f(m_resumable + "/unfinished.json");
            return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
        }();
        QVERIFY(!marker.isEmpty());
        QJsonObject options = QJsonDocument::fromJson(marker).object()["options"].toObject(); // what it recorded
        QCOMPARE(options["method"].toString(), QString("latmix-lu"));
        const int seed = options["seed"].toInt();
        // The folder the front end continues: a copy of the unfinished run (a sweep's cell folder
        // under OUT/cells, named method-format-s<seed>).
        const QString tag = QString::number(qHash(QString(QTest::currentDataTag())));
        const QString sweepOut = m_tmp.filePath("sweep-" + tag);
        const QString runDir = frontEnd == "latmix sweep" ? sweepOut + "/cells/latmix-lu-mxfp4-s" + QString::number(seed)
                                                          : m_tmp.filePath("resume-" + tag);
        std::filesystem::create_directories(std::filesystem::path(runDir.toStdString()).parent_path());
        std::filesystem::copy(m_resumable.toStdString(), runDir.toStdString(), std::filesystem::copy_options::recursive);

        QString error;
        if (frontEnd == "latmix quantize --resume") {
            QStringList args{"quantize", "--resume", runDir, "--model", model, "--steps", QString::number(saved + 2)};
            if (otherOption) args << "--format" << "nvfp4";
            const auto r = test::runLatmixInProcess(args);
            if (r.exitCode != 0) error = r.err;
        } else if (frontEnd == "workbench") {
            MainWindow w;
            QVERIFY(w.openCheckpoint(model, false));
            CalibrationView* v = w.calibrationView();
            configure(v, runDir, "latmix-lu", saved + 2);
            if (otherOption) v->setFormat(QStringLiteral("nvfp4"));
            v->setCalibrationText(m_tmp.filePath("resume-calib.txt"));
            QSignalSpy done(v, &CalibrationView::runFinished);
            if (v->start(&error)) {
                QVERIFY(done.wait(300000));
                if (!done.first().at(0).toBool()) error = done.first().at(2).toString();
            }
        } else {
            // The grid: the options the run recorded, its method, format and seed as the grid's axes.
            for (const char* axis : {"method", "format", "seed"}) options.remove(axis);
            options["steps"] = saved + 2;
            if (otherOption) options["lr"] = 2 * options["lr"].toDouble();
            const QJsonObject grid{{"model", model}, {"methods", QJsonArray{"latmix-lu"}}, {"formats", QJsonArray{"mxfp4"}},
                                   {"seeds", QJsonArray{seed}}, {"options", options}};
            const QString gridFile = m_tmp.filePath("grid-" + tag + ".json");
            QFile f(gridFile);
            QVERIFY(f.open(QIODevice::WriteOnly) && f.write(QJsonDocument(grid).toJson()) > 0);
            f.close();
            try {
                run::runSweep(run::readSweepGrid(gridFile.toStdString()), sweepOut.toStdString());
            } catch (const std::exception& e) {
                error = QString::fromLocal8Bit(e.what());
            }
        }
        if (otherModel || otherOption) {
            // Refused before any work, naming the run and its own method and model, or the option
            // changed with both values in the front end's words; the folder as it was.
            QVERIFY2(error.contains("is an unfinished run of latmix-lu"), qPrintable(frontEnd + ": " + error));
            if (otherModel)
                QVERIFY2(error.contains("continues only with its own method (latmix-lu) and model"),
                         qPrintable(frontEnd + ": " + error));
            const double lr = QJsonDocument::fromJson(marker).object()["options"].toObject()["lr"].toDouble(); // as recorded
            const QString asked = frontEnd == "latmix quantize --resume" ? QStringLiteral("--format mxfp4 (asked: nvfp4)")
                                  : frontEnd == "workbench"
                                      ? QStringLiteral("Format: mxfp4 (asked: nvfp4)")
                                      : QStringLiteral("--lr %1 (asked: %2)")
                                            .arg(QString::fromStdString(util::exactNumber(lr)),
                                                 QString::fromStdString(util::exactNumber(2 * lr)));
            if (otherOption) QVERIFY2(error.contains(asked), qPrintable(frontEnd + ": " + error + "\nexpected: " + asked));
            QFile f(runDir + "/unfinished.json");
            QVERIFY(f.open(QIODevice::ReadOnly));
            QCOMPARE(f.readAll(), marker);
            QCOMPARE(int(train::readDistillSeries((runDir + "/train.h5").toStdString()).size()), saved);
            QVERIFY(!QFile::exists(runDir + "/latmix.json"));
            return;
        }
        QVERIFY2(error.isEmpty(), qPrintable(frontEnd + ": " + error));
        QVERIFY(!run::hasUnfinishedMarker(runDir.toStdString()));
        QFile f(runDir + "/latmix.json");
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QJsonObject record = QJsonDocument::fromJson(f.readAll()).object();
        QCOMPARE(record["training"].toObject()["resumed_from_step"].toInt(), saved);
        QCOMPARE(record["training"].toObject()["steps"].toInt(), saved + 2);
        QCOMPARE(int(train::readDistillSeries((runDir + "/train.h5").toStdString()).size()), saved + 2);
    }

    // A run calibrated on the built-in text, continued by `latmix quantize --resume`: the CLI has
    // no such text, says so and how to give it; with the same text as a file the run continues.
    void cliResumeOfBuiltInTextRun() {
        const QString runDir = cancelledRun(QStringLiteral("resume-builtin")); // m_cancelled is continued above
        const int saved = int(train::readDistillSeries((runDir + "/train.h5").toStdString()).size());
        const QStringList args{"quantize", "--resume", runDir, "--steps", QString::number(saved + 1)};
        auto r = test::runLatmixInProcess(args);
        QVERIFY(r.exitCode != 0);
        QVERIFY2(r.err.contains("built-in calibration text, which only the workbench holds") && r.err.contains("--calib"),
                 qPrintable(r.err));
        QVERIFY(run::hasUnfinishedMarker(runDir.toStdString()));
        const QString text = m_tmp.filePath("builtin.txt");
        QFile f(text);
        QVERIFY(f.open(QIODevice::WriteOnly) && f.write(gui::builtInCalibrationText()) > 0);
        f.close();
        r = test::runLatmixInProcess(QStringList(args) << "--calib" << text);
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QFile record(runDir + "/latmix.json");
        QVERIFY(record.open(QIODevice::ReadOnly));
        QCOMPARE(QJsonDocument::fromJson(record.readAll()).object()["training"].toObject()["resumed_from_step"].toInt(), saved);
    }

    // Issue 71: perplexity on an evaluation text chosen in the form, where the data folder has
    // none (it needed LATMIX_DATA_DIR/wikitext-2): the run evaluates that file and records it.
    void evaluationTextChosenInTheForm() {
        const QString wiki = test::dataDir() + "/wikitext-2/wiki.test.raw";
        if (!QFile::exists(wiki)) LATMIX_DATA_SKIP("WikiText-2 test split not found (LATMIX_DATA_DIR)");
        const QString chosen = m_tmp.filePath("my-eval.raw");
        QFile::remove(chosen);
        QVERIFY(QFile::copy(wiki, chosen));
        const QByteArray before = qgetenv("LATMIX_DATA_DIR");
        QTemporaryDir empty;
        qputenv("LATMIX_DATA_DIR", empty.path().toLocal8Bit()); // no wikitext-2/ there
        MainWindow w;
        QVERIFY(w.openCheckpoint(m_model, false));
        CalibrationView* v = w.calibrationView();
        configure(v, m_tmp.filePath("run-eval-text"), "rtn", 1);
        v->setEvalWindows(2);
        v->setEvaluationText(chosen);
        QSignalSpy done(v, &CalibrationView::runFinished);
        QString error;
        const bool started = v->start(&error);
        qputenv("LATMIX_DATA_DIR", before);
        QVERIFY2(started, qPrintable(error));
        QVERIFY(done.wait(300000));
        QVERIFY2(done.first().at(0).toBool(), qPrintable(done.first().at(2).toString()));
        QFile f(m_tmp.filePath("run-eval-text/latmix.json"));
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QJsonObject p = QJsonDocument::fromJson(f.readAll()).object()["perplexity"].toObject();
        QCOMPARE(p["source"].toString(), chosen);
        QCOMPARE(p["windows"].toInt(), 2);
        QVERIFY(p["w4a4"].toDouble() > 1);
    }

    // Without a model the Run button refuses with a message instead of failing later.
    void runNeedsAModel() {
        MainWindow w;
        QString error;
        QVERIFY(!w.calibrationView()->start(&error));
        QVERIFY(error.contains("Open a model"));
    }
};

QTEST_MAIN(TestCalibrationView)
#include "tst_calibrationview.moc"
