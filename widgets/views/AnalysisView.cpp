#include "AnalysisView.h"

#include "PlotStyle.h"

#include <QCheckBox>
#include <QEvent>
#include <QFormLayout>
#include <QBoxLayout>
#include <QLabel>
#include <QPushButton>

#include <utility>

namespace latmix::gui {

AnalysisView::AnalysisView(QWidget* parent, const QString& busyRefusal)
    : QWidget(parent), m_runner(new JobRunner(this)), m_busyRefusal(busyRefusal) {}

void AnalysisView::setStatusLine(QLabel* status) {
    m_status = status;
    m_runner->showProgressIn(status);
    // The job's own Cancel, under its status line and shown while it runs (issue 71: the views had
    // none; the Jobs dock lists them too). "comparisonStatus" -> "comparisonCancelButton".
    m_cancel = new QPushButton(tr("Cancel"), status->parentWidget());
    QString name = status->objectName();
    name.replace(QStringLiteral("Status"), QString());
    m_cancel->setObjectName(name + QStringLiteral("CancelButton"));
    m_cancel->setToolTip(tr("Stop this job at its next safe point"));
    m_cancel->hide();
    if (auto* box = qobject_cast<QBoxLayout*>(status->parentWidget() ? status->parentWidget()->layout() : nullptr);
        box && box->indexOf(status) >= 0)
        box->insertWidget(box->indexOf(status) + 1, m_cancel);
    connect(m_cancel, &QPushButton::clicked, this, [this] {
        m_cancel->setEnabled(false);
        m_cancel->setText(tr("Cancelling…"));
        m_runner->cancel();
    });
}

void AnalysisView::setPlots(const QList<QCustomPlot*>& plots) {
    m_plots = plots;
    PlotStyle::restyle(m_plots, palette());
}

void AnalysisView::changeEvent(QEvent* event) {
    QWidget::changeEvent(event);
    if (event->type() == QEvent::PaletteChange) PlotStyle::restyle(m_plots, palette());
}

void AnalysisView::addUpdateOnChange(QFormLayout* form, const QString& objectName, std::function<void()> update) {
    m_updateOnChange = new QCheckBox(tr("Update on every change"), form->parentWidget());
    m_updateOnChange->setObjectName(objectName);
    m_updateOnChange->setChecked(true);
    form->addRow(m_updateOnChange);
    m_update = std::move(update);
}

void AnalysisView::settingChanged() {
    if (!m_updateOnChange || !m_updateOnChange->isChecked()) return;
    if (m_runner->isRunning())
        m_changedWhileBusy = true;
    else
        m_update();
}

bool AnalysisView::refuse(const QString& why, QString* error) {
    if (error) *error = why;
    m_status->setText(why);
    emit errorOccurred(why);
    return false;
}

bool AnalysisView::refusedWhileBusy(QString* error) {
    if (!m_runner->isRunning()) return false;
    refuse(m_busyRefusal, error);
    return true;
}

bool AnalysisView::startJob(Job job, std::function<void(bool, const QString&)> ended, QString* error) {
    if (refusedWhileBusy(error)) return false;
    if (!m_runner->start(job.title, std::move(job.work))) return refuse(m_busyRefusal, error);
    for (QWidget* c : job.controls) c->setEnabled(false);
    m_status->setText(job.busyText);
    if (m_cancel) {
        m_cancel->setText(tr("Cancel"));
        m_cancel->setEnabled(true);
        m_cancel->show();
    }
    // One connection per job, gone once it has fired.
    connect(
        m_runner, &JobRunner::finished, this,
        [this, controls = job.controls, failure = job.failure, ended = std::move(ended)](bool ok, const QString& message) {
            for (QWidget* c : controls) c->setEnabled(true);
            if (m_cancel) m_cancel->hide();
            if (ok) {
                m_status->clear();
            } else if (message == QLatin1String("cancelled")) {
                m_status->setText(tr("Cancelled")); // asked for, not a failure
            } else {
                m_status->setText(tr("%1: %2").arg(failure, message));
                emit errorOccurred(m_status->text());
            }
            ended(ok, m_status->text());
            if (std::exchange(m_changedWhileBusy, false) && ok) m_update();
        },
        Qt::SingleShotConnection);
    return true;
}

} // namespace latmix::gui
