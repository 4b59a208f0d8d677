// The workbench shell: the Export action is present but disabled (with the reason as tooltip),
// the status bar shows the runtime facts, Recent is kept in QSettings and can be cleared, the
// theme choice is remembered, the Model dock can be toggled (sessions, scripted and saved:
// tst_sessions).
// QSettings and the demo model go to this binary's own test home (tests/TestMode.cpp), never
// the user's. Opening checkpoints is tested in tst_modelsummaryview.
#include "model/Checkpoint.h"
#include "model/LlamaModel.h"
#include "report/Report.h"
#include "run/RunCatalog.h"

#include "PoisonedModel.h" // ATen before any Qt header

#include "BlockDiagramView.h"
#include "CalibrationView.h"
#include "ComparisonView.h"
#include "MainWindow.h"
#include "ModelSummaryView.h"
#include "ActivationView.h"
#include "JobManager.h"
#include "JobRunner.h"
#include "JobsDock.h"
#include "MxExplorerView.h"
#include "RunsView.h"
#include "WeightView.h"
#include "ScriptedRun.h"
#include "WidgetLookup.h"
#include "util/Runtime.h"

#include <qcustomplot.h>

#include <QAction>
#include <QApplication>
#include <QDir>
#include <QDockWidget>
#include <QFileInfo>
#include <QJsonObject>
#include <QSignalSpy>
#include <QCheckBox>
#include <QLabel>
#include <QMenu>
#include <QSettings>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTabWidget>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <limits>

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
    void dataFolderIsRemembered();
    void diagramSelectsEverywhere_data();
    void diagramSelectsEverywhere();
    void reportAndRunsFromTheWindow();
    void jobsDockListsTheViewsJobs();
    void damagedWeightsAreNamed();
};

namespace {
// A short LATMiX-LU calibration of the demo model into runDir, through the Calibration tab.
bool calibrate(MainWindow& w, const QString& runDir, int steps, int evalWindows, QString* why) {
    auto* cal = w.calibrationView();
    cal->setMethod(QStringLiteral("latmix-lu"));
    cal->setSteps(steps);
    cal->setCalibration(2, 16, 1);
    cal->setEvalWindows(evalWindows);
    cal->setRunDir(runDir);
    QSignalSpy done(cal, &latmix::gui::CalibrationView::runFinished);
    if (!cal->start(why)) return false;
    if (!done.wait(180000)) {
        *why = QStringLiteral("the calibration did not finish in 3 minutes");
        return false;
    }
    if (!done.last().at(0).toBool()) *why = done.last().at(2).toString();
    return done.last().at(0).toBool();
}
} // namespace

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
    QVERIFY(latmix::test::child<latmix::gui::ModelSummaryView>(&w) && !latmix::test::child<latmix::gui::ModelSummaryView>(&w)->hasModel());
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
    QDockWidget* dock = latmix::test::child<QDockWidget>(&w, "modelDock");
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

// Every test binary has a home of its own (tests/TestMode.cpp: XDG folders under
// LATMIX_TEST_HOME, named after the binary), so the settings this suite clears and the demo model
// it writes are neither the user's nor another test binary's (ctest -j runs GUI tests side by side).
void TestMainWindow::settingsAndDemoStayInTestLocation() {
    const QString testRoot = qEnvironmentVariable("LATMIX_TEST_HOME") + QStringLiteral("/");
    QVERIFY2(testRoot.endsWith(QStringLiteral("/tst_mainwindow/")), qPrintable(testRoot));
    QVERIFY(!testRoot.startsWith(QDir::homePath() + QStringLiteral("/.config")));
    const QString settings = QSettings(QStringLiteral("LATMiX"), QStringLiteral("Workbench")).fileName();
    QVERIFY2(settings.startsWith(testRoot), qPrintable(settings));
    QString error;
    const QString demo = latmix::gui::prepareDemoModel(&error);
    QVERIFY2(!demo.isEmpty(), qPrintable(error));
    QVERIFY2(demo.startsWith(testRoot), qPrintable(demo));
    QVERIFY(QFileInfo::exists(demo + QStringLiteral("/config.json")));
    QVERIFY(QFileInfo::exists(demo + QStringLiteral("/model.safetensors")));
}

