// The GUI's job runner: core jobs run off the UI thread, progress and completion arrive as
// signals in order, cancel and errors are reported, one job at a time; every job is listed by
// the application's JobManager and runs with the libtorch threads it was granted.
#include "JobManager.h"
#include "JobRunner.h"
#include "util/Runtime.h"

#include <QSignalSpy>
#include <QThread>
#include <QtTest>

#include <atomic>
#include <stdexcept>

using latmix::gui::JobManager;
using latmix::gui::JobRunner;
using latmix::gui::JobState;

class TestJobRunner : public QObject {
    Q_OBJECT
private slots:
    void reportsProgressThenFinishes() {
        JobRunner runner;
        QSignalSpy progress(&runner, &JobRunner::progressed);
        QSignalSpy done(&runner, &JobRunner::finished);
        Qt::HANDLE worker = nullptr;
        QVERIFY(runner.start("count", [&](latmix::JobContext& job) {
            worker = QThread::currentThreadId();
            for (int i = 1; i <= 5; ++i) {
                QThread::msleep(60); // above the throttle: every report gets through
                job.progress(i / 5.0, "step " + std::to_string(i));
            }
        }));
        QVERIFY(runner.isRunning());
        QVERIFY(!runner.start("second", [](latmix::JobContext&) {})); // one at a time
        QVERIFY(done.wait(5000));
        QVERIFY(worker != QThread::currentThreadId());
        QCOMPARE(done.first().at(0).toBool(), true);
        QCOMPARE(progress.size(), 5);
        QCOMPARE(progress.last().at(0).toDouble(), 1.0);
        QCOMPARE(progress.last().at(1).toString(), QString("step 5"));
        QCOMPARE(progress.at(2).at(1).toString(), QString("step 3"));
        QVERIFY(progress.at(2).at(2).toDouble() >= 0); // an ETA once progress is known
        QVERIFY(!runner.isRunning());
    }

    void outcomes_data() {
        QTest::addColumn<int>("kind");
        QTest::addColumn<bool>("ok");
        QTest::addColumn<QString>("error");
        QTest::newRow("cancelled") << 0 << false << "cancelled";
        QTest::newRow("core error") << 1 << false << "bad checkpoint /x: config.json missing";
    }
    void outcomes() {
        QFETCH(int, kind);
        QFETCH(bool, ok);
        QFETCH(QString, error);
        JobRunner runner;
        QSignalSpy done(&runner, &JobRunner::finished);
        runner.start("job", [kind](latmix::JobContext& job) {
            if (kind == 1) throw std::runtime_error("bad checkpoint /x: config.json missing");
            for (;;) { // until cancelled
                QThread::msleep(5);
                job.checkCancelled();
            }
        });
        if (kind == 0) {
            QThread::msleep(30);
            runner.cancel();
        }
        QVERIFY(done.wait(5000));
        QCOMPARE(done.first().at(0).toBool(), ok);
        QCOMPARE(done.first().at(1).toString(), error);
    }

    // A runner registers its job with the application's manager without being told, and its work
    // runs with the threads granted: the whole budget by default, or what it asked for.
    void registersWithTheApplicationsManager_data() {
        QTest::addColumn<int>("asked");
        QTest::addColumn<int>("granted");
        QTest::newRow("whole budget") << 0 << 3;
        QTest::newRow("one thread") << 1 << 1;
    }
    void registersWithTheApplicationsManager() {
        QFETCH(int, asked);
        QFETCH(int, granted);
        JobManager* manager = JobManager::instance();
        QVERIFY(manager != nullptr);
        QCOMPARE(JobManager::instance(), manager); // one per application
        manager->setBudget(3);
        JobRunner runner;
        QSignalSpy done(&runner, &JobRunner::finished);
        QSignalSpy grantedSpy(&runner, &JobRunner::threadsGranted);
        std::atomic<int> seen{-1}, seenGranted{-1};
        const int uiThreads = latmix::threadCount();
        QVERIFY(runner.start("listed", [&](latmix::JobContext& job) {
            seen = latmix::threadCount();
            seenGranted = JobRunner::grantedThreads(job);
            job.progress(0.5, "half");
        }, asked));
        QVERIFY(manager->contains(runner.jobId()));
        QCOMPARE(manager->job(runner.jobId()).title, QString("listed"));
        QVERIFY(done.wait(5000));
        QCOMPARE(done.first().at(0).toBool(), true);
        QCOMPARE(grantedSpy.size(), 1);
        QCOMPARE(grantedSpy.first().at(0).toInt(), granted);
        QCOMPARE(seen.load(), granted);
        QCOMPARE(seenGranted.load(), granted);
        QCOMPARE(latmix::threadCount(), uiThreads); // the UI thread's count is its own
        QCOMPARE(manager->job(runner.jobId()).state, JobState::Finished);
        QCOMPARE(manager->threadsInUse(), 0);
        QCOMPARE(JobRunner::grantedThreads(latmix::silentJob()), 0); // not a runner's context
        manager->setBudget(0);
        manager->clearFinished();
    }

    void destructorCancelsRunningJob() {
        std::atomic<bool> running{false}, sawCancel{false};
        {
            JobRunner runner;
            runner.start("long", [&](latmix::JobContext& job) {
                running = true;
                while (!job.cancelRequested()) QThread::msleep(5);
                sawCancel = true;
            });
            QTRY_VERIFY(running.load()); // the work itself runs (a queued job would end unrun)
        } // must not hang or crash
        QVERIFY(sawCancel);
    }
};

QTEST_GUILESS_MAIN(TestJobRunner)
#include "tst_jobrunner.moc"
