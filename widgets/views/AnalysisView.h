#pragma once
// What the analysis tabs (activations, weights, transform comparison, expert load) share, decided
// here once: one core job at a time on the tab's own JobRunner, its progress in the form's status
// line; a request that cannot start, or a job that failed, said in that line and raised as
// errorOccurred (the main window's banner; a cancelled job is not an error); the tab's plots in
// the palette's colours, again whenever the palette changes (View › Theme); "Update on every
// change", for the tabs that offer it.
#include "JobRunner.h"

#include <QList>
#include <QString>
#include <QWidget>

#include <functional>

class QCheckBox;
class QCustomPlot;
class QFormLayout;
class QLabel;
class QPushButton;

namespace latmix::gui {

class AnalysisView : public QWidget {
    Q_OBJECT

public:
    JobRunner* runner() const { return m_runner; }

signals:
    void errorOccurred(const QString& message);

protected:
    // busyRefusal: why a request is refused while a job runs ("The weights are still being loaded").
    AnalysisView(QWidget* parent, const QString& busyRefusal);

    // Once the form is built: the line that shows progress, refusals and failures, and the job's
    // Cancel button right under it (its name: the status line's with "CancelButton" for "Status").
    void setStatusLine(QLabel* status);
    QLabel* statusLine() const { return m_status; }
    // Once the plots are built: drawn in the palette's colours now and after every change.
    void setPlots(const QList<QCustomPlot*>& plots);

    // Why a request cannot start: in the status line, in *error and as errorOccurred; false.
    bool refuse(const QString& why, QString* error);
    // While a job runs: refuse(busyRefusal) and true; otherwise false.
    bool refusedWhileBusy(QString* error);

    struct Job {
        QString title;           // the Jobs dock's name for it
        JobRunner::Work work;    // runs on the worker thread
        QString busyText;        // the status line until the first progress report ("Loading…")
        QString failure;         // "Weights failed": the status line reads "Weights failed: <why>"
        QList<QWidget*> controls; // disabled while it runs
    };
    // Starts job, or refuses as refusedWhileBusy does. When it has ended, on this thread: its
    // controls enabled, the status line cleared (ok), "Cancelled", or the failure said (and
    // errorOccurred), then ended(ok, the status line's text).
    bool startJob(Job job, std::function<void(bool ok, const QString& status)> ended, QString* error);

    // "Update on every change" (checked) as the last row of form; update is what a change runs.
    void addUpdateOnChange(QFormLayout* form, const QString& objectName, std::function<void()> update);
    // A setting changed: with the box checked, update() now or, while a job runs, once it has
    // ended well (however many changes came meanwhile).
    void settingChanged();

    void changeEvent(QEvent* event) override;

private:
    JobRunner* m_runner;
    QString m_busyRefusal;
    QLabel* m_status = nullptr;
    QPushButton* m_cancel = nullptr;
    QList<QCustomPlot*> m_plots;
    QCheckBox* m_updateOnChange = nullptr;
    std::function<void()> m_update;
    bool m_changedWhileBusy = false;
};

} // namespace latmix::gui