// File › Data folder… (issue 71: perplexity needed LATMIX_DATA_DIR, which only a shell could set):
// the folder chosen is core's data folder at once, and a later start without the variable takes
// it from the settings; one that is not a folder is refused and changes nothing.
void TestMainWindow::dataFolderIsRemembered() {
    const QByteArray before = qgetenv("LATMIX_DATA_DIR");
    QTemporaryDir data;
    {
        MainWindow w;
        QString error;
        QVERIFY(!w.setDataFolder(data.filePath(QStringLiteral("no-such-folder")), &error));
        QVERIFY2(error.contains(QStringLiteral("no-such-folder")), qPrintable(error));
        QCOMPARE(qgetenv("LATMIX_DATA_DIR"), before);
        QVERIFY2(w.setDataFolder(data.path(), &error), qPrintable(error));
        QCOMPARE(MainWindow::dataFolder(), QDir::cleanPath(data.path()));
        QVERIFY(latmix::test::child<QAction>(&w, "actionDataFolder"));
    }
    qunsetenv("LATMIX_DATA_DIR");
    {
        MainWindow again; // a new start: the setting, the environment having none
        QCOMPARE(MainWindow::dataFolder(), QDir::cleanPath(data.path()));
    }
    qputenv("LATMIX_DATA_DIR", before); // the suite's own
    QSettings(QStringLiteral("LATMiX"), QStringLiteral("Workbench")).clear();
}

// A marker clicked in the block diagram is the point of every view (tree, activations,
// comparison, weights), and a point picked in the tree is the diagram's, on its layer.
void TestMainWindow::diagramSelectsEverywhere_data() {
    QTest::addColumn<int>("layer");
    QTest::addColumn<int>("kind");
    QTest::addColumn<QString>("linear"); // the weights view's linear for that point
    QTest::newRow("qkv, layer 0") << 0 << int(latmix::model::PointKind::QkvInput) << "self_attn.q_proj";
    QTest::newRow("o_proj, layer 1") << 1 << int(latmix::model::PointKind::OProjInput) << "self_attn.o_proj";
    QTest::newRow("gate_up, layer 2") << 2 << int(latmix::model::PointKind::GateUpInput) << "mlp.gate_proj";
    QTest::newRow("down_proj, layer 3") << 3 << int(latmix::model::PointKind::DownProjInput) << "mlp.down_proj";
}

void TestMainWindow::diagramSelectsEverywhere() {
    QFETCH(int, layer);
    QFETCH(int, kind);
    QFETCH(QString, linear);
    QString why;
    const QString demo = latmix::gui::prepareDemoModel(&why);
    QVERIFY2(!demo.isEmpty(), qPrintable(why));
    MainWindow w;
    QVERIFY(w.openCheckpoint(demo, false));
    // No automatic captures: the test is about selection, not the numbers behind it.
    w.activationView()->findChild<QCheckBox*>(QStringLiteral("activationAutoCheck"))->setChecked(false);
    w.resize(1280, 800);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    auto* diagram = w.blockDiagramView();
    w.viewTabs()->setCurrentWidget(diagram);
    QVERIFY(diagram->hasModel());
    QCOMPARE(diagram->layerCount(), w.currentModel()->config().numLayers);
    diagram->setLayer(layer);
    const auto pk = static_cast<latmix::model::PointKind>(kind);
    const QString point = QString::fromStdString(latmix::model::pointName(layer, pk));
    QTest::mouseClick(diagram, Qt::LeftButton, {}, diagram->markerRect(pk).center().toPoint());
    QCOMPARE(diagram->currentPoint(), point);
    QCOMPARE(w.activationView()->currentPoint(), point);
    QCOMPARE(w.comparisonView()->currentPoint(), point);
    QCOMPARE(w.weightView()->layer(), layer);
    QCOMPARE(w.weightView()->linear(), linear);
    QCOMPARE(w.viewTabs()->currentWidget(), static_cast<QWidget*>(diagram)); // the user stays where they clicked

    // The other way: the tree's choice moves the diagram's marker (and layer).
    const int other = (layer + 1) % w.currentModel()->config().numLayers;
    const QString treePoint = QString::fromStdString(latmix::model::pointName(other, latmix::model::PointKind::DownProjInput));
    QVERIFY(latmix::test::child<latmix::gui::ModelSummaryView>(&w)->selectPoint(treePoint));
    QCOMPARE(diagram->currentPoint(), treePoint);
    QCOMPARE(diagram->layer(), other);
    QVERIFY(!w.selectPoint(QStringLiteral("layers.99.mlp.down_proj.input")));
    QCOMPARE(diagram->currentPoint(), treePoint);
}

