#pragma once
// What the JobManager knows, shown: JobsDock lists the jobs (title, state, progress bar, ETA,
// threads, a Cancel button for each queued or running one), to be put in a QDockWidget;
// JobStatusIndicator is the one-line summary for the status bar ("2 jobs (1 queued) · 20% ·
// ETA 1:23"), the jobs in its tooltip; a click on it asks for the dock.
#include "JobManager.h" // QPointer<JobManager> members need the complete type

#include <QPointer>
#include <QString>
#include <QWidget>

class QAbstractButton;
class QLabel;
class QMouseEvent;
class QProgressBar;
class QPushButton;
class QTableWidget;

namespace latmix::gui {


class JobsDock : public QWidget {
    Q_OBJECT

public:
    enum Column { TitleColumn, StateColumn, ProgressColumn, EtaColumn, ThreadsColumn, CancelColumn, ColumnCount };

    // manager: nullptr is JobManager::instance().
    explicit JobsDock(JobManager* manager, QWidget* parent = nullptr);
    explicit JobsDock(QWidget* parent = nullptr) : JobsDock(nullptr, parent) {}

    JobManager* manager() const { return m_manager; }
    QTableWidget* table() const { return m_table; }
    // The row showing job id (rows follow the order of submission), -1 when none does.
    int rowOf(int id) const;
    QProgressBar* progressBar(int id) const;
    QAbstractButton* cancelButton(int id) const; // nullptr once the job ended

private:
    void addRow(int id);
    void updateRow(int id);
    void removeRow(int id);
    void updateSummary();

    QPointer<JobManager> m_manager;
    QTableWidget* m_table;
    QLabel* m_summary;
    QPushButton* m_cancelAll;
    QPushButton* m_clear;
};

// For QStatusBar::addPermanentWidget.
class JobStatusIndicator : public QWidget {
    Q_OBJECT

public:
    explicit JobStatusIndicator(JobManager* manager, QWidget* parent = nullptr);
    explicit JobStatusIndicator(QWidget* parent = nullptr) : JobStatusIndicator(nullptr, parent) {}

    QString text() const;
    // "No jobs", "1 job · 42% · ETA 1:23", "2 jobs (1 queued) · 20% · ETA 1:23".
    static QString summaryText(const JobManager& manager);

signals:
    void showJobsRequested(); // clicked

protected:
    void mousePressEvent(QMouseEvent* event) override;
    void mouseReleaseEvent(QMouseEvent* event) override;

private:
    void refresh();

    QPointer<JobManager> m_manager;
    QLabel* m_label;
};

} // namespace latmix::gui
