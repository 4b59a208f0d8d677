// latmix-workbench: the Qt desktop workbench. A thin shell over latmix_widgets.
#include "import/DemoModel.h"
#include "util/Runtime.h"

#include "AnalysisPlots.h"
#include "CalibrationView.h"
#include "ComparisonView.h"
#include "MainWindow.h"
#include "MxExplorerView.h"

#include <QApplication>
#include <QCommandLineOption>
#include <QCommandLineParser>
#include <QDir>
#include <QEventLoop>
#include <QTabWidget>
#include <QPixmap>
#include <QStandardPaths>
#include <QtGlobal>

#include <cstdio>
#include <cstring>
#include <exception>

namespace {

// A screenshot, --help or --version needs no screen: on a headless machine (CI, ctest) fall
// back to the offscreen platform instead of aborting because no display can be opened.
// Must run before QApplication exists.
void preferOffscreenWhenHeadless(int argc, char** argv) {
    if (!qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM") || !qEnvironmentVariableIsEmpty("DISPLAY") ||
        !qEnvironmentVariableIsEmpty("WAYLAND_DISPLAY"))
        return;
    for (int i = 1; i < argc; ++i) {
        const char* a = argv[i];
        if (std::strncmp(a, "--screenshot", 12) == 0 || std::strncmp(a, "--plot-analysis", 15) == 0 || std::strcmp(a, "--version") == 0 ||
            std::strcmp(a, "-v") == 0 || std::strncmp(a, "--help", 6) == 0 || std::strcmp(a, "-h") == 0) {
            qputenv("QT_QPA_PLATFORM", "offscreen");
            return;
        }
    }
}

int fail(const QString& message) {
    std::fprintf(stderr, "latmix-workbench: error: %s\n", qPrintable(message));
    return 2;
}

// The built-in demo model lives in the per-user data folder (~/.local/share/LATMiX/Workbench
// on Linux), so the workbench starts with a real model to look at and no download or ../shared
// data. writeDemoModel is deterministic and takes milliseconds: a missing or half-written
// folder is simply written again. Returns the folder, or an empty string and why in *error.
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

// One PNG of per-block error and one of E(T) vs block size per quantization point; the file
// names are the point names ("layers.2.mlp.down_proj.input-per-block.png").
int plotAnalysis(const QString& json, const QString& outDir) {
    using namespace latmix::gui;
    QVector<PointCurves> points;
    try {
        points = AnalysisPlots::loadAnalysisJson(json);
    } catch (const std::exception& e) {
        return fail(QString::fromLocal8Bit(e.what()));
    }
    QDir().mkpath(outDir);
    for (const auto& p : points) {
        QString error;
        const QString base = QDir(outDir).filePath(p.point);
        if (!AnalysisPlots::savePerBlockErrorPng(p, base + "-per-block.png", &error) ||
            !AnalysisPlots::saveBlockSizeSweepPng(p, base + "-sweep.png", &error))
            return fail(error);
        std::printf("latmix-workbench: wrote %s-per-block.png and %s-sweep.png\n", qPrintable(base), qPrintable(base));
    }
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    latmix::preferPassiveOpenMpWait(argv); // before Qt or libtorch start threads
    preferOffscreenWhenHeadless(argc, argv);
    QApplication app(argc, argv);
    QCoreApplication::setOrganizationName(QStringLiteral("LATMiX"));
    QCoreApplication::setApplicationName(QStringLiteral("Workbench"));
    QCoreApplication::setApplicationVersion(QString::fromStdString(latmix::latmixVersion()));
    QGuiApplication::setApplicationDisplayName(QStringLiteral("LATMiX Workbench"));
    // Lets Wayland compositors match the window to latmix-workbench.desktop (and its icon).
    QGuiApplication::setDesktopFileName(QStringLiteral("latmix-workbench"));
    QApplication::setWindowIcon(latmix::gui::MainWindow::applicationIcon());

    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral("LATMiX Workbench: MX quantization analysis of LLMs"));
    parser.addHelpOption();
    // Own --version: Qt's would print the settings name "Workbench", not the libtorch in use.
    const QCommandLineOption versionOption({QStringLiteral("v"), QStringLiteral("version")},
                                           QStringLiteral("Displays version information."));
    parser.addOption(versionOption);
    const QCommandLineOption threadsOption(
        QStringLiteral("threads"),
        QStringLiteral("libtorch threads (default: LATMIX_THREADS, else the number of cores)."),
        QStringLiteral("N"), QStringLiteral("0"));
    const QCommandLineOption screenshotOption(
        QStringLiteral("screenshot"),
        QStringLiteral("Render the main window (1280x800) to the PNG file FILE and exit."),
        QStringLiteral("FILE"));
    const QCommandLineOption formatOption(
        QStringLiteral("format"),
        QStringLiteral("MX format shown first in the explorer, e.g. mxfp4 or nvfp4."),
        QStringLiteral("NAME"));
    parser.addOption(threadsOption);
    parser.addOption(screenshotOption);
    parser.addOption(formatOption);
    const QCommandLineOption plotAnalysisOption(
        QStringLiteral("plot-analysis"),
        QStringLiteral("Render the plots of a `latmix analyze --json` file as PNGs into --out-dir and exit."),
        QStringLiteral("JSON"));
    const QCommandLineOption outDirOption(QStringLiteral("out-dir"), QStringLiteral("Folder for --plot-analysis."),
                                          QStringLiteral("DIR"), QStringLiteral("."));
    parser.addOption(plotAnalysisOption);
    parser.addOption(outDirOption);
    const QCommandLineOption viewOption(QStringLiteral("view"),
                                        QStringLiteral("View shown first: explorer, comparison or calibration."), QStringLiteral("NAME"));
    const QCommandLineOption openRunOption(QStringLiteral("open-run"),
                                           QStringLiteral("Open a finished run folder (its curves, its export)."),
                                           QStringLiteral("RUN_DIR"));
    const QCommandLineOption calibrateOption(
        QStringLiteral("calibrate"),
        QStringLiteral("Start a calibration of the model with METHOD (e.g. latmix-lu) at once; with --screenshot, "
                       "the screenshot is taken when it has finished."),
        QStringLiteral("METHOD"));
    const QCommandLineOption stepsOption(QStringLiteral("steps"), QStringLiteral("Training steps for --calibrate."),
                                         QStringLiteral("N"), QStringLiteral("40"));
    const QCommandLineOption compareOption(
        QStringLiteral("compare"),
        QStringLiteral("Compare the transforms at POINT (e.g. layers.1.mlp.down_proj.input) and draw the per-block "
                       "error of that point in every layer; with --screenshot, taken when both are done."),
        QStringLiteral("POINT"));
    parser.addOption(compareOption);
    parser.addOption(viewOption);
    parser.addOption(openRunOption);
    parser.addOption(calibrateOption);
    parser.addOption(stepsOption);
    parser.addPositionalArgument(
        QStringLiteral("MODEL_DIR"),
        QStringLiteral("Hugging Face model folder to open (config.json + model.safetensors). "
                       "Without one, the built-in demo model is opened."),
        QStringLiteral("[MODEL_DIR]"));
    parser.process(app); // exits on --help and unknown options
    if (parser.isSet(versionOption)) {
        std::printf("latmix-workbench %s (libtorch %s)\n", latmix::latmixVersion().c_str(),
                    latmix::libtorchVersion().c_str());
        return 0;
    }

