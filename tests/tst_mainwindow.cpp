// The workbench shell: the Export action is present but disabled (with the reason as tooltip),
// the status bar shows the runtime facts, Recent is kept in QSettings and can be cleared, the
// theme choice is remembered, the Model dock can be toggled; the scripted sessions of
// latmix-workbench's command line (demo model, view, comparison, screenshot) run in process.
// QSettings and the demo model go to QStandardPaths' test location (tests/TestMode.cpp), never
// the user's. Opening checkpoints is tested in tst_modelsummaryview.
#include "CalibrationView.h"
#include "ComparisonView.h"
#include "MainWindow.h"
#include "ModelSummaryView.h"
#include "ActivationView.h"
#include "MxExplorerView.h"
#include "ScriptedRun.h"
#include "util/Runtime.h"

#include <qcustomplot.h>

#include <QAction>
#include <QApplication>
#include <QDir>
#include <QDockWidget>
#include <QFileInfo>
#include <QImage>
#include <QJsonArray>
#include <QJsonObject>
#include <QSignalSpy>
#include <QCheckBox>
#include <QLabel>
#include <QMenu>
#include <QSettings>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QtTest>

using latmix::gui::MainWindow;

namespace {

QStringList recentEntries(const MainWindow& w) {
    auto* menu = w.findChild<QMenu*>(QStringLiteral("menuRecent"));
    QStringList paths;
    if (!menu) return paths;
    for (QAction* a : menu->actions())
        if (a->objectName() == QLatin1String("recentCheckpointAction")) paths << a->data().toString();
    return paths;
}

} // namespace

class TestMainWindow : public QObject {
    Q_OBJECT

private slots:
    void initTestCase();
    void init();
    void cleanupTestCase();
    void exportIsDisabledWithReason();
    void statusBarShowsRuntime();
    void aboutNamesVersions();
    void recentRecordsAndClears();
    void recentIsDedupedAndCapped();
    void startsWithoutModel();
    void modelDockToggles();
    void explorerIsCentralAndToggles();
    void themeChoicePersists();
    void settingsAndDemoStayInTestLocation();
    void scriptedSession_data();
    void scriptedSession();
    void sessionRoundTrip();
    void sessionWithWhatIsGone();
    void badSessionFiles_data();
    void badSessionFiles();
};

void TestMainWindow::initTestCase() {
    latmix::configureThreads(2);
}

void TestMainWindow::init() { QSettings(QStringLiteral("LATMiX"), QStringLiteral("Workbench")).clear(); }

void TestMainWindow::cleanupTestCase() { QSettings(QStringLiteral("LATMiX"), QStringLiteral("Workbench")).clear(); }

void TestMainWindow::exportIsDisabledWithReason() {
    MainWindow w;
    auto* exportAction = w.findChild<QAction*>(QStringLiteral("actionExport"));
    QVERIFY(exportAction);
    QVERIFY(!exportAction->isEnabled());
    QVERIFY2(exportAction->toolTip().startsWith(QStringLiteral("Nothing to export yet")), qPrintable(exportAction->toolTip()));
    auto* fileMenu = w.findChild<QMenu*>(QStringLiteral("menuFile"));
    QVERIFY(fileMenu);
    QVERIFY(fileMenu->actions().contains(exportAction));
    QVERIFY(fileMenu->toolTipsVisible()); // else the reason never shows in the menu
}

void TestMainWindow::statusBarShowsRuntime() {
    MainWindow w;
    auto* device = w.findChild<QLabel*>(QStringLiteral("deviceLabel"));
    auto* threads = w.findChild<QLabel*>(QStringLiteral("threadsLabel"));
    auto* libtorch = w.findChild<QLabel*>(QStringLiteral("libtorchLabel"));
    QVERIFY(device && threads && libtorch);
    QVERIFY(w.statusBar()->isAncestorOf(device));
    QCOMPARE(device->text(), QStringLiteral("Device: ") + QString::fromStdString(latmix::deviceDescription()));
    QCOMPARE(threads->text(), QStringLiteral("Threads: 2"));
    QVERIFY(libtorch->text().contains(QString::fromStdString(latmix::libtorchVersion())));

    latmix::configureThreads(1);
    w.refreshRuntimeInfo();
    QCOMPARE(threads->text(), QStringLiteral("Threads: 1"));
    latmix::configureThreads(2);
}

