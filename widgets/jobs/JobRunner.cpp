#include "AtenHeaders.h"
#if AT_PARALLEL_OPENMP && defined(_OPENMP)
#include <omp.h>
#endif

#include "JobRunner.h"

#include "JobManager.h"
#include "util/Runtime.h"

#include "run/quantize/OptionTable.h"

#include <QElapsedTimer>
#include <QLabel>
#include <QMetaObject>
#include <QThread>

#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <utility>

namespace latmix::gui {

namespace {

// Gives the calling (worker) thread `threads` libtorch intra-op threads, and nothing else.
//
// libtorch's intra-op thread count is per thread, not per process (ATen/ParallelOpenMP.cpp, the
// same in 1.13 and 2.x): at::set_num_threads(n) stores n as the process default *and* sets the
// calling thread's OpenMP nthreads ICV (omp_set_num_threads; in MKL builds MKL's thread-local
// count too); at::get_num_threads() is the calling thread's omp_get_max_threads(). A thread's
// first parallel call (at::internal::lazy_init_num_threads, once per thread) copies the process
// default into that thread, overwriting whatever omp_set_num_threads had set there before. So
// latmix::configureThreads on the UI thread does not reach a worker that has started its
// parallel work, and at::set_num_threads on a worker would change the default of every thread
// started later (measured with libtorch 1.13: a fresh std::thread after a worker's
// at::set_num_threads(2) ran its parallel_for on 2 threads, the main thread kept its 4).
//
// So the worker first lets libtorch initialise it from the process default (at::get_num_threads
// does the lazy initialisation), then sets its own ICV only. Parallel regions a thread opens
// get their own OpenMP team sized by that thread's ICV, and the OpenMP OpenBLAS sizes each
// product by the calling thread's omp_get_max_threads(), so the job's loops and matrix products
// use `threads` threads and two jobs' teams together never exceed the manager's budget.
void useThreadsOnThisThread(int threads) {
    (void)at::get_num_threads(); // this thread's lazy initialisation, before we set our count
#if AT_MKL_ENABLED()
    // MKL's per-thread count is reachable only through at::set_num_threads; this also makes
    // `threads` the default of threads started later (each job's worker sets its own anyway).
    at::set_num_threads(threads);
#elif AT_PARALLEL_OPENMP && defined(_OPENMP)
    omp_set_num_threads(threads);
#else
    // The native backend has one process-wide pool: nothing is per thread. The budget still
    // keeps heavy jobs from running at once.
    (void)threads;
#endif
}

} // namespace

// The JobContext the core job sees: cancel flag read from the worker thread, progress posted
// to the runner's thread as queued calls, and the grant the worker waits for while queued.
class JobRunner::Context : public latmix::JobContext {
public:
    explicit Context(JobRunner* runner) : m_runner(runner) { m_clock.start(); }

    void progress(double fraction, const std::string& message) override {
        const qint64 now = m_clock.elapsed();
        if (fraction < 1.0 && now - m_lastPost < 50) return; // throttle, never drop the last one
        m_lastPost = now;
        const double busy = (now - pausedMs()) / 1000.0;
        const double eta = fraction > 0 ? busy * (1.0 - fraction) / fraction : -1.0;
        const QString text = QString::fromStdString(message);
        QPointer<JobRunner> runner = m_runner;
        QMetaObject::invokeMethod(
            m_runner,
            [runner, fraction, text, eta] {
                if (runner) runner->reportProgress(fraction, text, eta);
            },
            Qt::QueuedConnection);
    }
    // The job's safe point: blocks here while paused. The runner hears that the worker is held
    // (JobRunner::held) through the same queue as the job's earlier reports, so they all arrive first.
    bool cancelRequested() const override {
        if (m_paused.load() && !m_cancel.load()) {
            QPointer<JobRunner> runner = m_runner;
            QMetaObject::invokeMethod(
                m_runner, [runner] { if (runner) emit runner->held(); }, Qt::QueuedConnection);
            std::unique_lock<std::mutex> lock(m_mutex);
            m_wake.wait(lock, [this] { return !m_paused.load() || m_cancel.load(); });
        }
        return m_cancel.load();
    }
    void requestCancel() {
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            m_cancel = true;
        }
        m_wake.notify_all();
    }
    void setPaused(bool paused) {
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            if (paused == m_paused.load()) return;
            m_paused = paused;
            const qint64 now = m_clock.elapsed();
            if (paused) m_pausedSince = now;
            else m_pausedTotal += now - m_pausedSince;
        }
        m_wake.notify_all();
    }
    bool paused() const { return m_paused.load(); }

    // Manager's thread: the job may run with `threads` threads.
    void grant(int threads) {
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            m_granted = threads;
        }
        m_wake.notify_all();
    }
    int granted() const { return m_granted.load(); }
    // Worker: blocks while queued; returns the threads granted, or 0 when cancelled first. The
    // ETA's clock starts here: queued time is not work.
    int waitForGrant() {
        std::unique_lock<std::mutex> lock(m_mutex);
        m_wake.wait(lock, [this] { return m_granted.load() > 0 || m_cancel.load(); });
        if (m_cancel.load()) return 0;
        m_clock.restart();
        m_pausedTotal = 0;
        m_pausedSince = 0; // paused while queued: paused from the start
        return m_granted.load();
    }

