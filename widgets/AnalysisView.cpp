#include "AnalysisView.h"

#include "PlotStyle.h"

#include <QCheckBox>
#include <QEvent>
#include <QFormLayout>
#include <QLabel>

#include <utility>

namespace latmix::gui {

AnalysisView::AnalysisView(QWidget* parent, const QString& busyRefusal)
    : QWidget(parent), m_runner(new JobRunner(this)), m_busyRefusal(busyRefusal) {}

void AnalysisView::setStatusLine(QLabel* status) {
    m_status = status;
    m_runner->showProgressIn(status);
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
    // One connection per job, gone once it has fired.
    connect(
        m_runner, &JobRunner::finished, this,
        [this, controls = job.controls, failure = job.failure, ended = std::move(ended)](bool ok, const QString& message) {
            for (QWidget* c : controls) c->setEnabled(true);
            if (ok) {
                m_status->clear();
            } else {
                m_status->setText(tr("%1: %2").arg(failure, message));
                if (message != QLatin1String("cancelled")) emit errorOccurred(m_status->text());
            }
            ended(ok, m_status->text());
            if (std::exchange(m_changedWhileBusy, false) && ok) m_update();
        },
        Qt::SingleShotConnection);
    return true;
}

} // namespace latmix::gui