// File › Export report… writes the report of the current run (the same page `latmix report`
// writes), refuses while there is none, and the run appears in the runs table at once.
void TestMainWindow::reportAndRunsFromTheWindow() {
    QString why;
    const QString demo = latmix::gui::prepareDemoModel(&why);
    QVERIFY2(!demo.isEmpty(), qPrintable(why));
    QTemporaryDir tmp;
    MainWindow w;
    QVERIFY(w.openCheckpoint(demo, false));
    QAction* report = latmix::test::child<QAction>(&w, "actionExportReport");
    QVERIFY(report && !report->isEnabled());
    const QString out = tmp.filePath(QStringLiteral("out/report.html"));
    QVERIFY(!w.exportReport(out, &why));
    QVERIFY2(why.contains(QStringLiteral("no run to report")), qPrintable(why));
    QVERIFY(!QFileInfo::exists(out));

    const QString runsRoot = tmp.filePath(QStringLiteral("runs"));
    const QString run = runsRoot + QStringLiteral("/lu");
    QVERIFY2(calibrate(w, run, 2, 0, &why), qPrintable(why));
    QVERIFY(report->isEnabled());
    QVERIFY(report->toolTip().contains(QDir::toNativeSeparators(run)));
    QVERIFY2(w.exportReport(out, &why), qPrintable(why));
    QFile f(out);
    QVERIFY(f.open(QIODevice::ReadOnly));
    QCOMPARE(QString::fromUtf8(f.readAll()), QString::fromStdString(latmix::report::runReportHtml(run.toStdString())));
    QVERIFY(QDir(tmp.filePath(QStringLiteral("out"))).entryList(QDir::Files) == QStringList{QStringLiteral("report.html")});
    // An unwritable target: a clear error naming it, the window carries on.
    const QString blocked = tmp.filePath(QStringLiteral("file"));
    QFile(blocked).open(QIODevice::WriteOnly);
    QVERIFY(!w.exportReport(blocked + QStringLiteral("/report.html"), &why));
    QVERIFY2(why.contains(blocked), qPrintable(why));

    // The finished run's folder joined the runs table, with the run's numbers.
    auto* runs = w.runsView();
    QVERIFY2(runs->folders().contains(runsRoot), qPrintable(runs->folders().join(", ")));
    const auto summary = latmix::run::readRunSummary(run.toStdString());
    const auto listed = std::find_if(runs->runs().begin(), runs->runs().end(), [&](const latmix::run::RunSummary& r) {
        return QDir::cleanPath(QString::fromStdString(r.dir)) == run;
    });
    QVERIFY(listed != runs->runs().end());
    QCOMPARE(listed->method, std::string("latmix-lu"));
    QCOMPARE(listed->steps, 2);
    QVERIFY(summary.finalObjective >= 0);
    QCOMPARE(listed->finalObjective, summary.finalObjective);
}

