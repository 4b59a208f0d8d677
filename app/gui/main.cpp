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

QCommandLineOption option(const char* name, const char* help, const char* value = nullptr, const char* def = nullptr) {
    QCommandLineOption o(QString::fromLatin1(name), QString::fromUtf8(help));
    if (value) o.setValueName(QString::fromLatin1(value));
    if (def) o.setDefaultValue(QString::fromLatin1(def));
    return o;
}

// The command line: --help lists them in this order.
struct Options {
    // Own --version: Qt's would print the settings name "Workbench", not the libtorch in use.
    QCommandLineOption version{{QStringLiteral("v"), QStringLiteral("version")}, QStringLiteral("Displays version information.")};
    QCommandLineOption threads =
        option("threads", "libtorch threads (default: LATMIX_THREADS, else the number of cores).", "N", "0");
    QCommandLineOption screenshot = option("screenshot", "Render the main window (at --size) to the PNG file FILE and exit.", "FILE");
    QCommandLineOption format = option("format", "MX format shown first in the explorer, e.g. mxfp4 or nvfp4.", "NAME");
    QCommandLineOption plotAnalysis =
        option("plot-analysis", "Render the plots of a `latmix analyze --json` file as PNGs into --out-dir and exit.", "JSON");
    QCommandLineOption outDir = option("out-dir", "Folder for --plot-analysis.", "DIR", ".");
    QCommandLineOption point = option("point",
                                      "Select the quantization POINT (e.g. layers.1.mlp.down_proj.input) in every view: the "
                                      "Model dock's tree, the block diagram, the activation, comparison and weights views.",
                                      "POINT");
    QCommandLineOption activations =
        option("activations",
               "Show the activations of POINT (e.g. layers.1.mlp.down_proj.input) before and after --transform; with "
               "--screenshot, taken when they are drawn.",
               "POINT");
    QCommandLineOption transform = option("transform",
                                          "Transform of the activation view: none, hadamard (default), block-hadamard, "
                                          "orthogonal, block-orthogonal, or run (the transforms of --open-run).",
                                          "KIND", "hadamard");
    QCommandLineOption weights = option("weights",
                                        "Show the weights of LINEAR (e.g. layers.1.mlp.down_proj), folded with --open-run's "
                                        "transforms when it has them; with --screenshot, taken when they are drawn.",
                                        "LINEAR");
    QCommandLineOption experts = option("experts",
                                        "Measure the expert load of a mixture-of-experts model on N windows of the built-in "
                                        "calibration text (the experts view); with --screenshot, taken when it is drawn.",
                                        "N");
    QCommandLineOption sensitivity = option("sensitivity",
                                            "Show the sensitivity table FILE (latmix sensitivity --out FILE) in the sensitivity "
                                            "view; with --screenshot, taken when it is drawn.",
                                            "FILE");
    QCommandLineOption runsFolder = option("runs-folder", "List the runs under DIR in the runs view, the best four selected.", "DIR");
    QCommandLineOption compare = option("compare",
                                        "Compare the transforms at POINT (e.g. layers.1.mlp.down_proj.input) and draw the "
                                        "per-block error of that point in every layer (--across-layers); with --screenshot, "
                                        "taken when both are done.",
                                        "POINT");
    QCommandLineOption compareTransforms = option("compare-transforms",
                                                  "Transforms --compare ticks, comma-separated (e.g. "
                                                  "none,hadamard,block-hadamard); default: none, hadamard, block-hadamard "
                                                  "and learned-affine-lu.",
                                                  "KINDS");
    QCommandLineOption acrossLayers = option("across-layers",
                                             "Transform of --compare's per-block error map across layers (default none), or "
                                             "off for the comparison alone (the map captures every layer: most of the time at 8B).",
                                             "KIND", "none");
    QCommandLineOption view = option(
        "view", ("View shown first: " + latmix::gui::MainWindow::viewNameList() + ".").toUtf8().constData(), "NAME");
    QCommandLineOption openRun = option("open-run", "Open a finished run folder (its curves, its export).", "RUN_DIR");
    QCommandLineOption calibrate = option("calibrate",
                                          "Start a calibration of the model with METHOD (e.g. latmix-lu) at once; with "
                                          "--screenshot, the screenshot is taken when it has finished.",
                                          "METHOD");
    QCommandLineOption steps = option("steps", "Training steps for --calibrate.", "N", "40");
    QCommandLineOption scheme = option("scheme",
                                       "Mixed precision rules ('REGEX = FORMAT; ...') or a scheme file for the Calibration "
                                       "form (and --calibrate); the Model dock shows each point's format.",
                                       "RULES");
    QCommandLineOption size = option("size", "The window's size for --screenshot and --layout-report, e.g. 1024x700.", "WxH",
                                     "1280x800");
    QCommandLineOption layoutReport =
        option("layout-report",
               "When the session's jobs are done, write what the window shows wrong at --size (a dock closed, the "
               "window's minimum too large, a name cut, an axis with one label, ...), one problem a line, to FILE; "
               "an empty file: none. The window stays open (packaging/gui-x-check.sh).",
               "FILE");