    bool ok = false;
    const int threads = parser.value(threadsOption).toInt(&ok);
    if (!ok || threads < 0)
        return fail(QStringLiteral("--threads expects a non-negative integer, got '%1'").arg(parser.value(threadsOption)));
    latmix::configureThreads(threads);
    const QStringList positional = parser.positionalArguments();
    if (positional.size() > 1)
        return fail(QStringLiteral("expected at most one MODEL_DIR, got %1: %2")
                        .arg(positional.size())
                        .arg(positional.join(QStringLiteral(", "))));

    if (parser.isSet(plotAnalysisOption)) return plotAnalysis(parser.value(plotAnalysisOption), parser.value(outDirOption));

    latmix::gui::MainWindow window;
    // An explicit --threads wins over the thread count remembered in the settings.
    if (parser.isSet(threadsOption)) {
        latmix::configureThreads(threads);
        window.refreshRuntimeInfo();
    }
    if (parser.isSet(formatOption) && !window.explorerView()->selectFormat(parser.value(formatOption)))
        return fail(QStringLiteral("unknown MX format '%1'; choose one of %2")
                        .arg(parser.value(formatOption), QString::fromStdString(latmix::mx::formatNameList())));

    // A model that cannot be opened is shown in the window's error banner, not fatal: the
    // user can pick another folder from there (and --screenshot still renders the window).
    if (!positional.isEmpty()) {
        if (!window.openCheckpoint(positional.first()))
            std::fprintf(stderr, "latmix-workbench: %s\n", qPrintable(window.errorBannerText()));
    } else {
        QString error;
        const QString demo = prepareDemoModel(&error);
        // Not remembered in Recent: it opens at every start without arguments anyway.
        if (demo.isEmpty())
            window.showErrorBanner(error);
        else if (!window.openCheckpoint(demo, /*remember=*/false))
            error = window.errorBannerText();
        if (!error.isEmpty()) std::fprintf(stderr, "latmix-workbench: %s\n", qPrintable(error));
    }

