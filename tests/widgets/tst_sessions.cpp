// latmix-workbench's sessions: the scripted ones of its command line (demo model, view,
// comparison, screenshot), run in process, and the ones saved to a file (model, point, runs,
// view and docks back in a new window; what is gone named; bad files refused by path). QSettings
// and the demo model go to QStandardPaths' test location (tests/TestMode.cpp).
#include "model/Checkpoint.h"

#include <ATen/ATen.h> // ATen before any Qt header

#include "ActivationView.h"
#include "BlockDiagramView.h"
#include "CalibrationView.h"
#include "ComparisonView.h"
#include "MainWindow.h"
#include "ModelSummaryView.h"
#include "ScriptedRun.h"
#include "WidgetLookup.h"
#include "util/Runtime.h"

#include <qcustomplot.h>

#include <QCheckBox>
#include <QDockWidget>
#include <QFileInfo>
#include <QImage>
#include <QJsonArray>
#include <QJsonObject>
#include <QSettings>
#include <QSignalSpy>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QtTest>

using latmix::gui::MainWindow;

class TestSessions : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() { latmix::configureThreads(2); }
    void init() { QSettings(QStringLiteral("LATMiX"), QStringLiteral("Workbench")).clear(); }
    void cleanupTestCase() { QSettings(QStringLiteral("LATMiX"), QStringLiteral("Workbench")).clear(); }
    void scriptedSession_data();
    void scriptedSession();
    void scriptedAcrossLayers_data();
    void scriptedAcrossLayers();
    void sessionRoundTrip();
    void sessionWithWhatIsGone();
    void badSessionFiles_data();
    void badSessionFiles();
};

// latmix-workbench's scripted flags, run in process on the demo model: the view chosen, the
// comparison run before the screenshot, the PNG of the asked size; bad arguments refused with
// the message main prints.
void TestSessions::scriptedSession_data() {
    QTest::addColumn<QString>("view");
    QTest::addColumn<QString>("point");
    QTest::addColumn<QString>("activations"); // a point for the activation view
    QTest::addColumn<QString>("method");
    QTest::addColumn<int>("steps");
    QTest::addColumn<QString>("error");      // empty: succeeds
    QTest::addColumn<QString>("currentTab"); // object name of the tab shown at the end
    QTest::addColumn<QString>("select");     // --point: selected in every view
    QTest::newRow("calibration view") << "calibration" << "" << "" << "" << 40 << "" << "calibrationView" << "";
    QTest::newRow("comparison at a point") << "" << "layers.1.mlp.down_proj.input" << "" << "" << 40 << ""
                                           << "comparisonView" << "";
    QTest::newRow("activations of a point") << "" << "" << "layers.2.mlp.down_proj.input" << "" << 40 << ""
                                            << "activationView" << "";
    QTest::newRow("unknown view") << "plots" << "" << "" << "" << 40
                                  << "unknown view 'plots'; choose explorer, activations, weights, experts, diagram, comparison, "
                                     "sensitivity, calibration or runs"
                                  << "" << "";
    QTest::newRow("block diagram") << "diagram" << "" << "" << "" << 40 << "" << "blockDiagramView" << "";
    QTest::newRow("block diagram, a point") << "diagram" << "" << "" << "" << 40 << "" << "blockDiagramView"
                                            << "layers.3.self_attn.o_proj.input";
    QTest::newRow("unknown selected point") << "diagram" << "" << "" << "" << 40
                                            << "the model has no quantization point 'layers.4.mlp.down_proj.input'" << ""
                                            << "layers.4.mlp.down_proj.input";
    QTest::newRow("runs view") << "runs" << "" << "" << "" << 40 << "" << "runsView" << "";
    QTest::newRow("unknown point") << "" << "layers.99.mlp.down_proj.input" << "" << "" << 40
                                   << "the model has no quantization point 'layers.99.mlp.down_proj.input'" << "" << "";
    QTest::newRow("calibration, no steps") << "" << "" << "" << "latmix-lu" << 0 << "--steps expects a positive integer" << "" << "";
}

namespace {
// The demo model opened in w, not remembered among the recent files; false with why when not.
bool openDemo(MainWindow& w, QString* why) {
    const QString demo = latmix::gui::prepareDemoModel(why);
    if (demo.isEmpty()) return false;
    if (w.openCheckpoint(demo, /*remember=*/false)) return true;
    *why = w.errorBannerText();
    return false;
}
} // namespace

