#pragma once
// Runs one core job (capture, evaluation, training, export: anything written against
// latmix::JobContext) on a worker thread and turns its progress and completion into Qt
// signals on the thread that owns the runner, so the UI thread never blocks on core work
// (QGIS's task-manager idea, reduced to what the workbench needs).
//
// Every job is registered with a JobManager (JobManager::instance() unless setManager named
// another): it lists the application's jobs and shares one budget of libtorch threads among
// them. A started job first waits, queued, until the manager grants it its threads (its worker
// thread blocked; cancel ends it without running the work), then runs with exactly that many
// intra-op threads on its worker thread (JobRunner.cpp says how).
#include "util/Job.h"

#include <QObject>
#include <QPointer>
#include <QString>

#include <functional>
#include <memory>

class QLabel;
class QThread;

namespace latmix::gui {

class JobManager;

class JobRunner : public QObject {
    Q_OBJECT

public:
    using Work = std::function<void(latmix::JobContext&)>;

    explicit JobRunner(QObject* parent = nullptr);
    ~JobRunner() override; // asks a running (or queued) job to cancel and waits for it

    // The manager the next job registers with; nullptr (the default): JobManager::instance()
    // at the time of start(). Must live in this runner's thread.
    void setManager(JobManager* manager);
    JobManager* manager() const;

    // True from start() until finished is emitted: queued or running.
    bool isRunning() const { return m_thread != nullptr; }
    // Started but still waiting for its threads.
    bool isQueued() const { return m_thread != nullptr && m_granted == 0; }
    QString title() const { return m_title; }
    // The current (or last) job's id in its manager; 0 before the first start.
    int jobId() const { return m_jobId; }
    // Threads granted to the current job; 0 while queued or idle.
    int grantedThreads() const { return m_thread ? m_granted : 0; }

    // Starts work on a new thread; returns false (and does nothing) while a job runs.
    // threads: the libtorch intra-op threads the job needs; 0 asks for the manager's whole
    // budget (what a heavy libtorch job should do), more than the budget is clamped to it.
    bool start(const QString& title, Work work, int threads = 0);

    bool isPaused() const;

    // The label shows each progress report of this runner's jobs as "42% message".
    void showProgressIn(QLabel* status);

    // Inside the work: the threads its runner was granted (also what latmix::threadCount()
    // returns on the worker thread); 0 for a context that is not a JobRunner's.
    static int grantedThreads(const latmix::JobContext& job);

public slots:
    void cancel(); // the job stops at its next checkCancelled(); a queued job ends at once
    // Pausing holds the job at its next checkCancelled() (a safe point: between training steps,
    // layers, windows) until resumed or cancelled; paused time does not count towards the ETA.
    // A paused job keeps its threads.
    void setPaused(bool paused);

signals:
    void started(const QString& title); // when start() is called, before the job is granted threads
    // When the job leaves the queue and its work begins, with that many threads.
    void threadsGranted(int threads);
    // fraction in [0, 1]; etaSeconds < 0 while unknown. Throttled to ~20 per second, the last
    // report of a job always arrives.
    void progressed(double fraction, const QString& message, double etaSeconds);
    // A paused job reached its safe point and waits there: no report follows until it is resumed
    // (or cancelled). Every report the job made before arrives before this signal.
    void held();
    // ok == false: error holds the job's message, or "cancelled".
    void finished(bool ok, const QString& error);

private:
    friend class JobManager;
    class Context;
    void onThreadDone();
    void reportProgress(double fraction, const QString& message, double etaSeconds);
    // From the manager: the current job (id) may run with that many threads.
    void grant(int id, int threads);
    // From the manager's destructor: nobody will grant or list this job any more.
    void managerGone();

    QThread* m_thread = nullptr;
    std::shared_ptr<Context> m_context;
    QPointer<JobManager> m_manager;       // as set; null: the application's
    QPointer<JobManager> m_activeManager; // the one the current job is registered with
    QString m_title;
    QString m_error;
    bool m_ok = false;
    int m_jobId = 0;
    int m_granted = 0;
};

} // namespace latmix::gui
