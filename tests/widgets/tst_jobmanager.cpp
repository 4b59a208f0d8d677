// The job manager: every JobRunner's job listed in one place, one budget of libtorch threads
// shared by them (a job waits, queued, until its threads are free; first in, first out), cancel
// of queued and running jobs; the Jobs dock and the status-bar indicator show what it knows.
// The works are synthetic: each waits on a gate the test opens, so what runs at once is decided
// by the manager alone, not by timing.
#include "JobManager.h"
#include "JobRunner.h"
#include "JobsDock.h"
#include "WidgetLookup.h"
#include "util/Runtime.h"

#include <QAbstractButton>
#include <QLabel>
#include <QList>
#include <QProgressBar>
#include <QPushButton>
#include <QRegularExpression>
#include <QSemaphore>
#include <QSignalSpy>
#include <QTableWidget>
#include <QtTest>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

using namespace latmix::gui;

namespace {

// What the works saw, shared with the test.
struct Probe {
    std::mutex mutex;
    std::vector<int> startOrder;     // indices of the works, in the order they began
    std::map<int, int> seenThreads;  // latmix::threadCount() on the worker thread
    std::map<int, int> seenGranted;  // JobRunner::grantedThreads(job)
    std::atomic<int> running{0};
    std::atomic<int> maxRunning{0};

    bool started(int i) {
        std::lock_guard<std::mutex> lock(mutex);
        return std::find(startOrder.begin(), startOrder.end(), i) != startOrder.end();
    }
    int startedCount() {
        std::lock_guard<std::mutex> lock(mutex);
        return static_cast<int>(startOrder.size());
    }
};

// A work that records itself, reports `fraction` once, then waits until its gate opens (or
// until it is cancelled).
JobRunner::Work gatedWork(std::shared_ptr<Probe> probe, int index, std::shared_ptr<QSemaphore> gate,
                          double fraction = -1) {
    return [probe, index, gate, fraction](latmix::JobContext& job) {
        {
            std::lock_guard<std::mutex> lock(probe->mutex);
            probe->startOrder.push_back(index);
            probe->seenThreads[index] = latmix::threadCount();
            probe->seenGranted[index] = JobRunner::grantedThreads(job);
        }
        const int now = ++probe->running;
        int max = probe->maxRunning.load();
        while (now > max && !probe->maxRunning.compare_exchange_weak(max, now)) {
        }
        struct Leave {
            Probe& p;
            ~Leave() { --p.running; }
        } leave{*probe};
        if (fraction >= 0) job.progress(fraction, "layer 2 of 5");
        while (!gate->tryAcquire(1, 10)) job.checkCancelled();
    };
}

// n runners on one manager, each with its gate.
struct Jobs {
    std::shared_ptr<Probe> probe = std::make_shared<Probe>();
    std::vector<int> grantOrder; // indices, in the order the manager granted their threads (outlives the runners)
    std::vector<std::unique_ptr<JobRunner>> runners;
    std::vector<std::shared_ptr<QSemaphore>> gates;
    std::vector<std::unique_ptr<QSignalSpy>> done;

    JobRunner& add(JobManager& manager, const QString& title, int threads, double fraction = -1) {
        const int i = static_cast<int>(runners.size());
        runners.push_back(std::make_unique<JobRunner>());
        gates.push_back(std::make_shared<QSemaphore>());
        JobRunner& r = *runners.back();
        r.setManager(&manager);
        done.push_back(std::make_unique<QSignalSpy>(&r, &JobRunner::finished));
        QObject::connect(&r, &JobRunner::threadsGranted, &r, [this, i] { grantOrder.push_back(i); });
        r.start(title, gatedWork(probe, i, gates.back(), fraction), threads);
        return r;
    }
    int id(int i) const { return runners[i]->jobId(); }
    void release(int i) { gates[i]->release(); }
};

} // namespace