void TestMainWindow::aboutNamesVersions() {
    MainWindow w;
    const QString about = w.aboutText();
    QVERIFY(about.contains(QString::fromStdString(latmix::latmixVersion())));
    QVERIFY(about.contains(QString::fromStdString(latmix::libtorchVersion())));
    QVERIFY(about.contains(QString::fromStdString(latmix::deviceDescription())));
    QVERIFY(w.findChild<QAction*>(QStringLiteral("actionAbout")));
    QVERIFY(!w.windowIcon().isNull()); // the compiled-in resources were linked
}

void TestMainWindow::recentRecordsAndClears() {
    MainWindow w;
    QVERIFY(recentEntries(w).isEmpty());
    auto* clear = w.findChild<QAction*>(QStringLiteral("actionClearRecent"));
    QVERIFY(clear);
    QVERIFY(!clear->isEnabled());

    w.addRecentCheckpoint(QStringLiteral("/models/Llama-3.2-1B"));
    w.addRecentCheckpoint(QStringLiteral("/models/Qwen2.5-0.5B"));
    const QStringList want{QStringLiteral("/models/Qwen2.5-0.5B"), QStringLiteral("/models/Llama-3.2-1B")};
    QCOMPARE(w.recentCheckpoints(), want);
    QCOMPARE(recentEntries(w), want);
    QVERIFY(clear->isEnabled());

    // Kept in QSettings: a new window (a later session) sees the same list.
    {
        MainWindow later;
        QCOMPARE(recentEntries(later), want);
    }

    clear->trigger();
    QVERIFY(w.recentCheckpoints().isEmpty());
    QVERIFY(recentEntries(w).isEmpty());
    QVERIFY(!clear->isEnabled());
    QVERIFY(QSettings(QStringLiteral("LATMiX"), QStringLiteral("Workbench")).value("recent/checkpoints").toStringList().isEmpty());
}

void TestMainWindow::recentIsDedupedAndCapped() {
    MainWindow w;
    for (int i = 0; i < MainWindow::kMaxRecent + 3; ++i) w.addRecentCheckpoint(QStringLiteral("/ckpt/%1").arg(i));
    w.addRecentCheckpoint(QStringLiteral("/ckpt/5/")); // same folder again, trailing slash
    const QStringList recent = w.recentCheckpoints();
    QCOMPARE(recent.size(), MainWindow::kMaxRecent);
    QCOMPARE(recent.first(), QStringLiteral("/ckpt/5"));
    QCOMPARE(recent.count(QStringLiteral("/ckpt/5")), 1);
    QCOMPARE(recent.at(1), QStringLiteral("/ckpt/%1").arg(MainWindow::kMaxRecent + 2));
    QCOMPARE(recentEntries(w), recent);
}

void TestMainWindow::startsWithoutModel() {
    MainWindow w;
    QCOMPARE(w.windowTitle(), QStringLiteral("LATMiX Workbench"));
    QVERIFY(w.currentModelDir().isEmpty());
    QVERIFY(!w.currentModel());
    QVERIFY(w.modelSummary() && !w.modelSummary()->hasModel());
    QVERIFY(!w.isErrorBannerShown());
    // A failed open is not remembered (the missing folder would clutter Recent forever).
    QVERIFY(!w.openCheckpoint(QStringLiteral("/models/tiny-that-does-not-exist")));
    QVERIFY(w.recentCheckpoints().isEmpty());
    QVERIFY(w.errorBannerText().contains(QStringLiteral("/models/tiny-that-does-not-exist")));
}

