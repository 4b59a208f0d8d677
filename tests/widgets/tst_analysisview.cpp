// What the four analysis tabs (activations, weights, transform comparison, expert load) share
// through AnalysisView, checked on each: a second request while a job waits is refused, saying
// why (returned, in errorOccurred once); the tab's own Cancel button, shown while its job runs,
// cancels it, and it ends with "Cancelled" and no errorOccurred (issue 71: there was no button,
// and the line read "<tab> failed: cancelled"); the tab's button is disabled while its job runs and enabled after; the next
// request runs to the end; a job that fails (the checkpoint's weights gone after the model was
// opened) says why once, naming the file, and leaves the tab usable. On the tabs with "Update on
// every change": changes made while a job runs start one more job once it has ended well, none
// after a cancel.
#include "ActivationView.h"
#include "ComparisonView.h"
#include "ExpertLoadView.h"
#include "JobManager.h"
#include "JobRunner.h"
#include "TestData.h"
#include "WeightView.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QtTest>

#include <filesystem>
#include <functional>
#include <future>
#include <memory>

using namespace latmix;
using namespace latmix::gui;

namespace {

// One tab, opened on modelDir, with its request and the signal that ends it.
struct Tab {
    std::unique_ptr<AnalysisView> view;
    std::function<bool(QString*)> start;
    const char* finished = nullptr; // SIGNAL(...)
    QPushButton* button = nullptr;
};

Tab openTab(const QString& name, const QString& modelDir) {
    Tab t;
    if (name == "activations") {
        auto* v = new ActivationView;
        v->findChild<QCheckBox*>("activationAutoCheck")->setChecked(false); // one job at a time, started here
        v->setModelDir(modelDir);
        v->setCalibration(1, 16);
        t.start = [v](QString* e) { return v->analyze(e); };
        t.finished = SIGNAL(profileFinished(bool, QString));
        t.view.reset(v);
        t.button = v->findChild<QPushButton*>("activationAnalyzeButton");
    } else if (name == "weights") {
        auto* v = new WeightView;
        v->findChild<QCheckBox*>("weightAutoCheck")->setChecked(false);
        v->setModelDir(modelDir);
        t.start = [v](QString* e) { return v->analyze(e); };
        t.finished = SIGNAL(profileFinished(bool, QString));
        t.view.reset(v);
        t.button = v->findChild<QPushButton*>("weightAnalyzeButton");
    } else if (name == "comparison") {
        auto* v = new ComparisonView;
        v->setModelDir(modelDir);
        v->setCalibration(1, 16, 2);
        t.start = [v](QString* e) { return v->compare(e); };
        t.finished = SIGNAL(comparisonFinished(bool, QString));
        t.view.reset(v);
        t.button = v->findChild<QPushButton*>("compareButton");
    } else {
        auto* v = new ExpertLoadView;
        v->setModelDir(modelDir);
        v->findChild<QSpinBox*>("expertWindowsSpin")->setValue(1);
        v->findChild<QSpinBox*>("expertSeqLenSpin")->setValue(16);
        t.start = [v](QString* e) { return v->measure(e); };
        t.finished = SIGNAL(loadFinished(bool, QString));
        t.view.reset(v);
        t.button = v->findChild<QPushButton*>("expertAnalyzeButton");
    }
    return t;
}

QString modelFor(const QString& tab) { return tab == "experts" ? test::smallMoeModelDir() : test::demoModelDir(); }

// A job that holds a manager's whole budget until released, so that the next job waits queued.
class Blocker {
public:
    explicit Blocker(JobManager& manager) : m_gate(m_open.get_future().share()) {
        m_runner.setManager(&manager);
        auto gate = m_gate;
        m_runner.start("blocker", [gate](latmix::JobContext&) { gate.wait(); }, manager.budget());
    }
    ~Blocker() { release(); } // the runner's destructor waits for the job
    void release() {
        if (!m_released) m_open.set_value();
        m_released = true;
    }

private:
    std::promise<void> m_open;
    std::shared_future<void> m_gate;
    bool m_released = false;
    JobRunner m_runner;
};

} // namespace

class TestAnalysisView : public QObject {
    Q_OBJECT

