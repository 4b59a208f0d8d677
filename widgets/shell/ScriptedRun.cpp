#include "ScriptedRun.h"

#include "ExpertLoadView.h"

#include "import/DemoModel.h"
#include "transforms/LearnedTransforms.h"

#include "ActivationView.h"
#include "AnalysisPlots.h"
#include "BlockDiagramView.h"
#include "CalibrationView.h"
#include "ComparisonView.h"
#include "MainWindow.h"
#include "RunsView.h"
#include "SensitivityView.h"
#include "WeightView.h"
#include "JobRunner.h"
#include "LayoutCheck.h"
#include "MxExplorerView.h"

#include <algorithm>

#include <QCoreApplication>
#include <QDir>
#include <QEventLoop>
#include <QSpinBox>
#include <QFileInfo>
#include <QRegularExpression>
#include <QSaveFile>
#include <QTableView>
#include <QPixmap>
#include <QStandardPaths>
#include <QTabWidget>

#include <cstdio>
#include <exception>

namespace latmix::gui {

QString prepareDemoModel(QString* error) {
    const QString base = QStandardPaths::writableLocation(QStandardPaths::AppLocalDataLocation);
    if (base.isEmpty()) {
        *error = QStringLiteral("No writable data folder for the built-in demo model; open a model folder "
                                "with File › Open checkpoint… or latmix-workbench MODEL_DIR");
        return {};
    }
    const QString dir = base + QStringLiteral("/demo-model");
    const QDir d(dir);
    if (d.exists(QStringLiteral("config.json")) && d.exists(QStringLiteral("model.safetensors"))) return dir;
    try {
        latmix::importing::writeDemoModel(dir.toStdString());
    } catch (const std::exception& e) {
        *error = QStringLiteral("Cannot write the built-in demo model to %1: %2")
                     .arg(QDir::toNativeSeparators(dir), QString::fromStdString(e.what()));
        return {};
    }
    return dir;
}

bool plotAnalysisJson(const QString& json, const QString& outDir, QStringList* written, QString* error) {
    QVector<PointCurves> points;
    try {
        points = AnalysisPlots::loadAnalysisJson(json);
    } catch (const std::exception& e) {
        *error = QString::fromLocal8Bit(e.what());
        return false;
    }
    if (!QDir().mkpath(outDir)) {
        *error = QStringLiteral("cannot create the folder '%1' for the plots").arg(outDir);
        return false;
    }
    for (const auto& p : points) {
        const QString base = QDir(outDir).filePath(p.point);
        if (!AnalysisPlots::savePerBlockErrorPng(p, base + "-per-block.png", error) ||
            !AnalysisPlots::saveBlockSizeSweepPng(p, base + "-sweep.png", error))
            return false;
        if (written) *written << base + "-per-block.png" << base + "-sweep.png";
    }
    return true;
}

namespace {

void settle() {
    // Let layouts settle and QCustomPlot run its queued replots (after a resize) before grabbing;
    // grab() then paints the widget tree into a pixmap, no screen involved.
    for (int i = 0; i < 3; ++i) {
        QCoreApplication::sendPostedEvents();
        QCoreApplication::processEvents();
    }
}

void showAt(MainWindow& window, QSize size) {
    window.resize(size);
    window.show();
}

// What a view (activations, weights) draws for its current selection. The selection may have
// started a job already ("update on every change"): wait for it, then analyze once more, so what
// is shown is surely what was asked for.
template <typename View>
bool drawSelection(View* view, QString* error) {
    auto wait = [view] {
        QEventLoop loop;
        QObject::connect(view, &View::profileFinished, &loop, [&](bool done, const QString& message) {
            if (!done) std::fprintf(stderr, "latmix-workbench: %s\n", qPrintable(message));
            loop.quit();
        });
        loop.exec();
    };
    while (view->runner()->isRunning()) wait();
    if (!view->analyze(error)) return false;
    wait();
    return true;
}

// --view: the tab shown first.
bool showView(MainWindow& window, const ScriptedSession& s, QString* error) {
    QWidget* target = window.view(s.view);
    if (!target) {
        *error = QStringLiteral("unknown view '%1'; choose %2").arg(s.view, MainWindow::viewNameList());
        return false;
    }
    window.viewTabs()->setCurrentWidget(target);
    return true;
}

// --activations POINT with --transform: drawn before it returns.
bool showActivations(MainWindow& window, const ScriptedSession& s, QString* error) {
    auto* view = window.activationView();
    if (!view->selectPoint(s.activationPoint)) {
        *error = QStringLiteral("the model has no quantization point '%1'").arg(s.activationPoint);
        return false;
    }
    // "run": the open run's transforms (--open-run), what its quantizers see.
    const bool run = s.activationTransform == QLatin1String("run");
    if (!view->setTransform(run ? ActivationView::runTransformName() : s.activationTransform)) {
        *error = run ? QStringLiteral("--transform run needs a run with transforms (transforms.h5) opened with --open-run")
                     : QStringLiteral("unknown transform '%1' for the activation view; choose one of %2, or run")
                           .arg(s.activationTransform, ActivationView::transformKinds().join(QStringLiteral(", ")));
        return false;
    }
    window.viewTabs()->setCurrentWidget(view);
    showAt(window, s.size);
    if (!drawSelection(view, error)) return false; // the capture is cached by then: only the profile runs
    return true;
}

// --weights LINEAR: drawn before it returns.
bool showWeights(MainWindow& window, const ScriptedSession& s, QString* error) {
    auto* view = window.weightView();
    static const QRegularExpression re(QStringLiteral("^(?:layers\\.)?(\\d+)\\.(.+)$"));
    const auto m = re.match(s.weightsLinear);
    if (!m.hasMatch() || !view->selectLinear(m.captured(1).toInt(), m.captured(2))) {
        *error = QStringLiteral("the model has no linear '%1'; give layers.N.LINEAR with LINEAR one of %2")
                     .arg(s.weightsLinear, WeightView::linears().join(QStringLiteral(", ")));
        return false;
    }
    window.viewTabs()->setCurrentWidget(view);
    showAt(window, s.size);
    if (!drawSelection(view, error)) return false;
    return true;
}

// --experts N: measured and drawn before it returns.
bool showExperts(MainWindow& window, const ScriptedSession& s, QString* error) {
    auto* view = window.expertLoadView();
    if (s.expertWindows < 1) {
        *error = QStringLiteral("--experts needs a positive number of windows");
        return false;
    }
    if (auto* windows = view->findChild<QSpinBox*>(QStringLiteral("expertWindowsSpin"))) windows->setValue(s.expertWindows);
    window.viewTabs()->setCurrentWidget(view);
    showAt(window, s.size);
    QEventLoop loop;
    bool ok = false;
    QObject::connect(view, &ExpertLoadView::loadFinished, &loop, [&](bool done, const QString& message) {
        if (!done) std::fprintf(stderr, "latmix-workbench: %s\n", qPrintable(message));
        ok = done;
        loop.quit();
    });
    if (!view->measure(error)) return false;
    loop.exec();
    if (!ok) *error = QStringLiteral("the expert load could not be measured (the banner says why)");
    return ok;
}

// --sensitivity FILE: the table shown, its heat map and the budget's scheme drawn.
bool showSensitivity(MainWindow& window, const ScriptedSession& s, QString* error) {
    auto* view = window.sensitivityView();
    window.viewTabs()->setCurrentWidget(view);
    showAt(window, s.size);
    return view->loadTable(s.sensitivityTable, error);
}

// --runs-folder DIR: listed, the best four selected.
bool showRuns(MainWindow& window, const ScriptedSession& s, QString* error) {
    auto* view = window.runsView();
    if (!QFileInfo(s.runsFolder).isDir()) {
        *error = QStringLiteral("'%1' is not a folder of runs").arg(s.runsFolder);
        return false;
    }
    view->addFolder(s.runsFolder);
    QStringList best;
    auto* table = view->table()->model();
    for (int row = 0; row < table->rowCount() && best.size() < 4; ++row)
        best << table->data(table->index(row, RunsView::Name), RunsView::kDirRole).toString();
    view->selectRuns(best);
    window.viewTabs()->setCurrentWidget(view);
    return true;
}

// --compare POINT (with --compare-transforms and --across-layers): finished before it returns.
bool runComparison(MainWindow& window, const ScriptedSession& s, QString* error) {
    auto* comparison = window.comparisonView();
    if (!comparison->selectPoint(s.comparePoint)) {
        *error = QStringLiteral("the model has no quantization point '%1'").arg(s.comparePoint);
        return false;
    }
    if (!s.compareTransforms.isEmpty()) {
        QStringList known;
        for (const auto& k : latmix::transforms::transformKinds()) known << QString::fromStdString(k);
        for (const QString& k : s.compareTransforms)
            if (!known.contains(k)) {
                *error = QStringLiteral("unknown transform '%1' for --compare-transforms; choose from %2")
                             .arg(k, known.join(QStringLiteral(", ")));
                return false;
            }
        comparison->setTransforms(s.compareTransforms);
    }
    const bool map = s.acrossLayers != QLatin1String("off");
    const std::string acrossKind = s.acrossLayers.toStdString();
    const auto kinds = latmix::transforms::transformKinds();
    if (map && (latmix::transforms::isLearnedKind(acrossKind) ||
                std::find(kinds.begin(), kinds.end(), acrossKind) == kinds.end())) {
        *error = QStringLiteral("unknown transform '%1' for --across-layers; choose a fixed one (none, hadamard, "
                                "block-hadamard, orthogonal, block-orthogonal) or off")
                     .arg(s.acrossLayers);
        return false;
    }
    window.viewTabs()->setCurrentWidget(comparison);
    QEventLoop loop;
    QObject::connect(comparison, &ComparisonView::comparisonFinished, &loop, [&](bool done, const QString& message) {
        if (!done) std::fprintf(stderr, "latmix-workbench: %s\n", qPrintable(message));
        loop.quit();
    });
    showAt(window, s.size);
    // The map across layers first: its capture holds the compared point too, which compare()
    // then reuses (ComparisonView::CaptureCache).
    if (map) {
        if (!comparison->compareAcrossLayers(s.acrossLayers, error)) return false;
        loop.exec();
    }
    if (!comparison->compare(error)) return false;
    loop.exec();
    return true;
}

// --calibrate METHOD --steps N: started; with a screenshot to take, finished before it returns.
bool runCalibration(MainWindow& window, const ScriptedSession& s, QString* error) {
    if (s.steps < 1) {
        *error = QStringLiteral("--steps expects a positive integer");
        return false;
    }
    auto* calibration = window.calibrationView();
    calibration->setMethod(s.calibrateMethod);
    calibration->setSteps(s.steps);
    window.viewTabs()->setCurrentWidget(calibration);
    // With a screenshot to take or a layout to report, wait for the run (the event loop keeps the
    // dashboard live).
    const bool wait = !s.screenshot.isEmpty() || !s.layoutReport.isEmpty();
    QEventLoop loop;
    bool finished = false;
    if (wait) {
        QObject::connect(calibration, &CalibrationView::runFinished, &loop,
                         [&](bool done, const QString&, const QString& message) {
                             finished = true;
                             if (!done) std::fprintf(stderr, "latmix-workbench: %s\n", qPrintable(message));
                             loop.quit();
                         });
        showAt(window, s.size);
    }
    if (!calibration->start(error)) return false;
    if (wait && !finished) loop.exec();
    return true;
}

// --screenshot FILE: the window as a PNG.
bool takeScreenshot(MainWindow& window, const ScriptedSession& s, QString* error) {
    showAt(window, s.size);
    settle();
    const QPixmap shot = window.grab();
    if (shot.isNull() || !shot.save(s.screenshot, "PNG")) {
        *error = QStringLiteral("cannot write the screenshot to '%1'").arg(s.screenshot);
        return false;
    }
    std::printf("latmix-workbench: wrote %s (%dx%d)\n", qPrintable(s.screenshot), shot.width(), shot.height());
    return true;
}

// --layout-report FILE: what the window shows wrong at its size (LayoutCheck.h), one problem a
// line (an empty file: none), written under a temporary name; the window stays up.
bool writeLayoutReport(MainWindow& window, const ScriptedSession& s, QString* error) {
    showAt(window, s.size);
    settle();
    QStringList problems = layoutProblems(window);
    // The window manager enlarges a window below its minimum: the size asked for did not fit.
    if (window.width() > s.size.width() || window.height() > s.size.height())
        problems.prepend(QStringLiteral("the window is %1x%2, not the %3x%4 asked for: its minimum is larger")
                             .arg(window.width())
                             .arg(window.height())
                             .arg(s.size.width())
                             .arg(s.size.height()));
    QSaveFile f(s.layoutReport);
    if (!f.open(QIODevice::WriteOnly) || f.write((problems.join(QLatin1Char('\n')) + (problems.isEmpty() ? "" : "\n")).toUtf8()) < 0 ||
        !f.commit()) {
        *error = QStringLiteral("cannot write the layout report to '%1'").arg(s.layoutReport);
        return false;
    }
    std::printf("latmix-workbench: wrote %s (%lld problem(s) at %dx%d)\n", qPrintable(s.layoutReport),
                static_cast<long long>(problems.size()), window.width(), window.height());
    std::fflush(stdout);
    return true;
}

} // namespace

bool runScriptedSession(MainWindow& window, const ScriptedSession& s, QString* error) {
    if (!s.openRun.isEmpty() && !window.openRun(s.openRun))
        std::fprintf(stderr, "latmix-workbench: %s\n", qPrintable(window.errorBannerText()));
    if (!s.point.isEmpty() && !window.selectPoint(s.point)) {
        *error = QStringLiteral("the model has no quantization point '%1'").arg(s.point);
        return false;
    }
    if (!s.scheme.isEmpty()) window.calibrationView()->setScheme(s.scheme);
    return (s.view.isEmpty() || showView(window, s, error)) &&
           (s.activationPoint.isEmpty() || showActivations(window, s, error)) &&
           (s.weightsLinear.isEmpty() || showWeights(window, s, error)) &&
           (s.expertWindows == 0 || showExperts(window, s, error)) &&
           (s.sensitivityTable.isEmpty() || showSensitivity(window, s, error)) &&
           (s.runsFolder.isEmpty() || showRuns(window, s, error)) &&
           (s.comparePoint.isEmpty() || runComparison(window, s, error)) &&
           (s.calibrateMethod.isEmpty() || runCalibration(window, s, error)) &&
           (s.screenshot.isEmpty() || takeScreenshot(window, s, error)) &&
           (s.layoutReport.isEmpty() || writeLayoutReport(window, s, error));
}

} // namespace latmix::gui