class TestJobManager : public QObject {
    Q_OBJECT

private slots:
    // Jobs asking threads of a budget run at most as many at once as fit, in submission order,
    // each seeing exactly the threads it was granted; the others wait, queued, with none.
    void budgetLimitsConcurrency_data() {
        QTest::addColumn<int>("budget");
        QTest::addColumn<QList<int>>("requests"); // 0: the whole budget
        QTest::addColumn<QList<int>>("granted");
        QTest::addColumn<int>("maxAtOnce");
        QTest::newRow("2: [2, 2] one at a time") << 2 << QList<int>{2, 2} << QList<int>{2, 2} << 1;
        QTest::newRow("2: [1, 1] both at once") << 2 << QList<int>{1, 1} << QList<int>{1, 1} << 2;
        QTest::newRow("4: [1, 2, 1] all at once") << 4 << QList<int>{1, 2, 1} << QList<int>{1, 2, 1} << 3;
        QTest::newRow("3: [1, 2, 1] two at once") << 3 << QList<int>{1, 2, 1} << QList<int>{1, 2, 1} << 2;
        // The third would fit beside the first but does not overtake the second: no starvation.
        QTest::newRow("2: [1, 2, 1] no overtaking") << 2 << QList<int>{1, 2, 1} << QList<int>{1, 2, 1} << 1;
        QTest::newRow("4: [3, 3, 1]") << 4 << QList<int>{3, 3, 1} << QList<int>{3, 3, 1} << 2;
        QTest::newRow("4: [all, 1]") << 4 << QList<int>{0, 1} << QList<int>{4, 1} << 1;
        QTest::newRow("2: [5, 1] clamped to the budget") << 2 << QList<int>{5, 1} << QList<int>{2, 1} << 1;
    }
    void budgetLimitsConcurrency() {
        QFETCH(int, budget);
        QFETCH(QList<int>, requests);
        QFETCH(QList<int>, granted);
        QFETCH(int, maxAtOnce);
        JobManager manager;
        manager.setBudget(budget);
        QCOMPARE(manager.budget(), budget);
        Jobs jobs;
        for (int i = 0; i < requests.size(); ++i) jobs.add(manager, QString("job %1").arg(i), requests[i]);
        QCOMPARE(manager.jobs().size(), requests.size());

        std::vector<bool> released(requests.size(), false);
        for (int round = 0; round < requests.size(); ++round) {
            // Every job the manager granted threads to begins its work; no other does.
            auto holding = [&] {
                int n = 0;
                for (int i = 0; i < requests.size(); ++i)
                    if (manager.job(jobs.id(i)).state != JobState::Queued) ++n;
                return n;
            };
            QTRY_COMPARE(jobs.probe->startedCount(), holding());
            QVERIFY(manager.threadsInUse() <= budget);
            int inUse = 0;
            for (int i = 0; i < requests.size(); ++i) {
                const JobInfo job = manager.job(jobs.id(i));
                if (job.state == JobState::Queued) {
                    QVERIFY2(!jobs.probe->started(i), qPrintable(QString("queued job %1 ran").arg(i)));
                    QCOMPARE(job.threadsGranted, 0);
                    QVERIFY(jobs.runners[i]->isQueued());
                    QVERIFY(jobs.runners[i]->isRunning()); // busy: a view cannot start another
                } else if (job.state == JobState::Running) {
                    QCOMPARE(job.threadsGranted, granted[i]);
                    QCOMPARE(jobs.runners[i]->grantedThreads(), granted[i]);
                    inUse += job.threadsGranted;
                }
            }
            QCOMPARE(manager.threadsInUse(), inUse);
            // Let the oldest running work finish.
            int next = -1;
            {
                std::lock_guard<std::mutex> lock(jobs.probe->mutex);
                for (int i : jobs.probe->startOrder)
                    if (!released[i]) {
                        next = i;
                        break;
                    }
            }
            QVERIFY(next >= 0);
            released[next] = true;
            jobs.release(next);
            QVERIFY(jobs.done[next]->wait(5000));
            QCOMPARE(jobs.done[next]->first().at(0).toBool(), true);
            QCOMPARE(manager.job(jobs.id(next)).state, JobState::Finished);
        }
        QCOMPARE(jobs.probe->maxRunning.load(), maxAtOnce);
        std::vector<int> fifo(requests.size());
        for (int i = 0; i < requests.size(); ++i) fifo[i] = i;
        QCOMPARE(jobs.grantOrder, fifo); // first in, first out
        for (int i = 0; i < requests.size(); ++i) {
            QCOMPARE(jobs.probe->seenThreads[i], granted[i]); // libtorch's count on the worker thread
            QCOMPARE(jobs.probe->seenGranted[i], granted[i]);
        }
        QCOMPARE(manager.threadsInUse(), 0);
        QCOMPARE(manager.activeCount(), 0);
    }

