// latmix-workbench: the Qt desktop workbench. A thin shell over latmix_widgets.
#include "MainWindow.h"
#include "MxExplorerView.h"
#include "util/Runtime.h"

#include <QApplication>
#include <QCommandLineOption>
#include <QCommandLineParser>
#include <QPixmap>
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
        if (std::strncmp(a, "--screenshot", 12) == 0 || std::strcmp(a, "--version") == 0 ||
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

    latmix::gui::MainWindow window;
    if (parser.isSet(formatOption) && !window.explorerView()->selectFormat(parser.value(formatOption)))
        return fail(QStringLiteral("unknown MX format '%1'; choose one of %2")
                        .arg(parser.value(formatOption), QString::fromStdString(latmix::mx::formatNameList())));

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