    void tabs() {
        QTest::addColumn<QString>("tab");
        for (const char* t : {"activations", "weights", "comparison", "experts"}) QTest::newRow(t) << QString(t);
    }

private slots:
    void refusedWhileBusyCancelledQuietly_data() { tabs(); }
    void refusedWhileBusyCancelledQuietly() {
        QFETCH(QString, tab);
        JobManager manager;
        manager.setBudget(1);
        Tab t = openTab(tab, modelFor(tab));
        QVERIFY(t.button && t.button->isEnabled());
        t.view->runner()->setManager(&manager);
        QSignalSpy errors(t.view.get(), &AnalysisView::errorOccurred);
        QSignalSpy finished(t.view.get(), t.finished);
        Blocker blocker(manager);

        QString error;
        QVERIFY2(t.start(&error), qPrintable(error));
        QVERIFY(t.view->runner()->isQueued()); // behind the blocker
        QVERIFY(!t.button->isEnabled());
        QString refusal;
        QVERIFY(!t.start(&refusal));
        QVERIFY2(refusal.contains("still") || refusal.contains("already"), qPrintable(refusal));
        QCOMPARE(errors.size(), 1);
        QCOMPARE(errors.first().at(0).toString(), refusal);

        QPushButton* cancel = nullptr;
        for (auto* b : t.view->findChildren<QPushButton*>())
            if (b->objectName().endsWith(QLatin1String("CancelButton"))) cancel = b;
        QVERIFY(cancel && !cancel->isHidden() && cancel->isEnabled());
        cancel->click();
        QVERIFY(finished.wait(30000));
        QCOMPARE(finished.first().at(0).toBool(), false);
        QCOMPARE(finished.first().at(1).toString(), QStringLiteral("Cancelled"));
        QCOMPARE(errors.size(), 1); // a cancel is not an error
        QVERIFY(t.button->isEnabled());
        QVERIFY(cancel->isHidden());

        blocker.release(); // the next job runs once the blocker's thread is free
        QVERIFY2(t.start(&error), qPrintable(error));
        QVERIFY(finished.wait(120000));
        QVERIFY2(finished.last().at(0).toBool(), qPrintable(finished.last().at(1).toString()));
        QCOMPARE(errors.size(), 1);
        QVERIFY(t.button->isEnabled());
    }

    // Two changes of the tab's first choice while its job waits: one more job when it has
    // ended well (it starts in the finished handler, so nothing is queued after it); none when
    // it was cancelled.
    void changesWhileBusyRunOnce_data() {
        QTest::addColumn<QString>("tab");
        QTest::addColumn<QString>("choice");
        QTest::newRow("activations") << "activations" << "activationTransformCombo";
        QTest::newRow("weights") << "weights" << "weightLinearCombo";
    }
    void changesWhileBusyRunOnce() {
        QFETCH(QString, tab);
        QFETCH(QString, choice);
        JobManager manager;
        manager.setBudget(1);
        Tab t = openTab(tab, modelFor(tab));
        t.view->findChild<QCheckBox*>(tab == "activations" ? "activationAutoCheck" : "weightAutoCheck")->setChecked(true);
        t.view->runner()->setManager(&manager);
        auto* combo = t.view->findChild<QComboBox*>(choice);
        QVERIFY(combo && combo->count() >= 3);
        QSignalSpy finished(t.view.get(), t.finished);
        for (const bool cancel : {true, false}) {
            finished.clear();
            Blocker blocker(manager);
            QString error;
            QVERIFY2(t.start(&error), qPrintable(error));
            QVERIFY(t.view->runner()->isQueued());
            combo->setCurrentIndex((combo->currentIndex() + 1) % combo->count());
            combo->setCurrentIndex((combo->currentIndex() + 1) % combo->count());
            if (cancel) t.view->runner()->cancel();
            blocker.release();
            QVERIFY(finished.wait(120000));
            QCOMPARE(finished.first().at(0).toBool(), !cancel);
            if (!cancel) {
                QVERIFY(t.view->runner()->isRunning()); // the changes' one job
                QVERIFY(finished.wait(120000));
                QVERIFY2(finished.last().at(0).toBool(), qPrintable(finished.last().at(1).toString()));
            }
            QVERIFY(!t.view->runner()->isRunning());
            QCOMPARE(finished.size(), cancel ? 1 : 2);
        }
    }

    void failureSaysWhyOnce_data() { tabs(); }
    void failureSaysWhyOnce() {
        QFETCH(QString, tab);
        QTemporaryDir dir;
        const QString model = dir.filePath("model");
        std::filesystem::copy(modelFor(tab).toStdString(), model.toStdString(), std::filesystem::copy_options::recursive);
        Tab t = openTab(tab, model);
        QSignalSpy errors(t.view.get(), &AnalysisView::errorOccurred);
        QSignalSpy finished(t.view.get(), t.finished);
        // Opened, then the weights are gone: the job finds out on its worker thread.
        const QString weights = QDir(model).filePath("model.safetensors");
        QVERIFY(QFile::remove(weights));

        QString error;
        QVERIFY2(t.start(&error), qPrintable(error));
        QVERIFY(finished.wait(60000));
        QCOMPARE(finished.first().at(0).toBool(), false);
        const QString said = finished.first().at(1).toString();
        QVERIFY2(said.contains("failed: ") && said.contains("model.safetensors"), qPrintable(said));
        QCOMPARE(errors.size(), 1);
        QCOMPARE(errors.first().at(0).toString(), said);
        QVERIFY(t.button->isEnabled());
    }
};

QTEST_MAIN(TestAnalysisView)
#include "tst_analysisview.moc"