// The views' jobs are the Jobs dock's rows; the dock is shown from the start, under the views
// (issue 71), and once hidden the status bar's summary opens it again.
void TestMainWindow::jobsDockListsTheViewsJobs() {
    QString why;
    const QString demo = latmix::gui::prepareDemoModel(&why);
    QVERIFY2(!demo.isEmpty(), qPrintable(why));
    QTemporaryDir tmp;
    MainWindow w;
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(w.openCheckpoint(demo, false));
    auto* dock = latmix::test::child<QDockWidget>(&w, "jobsDock");
    QVERIFY(dock->isVisible());
    QCOMPARE(w.dockWidgetArea(dock), Qt::BottomDockWidgetArea);
    dock->toggleViewAction()->trigger(); // View › Jobs
    QVERIFY(dock->isHidden());
    QVERIFY(latmix::test::child<latmix::gui::JobStatusIndicator>(&w, "jobIndicator"));
    QTest::mouseClick(latmix::test::child<latmix::gui::JobStatusIndicator>(&w, "jobIndicator"), Qt::LeftButton);
    QVERIFY(latmix::test::child<QDockWidget>(&w, "jobsDock")->isVisible());
    QCOMPARE(latmix::test::child<latmix::gui::JobsDock>(&w)->manager(), latmix::gui::JobManager::instance());

    auto* cal = w.calibrationView();
    QTRY_VERIFY(!latmix::test::child<latmix::gui::JobRunner>(&w, "weightCheckRunner")->isRunning()); // the open's own job, listed too
    QCOMPARE(latmix::test::child<latmix::gui::JobsDock>(&w)->rowOf(latmix::test::child<latmix::gui::JobRunner>(&w, "weightCheckRunner")->jobId()) >= 0, true);
    // The application's manager keeps the last 20 ended jobs: earlier tests' jobs go first.
    latmix::gui::JobManager::instance()->clearFinished();
    const int before = latmix::test::child<latmix::gui::JobsDock>(&w)->table()->rowCount();
    QCOMPARE(before, 0);
    QVERIFY2(calibrate(w, tmp.filePath(QStringLiteral("run")), 2, 0, &why), qPrintable(why));
    QCOMPARE(latmix::test::child<latmix::gui::JobsDock>(&w)->table()->rowCount(), before + 1);
    const int id = cal->runner()->jobId();
    const int row = latmix::test::child<latmix::gui::JobsDock>(&w)->rowOf(id);
    QVERIFY(row >= 0);
    QCOMPARE(latmix::gui::JobManager::instance()->job(id).state, latmix::gui::JobState::Finished);
    QCOMPARE(latmix::test::child<latmix::gui::JobsDock>(&w)->table()->item(row, latmix::gui::JobsDock::StateColumn)->text(),
             latmix::gui::jobStateText(latmix::gui::JobState::Finished));
    QVERIFY(latmix::test::child<latmix::gui::JobsDock>(&w)->cancelButton(id) == nullptr); // nothing to cancel once ended
}

// A checkpoint with one NaN weight opens (its header is fine), and the check that follows names
// the tensor, its first NaN and what to do in the banner; a clean model leaves no banner.
void TestMainWindow::damagedWeightsAreNamed() {
    QString why;
    const QString demo = latmix::gui::prepareDemoModel(&why);
    QVERIFY2(!demo.isEmpty(), qPrintable(why));
    QTemporaryDir tmp;
    const QString damaged = tmp.filePath(QStringLiteral("damaged"));
    QVERIFY(latmix::test::writePoisonedModel(demo, damaged, "model.layers.0.mlp.up_proj.weight", 7 * 128 + 2,
                                             std::numeric_limits<double>::infinity()));
    MainWindow w;
    QSignalSpy checked(latmix::test::child<latmix::gui::JobRunner>(&w, "weightCheckRunner"), &latmix::gui::JobRunner::finished);
    QVERIFY(w.openCheckpoint(demo, false));
    QVERIFY(checked.wait(30000));
    QCOMPARE(checked.last().at(0).toBool(), true);
    QVERIFY(!w.isErrorBannerShown());
    QVERIFY(w.openCheckpoint(damaged, false));
    QCOMPARE(w.currentModelDir(), damaged);
    QVERIFY(checked.wait(30000));
    QCOMPARE(checked.last().at(0).toBool(), false);
    QVERIFY(w.isErrorBannerShown());
    for (const QString& p : {QString("tensor 'model.layers.0.mlp.up_proj.weight' in model.safetensors holds NaN/Inf"),
                             QString("first at [7, 2] (inf)"), damaged})
        QVERIFY2(w.errorBannerText().contains(p), qPrintable(w.errorBannerText()));
}

QTEST_MAIN(TestMainWindow)
#include "tst_mainwindow.moc"
