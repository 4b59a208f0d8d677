#pragma once
// File › Export quantized model…: a finished run folder exported as a Hugging Face (bf16) or
// compressed-tensors (packed MX) model (core/export, SPEC §8), or as a GGUF file for llama.cpp
// (export/GgufExport.h), on a worker thread, with progress, cancel, and the result of the
// post-export verification shown in the dialog. Nothing is left under the destination name when
// the export fails or is cancelled (core writes to a temporary name and renames).
#include <QDialog>
#include <QString>

class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;

namespace latmix::gui {

class JobRunner;

class ExportDialog : public QDialog {
    Q_OBJECT

public:
    explicit ExportDialog(const QString& runDir, QWidget* parent = nullptr);

    void setFormat(const QString& format); // "hf" | "compressed-tensors" | "gguf"
    void setDestination(const QString& dir);
    QString destination() const;
    QString resultText() const;
    // What loads the chosen target, what runs online, what was folded, its size; or why the run
    // cannot go there, as far as its config tells (exporting::checkExportTarget: Export is then off).
    QString targetText() const;
    bool isRunning() const;
    // Outcome of the last export: true once exported and verified.
    bool succeeded() const { return m_ok; }

public slots:
    bool startExport();

signals:
    void exportFinished(bool ok, const QString& outDir, const QString& message);

private:
    void showTarget();

    QString m_runDir;
    bool m_ok = false;
    QString m_refusal; // why the chosen target cannot hold the run; empty: it can
    JobRunner* m_runner;
    QComboBox* m_format;
    QLineEdit* m_dest;
    QCheckBox* m_overwrite;
    QProgressBar* m_progress;
    QLabel* m_status;
    QLabel* m_target;
    QLabel* m_result;
    QPushButton* m_export;
    QPushButton* m_cancel;
    QPushButton* m_close;
};

} // namespace latmix::gui