    // A queued job cancelled (from the manager, or through its runner as a view does) ends at
    // once with "cancelled", its work never runs, the running job is untouched.
    void cancelQueued_data() {
        QTest::addColumn<bool>("throughManager");
        QTest::newRow("manager") << true;
        QTest::newRow("runner") << false;
    }
    void cancelQueued() {
        QFETCH(bool, throughManager);
        JobManager manager;
        manager.setBudget(2);
        Jobs jobs;
        jobs.add(manager, "first", 2);
        JobRunner& second = jobs.add(manager, "second", 2);
        QTRY_VERIFY(jobs.probe->started(0));
        QCOMPARE(manager.job(jobs.id(1)).state, JobState::Queued);
        if (throughManager) manager.cancel(jobs.id(1));
        else second.cancel();
        QVERIFY(jobs.done[1]->wait(5000)); // while the first still holds every thread
        QCOMPARE(jobs.done[1]->first().at(0).toBool(), false);
        QCOMPARE(jobs.done[1]->first().at(1).toString(), QString("cancelled"));
        QCOMPARE(manager.job(jobs.id(1)).state, JobState::Cancelled);
        QCOMPARE(manager.job(jobs.id(0)).state, JobState::Running);
        QVERIFY(!jobs.probe->started(1));
        jobs.release(0);
        QVERIFY(jobs.done[0]->wait(5000));
        QCOMPARE(jobs.done[0]->first().at(0).toBool(), true);
        QVERIFY(!jobs.probe->started(1));
        QCOMPARE(jobs.probe->startedCount(), 1);
    }

    // Cancelling the head of the queue lets the next one in when it fits.
    void cancelHeadOfQueue() {
        JobManager manager;
        manager.setBudget(2);
        Jobs jobs;
        jobs.add(manager, "small", 1);
        jobs.add(manager, "big", 2);
        jobs.add(manager, "small behind", 1);
        QTRY_VERIFY(jobs.probe->started(0));
        QCOMPARE(manager.job(jobs.id(2)).state, JobState::Queued); // waits behind "big"
        manager.cancel(jobs.id(1));
        QTRY_VERIFY(jobs.probe->started(2));
        QCOMPARE(manager.job(jobs.id(0)).state, JobState::Running);
        QCOMPARE(manager.threadsInUse(), 2);
        QVERIFY(jobs.done[1]->size() == 1 || jobs.done[1]->wait(5000));
        QVERIFY(!jobs.probe->started(1));
        jobs.release(0);
        jobs.release(2);
        QTRY_COMPARE(manager.activeCount(), 0);
    }

    void cancelAll() {
        JobManager manager;
        manager.setBudget(1);
        Jobs jobs;
        for (int i = 0; i < 3; ++i) jobs.add(manager, QString("job %1").arg(i), 1);
        QTRY_VERIFY(jobs.probe->started(0));
        QCOMPARE(manager.runningCount(), 1);
        QCOMPARE(manager.queuedCount(), 2);
        manager.cancelAll();
        for (int i = 0; i < 3; ++i) {
            QVERIFY(jobs.done[i]->size() == 1 || jobs.done[i]->wait(5000));
            QCOMPARE(jobs.done[i]->first().at(1).toString(), QString("cancelled"));
            QCOMPARE(manager.job(jobs.id(i)).state, JobState::Cancelled);
        }
        QCOMPARE(jobs.probe->startedCount(), 1); // the queued ones never ran
        QCOMPARE(manager.activeCount(), 0);
        QCOMPARE(manager.threadsInUse(), 0);
    }

