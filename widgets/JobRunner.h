#pragma once
// Runs one core job (capture, evaluation, training, export: anything written against
// latmix::JobContext) on a worker thread and turns its progress and completion into Qt
// signals on the thread that owns the runner, so the UI thread never blocks on core work
// (QGIS's task-manager idea, reduced to what the workbench needs).
#include "util/Job.h"

#include <QElapsedTimer>
#include <QObject>
#include <QString>
#include <QThread>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <functional>
#include <memory>

namespace latmix::gui {

class JobRunner : public QObject {
    Q_OBJECT

public:
    using Work = std::function<void(latmix::JobContext&)>;

    explicit JobRunner(QObject* parent = nullptr);
    ~JobRunner() override; // asks a running job to cancel and waits for it

    bool isRunning() const { return m_thread != nullptr; }
    QString title() const { return m_title; }

    // Starts work on a new thread; returns false (and does nothing) while a job runs.
    bool start(const QString& title, Work work);

    bool isPaused() const;

public slots:
    void cancel(); // the job stops at its next checkCancelled()
    // Pausing holds the job at its next checkCancelled() (a safe point: between training steps,
    // layers, windows) until resumed or cancelled; paused time does not count towards the ETA.
    void setPaused(bool paused);

signals:
    void started(const QString& title);
    // fraction in [0, 1]; etaSeconds < 0 while unknown. Throttled to ~20 per second, the last
    // report of a job always arrives.
    void progressed(double fraction, const QString& message, double etaSeconds);
    // ok == false: error holds the job's message, or "cancelled".
    void finished(bool ok, const QString& error);

private:
    class Context;
    void onThreadDone();

    QThread* m_thread = nullptr;
    std::shared_ptr<Context> m_context;
    QString m_title;
    QString m_error;
    bool m_ok = false;
};

} // namespace latmix::gui
