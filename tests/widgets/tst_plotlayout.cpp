// Every view of the main window, filled with real results on the demo model (activations, a
// transform comparison, a short calibration, the weights of a linear before and after the
// calibration's folding, the runs table with that run selected), at 1024×700, 1280×800 and
// 1920×1080 in the light and the dark theme, with the Model and Jobs docks open: nothing that
// widgets/shell/LayoutCheck.h's layoutProblems finds (the window's minimum within its size, no name
// cut, no column hidden at 1280 px and up, no form scrolling sideways, every axis with two
// readable labels, no legend cut or covering points, the theme's colours). Offscreen here; the
// same check from a real X window is packaging/gui-x-check.sh (test gui_x_check).
#include "import/DemoModel.h"

#include <ATen/ATen.h>
// Qt after ATen: Qt's `slots` macro breaks ATen headers.
#include "ActivationView.h"
#include "CalibrationView.h"
#include "ComparisonView.h"
#include "JobRunner.h"
#include "LayoutCheck.h"
#include "MainWindow.h"
#include "MxExplorerView.h"
#include "RunsView.h"
#include "WeightView.h"
#include "util/Runtime.h"
#include "TestData.h"

#include <qcustomplot.h>

#include <QCheckBox>
#include <QFileInfo>
#include <QLabel>
#include <QSignalSpy>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QtTest>


using namespace latmix;
using latmix::gui::MainWindow;

class TestPlotLayout : public QObject {
    Q_OBJECT

    QTemporaryDir m_tmp;
    MainWindow* m_window = nullptr;

private slots:
    void initTestCase() {
        const QString model = m_tmp.filePath("demo");
        importing::writeDemoModel(model.toStdString());
        m_window = new MainWindow;
        QVERIFY(m_window->openCheckpoint(model, false));
        m_window->resize(1280, 800);
        m_window->show();
        // Fill every view with real numbers.
        auto* cal = m_window->calibrationView();
        QSignalSpy calDone(cal, &gui::CalibrationView::runFinished);
        cal->setMethod("latmix-lu");
        cal->setSteps(60);
        cal->setCalibration(4, 32, 2);
        // A perplexity for the runs table where WikiText-2 is at hand.
        cal->setEvalWindows(QFileInfo::exists(test::dataDir() + "/wikitext-2/wiki.test.raw") ? 1 : 0);
        cal->setRunDir(m_tmp.filePath("run"));
        QString why;
        QVERIFY2(cal->start(&why), qPrintable(why));
        if (!calDone.wait(300000)) {
            auto* status = m_window->findChild<QLabel*>("dashboardStatus");
            QFAIL(qPrintable("calibration did not finish: " + (status ? status->text() : QString("?")) + " running " +
                             QString::number(cal->runner()->isRunning())));
        }
        auto* act = m_window->activationView();
        QSignalSpy actDone(act, &gui::ActivationView::profileFinished);
        act->setCalibration(2, 32);
        QVERIFY(act->selectPoint("layers.1.mlp.down_proj.input"));
        while (act->runner()->isRunning()) QVERIFY(actDone.wait(60000));
        if (actDone.isEmpty()) {
            QVERIFY(act->analyze());
            QVERIFY(actDone.wait(60000));
        }
        auto* cmp = m_window->comparisonView();
        QSignalSpy cmpDone(cmp, &gui::ComparisonView::comparisonFinished);
        cmp->setCalibration(2, 32, 20);
        QVERIFY(cmp->selectPoint("layers.1.mlp.down_proj.input"));
        QVERIFY(cmp->compare());
        QVERIFY(cmpDone.wait(120000));
        QVERIFY(cmp->compareAcrossLayers("hadamard"));
        QVERIFY(cmpDone.wait(120000));
        QVERIFY2(calDone.last().at(0).toBool(), qPrintable(calDone.last().at(2).toString()));
        // The finished run is the weights view's folded side and a row of the runs table.
        auto* weights = m_window->weightView();
        QCOMPARE(weights->runDir(), m_tmp.filePath("run"));
        QSignalSpy wDone(weights, &gui::WeightView::profileFinished);
        QVERIFY(weights->selectLinear(1, "mlp.down_proj"));
        while (weights->runner()->isRunning()) QVERIFY(wDone.wait(60000));
        QString error;
        QVERIFY2(weights->analyze(&error), qPrintable(error));
        QVERIFY(wDone.wait(60000));
        QVERIFY2(wDone.last().at(0).toBool(), qPrintable(wDone.last().at(1).toString()));
        auto* runs = m_window->runsView();
        runs->selectRuns({m_tmp.filePath("run")});
        QCOMPARE(runs->selectedRuns().size(), 1);
    }
    void cleanupTestCase() { delete m_window; }

    void readable_data() {
        QTest::addColumn<QSize>("size");
        QTest::addColumn<int>("theme");
        // Issue 71: the sizes people have, with the Model and Jobs docks open (the window's minimum
        // was 1187 px wide, 1515 with the Jobs dock).
        QTest::newRow("1024x700 light") << QSize(1024, 700) << int(MainWindow::Theme::Light);
        QTest::newRow("1280x800 light") << QSize(1280, 800) << int(MainWindow::Theme::Light);
        QTest::newRow("1280x800 dark") << QSize(1280, 800) << int(MainWindow::Theme::Dark);
        QTest::newRow("1920x1080 light") << QSize(1920, 1080) << int(MainWindow::Theme::Light);
        QTest::newRow("1920x1080 dark") << QSize(1920, 1080) << int(MainWindow::Theme::Dark);
    }
    void readable() {
        QFETCH(QSize, size);
        QFETCH(int, theme);
        m_window->setTheme(MainWindow::Theme(theme));
        m_window->resize(size);
        // Everything the window's views would show wrong at this size (widgets/shell/LayoutCheck.h).
        const QStringList problems = gui::layoutProblems(*m_window);
        QVERIFY2(problems.isEmpty(), qPrintable(problems.join("\n")));
    }
};

QTEST_MAIN(TestPlotLayout)
#include "tst_plotlayout.moc"
