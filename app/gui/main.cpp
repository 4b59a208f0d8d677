// latmix-workbench: the Qt desktop workbench. A thin shell over latmix_widgets.
#include "util/Runtime.h"

#include "MainWindow.h"
#include "MxExplorerView.h"
#include "ScriptedRun.h"

#include <QApplication>
#include <QCommandLineOption>
#include <QCommandLineParser>
#include <QJsonObject>
#include <QtGlobal>

#include <cstdio>
#include <cstring>

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

} // namespace

int main(int argc, char** argv) {
    latmix::preferPassiveOpenMpWait(argv); // before Qt or libtorch start threads
    latmix::configureAllocator();
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
                                        QStringLiteral("View shown first: explorer, activations, weights, diagram, comparison, calibration or runs."), QStringLiteral("NAME"));
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
    const QCommandLineOption pointOption(QStringLiteral("point"),
                                         QStringLiteral("Select the quantization POINT (e.g. layers.1.mlp.down_proj.input) in "
                                                        "every view: the Model dock's tree, the block diagram, the activation, "
                                                        "comparison and weights views."),
                                         QStringLiteral("POINT"));
    parser.addOption(pointOption);
    const QCommandLineOption compareOption(
        QStringLiteral("compare"),
        QStringLiteral("Compare the transforms at POINT (e.g. layers.1.mlp.down_proj.input) and draw the per-block "
                       "error of that point in every layer (--across-layers); with --screenshot, taken when both are done."),
        QStringLiteral("POINT"));
    const QCommandLineOption acrossLayersOption(
        QStringLiteral("across-layers"),
        QStringLiteral("Transform of --compare's per-block error map across layers (default none), or off for the "
                       "comparison alone (the map captures every layer: most of the time at 8B)."),
        QStringLiteral("KIND"), QStringLiteral("none"));
    const QCommandLineOption compareTransformsOption(
        QStringLiteral("compare-transforms"),
        QStringLiteral("Transforms --compare ticks, comma-separated (e.g. none,hadamard,block-hadamard); default: "
                       "none, hadamard, block-hadamard and learned-affine-lu."),
        QStringLiteral("KINDS"));
    const QCommandLineOption activationsOption(
        QStringLiteral("activations"),
        QStringLiteral("Show the activations of POINT (e.g. layers.1.mlp.down_proj.input) before and after --transform; "
                       "with --screenshot, taken when they are drawn."),
        QStringLiteral("POINT"));
    const QCommandLineOption transformOption(QStringLiteral("transform"),
                                             QStringLiteral("Transform of the activation view: none, hadamard (default), block-hadamard, orthogonal, "
                                                            "block-orthogonal, or run (the transforms of --open-run)."),
                                             QStringLiteral("KIND"), QStringLiteral("hadamard"));
    const QCommandLineOption weightsOption(
        QStringLiteral("weights"),
        QStringLiteral("Show the weights of LINEAR (e.g. layers.1.mlp.down_proj), folded with --open-run's transforms "
                       "when it has them; with --screenshot, taken when they are drawn."),
        QStringLiteral("LINEAR"));
    const QCommandLineOption runsFolderOption(QStringLiteral("runs-folder"),
                                              QStringLiteral("List the runs under DIR in the runs view, the best four selected."),
                                              QStringLiteral("DIR"));
    parser.addOption(activationsOption);
    parser.addOption(transformOption);
    parser.addOption(weightsOption);
    parser.addOption(runsFolderOption);
    parser.addOption(compareOption);
    parser.addOption(compareTransformsOption);
    parser.addOption(acrossLayersOption);
    parser.addOption(viewOption);
    parser.addOption(openRunOption);
    parser.addOption(calibrateOption);
    parser.addOption(stepsOption);
    parser.addPositionalArgument(
        QStringLiteral("MODEL_DIR"),
        QStringLiteral("Hugging Face model folder to open (config.json + model.safetensors). "
                       "Without one, the last session is restored, or else the built-in demo model is opened."),
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

    if (parser.isSet(plotAnalysisOption)) {
        QStringList written;
        QString error;
        if (!latmix::gui::plotAnalysisJson(parser.value(plotAnalysisOption), parser.value(outDirOption), &written, &error))
            return fail(error);
        for (const QString& f : written) std::printf("latmix-workbench: wrote %s\n", qPrintable(f));
        return 0;
    }

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
    } else if (const QJsonObject last = latmix::gui::MainWindow::lastSession();
               !last.isEmpty() && !last.value(QStringLiteral("model")).toString().isEmpty() && window.restoreSession(last)) {
        // The last session (model, point, runs, view, layout) is back; what is gone is in the banner.
    } else {
        QString error;
        const QString demo = latmix::gui::prepareDemoModel(&error);
        // Not remembered in Recent: it opens at every start without arguments anyway.
        if (demo.isEmpty())
            window.showErrorBanner(error);
        else if (!window.openCheckpoint(demo, /*remember=*/false))
            error = window.errorBannerText();
        if (!error.isEmpty()) std::fprintf(stderr, "latmix-workbench: %s\n", qPrintable(error));
    }

    latmix::gui::ScriptedSession session;
    session.openRun = parser.value(openRunOption);
    session.view = parser.value(viewOption);
    session.activationPoint = parser.value(activationsOption);
    session.activationTransform = parser.value(transformOption);
    session.weightsLinear = parser.value(weightsOption);
    session.runsFolder = parser.value(runsFolderOption);
    session.point = parser.value(pointOption);
    session.comparePoint = parser.value(compareOption);
    if (parser.isSet(compareTransformsOption))
        session.compareTransforms = parser.value(compareTransformsOption).split(QLatin1Char(','), Qt::SkipEmptyParts);
    session.acrossLayers = parser.value(acrossLayersOption);
    session.calibrateMethod = parser.value(calibrateOption);
    session.steps = parser.value(stepsOption).toInt(&ok);
    if (!ok) session.steps = 0; // refused by runScriptedSession when --calibrate is given
    session.screenshot = parser.value(screenshotOption);
    QString error;
    if (!latmix::gui::runScriptedSession(window, session, &error)) return fail(error);
    if (!session.screenshot.isEmpty()) return 0;

    window.show();
    return app.exec();
}