    if (parser.isSet(openRunOption) && !window.openRun(parser.value(openRunOption)))
        std::fprintf(stderr, "latmix-workbench: %s\n", qPrintable(window.errorBannerText()));
    if (parser.isSet(viewOption)) {
        const QString v = parser.value(viewOption);
        if (v == QLatin1String("calibration"))
            window.viewTabs()->setCurrentWidget(window.calibrationView());
        else if (v == QLatin1String("explorer"))
            window.viewTabs()->setCurrentWidget(window.explorerView());
        else if (v == QLatin1String("comparison"))
            window.viewTabs()->setCurrentWidget(window.comparisonView());
        else
            return fail(QStringLiteral("unknown view '%1'; choose explorer, comparison or calibration").arg(v));
    }
    if (parser.isSet(compareOption)) {
        auto* comparison = window.comparisonView();
        if (!comparison->selectPoint(parser.value(compareOption)))
            return fail(QStringLiteral("the model has no quantization point '%1'").arg(parser.value(compareOption)));
        window.viewTabs()->setCurrentWidget(comparison);
        QEventLoop loop;
        QString error;
        QObject::connect(comparison, &latmix::gui::ComparisonView::comparisonFinished, &loop,
                         [&](bool done, const QString& message) {
                             if (!done) std::fprintf(stderr, "latmix-workbench: %s\n", qPrintable(message));
                             loop.quit();
                         });
        window.resize(1280, 800);
        window.show();
        if (!comparison->compare(&error)) return fail(error);
        loop.exec();
        if (!comparison->compareAcrossLayers(QStringLiteral("none"), &error)) return fail(error);
        loop.exec();
    }
    if (parser.isSet(calibrateOption)) {
        auto* calibration = window.calibrationView();
        const int steps = parser.value(stepsOption).toInt(&ok);
        if (!ok || steps < 1) return fail(QStringLiteral("--steps expects a positive integer"));
        calibration->setMethod(parser.value(calibrateOption));
        calibration->setSteps(steps);
        window.viewTabs()->setCurrentWidget(calibration);
        QString error;
        if (!calibration->start(&error)) return fail(error);
        if (parser.isSet(screenshotOption)) {
            // Wait for the run (the window's event loop keeps the dashboard live meanwhile).
            QEventLoop loop;
            bool finished = false;
            QObject::connect(calibration, &latmix::gui::CalibrationView::runFinished, &loop,
                             [&](bool done, const QString&, const QString& message) {
                                 finished = true;
                                 if (!done) std::fprintf(stderr, "latmix-workbench: %s\n", qPrintable(message));
                                 loop.quit();
                             });
            window.resize(1280, 800);
            window.show();
            if (!finished) loop.exec();
        }
    }

    if (parser.isSet(screenshotOption)) {
        const QString file = parser.value(screenshotOption);
        window.resize(1280, 800);
        window.show();
        // Let layouts settle and QCustomPlot run its queued replots (after the resize) before
        // grabbing; grab() then paints the widget tree into a pixmap, no screen involved.
        for (int i = 0; i < 3; ++i) {
            QCoreApplication::sendPostedEvents();
            QCoreApplication::processEvents();
        }
        const QPixmap shot = window.grab();
        if (shot.isNull() || !shot.save(file, "PNG"))
            return fail(QStringLiteral("cannot write the screenshot to '%1'").arg(file));
        std::printf("latmix-workbench: wrote %s (%dx%d)\n", qPrintable(file), shot.width(), shot.height());
        return 0;
    }

    window.show();
    return app.exec();
}