    // Ended jobs stay listed (with their outcome) until cleared; active ones stay.
    void endedJobsStayUntilCleared() {
        JobManager manager;
        manager.setBudget(2);
        JobRunner ok, bad;
        ok.setManager(&manager);
        bad.setManager(&manager);
        QSignalSpy okDone(&ok, &JobRunner::finished), badDone(&bad, &JobRunner::finished);
        QVERIFY(ok.start("fine", [](latmix::JobContext&) {}, 1));
        QVERIFY(bad.start("broken", [](latmix::JobContext&) { throw std::runtime_error("config.json missing"); }, 1));
        QVERIFY(okDone.size() == 1 || okDone.wait(5000));
        QVERIFY(badDone.size() == 1 || badDone.wait(5000));
        Jobs jobs;
        jobs.add(manager, "still running", 1);
        QCOMPARE(manager.jobs().size(), 3);
        const JobInfo fine = manager.job(ok.jobId()), broken = manager.job(bad.jobId());
        QCOMPARE(fine.state, JobState::Finished);
        QCOMPARE(fine.fraction, 1.0);
        QCOMPARE(broken.state, JobState::Failed);
        QCOMPARE(broken.error, QString("config.json missing"));
        QSignalSpy removed(&manager, &JobManager::jobRemoved);
        manager.clearFinished();
        QCOMPARE(removed.size(), 2);
        QCOMPARE(manager.jobs().size(), 1);
        QCOMPARE(manager.jobs().first().title, QString("still running"));
        jobs.release(0);
        QVERIFY(jobs.done[0]->wait(5000));
    }

    // At most keptEndedJobs() ended jobs are kept; the oldest go first.
    void endedJobsAreBounded() {
        JobManager manager;
        manager.setBudget(1);
        const int n = JobManager::keptEndedJobs() + 2;
        JobRunner runner;
        runner.setManager(&manager);
        QSignalSpy done(&runner, &JobRunner::finished);
        QList<int> ids;
        for (int i = 0; i < n; ++i) {
            QVERIFY(runner.start(QString("job %1").arg(i), [](latmix::JobContext&) {}));
            ids << runner.jobId();
            QVERIFY(done.wait(5000));
        }
        const QList<JobInfo> listed = manager.jobs();
        QCOMPARE(listed.size(), JobManager::keptEndedJobs());
        QVERIFY(!manager.contains(ids[0]) && !manager.contains(ids[1]));
        QCOMPARE(listed.first().id, ids[2]);
        QCOMPARE(listed.last().id, ids.last());
    }

    // Pause keeps the runner's meaning (held at the next safe point, threads kept) and shows.
    void pauseShows() {
        JobManager manager;
        manager.setBudget(2);
        Jobs jobs;
        JobRunner& r = jobs.add(manager, "paused one", 2);
        QTRY_VERIFY(jobs.probe->started(0));
        r.setPaused(true);
        QVERIFY(r.isPaused());
        QCOMPARE(manager.job(r.jobId()).state, JobState::Paused);
        QCOMPARE(manager.pausedCount(), 1);
        QCOMPARE(manager.threadsInUse(), 2);
        r.setPaused(false);
        QCOMPARE(manager.job(r.jobId()).state, JobState::Running);
        jobs.release(0);
        QVERIFY(jobs.done[0]->wait(5000));
    }

    // A runner destroyed while queued takes its job out (cancelled) without running it.
    void destroyedWhileQueued() {
        JobManager manager;
        manager.setBudget(1);
        Jobs jobs;
        jobs.add(manager, "holder", 1);
        jobs.add(manager, "doomed", 1);
        QTRY_VERIFY(jobs.probe->started(0));
        const int doomed = jobs.id(1);
        jobs.done[1].reset();
        jobs.runners[1].reset(); // must not hang
        QCOMPARE(manager.job(doomed).state, JobState::Cancelled);
        QVERIFY(!jobs.probe->started(1));
        jobs.release(0);
        QVERIFY(jobs.done[0]->wait(5000));
        QCOMPARE(manager.activeCount(), 0);
    }

    // Progress reported by the work reaches the manager's list and its aggregate numbers.
    void aggregates() {
        JobManager manager;
        manager.setBudget(2);
        QCOMPARE(manager.overallFraction(), -1.0);
        Jobs jobs;
        jobs.add(manager, "calibration", 2, 0.4);
        jobs.add(manager, "export", 2);
        QTRY_COMPARE(manager.job(jobs.id(0)).fraction, 0.4);
        const JobInfo first = manager.job(jobs.id(0));
        QCOMPARE(first.message, QString("layer 2 of 5"));
        QVERIFY(first.etaSeconds >= 0); // known once some progress is
        QCOMPARE(manager.activeCount(), 2);
        QCOMPARE(manager.runningCount(), 1);
        QCOMPARE(manager.queuedCount(), 1);
        QCOMPARE(manager.overallFraction(), 0.2);
        QCOMPARE(manager.longestEtaSeconds(), first.etaSeconds);
        manager.cancelAll();
        QTRY_COMPARE(manager.activeCount(), 0);
    }

