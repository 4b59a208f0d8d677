#include "ExportDialog.h"

#include "JobRunner.h"

#include "export/ExportTargets.h"
#include "run/quantize/OptionTable.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QToolButton>
#include <QVBoxLayout>

#include <memory>

namespace latmix::gui {

ExportDialog::ExportDialog(const QString& runDir, QWidget* parent) : QDialog(parent), m_runDir(runDir) {
    setObjectName(QStringLiteral("exportDialog"));
    setWindowTitle(tr("Export quantized model"));
    m_runner = new JobRunner(this);

    auto* column = new QVBoxLayout(this);
    auto* form = new QFormLayout;
    auto* run = new QLabel(QDir::toNativeSeparators(runDir), this);
    run->setObjectName(QStringLiteral("exportRunLabel"));
    run->setTextInteractionFlags(Qt::TextSelectableByMouse);
    form->addRow(tr("Run:"), run);
    m_format = new QComboBox(this);
    m_format->setObjectName(QStringLiteral("exportFormatCombo"));
    for (const auto& k : latmix::exporting::exportTargetKinds())
        m_format->addItem(QString::fromStdString(k.choice), QString::fromStdString(k.name));
    form->addRow(tr("&Format:"), m_format);
    m_target = new QLabel(this);
    m_target->setObjectName(QStringLiteral("exportTargetLabel"));
    m_target->setWordWrap(true);
    m_target->setTextInteractionFlags(Qt::TextSelectableByMouse);

    auto* destRow = new QHBoxLayout;
    m_dest = new QLineEdit(this);
    m_dest->setObjectName(QStringLiteral("exportDestinationEdit"));
    m_dest->setText(runDir + QStringLiteral("-export"));
    auto* browse = new QToolButton(this);
    browse->setText(QStringLiteral("…"));
    connect(browse, &QToolButton::clicked, this, [this] {
        const QString d = QFileDialog::getSaveFileName(this, tr("Export to folder"), m_dest->text());
        if (!d.isEmpty()) m_dest->setText(d);
    });
    destRow->addWidget(m_dest);
    destRow->addWidget(browse);
    auto* destLabel = new QLabel(tr("&Destination:"), this); // a label with a buddy: the mnemonic works
    destLabel->setBuddy(m_dest);
    form->addRow(destLabel, destRow);
    m_overwrite = new QCheckBox(tr("Replace an existing folder or file (after the export succeeded)"), this);
    m_overwrite->setObjectName(QStringLiteral("exportOverwriteCheck"));
    form->addRow(QString(), m_overwrite);
    column->addLayout(form);
    column->addWidget(m_target); // outside the form: word-wrapped labels get their height there

    m_progress = new QProgressBar(this);
    m_progress->setObjectName(QStringLiteral("exportProgress"));
    m_progress->setRange(0, 1000);
    m_progress->setValue(0);
    column->addWidget(m_progress);
    m_status = new QLabel(this);
    m_status->setObjectName(QStringLiteral("exportStatus"));
    column->addWidget(m_status);
    m_result = new QLabel(this);
    m_result->setObjectName(QStringLiteral("exportResult"));
    m_result->setWordWrap(true);
    m_result->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_result->setAlignment(Qt::AlignLeft | Qt::AlignTop);
    // A long result (the notes of a GGUF export) scrolls instead of being cut at the dialog's edge.
    auto* resultScroll = new QScrollArea(this);
    resultScroll->setObjectName(QStringLiteral("exportResultScroll"));
    resultScroll->setWidget(m_result);
    resultScroll->setWidgetResizable(true);
    resultScroll->setFrameShape(QFrame::NoFrame);
    resultScroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    column->addWidget(resultScroll, 1);

    auto* buttons = new QHBoxLayout;
    buttons->addStretch(1);
    m_export = new QPushButton(tr("&Export"), this);
    m_export->setObjectName(QStringLiteral("exportButton"));
    m_export->setDefault(true);
    m_cancel = new QPushButton(tr("&Cancel export"), this);
    m_cancel->setObjectName(QStringLiteral("exportCancelButton"));
    m_cancel->setEnabled(false);
    m_close = new QPushButton(tr("C&lose"), this);
    m_close->setObjectName(QStringLiteral("exportCloseButton"));
    buttons->addWidget(m_export);
    buttons->addWidget(m_cancel);
    buttons->addWidget(m_close);
    column->addLayout(buttons);
    resize(680, 440);

    connect(m_format, &QComboBox::currentIndexChanged, this, &ExportDialog::showTarget);
    showTarget();
    // A one-file target (GGUF): the destination's name takes its ending while it is the suggested one.
    connect(m_format, &QComboBox::currentIndexChanged, this, [this] {
        const QString ending =
            QString::fromStdString(latmix::exporting::exportTargetKind(m_format->currentData().toString().toStdString()).extension);
        QString d = m_dest->text();
        for (const auto& k : latmix::exporting::exportTargetKinds()) {
            const QString other = QString::fromStdString(k.extension);
            if (!other.isEmpty() && other != ending && d.endsWith(other)) d.chop(other.size());
        }
        if (!ending.isEmpty() && !d.endsWith(ending)) d += ending;
        m_dest->setText(d);
    });
    connect(m_export, &QPushButton::clicked, this, &ExportDialog::startExport);
    connect(m_cancel, &QPushButton::clicked, m_runner, &JobRunner::cancel);
    connect(m_close, &QPushButton::clicked, this, &QDialog::reject);
    connect(m_runner, &JobRunner::progressed, this, [this](double f, const QString& message, double) {
        m_progress->setValue(static_cast<int>(f * 1000));
        m_status->setText(message);
    });
}

// Who loads the chosen target, what runs online there and what was folded, and its size
// (export/ExportTargets.h: from the run's config alone).
void ExportDialog::showTarget() {
    const std::string runDir = m_runDir.toStdString(), format = m_format->currentData().toString().toStdString();
    m_refusal.clear();
    if (!m_runner->isRunning()) { // the last export's result was of another target
        m_result->clear();
        m_status->clear();
        m_progress->setValue(0);
    }
    try {
        latmix::exporting::checkExportTarget(runDir, format);
        const auto t = latmix::exporting::describeExportTarget(runDir, format);
        m_target->setText(tr("Loads in: %1\nOnline: %2\nFolded: %3\nSize on disk: about %4")
                              .arg(QString::fromStdString(t.runtimes), QString::fromStdString(t.online),
                                   QString::fromStdString(t.folded),
                                   QLocale().formattedDataSize(static_cast<qint64>(t.bytes))));
    } catch (const std::exception& e) {
        // In the workbench's words (a remedy names the Calibration tab's control, not the flag).
        m_refusal = QString::fromStdString(latmix::run::messageFor(e, latmix::run::Face::Workbench));
        m_target->setText(m_refusal.left(1).toUpper() + m_refusal.mid(1)); // "Cannot export RUN as gguf: ..."
    }
    if (!m_runner->isRunning()) m_export->setEnabled(m_refusal.isEmpty());
}
QString ExportDialog::targetText() const { return m_target->text(); }

void ExportDialog::setFormat(const QString& format) {
    const int i = m_format->findData(format);
    if (i >= 0) m_format->setCurrentIndex(i);
}
void ExportDialog::setDestination(const QString& dir) { m_dest->setText(dir); }
QString ExportDialog::destination() const { return m_dest->text(); }
QString ExportDialog::resultText() const { return m_result->text(); }
bool ExportDialog::isRunning() const { return m_runner->isRunning(); }

bool ExportDialog::startExport() {
    const QString out = QDir::cleanPath(m_dest->text().trimmed());
    if (out.isEmpty()) {
        m_result->setText(tr("Choose a destination"));
        return false;
    }
    if (!m_refusal.isEmpty()) {
        m_result->setText(m_refusal);
        return false;
    }
    m_ok = false;
    const std::string runDir = m_runDir.toStdString(), outPath = out.toStdString(),
                      format = m_format->currentData().toString().toStdString();
    const bool overwrite = m_overwrite->isChecked();
    // What the finished job reports, in the dialog's words.
    auto summary = std::make_shared<QString>();
    m_result->setText(QString());
    m_progress->setValue(0);
    const bool started = m_runner->start(tr("Export"), [=](latmix::JobContext& job) {
        // Verified before the output took its name (exporting::exportTo): nothing is left to check.
        const auto r = latmix::exporting::exportTo(runDir, format, outPath, job, overwrite);
        const QString size = QLocale().formattedDataSize(static_cast<qint64>(r.bytes));
        if (!latmix::exporting::exportTargetKind(r.target).extension.empty()) // one file (GGUF)
            *summary = tr("Exported %1 tensors (%2 %3, %4) to %5 for llama.cpp in %6 s.\nVerified: the file reads "
                          "back as written.")
                           .arg(r.tensors)
                           .arg(r.packedLinears)
                           .arg(QString::fromStdString(r.packedType), size, QDir::toNativeSeparators(out))
                           .arg(r.seconds, 0, 'f', 1);
        else
            *summary = tr("Exported %1 tensors (%2 packed linears, %3) to %4 in %5 s.\nVerified: the export reloads "
                          "and equals the run's quantized weights.")
                           .arg(r.tensors)
                           .arg(r.packedLinears)
                           .arg(size, QDir::toNativeSeparators(out))
                           .arg(r.seconds, 0, 'f', 1);
        for (const auto& n : r.notes) *summary += QStringLiteral("\n• ") + QString::fromStdString(n);
    });
    if (!started) return false;
    m_export->setEnabled(false);
    m_close->setEnabled(false);
    m_cancel->setEnabled(true);
    connect(
        m_runner, &JobRunner::finished, this,
        [this, out, summary](bool ok, const QString& error) {
            m_export->setEnabled(m_refusal.isEmpty()); // the format may have changed meanwhile
            m_close->setEnabled(true);
            m_cancel->setEnabled(false);
            m_ok = ok;
            QString message;
            if (ok) {
                m_progress->setValue(1000);
                message = *summary;
                m_status->setText(tr("done"));
            } else {
                // The export's way out in this dialog's words: the CLI's flag is the Replace box here.
                QString why = error;
                why.replace(QStringLiteral("pass --overwrite"), tr("tick \u201c%1\u201d").arg(m_overwrite->text()));
                message = error == QLatin1String("cancelled") ? tr("Export cancelled; nothing was written to %1").arg(out)
                                                              : tr("Export failed: %1").arg(why);
                m_progress->setValue(0); // not a full bar beside "failed"
                m_status->setText(error == QLatin1String("cancelled") ? tr("cancelled") : tr("failed"));
            }
            m_result->setText(message);
            emit exportFinished(ok, out, message);
        },
        Qt::SingleShotConnection); // one connection per export
    return true;
}

} // namespace latmix::gui