void TestMainWindow::modelDockToggles() {
    MainWindow w;
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QDockWidget* dock = w.modelDock();
    QVERIFY(dock && dock->objectName() == QLatin1String("modelDock"));
    QCOMPARE(dock->windowTitle(), QStringLiteral("Model"));
    QVERIFY(w.dockWidgetArea(dock) == Qt::LeftDockWidgetArea);
    QVERIFY(dock->isVisible());
    // Leaves the explorer (its fixed 270 px controls plus the plots) most of the 1280 px.
    QVERIFY2(dock->width() <= 400, qPrintable(QString::number(dock->width())));
    QVERIFY2(w.explorerView()->width() >= 800, qPrintable(QString::number(w.explorerView()->width())));
    auto* toggle = w.findChild<QAction*>(QStringLiteral("actionShowModel"));
    QVERIFY(toggle && toggle->isCheckable() && toggle->isChecked());
    toggle->trigger();
    QVERIFY(!dock->isVisible());
    toggle->trigger();
    QVERIFY(dock->isVisible());
}

void TestMainWindow::explorerIsCentralAndToggles() {
    MainWindow w;
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    // The central area holds the (hidden) error banner above the view tabs: explorer, calibration.
    QVERIFY(w.centralWidget()->isAncestorOf(w.explorerView()));
    QVERIFY(w.centralWidget()->isAncestorOf(w.calibrationView()));
    QCOMPARE(w.viewTabs()->currentWidget(), static_cast<QWidget*>(w.explorerView()));
    w.findChild<QAction*>(QStringLiteral("actionShowCalibration"))->trigger();
    QCOMPARE(w.viewTabs()->currentWidget(), static_cast<QWidget*>(w.calibrationView()));
    QVERIFY(!w.explorerView()->isVisible());
    w.findChild<QAction*>(QStringLiteral("actionShowExplorer"))->trigger();
    QVERIFY(w.explorerView()->isVisible());
}

void TestMainWindow::themeChoicePersists() {
    MainWindow w;
    // Application palette changes reach a top-level widget through its window, as a posted
    // event: show it, and wait for the change below.
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QCOMPARE(w.theme(), MainWindow::Theme::System);
    QVERIFY(w.findChild<QAction*>(QStringLiteral("actionThemeSystem"))->isChecked());

    w.findChild<QAction*>(QStringLiteral("actionThemeDark"))->trigger();
    QCOMPARE(w.theme(), MainWindow::Theme::Dark);
    QVERIFY(QApplication::palette().color(QPalette::Window).lightness() < 128);
    QTRY_VERIFY(w.explorerView()->palette().color(QPalette::Base).lightness() < 128);
    {
        MainWindow later; // restores the saved choice
        QCOMPARE(later.theme(), MainWindow::Theme::Dark);
        QVERIFY(later.findChild<QAction*>(QStringLiteral("actionThemeDark"))->isChecked());
    }

    w.setTheme(MainWindow::Theme::Light);
    QVERIFY(QApplication::palette().color(QPalette::Window).lightness() >= 128);
    w.setTheme(MainWindow::Theme::System);
    QCOMPARE(QSettings(QStringLiteral("LATMiX"), QStringLiteral("Workbench")).value("view/theme").toString(),
             QStringLiteral("system"));
}

// Every test binary runs in QStandardPaths' test mode (tests/TestMode.cpp), so the settings
// this suite clears and the demo model it writes live under ~/.qttest, not in the user's config
// and data folders.
void TestMainWindow::settingsAndDemoStayInTestLocation() {
    QVERIFY(QStandardPaths::isTestModeEnabled());
    const QString testRoot = QDir::homePath() + QStringLiteral("/.qttest/");
    const QString settings = QSettings(QStringLiteral("LATMiX"), QStringLiteral("Workbench")).fileName();
    QVERIFY2(settings.startsWith(testRoot), qPrintable(settings));
    QString error;
    const QString demo = latmix::gui::prepareDemoModel(&error);
    QVERIFY2(!demo.isEmpty(), qPrintable(error));
    QVERIFY2(demo.startsWith(testRoot), qPrintable(demo));
    QVERIFY(QFileInfo::exists(demo + QStringLiteral("/config.json")));
    QVERIFY(QFileInfo::exists(demo + QStringLiteral("/model.safetensors")));
}