    void formatDuration_data() {
        QTest::addColumn<double>("seconds");
        QTest::addColumn<QString>("text");
        QTest::newRow("zero") << 0.0 << "0:00";
        QTest::newRow("rounded") << 59.4 << "0:59";
        QTest::newRow("m:ss") << 83.0 << "1:23";
        QTest::newRow("an hour") << 3600.0 << "1:00:00";
        QTest::newRow("h:mm:ss") << 3725.0 << "1:02:05";
        QTest::newRow("unknown") << -1.0 << "";
    }
    void formatDuration() {
        QFETCH(double, seconds);
        QFETCH(QString, text);
        QCOMPARE(latmix::gui::formatDuration(seconds), text);
    }

    // The status-bar summary for no job, one job, a running and a queued job.
    void indicatorText_data() {
        QTest::addColumn<int>("jobCount");
        QTest::addColumn<QString>("pattern");
        QTest::newRow("none") << 0 << "^No jobs$";
        QTest::newRow("one") << 1 << "^1 job · 40% · ETA \\d+:\\d\\d$";
        QTest::newRow("two, one queued") << 2 << "^2 jobs \\(1 queued\\) · 20% · ETA \\d+:\\d\\d$";
    }
    void indicatorText() {
        QFETCH(int, jobCount);
        QFETCH(QString, pattern);
        JobManager manager;
        manager.setBudget(2);
        JobStatusIndicator indicator(&manager);
        Jobs jobs;
        for (int i = 0; i < jobCount; ++i) jobs.add(manager, QString("job %1").arg(i), 2, i == 0 ? 0.4 : -1);
        if (jobCount > 0) QTRY_COMPARE(manager.job(jobs.id(0)).fraction, 0.4);
        QVERIFY2(QRegularExpression(pattern).match(indicator.text()).hasMatch(), qPrintable(indicator.text()));
        for (int i = 0; i < jobCount; ++i) QVERIFY(indicator.toolTip().contains(QString("job %1").arg(i)));
        manager.cancelAll();
        QTRY_COMPARE(manager.activeCount(), 0);
        QCOMPARE(indicator.text(), QString("No jobs"));
    }

    void indicatorClickAsksForTheDock() {
        JobManager manager;
        JobStatusIndicator indicator(&manager);
        indicator.show();
        QVERIFY(QTest::qWaitForWindowExposed(&indicator));
        QSignalSpy asked(&indicator, &JobStatusIndicator::showJobsRequested);
        QTest::mouseClick(&indicator, Qt::LeftButton);
        QCOMPARE(asked.size(), 1);
        QTest::mouseClick(&indicator, Qt::RightButton);
        QCOMPARE(asked.size(), 1);
    }