void TestSessions::scriptedSession() {
    QFETCH(QString, view);
    QFETCH(QString, point);
    QFETCH(QString, activations);
    QFETCH(QString, method);
    QFETCH(int, steps);
    QFETCH(QString, error);
    QFETCH(QString, currentTab);
    QFETCH(QString, select);
    QString why;
    MainWindow w;
    QVERIFY2(openDemo(w, &why), qPrintable(why));
    QTemporaryDir tmp;
    latmix::gui::ScriptedSession s;
    s.view = view;
    s.comparePoint = point;
    s.point = select;
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
    if (!select.isEmpty()) {
        QCOMPARE(w.blockDiagramView()->currentPoint(), select);
        QCOMPARE(w.activationView()->currentPoint(), select);
        QCOMPARE(w.comparisonView()->currentPoint(), select);
    }
    if (!activations.isEmpty()) { // drawn before the screenshot: the point and transform asked for
        QCOMPARE(w.activationView()->currentPoint(), activations);
        QVERIFY(QString::fromStdString(w.activationView()->lastProfile().transform).startsWith(QStringLiteral("hadamard")));
        QVERIFY(latmix::test::child<QCustomPlot>(w.activationView(), "activationChannelPlot")->graphCount() == 2);
    }
}

// --compare's map across layers: drawn with the transform asked for (one row per layer of the
// demo model), left out with "off", and a learned kind refused before anything runs.
void TestSessions::scriptedAcrossLayers_data() {
    QTest::addColumn<QString>("kind");
    QTest::addColumn<bool>("drawn");
    QTest::addColumn<QString>("error");
    QTest::newRow("hadamard") << "hadamard" << true << "";
    QTest::newRow("off") << "off" << false << "";
    QTest::newRow("learned refused") << "learned-affine-lu" << false
                                     << "unknown transform 'learned-affine-lu' for --across-layers; choose a fixed one "
                                        "(none, hadamard, block-hadamard, orthogonal, block-orthogonal) or off";
}

void TestSessions::scriptedAcrossLayers() {
    QFETCH(QString, kind);
    QFETCH(bool, drawn);
    QFETCH(QString, error);
    QString why;
    MainWindow w;
    QVERIFY2(openDemo(w, &why), qPrintable(why));
    QTemporaryDir tmp;
    latmix::gui::ScriptedSession s;
    s.comparePoint = QStringLiteral("layers.1.mlp.down_proj.input");
    s.compareTransforms = {QStringLiteral("none")};
    s.acrossLayers = kind;
    s.screenshot = tmp.filePath(QStringLiteral("shot.png"));
    s.size = QSize(1280, 800);
    const bool ok = latmix::gui::runScriptedSession(w, s, &why);
    QCOMPARE(ok, error.isEmpty());
    if (!ok) {
        QCOMPARE(why, error);
        return;
    }
    const int layers = latmix::model::Checkpoint::load(w.comparisonView()->modelDir().toStdString()).config().numLayers;
    QCOMPARE(w.comparisonView()->heatmapRows().size(), drawn ? layers : 0);
    QCOMPARE(int(w.comparisonView()->lastResult().entries.size()), 1); // the comparison itself ran either way
}

// A session saved to a file and opened in a new window brings back the model, the point, the
// runs (their curves), the view and the dock layout; closing the window remembers it for the
// next start.
void TestSessions::sessionRoundTrip() {
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
        QVERIFY(latmix::test::child<latmix::gui::ModelSummaryView>(&w)->selectPoint(QStringLiteral("layers.2.mlp.gate_up.input")));
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
        latmix::test::child<QDockWidget>(&w, "modelDock")->hide();
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
    QVERIFY(latmix::test::child<QDockWidget>(&later, "modelDock")->isHidden());
    QVERIFY(!later.isErrorBannerShown());
    QVERIFY(later.recentCheckpoints().isEmpty()); // a restore is not a new open
}

// A model and a run that no longer exist: named in the banner, the rest restored.
void TestSessions::sessionWithWhatIsGone() {
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

void TestSessions::badSessionFiles_data() {
    QTest::addColumn<QByteArray>("content"); // empty: no file at all
    QTest::addColumn<QString>("message");
    QTest::newRow("missing") << QByteArray() << "cannot read the session";
    QTest::newRow("not JSON") << QByteArray("{\"latmix_session\": ") << "not JSON";
    QTest::newRow("another JSON") << QByteArray("{\"model\": \"x\"}") << "not a LATMiX Workbench session";
}

void TestSessions::badSessionFiles() {
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

QTEST_MAIN(TestSessions)
#include "tst_sessions.moc"