private:
    qint64 pausedMs() const {
        std::lock_guard<std::mutex> lock(m_mutex);
        return m_pausedTotal + (m_paused.load() ? m_clock.elapsed() - m_pausedSince : 0);
    }

    JobRunner* m_runner;
    std::atomic<bool> m_cancel{false};
    std::atomic<bool> m_paused{false};
    std::atomic<int> m_granted{0};
    mutable std::mutex m_mutex;
    mutable std::condition_variable m_wake;
    qint64 m_pausedSince = 0, m_pausedTotal = 0;
    QElapsedTimer m_clock;
    qint64 m_lastPost = -1000;
};

JobRunner::JobRunner(QObject* parent) : QObject(parent) {}

JobRunner::~JobRunner() {
    if (m_thread) {
        m_context->requestCancel();
        m_thread->wait();
        delete m_thread;
        m_thread = nullptr;
        // onThreadDone will not run (this object is going): the manager hears it here.
        if (m_activeManager) m_activeManager->jobEnded(m_jobId, m_ok, m_error);
    }
}

void JobRunner::setManager(JobManager* manager) { m_manager = manager; }

JobManager* JobRunner::manager() const { return m_manager ? m_manager.data() : JobManager::instance(); }

bool JobRunner::start(const QString& title, Work work, int threads) {
    if (m_thread) return false;
    m_title = title;
    m_ok = false;
    m_error.clear();
    m_granted = 0;
    m_context = std::make_shared<Context>(this);
    auto context = m_context;
    m_thread = QThread::create([this, context, work = std::move(work)] {
        const int granted = context->waitForGrant();
        if (granted == 0) { // cancelled while queued: the work never runs
            m_error = QStringLiteral("cancelled");
            return;
        }
        useThreadsOnThisThread(granted);
        try {
            work(*context);
            m_ok = true;
        } catch (const latmix::JobCancelled&) {
            m_error = QStringLiteral("cancelled");
        } catch (const std::exception& e) { // a way out in the workbench's words ("a smaller Batch")
            m_error = QString::fromStdString(latmix::run::messageFor(e, latmix::run::Face::Workbench));
        } catch (...) {
            m_error = QStringLiteral("unknown error");
        }
        // What the job's tensors freed goes back to the system (issue 71: the workbench kept 2.3 GB
        // after its jobs on a 1B model had ended, against 0.3 GB after opening it).
        latmix::releaseFreeHostMemory();
    });
    // finished is emitted from the worker; the queued slot runs here, after every progress
    // report the job posted (same queue, posted earlier).
    connect(m_thread, &QThread::finished, this, &JobRunner::onThreadDone, Qt::QueuedConnection);
    emit started(title);
    m_thread->start(); // waits in waitForGrant until the manager (below) grants its threads
    m_activeManager = manager();
    if (m_activeManager) {
        m_jobId = m_activeManager->submit(this, title, threads);
        m_activeManager->schedule(); // grants at once when its threads are free
    } else { // no application object (and so no manager): run with the configured threads
        m_jobId = 0;
        grant(0, latmix::threadCount());
    }
    return true;
}

void JobRunner::grant(int id, int threads) {
    if (!m_thread || id != m_jobId || m_granted > 0) return;
    m_granted = threads;
    m_context->grant(threads);
    emit threadsGranted(threads);
}

void JobRunner::managerGone() {
    m_activeManager = nullptr;
    if (m_thread && m_granted == 0) grant(m_jobId, latmix::threadCount());
}

void JobRunner::reportProgress(double fraction, const QString& message, double etaSeconds) {
    if (m_activeManager) m_activeManager->jobProgressed(m_jobId, fraction, message, etaSeconds);
    emit progressed(fraction, message, etaSeconds);
}

void JobRunner::cancel() {
    if (!m_context) return;
    m_context->requestCancel();
    if (m_thread && m_activeManager) m_activeManager->jobCancelRequested(m_jobId);
}

void JobRunner::setPaused(bool paused) {
    if (!m_context) return;
    m_context->setPaused(paused);
    if (m_thread && m_activeManager) m_activeManager->jobPaused(m_jobId, paused);
}

void JobRunner::showProgressIn(QLabel* status) {
    connect(this, &JobRunner::progressed, status, [status](double fraction, const QString& message, double) {
        status->setText(QStringLiteral("%1% %2").arg(int(fraction * 100)).arg(message));
    });
}

bool JobRunner::isPaused() const { return m_context && m_thread && m_context->paused(); }

int JobRunner::grantedThreads(const latmix::JobContext& job) {
    const auto* context = dynamic_cast<const Context*>(&job);
    return context ? context->granted() : 0;
}

void JobRunner::onThreadDone() {
    m_thread->wait();
    delete m_thread;
    m_thread = nullptr;
    // The manager first: its threads are free and a view's finished handler sees the job ended.
    if (m_activeManager) m_activeManager->jobEnded(m_jobId, m_ok, m_error);
    emit finished(m_ok, m_error);
}

} // namespace latmix::gui