    // The dock's rows are the manager's jobs: titles, states, progress bars at the reported
    // fraction x 100, ETA and threads; a row's Cancel button cancels that job.
    void dockShowsAndCancels() {
        JobManager manager;
        manager.setBudget(2);
        Jobs jobs;
        jobs.add(manager, "before the dock", 1);
        QTRY_VERIFY(jobs.probe->started(0));
        JobsDock dock(&manager);
        QCOMPARE(dock.objectName(), QString("jobsDock"));
        QCOMPARE(dock.table()->rowCount(), 1); // jobs listed before the dock existed are there
        jobs.release(0);
        QVERIFY(jobs.done[0]->wait(5000));
        QCOMPARE(dock.table()->item(0, JobsDock::StateColumn)->text(), QString("finished"));
        QCOMPARE(dock.progressBar(jobs.id(0))->value(), 100);
        QVERIFY(!dock.cancelButton(jobs.id(0))); // an ended job has none
        QVERIFY(latmix::test::child<QPushButton>(&dock, "clearFinishedButton")->isEnabled());
        latmix::test::child<QPushButton>(&dock, "clearFinishedButton")->click();
        QCOMPARE(dock.table()->rowCount(), 0);
        QVERIFY(!latmix::test::child<QPushButton>(&dock, "clearFinishedButton")->isEnabled());

        jobs.add(manager, "Calibration LATMiX-LU", 2, 0.4);
        jobs.add(manager, "Export", 2, 0.25);
        dock.resize(700, 240);
        dock.show();
        QVERIFY(QTest::qWaitForWindowExposed(&dock));
        const int running = jobs.id(1), queued = jobs.id(2);
        QTRY_COMPARE(dock.progressBar(running)->value(), 40);
        QCOMPARE(dock.table()->rowCount(), 2);
        QCOMPARE(dock.rowOf(running), 0);
        QCOMPARE(dock.rowOf(queued), 1);
        QVERIFY(dock.table()->item(0, JobsDock::TitleColumn)->text().startsWith("Calibration LATMiX-LU"));
        QVERIFY(dock.table()->item(0, JobsDock::TitleColumn)->text().contains("layer 2 of 5"));
        QCOMPARE(dock.table()->item(1, JobsDock::TitleColumn)->text(), QString("Export"));
        QCOMPARE(dock.table()->item(0, JobsDock::StateColumn)->text(), QString("running"));
        QCOMPARE(dock.table()->item(1, JobsDock::StateColumn)->text(), QString("queued"));
        QCOMPARE(dock.progressBar(queued)->value(), 0);
        QVERIFY(QRegularExpression("^\\d+:\\d\\d$").match(dock.table()->item(0, JobsDock::EtaColumn)->text()).hasMatch());
        QCOMPARE(dock.table()->item(1, JobsDock::EtaColumn)->text(), QString());
        QCOMPARE(dock.table()->item(0, JobsDock::ThreadsColumn)->text(), QString("2"));
        QCOMPARE(dock.table()->item(1, JobsDock::ThreadsColumn)->text(), QString("needs 2"));
        QCOMPARE(dock.findChild<QLabel*>("jobsSummaryLabel")->text(), QString("Threads: 2 of 2 in use"));
        QVERIFY(dock.cancelButton(running)->isVisible() && dock.cancelButton(queued)->isVisible());

        // Cancel the queued one from its row: it ends, its work never ran, the other runs on.
        QTest::mouseClick(dock.cancelButton(queued), Qt::LeftButton);
        QVERIFY(jobs.done[2]->size() == 1 || jobs.done[2]->wait(5000));
        QCOMPARE(jobs.done[2]->first().at(1).toString(), QString("cancelled"));
        QCOMPARE(dock.table()->item(1, JobsDock::StateColumn)->text(), QString("cancelled"));
        QVERIFY(!dock.cancelButton(queued));
        QVERIFY(!jobs.probe->started(2));
        QCOMPARE(dock.table()->item(0, JobsDock::StateColumn)->text(), QString("running"));

        // Then the running one.
        QTest::mouseClick(dock.cancelButton(running), Qt::LeftButton);
        QVERIFY(jobs.done[1]->size() == 1 || jobs.done[1]->wait(5000));
        QCOMPARE(jobs.done[1]->first().at(1).toString(), QString("cancelled"));
        QCOMPARE(dock.table()->item(0, JobsDock::StateColumn)->text(), QString("cancelled"));
        QCOMPARE(dock.progressBar(running)->value(), 40); // where it stopped
        QVERIFY(!latmix::test::child<QPushButton>(&dock, "cancelAllButton")->isEnabled());
        QCOMPARE(dock.findChild<QLabel*>("jobsSummaryLabel")->text(), QString("Threads: 0 of 2 in use"));
    }

    void dockCancelAll() {
        JobManager manager;
        manager.setBudget(1);
        JobsDock dock(&manager);
        Jobs jobs;
        for (int i = 0; i < 3; ++i) jobs.add(manager, QString("job %1").arg(i), 1);
        QTRY_VERIFY(jobs.probe->started(0));
        QVERIFY(latmix::test::child<QPushButton>(&dock, "cancelAllButton")->isEnabled());
        latmix::test::child<QPushButton>(&dock, "cancelAllButton")->click();
        QTRY_COMPARE(manager.activeCount(), 0);
        for (int i = 0; i < 3; ++i) QCOMPARE(dock.table()->item(i, JobsDock::StateColumn)->text(), QString("cancelled"));
        QCOMPARE(jobs.probe->startedCount(), 1);
    }
};

QTEST_MAIN(TestJobManager)
#include "tst_jobmanager.moc"