    void addTo(QCommandLineParser& parser) const {
        for (const QCommandLineOption* o : {&version, &threads, &screenshot, &format, &plotAnalysis, &outDir, &point,
                                            &activations, &transform, &weights, &experts, &sensitivity, &runsFolder, &compare, &compareTransforms,
                                            &acrossLayers, &view, &openRun, &calibrate, &steps, &scheme, &size, &layoutReport})
            parser.addOption(*o);
    }
};

void describeApplication() {
    QCoreApplication::setOrganizationName(QStringLiteral("LATMiX"));
    QCoreApplication::setApplicationName(QStringLiteral("Workbench"));
    QCoreApplication::setApplicationVersion(QString::fromStdString(latmix::latmixVersion()));
    QGuiApplication::setApplicationDisplayName(QStringLiteral("LATMiX Workbench"));
    // Lets Wayland compositors match the window to latmix-workbench.desktop (and its icon).
    QGuiApplication::setDesktopFileName(QStringLiteral("latmix-workbench"));
    QApplication::setWindowIcon(latmix::gui::MainWindow::applicationIcon());
}

// The model the window opens with: MODEL_DIR, else the last session, else the built-in demo
// model. One that cannot be opened is shown in the window's error banner, not fatal: the user
// can pick another folder from there (and --screenshot still renders the window).
void openFirstModel(latmix::gui::MainWindow& window, const QStringList& positional) {
    if (!positional.isEmpty()) {
        if (!window.openCheckpoint(positional.first()))
            std::fprintf(stderr, "latmix-workbench: %s\n", qPrintable(window.errorBannerText()));
        return;
    }
    if (const QJsonObject last = latmix::gui::MainWindow::lastSession();
        !last.isEmpty() && !last.value(QStringLiteral("model")).toString().isEmpty() && window.restoreSession(last))
        return; // the last session (model, point, runs, view, layout) is back; what is gone is in the banner
    QString error;
    const QString demo = latmix::gui::prepareDemoModel(&error);
    // Not remembered in Recent: it opens at every start without arguments anyway.
    if (demo.isEmpty())
        window.showErrorBanner(error);
    else if (!window.openCheckpoint(demo, /*remember=*/false))
        error = window.errorBannerText();
    if (!error.isEmpty()) std::fprintf(stderr, "latmix-workbench: %s\n", qPrintable(error));
}