// latmix-workbench's scripted flags, run in process on the demo model: the view chosen, the
// comparison run before the screenshot, the PNG of the asked size; bad arguments refused with
// the message main prints.
void TestMainWindow::scriptedSession_data() {
    QTest::addColumn<QString>("view");
    QTest::addColumn<QString>("point");
    QTest::addColumn<QString>("activations"); // a point for the activation view
    QTest::addColumn<QString>("method");
    QTest::addColumn<int>("steps");
    QTest::addColumn<QString>("error");      // empty: succeeds
    QTest::addColumn<QString>("currentTab"); // object name of the tab shown at the end
    QTest::newRow("calibration view") << "calibration" << "" << "" << "" << 40 << "" << "calibrationView";
    QTest::newRow("comparison at a point") << "" << "layers.1.mlp.down_proj.input" << "" << "" << 40 << ""
                                           << "comparisonView";
    QTest::newRow("activations of a point") << "" << "" << "layers.2.mlp.down_proj.input" << "" << 40 << ""
                                            << "activationView";
    QTest::newRow("unknown view") << "plots" << "" << "" << "" << 40
                                  << "unknown view 'plots'; choose explorer, activations, comparison or calibration" << "";
    QTest::newRow("unknown point") << "" << "layers.99.mlp.down_proj.input" << "" << "" << 40
                                   << "the model has no quantization point 'layers.99.mlp.down_proj.input'" << "";
    QTest::newRow("calibration, no steps") << "" << "" << "" << "latmix-lu" << 0 << "--steps expects a positive integer" << "";
}

void TestMainWindow::scriptedSession() {
    QFETCH(QString, view);
    QFETCH(QString, point);
    QFETCH(QString, activations);
    QFETCH(QString, method);
    QFETCH(int, steps);
    QFETCH(QString, error);
    QFETCH(QString, currentTab);
    QString why;
    const QString demo = latmix::gui::prepareDemoModel(&why);
    QVERIFY2(!demo.isEmpty(), qPrintable(why));
    MainWindow w;
    QVERIFY2(w.openCheckpoint(demo, /*remember=*/false), qPrintable(w.errorBannerText()));
    QTemporaryDir tmp;
    latmix::gui::ScriptedSession s;
    s.view = view;
    s.comparePoint = point;
    s.activationPoint = activations;
    s.calibrateMethod = method;
    s.steps = steps;
    s.screenshot = tmp.filePath(QStringLiteral("shot.png"));
    s.size = QSize(1280, 800);
    const bool ok = latmix::gui::runScriptedSession(w, s, &why);
    if (!error.isEmpty()) {
        QVERIFY(!ok);
        QCOMPARE(why, error);
        QVERIFY(!QFileInfo::exists(s.screenshot));
        return;
    }
    QVERIFY2(ok, qPrintable(why));
    QCOMPARE(w.viewTabs()->currentWidget()->objectName(), currentTab);
    const QImage shot(s.screenshot);
    QCOMPARE(shot.size(), QSize(1280, 800) * w.devicePixelRatio());
    if (!activations.isEmpty()) { // drawn before the screenshot: the point and transform asked for
        QCOMPARE(w.activationView()->currentPoint(), activations);
        QVERIFY(QString::fromStdString(w.activationView()->lastProfile().transform).startsWith(QStringLiteral("hadamard")));
        QVERIFY(w.activationView()->channelPlot()->graphCount() == 2);
    }
}

