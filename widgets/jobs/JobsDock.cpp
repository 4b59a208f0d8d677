#include "JobsDock.h"

#include "JobManager.h"

#include <QAbstractButton>
#include <QBrush>
#include <QColor>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QMouseEvent>
#include <QProgressBar>
#include <QPushButton>
#include <QStringList>
#include <QTableWidget>
#include <QTableWidgetItem>
#include <QToolButton>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

namespace latmix::gui {

namespace {

// The state as shown: a job asked to stop says so until it has.
QString stateText(const JobInfo& job) {
    if (isActive(job.state) && job.cancelRequested) return JobsDock::tr("cancelling…");
    return jobStateText(job.state);
}

int percent(double fraction) { return static_cast<int>(std::lround(std::clamp(fraction, 0.0, 1.0) * 100.0)); }

QTableWidgetItem* readOnlyItem(const QString& text = {}) {
    auto* item = new QTableWidgetItem(text);
    item->setFlags(Qt::ItemIsEnabled | Qt::ItemIsSelectable);
    return item;
}

} // namespace

JobsDock::JobsDock(JobManager* manager, QWidget* parent)
    : QWidget(parent), m_manager(manager ? manager : JobManager::instance()) {
    setObjectName(QStringLiteral("jobsDock"));

    m_table = new QTableWidget(0, ColumnCount, this);
    m_table->setObjectName(QStringLiteral("jobsTable"));
    m_table->setHorizontalHeaderLabels({tr("Job"), tr("State"), tr("Progress"), tr("ETA"), tr("Threads"), QString()});
    m_table->verticalHeader()->hide();
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->setSelectionMode(QAbstractItemView::NoSelection);
    m_table->setFocusPolicy(Qt::NoFocus);
    m_table->setShowGrid(false);
    m_table->setAlternatingRowColors(true);
    m_table->setWordWrap(false);
    m_table->setTextElideMode(Qt::ElideRight); // the title first, the message after it
    QHeaderView* header = m_table->horizontalHeader();
    header->setSectionResizeMode(TitleColumn, QHeaderView::Stretch);
    for (int c : {StateColumn, EtaColumn, ThreadsColumn, CancelColumn})
        header->setSectionResizeMode(c, QHeaderView::ResizeToContents);
    header->setSectionResizeMode(ProgressColumn, QHeaderView::Fixed);
    header->resizeSection(ProgressColumn, 100);
    header->setMinimumSectionSize(40);
    header->setDefaultAlignment(Qt::AlignLeft | Qt::AlignVCenter);
    for (int c : {EtaColumn, ThreadsColumn}) m_table->horizontalHeaderItem(c)->setTextAlignment(Qt::AlignCenter);
    m_table->horizontalHeaderItem(ThreadsColumn)->setToolTip(tr("libtorch threads granted to the job (of the shared budget)"));

    m_summary = new QLabel(this);
    m_summary->setObjectName(QStringLiteral("jobsSummaryLabel"));
    m_cancelAll = new QPushButton(tr("Cancel &all"), this);
    m_cancelAll->setObjectName(QStringLiteral("cancelAllButton"));
    m_cancelAll->setToolTip(tr("Cancel every queued and running job"));
    m_clear = new QPushButton(tr("C&lear finished"), this);
    m_clear->setObjectName(QStringLiteral("clearFinishedButton"));
    m_clear->setToolTip(tr("Remove the finished, failed and cancelled jobs from the list"));

    auto* buttons = new QHBoxLayout;
    buttons->addWidget(m_summary, 1);
    buttons->addWidget(m_cancelAll);
    buttons->addWidget(m_clear);
    auto* column = new QVBoxLayout(this);
    column->setContentsMargins(4, 4, 4, 4);
    column->addWidget(m_table, 1);
    column->addLayout(buttons);

    if (m_manager) {
        connect(m_manager, &JobManager::jobAdded, this, &JobsDock::addRow);
        connect(m_manager, &JobManager::jobChanged, this, &JobsDock::updateRow);
        connect(m_manager, &JobManager::jobRemoved, this, &JobsDock::removeRow);
        connect(m_manager, &JobManager::summaryChanged, this, &JobsDock::updateSummary);
        connect(m_cancelAll, &QPushButton::clicked, m_manager, &JobManager::cancelAll);
        connect(m_clear, &QPushButton::clicked, m_manager, &JobManager::clearFinished);
        for (const JobInfo& job : m_manager->jobs()) addRow(job.id);
    }
    updateSummary();
}

int JobsDock::rowOf(int id) const {
    for (int row = 0; row < m_table->rowCount(); ++row)
        if (m_table->item(row, TitleColumn)->data(Qt::UserRole).toInt() == id) return row;
    return -1;
}

QProgressBar* JobsDock::progressBar(int id) const {
    const int row = rowOf(id);
    QWidget* cell = row < 0 ? nullptr : m_table->cellWidget(row, ProgressColumn);
    return cell ? cell->findChild<QProgressBar*>() : nullptr;
}

QAbstractButton* JobsDock::cancelButton(int id) const {
    const int row = rowOf(id);
    QWidget* cell = row < 0 ? nullptr : m_table->cellWidget(row, CancelColumn);
    return cell ? cell->findChild<QAbstractButton*>() : nullptr;
}

void JobsDock::addRow(int id) {
    if (!m_manager || rowOf(id) >= 0) return;
    const int row = m_table->rowCount();
    m_table->insertRow(row);
    auto* title = readOnlyItem();
    title->setData(Qt::UserRole, id);
    m_table->setItem(row, TitleColumn, title);
    m_table->setItem(row, StateColumn, readOnlyItem());
    m_table->setItem(row, EtaColumn, readOnlyItem());
    m_table->setItem(row, ThreadsColumn, readOnlyItem());
    m_table->item(row, ThreadsColumn)->setTextAlignment(Qt::AlignCenter);
    m_table->item(row, EtaColumn)->setTextAlignment(Qt::AlignCenter);

    auto* bar = new QProgressBar;
    bar->setObjectName(QStringLiteral("jobProgress_%1").arg(id));
    bar->setRange(0, 100);
    bar->setTextVisible(true);
    bar->setMaximumHeight(m_table->verticalHeader()->defaultSectionSize() - 6);
    auto* barCell = new QWidget(m_table); // the bar centred in its cell, a little inset
    auto* barLayout = new QHBoxLayout(barCell);
    barLayout->setContentsMargins(4, 2, 4, 2);
    barLayout->addWidget(bar);
    m_table->setCellWidget(row, ProgressColumn, barCell);

    auto* cancel = new QToolButton;
    cancel->setObjectName(QStringLiteral("jobCancel_%1").arg(id));
    cancel->setText(tr("Cancel"));
    connect(cancel, &QToolButton::clicked, this, [this, id] {
        if (m_manager) m_manager->cancel(id);
    });
    auto* cancelCell = new QWidget(m_table);
    auto* cancelLayout = new QHBoxLayout(cancelCell);
    cancelLayout->setContentsMargins(2, 2, 4, 2);
    cancelLayout->addWidget(cancel);
    m_table->setCellWidget(row, CancelColumn, cancelCell);
    updateRow(id);
}

void JobsDock::updateRow(int id) {
    const int row = rowOf(id);
    if (!m_manager || row < 0) return;
    const JobInfo job = m_manager->job(id);
    const bool active = isActive(job.state);

    QStringList tip{job.title};
    if (!job.message.isEmpty()) tip << job.message;
    if (!job.error.isEmpty() && job.state == JobState::Failed) tip << tr("Error: %1").arg(job.error);
    QTableWidgetItem* title = m_table->item(row, TitleColumn);
    title->setText(job.message.isEmpty() || !active ? job.title : tr("%1 — %2").arg(job.title, job.message));
    title->setToolTip(tip.join(QLatin1Char('\n')));

    QTableWidgetItem* state = m_table->item(row, StateColumn);
    state->setText(stateText(job));
    state->setToolTip(job.state == JobState::Failed ? job.error : QString());
    state->setForeground(job.state == JobState::Failed ? QBrush(QColor(0xc6, 0x28, 0x28)) : QBrush());

    const bool running = job.state == JobState::Running || job.state == JobState::Paused;
    m_table->item(row, EtaColumn)->setText(running ? formatDuration(job.etaSeconds) : QString());
    const int need = job.threadsRequested > 0 ? std::min(job.threadsRequested, m_manager->budget()) : m_manager->budget();
    QTableWidgetItem* threads = m_table->item(row, ThreadsColumn);
    threads->setText(running ? QString::number(job.threadsGranted)
                             : job.state == JobState::Queued ? tr("needs %1").arg(need) : QString());

    if (QProgressBar* bar = progressBar(id)) {
        bar->setValue(percent(job.fraction));
        bar->setEnabled(active || job.state == JobState::Finished);
        bar->setToolTip(job.message);
    }
    if (QAbstractButton* cancel = cancelButton(id)) {
        // The view shows and hides cell widgets itself (as they scroll in and out): an ended
        // job's button goes (deleted later: this may run in its own clicked handler).
        if (!active) {
            m_table->removeCellWidget(row, CancelColumn);
            return;
        }
        cancel->setEnabled(!job.cancelRequested);
        cancel->setToolTip(job.state == JobState::Queued ? tr("Remove %1 from the queue").arg(job.title)
                                                         : tr("Stop %1 at its next safe point").arg(job.title));
    }
}

void JobsDock::removeRow(int id) {
    const int row = rowOf(id);
    if (row >= 0) m_table->removeRow(row);
}

void JobsDock::updateSummary() {
    if (!m_manager) {
        m_summary->clear();
        return;
    }
    m_summary->setText(tr("Threads: %1 of %2 in use").arg(m_manager->threadsInUse()).arg(m_manager->budget()));
    m_summary->setToolTip(tr("Jobs share one budget of libtorch threads: a job waits, queued, until the threads it "
                             "needs are free"));
    m_cancelAll->setEnabled(m_manager->activeCount() > 0);
    m_clear->setEnabled(m_manager->jobs().size() > m_manager->activeCount());
}

JobStatusIndicator::JobStatusIndicator(JobManager* manager, QWidget* parent)
    : QWidget(parent), m_manager(manager ? manager : JobManager::instance()) {
    setObjectName(QStringLiteral("jobStatusIndicator"));
    m_label = new QLabel(this);
    m_label->setObjectName(QStringLiteral("jobStatusText"));
    auto* row = new QHBoxLayout(this);
    row->setContentsMargins(4, 0, 4, 0);
    row->addWidget(m_label);
    setCursor(Qt::PointingHandCursor);
    if (m_manager) connect(m_manager, &JobManager::summaryChanged, this, &JobStatusIndicator::refresh);
    refresh();
}

QString JobStatusIndicator::text() const { return m_label->text(); }

QString JobStatusIndicator::summaryText(const JobManager& manager) {
    const int n = manager.activeCount();
    if (n == 0) return tr("No jobs");
    QString text = n == 1 ? tr("1 job") : tr("%1 jobs").arg(n);
    QStringList parts;
    if (const int q = manager.queuedCount()) parts << tr("%1 queued").arg(q);
    if (const int p = manager.pausedCount()) parts << tr("%1 paused").arg(p);
    if (!parts.isEmpty()) text += QStringLiteral(" (%1)").arg(parts.join(QStringLiteral(", ")));
    text += QStringLiteral(" · %1%").arg(percent(manager.overallFraction()));
    const double eta = manager.longestEtaSeconds();
    if (eta >= 0) text += QStringLiteral(" · ") + tr("ETA %1").arg(formatDuration(eta));
    return text;
}

void JobStatusIndicator::refresh() {
    if (!m_manager) {
        m_label->setText(tr("No jobs"));
        return;
    }
    m_label->setText(summaryText(*m_manager));
    QStringList lines;
    for (const JobInfo& job : m_manager->jobs()) {
        if (!isActive(job.state)) continue;
        QString line = QStringLiteral("%1 — %2").arg(job.title, stateText(job));
        if (job.state != JobState::Queued) line += QStringLiteral(", %1%").arg(percent(job.fraction));
        if (job.state == JobState::Running && job.etaSeconds >= 0)
            line += QStringLiteral(", ") + tr("ETA %1").arg(formatDuration(job.etaSeconds));
        lines << line;
    }
    if (lines.isEmpty()) lines << tr("No jobs are running");
    lines << tr("Click to show the Jobs panel");
    setToolTip(lines.join(QLatin1Char('\n')));
}

void JobStatusIndicator::mousePressEvent(QMouseEvent* event) {
    if (event->button() == Qt::LeftButton) event->accept(); // the release comes here then
    else QWidget::mousePressEvent(event);
}

void JobStatusIndicator::mouseReleaseEvent(QMouseEvent* event) {
    if (event->button() == Qt::LeftButton && rect().contains(event->position().toPoint())) {
        emit showJobsRequested();
        event->accept();
        return;
    }
    QWidget::mouseReleaseEvent(event);
}

} // namespace latmix::gui