latmix::gui::ScriptedSession scriptedSession(const QCommandLineParser& parser, const Options& o) {
    latmix::gui::ScriptedSession session;
    bool ok = false;
    session.openRun = parser.value(o.openRun);
    session.view = parser.value(o.view);
    session.activationPoint = parser.value(o.activations);
    session.activationTransform = parser.value(o.transform);
    session.weightsLinear = parser.value(o.weights);
    session.runsFolder = parser.value(o.runsFolder);
    session.sensitivityTable = parser.value(o.sensitivity);
    if (parser.isSet(o.experts)) {
        session.expertWindows = parser.value(o.experts).toInt(&ok);
        if (!ok || session.expertWindows < 1) session.expertWindows = -1; // refused by runScriptedSession
    }
    session.point = parser.value(o.point);
    session.comparePoint = parser.value(o.compare);
    if (parser.isSet(o.compareTransforms))
        session.compareTransforms = parser.value(o.compareTransforms).split(QLatin1Char(','), Qt::SkipEmptyParts);
    session.acrossLayers = parser.value(o.acrossLayers);
    session.scheme = parser.value(o.scheme);
    session.calibrateMethod = parser.value(o.calibrate);
    session.steps = parser.value(o.steps).toInt(&ok);
    if (!ok) session.steps = 0; // refused by runScriptedSession when --calibrate is given
    session.screenshot = parser.value(o.screenshot);
    session.layoutReport = parser.value(o.layoutReport);
    const QStringList wh = parser.value(o.size).split(QLatin1Char('x'));
    const int w = wh.size() == 2 ? wh[0].toInt() : 0, h = wh.size() == 2 ? wh[1].toInt() : 0;
    session.size = w > 0 && h > 0 ? QSize(w, h) : QSize(); // an empty size: refused by main
    return session;
}

} // namespace

int main(int argc, char** argv) {
    latmix::preferPassiveOpenMpWait(argv); // before Qt or libtorch start threads
    latmix::configureAllocator();
    preferOffscreenWhenHeadless(argc, argv);
    QApplication app(argc, argv);
    describeApplication();

    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral("LATMiX Workbench: MX quantization analysis of LLMs"));
    parser.addHelpOption();
    const Options o;
    o.addTo(parser);
    parser.addPositionalArgument(
        QStringLiteral("MODEL_DIR"),
        QStringLiteral("Hugging Face model folder to open (config.json + model.safetensors). "
                       "Without one, the last session is restored, or else the built-in demo model is opened."),
        QStringLiteral("[MODEL_DIR]"));
    parser.process(app); // exits on --help and unknown options
    if (parser.isSet(o.version)) {
        std::printf("latmix-workbench %s (libtorch %s)\n", latmix::latmixVersion().c_str(), latmix::libtorchVersion().c_str());
        return 0;
    }
    bool ok = false;
    const int threads = parser.value(o.threads).toInt(&ok);
    if (!ok || threads < 0)
        return fail(QStringLiteral("--threads expects a non-negative integer, got '%1'").arg(parser.value(o.threads)));
    latmix::configureThreads(threads);
    const QStringList positional = parser.positionalArguments();
    if (positional.size() > 1)
        return fail(QStringLiteral("expected at most one MODEL_DIR, got %1: %2").arg(positional.size()).arg(positional.join(QStringLiteral(", "))));

    if (parser.isSet(o.plotAnalysis)) {
        QStringList written;
        QString error;
        if (!latmix::gui::plotAnalysisJson(parser.value(o.plotAnalysis), parser.value(o.outDir), &written, &error))
            return fail(error);
        for (const QString& f : written) std::printf("latmix-workbench: wrote %s\n", qPrintable(f));
        return 0;
    }

    latmix::gui::MainWindow window;
    if (parser.isSet(o.threads)) { // an explicit --threads wins over the count remembered in the settings
        latmix::configureThreads(threads);
        window.refreshRuntimeInfo();
    }
    if (parser.isSet(o.format) && !window.explorerView()->selectFormat(parser.value(o.format)))
        return fail(QStringLiteral("unknown MX format '%1'; choose one of %2")
                        .arg(parser.value(o.format), QString::fromStdString(latmix::mx::formatNameList())));
    openFirstModel(window, positional);
    const latmix::gui::ScriptedSession session = scriptedSession(parser, o);
    if (session.size.isEmpty())
        return fail(QStringLiteral("--size expects WIDTHxHEIGHT, e.g. 1024x700, got '%1'").arg(parser.value(o.size)));
    QString error;
    if (!latmix::gui::runScriptedSession(window, session, &error)) return fail(error);
    if (!session.screenshot.isEmpty()) return 0;
    window.show();
    return app.exec();
}