// A session saved to a file and opened in a new window brings back the model, the point, the
// runs (their curves), the view and the dock layout; closing the window remembers it for the
// next start.
void TestMainWindow::sessionRoundTrip() {
    QString why;
    const QString demo = latmix::gui::prepareDemoModel(&why);
    QVERIFY2(!demo.isEmpty(), qPrintable(why));
    QTemporaryDir tmp;
    const QString run = tmp.filePath(QStringLiteral("run"));
    const QString file = tmp.filePath(QStringLiteral("a.latmix-session"));
    {
        MainWindow w;
        w.show(); // as a user's: dock visibility is saved and restored for shown windows
        QVERIFY(w.openCheckpoint(demo, false));
        w.activationView()->findChild<QCheckBox*>(QStringLiteral("activationAutoCheck"))->setChecked(false);
        QVERIFY(w.modelSummary()->selectPoint(QStringLiteral("layers.2.mlp.gate_up.input")));
        auto* cal = w.calibrationView();
        cal->setMethod(QStringLiteral("latmix-lu"));
        cal->setSteps(3);
        cal->setCalibration(2, 16, 1);
        cal->setEvalWindows(0);
        cal->setRunDir(run);
        QSignalSpy done(cal, &latmix::gui::CalibrationView::runFinished);
        QVERIFY(cal->start());
        QVERIFY(done.wait(120000));
        QVERIFY2(done.last().at(0).toBool(), qPrintable(done.last().at(2).toString()));
        QCOMPARE(w.openRuns(), QStringList{run});
        w.modelDock()->hide();
        w.viewTabs()->setCurrentWidget(w.comparisonView());
        QVERIFY2(w.saveSessionFile(file, &why), qPrintable(why));
        w.close(); // remembered for the next start
        QCOMPARE(MainWindow::lastSession().value("model").toString(), demo);
    }
    MainWindow later;
    later.show();
    QVERIFY2(later.openSessionFile(file, &why), qPrintable(why));
    QCOMPARE(later.currentModelDir(), demo);
    QCOMPARE(later.activationView()->currentPoint(), QStringLiteral("layers.2.mlp.gate_up.input"));
    QCOMPARE(later.comparisonView()->currentPoint(), QStringLiteral("layers.2.mlp.gate_up.input"));
    QCOMPARE(later.openRuns(), QStringList{run});
    QCOMPARE(later.exportRunDir(), run);
    QCOMPARE(later.viewTabs()->currentWidget(), static_cast<QWidget*>(later.comparisonView()));
    QVERIFY(later.modelDock()->isHidden());
    QVERIFY(!later.isErrorBannerShown());
    QVERIFY(later.recentCheckpoints().isEmpty()); // a restore is not a new open
}

// A model and a run that no longer exist: named in the banner, the rest restored.
void TestMainWindow::sessionWithWhatIsGone() {
    MainWindow w;
    QJsonObject s = w.session();
    s["model"] = QStringLiteral("/nonexistent/model");
    s["runs"] = QJsonArray{QStringLiteral("/nonexistent/run")};
    s["view"] = QStringLiteral("calibrationView");
    QString why;
    QVERIFY2(w.restoreSession(s, &why), qPrintable(why));
    QVERIFY(w.isErrorBannerShown());
    QVERIFY2(w.errorBannerText().contains("/nonexistent/model") && w.errorBannerText().contains("/nonexistent/run"),
             qPrintable(w.errorBannerText()));
    QCOMPARE(w.viewTabs()->currentWidget(), static_cast<QWidget*>(w.calibrationView()));
}

void TestMainWindow::badSessionFiles_data() {
    QTest::addColumn<QByteArray>("content"); // empty: no file at all
    QTest::addColumn<QString>("message");
    QTest::newRow("missing") << QByteArray() << "cannot read the session";
    QTest::newRow("not JSON") << QByteArray("{\"latmix_session\": ") << "not JSON";
    QTest::newRow("another JSON") << QByteArray("{\"model\": \"x\"}") << "not a LATMiX Workbench session";
}

void TestMainWindow::badSessionFiles() {
    QFETCH(QByteArray, content);
    QFETCH(QString, message);
    QTemporaryDir tmp;
    const QString path = tmp.filePath(QStringLiteral("s.latmix-session"));
    if (!content.isEmpty()) {
        QFile f(path);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(content);
    }
    MainWindow w;
    QString why;
    QVERIFY(!w.openSessionFile(path, &why));
    QVERIFY2(why.contains(message) && why.contains(path), qPrintable(why));
    QVERIFY(w.currentModelDir().isEmpty());
}

QTEST_MAIN(TestMainWindow)
#include "tst_mainwindow.moc"
