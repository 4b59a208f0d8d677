#include "JobRunner.h"

#include <QMetaObject>
#include <QPointer>

#include <exception>

namespace latmix::gui {

// The JobContext the core job sees: cancel flag read from the worker thread, progress posted
// to the runner's thread as queued calls.
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
                if (runner) emit runner->progressed(fraction, text, eta);
            },
            Qt::QueuedConnection);
    }
    // The job's safe point: blocks here while paused.
    bool cancelRequested() const override {
        if (m_paused.load() && !m_cancel.load()) {
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

private:
    qint64 pausedMs() const {
        std::lock_guard<std::mutex> lock(m_mutex);
        return m_pausedTotal + (m_paused.load() ? m_clock.elapsed() - m_pausedSince : 0);
    }

    JobRunner* m_runner;
    std::atomic<bool> m_cancel{false};
    std::atomic<bool> m_paused{false};
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
    }
}

bool JobRunner::start(const QString& title, Work work) {
    if (m_thread) return false;
    m_title = title;
    m_ok = false;
    m_error.clear();
    m_context = std::make_shared<Context>(this);
    auto context = m_context;
    m_thread = QThread::create([this, context, work = std::move(work)] {
        try {
            work(*context);
            m_ok = true;
        } catch (const latmix::JobCancelled&) {
            m_error = QStringLiteral("cancelled");
        } catch (const std::exception& e) {
            m_error = QString::fromLocal8Bit(e.what());
        } catch (...) {
            m_error = QStringLiteral("unknown error");
        }
    });
    // finished is emitted from the worker; the queued slot runs here, after every progress
    // report the job posted (same queue, posted earlier).
    connect(m_thread, &QThread::finished, this, &JobRunner::onThreadDone, Qt::QueuedConnection);
    emit started(title);
    m_thread->start();
    return true;
}

void JobRunner::cancel() {
    if (m_context) m_context->requestCancel();
}

void JobRunner::setPaused(bool paused) {
    if (m_context) m_context->setPaused(paused);
}

bool JobRunner::isPaused() const { return m_context && m_thread && m_context->paused(); }

void JobRunner::onThreadDone() {
    m_thread->wait();
    delete m_thread;
    m_thread = nullptr;
    emit finished(m_ok, m_error);
}

} // namespace latmix::gui
