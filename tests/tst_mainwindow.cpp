// The workbench shell: the Export action is present but disabled (with the reason as tooltip),
// the status bar shows the runtime facts, Recent is kept in QSettings and can be cleared, the
// theme choice is remembered, the Model dock can be toggled. QSettings go to a throw-away test
// location. Opening checkpoints is tested in tst_modelsummaryview.
#include "CalibrationView.h"
#include "MainWindow.h"
#include "ModelSummaryView.h"
#include "MxExplorerView.h"
#include "util/Runtime.h"

#include <QAction>
#include <QApplication>
#include <QDockWidget>
#include <QLabel>
#include <QMenu>
#include <QSettings>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTabWidget>
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
};

void TestMainWindow::initTestCase() {
    // QSettings("LATMiX", "Workbench") then lives under ~/.qttest, never the user's config.
    QStandardPaths::setTestModeEnabled(true);
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

QTEST_MAIN(TestMainWindow)
#include "tst_mainwindow.moc"
