#pragma once
// The application's jobs in one place, and one budget of libtorch threads shared by them.
//
// Every JobRunner registers its job here when it starts (JobRunner::setManager names another
// manager; tests make their own). A job asks for a number of threads (by default the whole
// budget) and waits, queued, until that many are free: the sum of the threads granted to
// running jobs never exceeds budget(), so two heavy jobs never run at once on all cores. The
// queue is strictly first in, first out: a job that would fit never overtakes an earlier one
// that does not, so none starves. A paused job keeps its threads.
//
// Ended jobs (finished, failed, cancelled) stay listed until clearFinished(), at most
// keptEndedJobs() of them (the oldest go first, with jobRemoved).
//
// Everything here runs on the thread the manager lives in (the UI thread), as do the runners.
#include <QList>
#include <QObject>
#include <QPointer>
#include <QString>

namespace latmix::gui {

class JobRunner;

enum class JobState { Queued, Running, Paused, Finished, Failed, Cancelled };

// "queued", "running", "paused", "finished", "failed", "cancelled" (translated).
QString jobStateText(JobState state);
// Queued, running or paused.
bool isActive(JobState state);
// "m:ss" under an hour, "h:mm:ss" from there; "" for a negative (unknown) time.
QString formatDuration(double seconds);

struct JobInfo {
    int id = 0; // > 0, unique in its manager
    QString title;
    JobState state = JobState::Queued;
    double fraction = 0;    // [0, 1], as the work last reported
    QString message;        // the work's last progress message
    double etaSeconds = -1; // < 0: unknown
    int threadsRequested = 0; // as asked: 0 is the whole budget
    int threadsGranted = 0;   // while running or paused; 0 while queued and once ended
    bool cancelRequested = false;
    QString error; // failed: the job's message; cancelled: "cancelled"
};

class JobManager : public QObject {
    Q_OBJECT

public:
    explicit JobManager(QObject* parent = nullptr);
    // Jobs still registered are released: a queued one runs unmanaged with the configured
    // threads. Their runners keep working.
    ~JobManager() override;

    // The application's manager: made on first use, a child of QCoreApplication (gone with it);
    // nullptr without a QCoreApplication. setInstance replaces it (tests); nullptr goes back to
    // one made on next use. The runners' next jobs register with the current one.
    static JobManager* instance();
    static void setInstance(JobManager* manager);

    // Threads shared by the jobs. setBudget(0) (the default) follows the thread count configured
    // for the process (latmix::threadCount() on this thread, which latmix::configureThreads
    // sets); a count > 0 fixes it.
    int budget() const;
    void setBudget(int threads);
    int threadsInUse() const; // granted to running and paused jobs

    QList<JobInfo> jobs() const; // in order of submission
    bool contains(int id) const;
    JobInfo job(int id) const; // id 0 when there is no such job

    // For a status-bar indicator.
    int activeCount() const;  // queued + running + paused
    int runningCount() const; // running + paused (they hold threads)
    int queuedCount() const;
    int pausedCount() const;
    // Mean fraction of the active jobs (queued ones count as 0); -1 with none.
    double overallFraction() const;
    // The longest ETA among the active jobs that know theirs; -1 when none does.
    double longestEtaSeconds() const;

    static int keptEndedJobs() { return 20; }

public slots:
    void cancel(int id); // a queued job ends without running its work; a running one at its next safe point
    void cancelAll();
    void clearFinished(); // forgets every ended job

signals:
    void jobAdded(int id);
    void jobChanged(int id);
    void jobRemoved(int id);
    void summaryChanged(); // after any of the three: the aggregate numbers may have changed

private:
    friend class JobRunner;
    struct Entry {
        JobInfo info;
        QPointer<JobRunner> runner;
        bool paused = false;
    };
    // From JobRunner, on this thread.
    int submit(JobRunner* runner, const QString& title, int threads);
    void schedule(); // grants queued jobs, in order, while the next one fits
    void jobProgressed(int id, double fraction, const QString& message, double etaSeconds);
    void jobPaused(int id, bool paused);
    void jobCancelRequested(int id);
    void jobEnded(int id, bool ok, const QString& error);

    Entry* find(int id);
    const Entry* find(int id) const;
    void changed(int id);
    void trimEnded();

    QList<Entry> m_jobs;
    int m_budget = 0;
    int m_nextId = 1;
};

} // namespace latmix::gui
