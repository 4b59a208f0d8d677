#include "JobManager.h"

#include "JobRunner.h"
#include "util/Runtime.h"

#include <QCoreApplication>
#include <QVector>

#include <algorithm>
#include <cmath>

namespace latmix::gui {

QString jobStateText(JobState state) {
    switch (state) {
    case JobState::Queued: return JobManager::tr("queued");
    case JobState::Running: return JobManager::tr("running");
    case JobState::Paused: return JobManager::tr("paused");
    case JobState::Finished: return JobManager::tr("finished");
    case JobState::Failed: return JobManager::tr("failed");
    case JobState::Cancelled: return JobManager::tr("cancelled");
    }
    return {};
}

bool isActive(JobState state) {
    return state == JobState::Queued || state == JobState::Running || state == JobState::Paused;
}

QString formatDuration(double seconds) {
    if (!(seconds >= 0) || !std::isfinite(seconds)) return {};
    const long long s = std::llround(seconds);
    const auto two = [](long long v) { return QStringLiteral("%1").arg(v, 2, 10, QLatin1Char('0')); };
    if (s >= 3600) return QStringLiteral("%1:%2:%3").arg(s / 3600).arg(two((s % 3600) / 60), two(s % 60));
    return QStringLiteral("%1:%2").arg(s / 60).arg(two(s % 60));
}

namespace {
QPointer<JobManager>& current() {
    static QPointer<JobManager> manager;
    return manager;
}
} // namespace

JobManager::JobManager(QObject* parent) : QObject(parent) {}

JobManager::~JobManager() {
    for (Entry& e : m_jobs)
        if (isActive(e.info.state) && e.runner) e.runner->managerGone();
}

JobManager* JobManager::instance() {
    QPointer<JobManager>& manager = current();
    if (!manager) {
        QCoreApplication* app = QCoreApplication::instance();
        if (!app) return nullptr;
        auto* made = new JobManager;
        made->moveToThread(app->thread());
        made->setParent(app);
        manager = made;
    }
    return manager;
}

void JobManager::setInstance(JobManager* manager) { current() = manager; }

int JobManager::budget() const { return m_budget > 0 ? m_budget : std::max(1, latmix::threadCount()); }

void JobManager::setBudget(int threads) {
    m_budget = std::max(0, threads);
    schedule();
    emit summaryChanged();
}

int JobManager::threadsInUse() const {
    int n = 0;
    for (const Entry& e : m_jobs) n += e.info.threadsGranted;
    return n;
}

QList<JobInfo> JobManager::jobs() const {
    QList<JobInfo> list;
    list.reserve(m_jobs.size());
    for (const Entry& e : m_jobs) list.append(e.info);
    return list;
}

bool JobManager::contains(int id) const { return find(id) != nullptr; }

JobInfo JobManager::job(int id) const {
    const Entry* e = find(id);
    return e ? e->info : JobInfo{};
}

int JobManager::activeCount() const {
    return static_cast<int>(std::count_if(m_jobs.begin(), m_jobs.end(), [](const Entry& e) { return isActive(e.info.state); }));
}

int JobManager::runningCount() const { return activeCount() - queuedCount(); }

int JobManager::queuedCount() const {
    return static_cast<int>(
        std::count_if(m_jobs.begin(), m_jobs.end(), [](const Entry& e) { return e.info.state == JobState::Queued; }));
}

int JobManager::pausedCount() const {
    return static_cast<int>(
        std::count_if(m_jobs.begin(), m_jobs.end(), [](const Entry& e) { return e.info.state == JobState::Paused; }));
}

double JobManager::overallFraction() const {
    double sum = 0;
    int n = 0;
    for (const Entry& e : m_jobs)
        if (isActive(e.info.state)) {
            sum += e.info.state == JobState::Queued ? 0.0 : e.info.fraction;
            ++n;
        }
    return n ? sum / n : -1.0;
}

double JobManager::longestEtaSeconds() const {
    double eta = -1;
    for (const Entry& e : m_jobs)
        if (isActive(e.info.state) && e.info.state != JobState::Queued && e.info.etaSeconds >= 0)
            eta = std::max(eta, e.info.etaSeconds);
    return eta;
}

void JobManager::cancel(int id) {
    Entry* e = find(id);
    if (!e || !isActive(e->info.state)) return;
    if (e->runner) {
        e->runner->cancel(); // comes back through jobCancelRequested
    } else { // its runner is gone without telling (cannot happen through JobRunner): forget it
        e->info.state = JobState::Cancelled;
        e->info.threadsGranted = 0;
        e->info.error = QStringLiteral("cancelled");
        changed(id);
        schedule();
    }
}

void JobManager::cancelAll() {
    // Every one flagged first, so that no queued job is granted threads while the others are
    // being cancelled.
    QVector<int> ids;
    for (Entry& e : m_jobs)
        if (isActive(e.info.state)) {
            e.info.cancelRequested = true;
            ids.append(e.info.id);
        }
    for (int id : ids) cancel(id);
}

void JobManager::clearFinished() {
    QVector<int> gone;
    for (const Entry& e : m_jobs)
        if (!isActive(e.info.state)) gone.append(e.info.id);
    m_jobs.erase(std::remove_if(m_jobs.begin(), m_jobs.end(), [](const Entry& e) { return !isActive(e.info.state); }),
                 m_jobs.end());
    for (int id : gone) emit jobRemoved(id);
    if (!gone.isEmpty()) emit summaryChanged();
}

int JobManager::submit(JobRunner* runner, const QString& title, int threads) {
    Entry e;
    e.info.id = m_nextId++;
    e.info.title = title;
    e.info.threadsRequested = std::max(0, threads);
    e.runner = runner;
    m_jobs.append(e);
    emit jobAdded(e.info.id);
    emit summaryChanged();
    return e.info.id;
}

void JobManager::schedule() {
    const int total = budget();
    int free = total - threadsInUse();
    struct Grant {
        int id, threads;
        QPointer<JobRunner> runner;
    };
    QVector<Grant> grants;
    for (Entry& e : m_jobs) {
        if (e.info.state != JobState::Queued || e.info.cancelRequested || !e.runner) continue;
        const int need = e.info.threadsRequested <= 0 ? total : std::min(e.info.threadsRequested, total);
        if (need > free) break; // first in, first out: nobody overtakes the head of the queue
        free -= need;
        e.info.threadsGranted = need;
        e.info.state = e.paused ? JobState::Paused : JobState::Running;
        grants.append({e.info.id, need, e.runner});
    }
    // The state is consistent before anyone hears of it (a listener may call back in).
    for (const Grant& g : grants) {
        if (g.runner) g.runner->grant(g.id, g.threads);
        changed(g.id);
    }
}

void JobManager::jobProgressed(int id, double fraction, const QString& message, double etaSeconds) {
    Entry* e = find(id);
    if (!e || !isActive(e->info.state)) return;
    e->info.fraction = std::clamp(fraction, 0.0, 1.0);
    e->info.message = message;
    e->info.etaSeconds = etaSeconds;
    changed(id);
}

void JobManager::jobPaused(int id, bool paused) {
    Entry* e = find(id);
    if (!e || !isActive(e->info.state) || e->paused == paused) return;
    e->paused = paused;
    if (e->info.state != JobState::Queued) e->info.state = paused ? JobState::Paused : JobState::Running;
    changed(id);
}

void JobManager::jobCancelRequested(int id) {
    Entry* e = find(id);
    if (!e || !isActive(e->info.state)) return;
    e->info.cancelRequested = true;
    changed(id);
    if (e->info.state == JobState::Queued) schedule(); // the ones behind it may fit now
}

void JobManager::jobEnded(int id, bool ok, const QString& error) {
    Entry* e = find(id);
    if (!e || !isActive(e->info.state)) return;
    e->info.state = ok ? JobState::Finished : error == QLatin1String("cancelled") ? JobState::Cancelled : JobState::Failed;
    e->info.threadsGranted = 0;
    e->info.error = ok ? QString() : error;
    e->info.etaSeconds = -1;
    if (ok) e->info.fraction = 1.0;
    e->runner = nullptr;
    changed(id);
    trimEnded();
    schedule();
}

JobManager::Entry* JobManager::find(int id) {
    for (Entry& e : m_jobs)
        if (e.info.id == id) return &e;
    return nullptr;
}

const JobManager::Entry* JobManager::find(int id) const {
    for (const Entry& e : m_jobs)
        if (e.info.id == id) return &e;
    return nullptr;
}

void JobManager::changed(int id) {
    emit jobChanged(id);
    emit summaryChanged();
}

void JobManager::trimEnded() {
    int ended = static_cast<int>(
        std::count_if(m_jobs.begin(), m_jobs.end(), [](const Entry& e) { return !isActive(e.info.state); }));
    while (ended > keptEndedJobs()) {
        const auto oldest =
            std::find_if(m_jobs.begin(), m_jobs.end(), [](const Entry& e) { return !isActive(e.info.state); });
        const int id = oldest->info.id;
        m_jobs.erase(oldest);
        --ended;
        emit jobRemoved(id);
        emit summaryChanged();
    }
}

} // namespace latmix::gui
