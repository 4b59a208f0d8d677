#pragma once
// The calibration tab: a form with the run's settings (method, MX format, training
// hyperparameters, calibration text, device, run folder) beside the live TrainingDashboard.
// "Run" quantizes the open model with run::runQuantize on a worker thread (JobRunner); the
// dashboard receives every training step and the A1/A2 matrices; the finished run folder can
// be exported (File › Export quantized model…) or reopened later as a run file overlay.
// The form is remembered in QSettings (group "calibration").
#include "model/ModelConfig.h"
#include "run/QuantizeRun.h"

#include <QByteArray>
#include <QMap>
#include <QString>
#include <QWidget>

class QCheckBox;
class QComboBox;
class QGroupBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QScrollArea;
class QSpinBox;

namespace latmix::gui {

class JobRunner;

// The short calibration text compiled into the workbench (resources/text/calibration.txt): the
// default when no file is chosen, so nothing depends on downloaded data.
QByteArray builtInCalibrationText();
class TrainingDashboard;

class CalibrationView : public QWidget {
    Q_OBJECT

public:
    explicit CalibrationView(QWidget* parent = nullptr);
    ~CalibrationView() override;

    TrainingDashboard* dashboard() const { return m_dashboard; }
    JobRunner* runner() const { return m_runner; }

    // The model to calibrate (MainWindow::modelOpened); empty: the Run button is disabled.
    void setModelDir(const QString& dir);
    QString modelDir() const { return m_modelDir; }

    // The options the form describes (format validated when the run starts).
    latmix::run::RunConfig options() const;
    // Form setters for scripted use and tests.
    void setMethod(const QString& method);
    // --keep's regex (empty: none); the Model dock's "keep in bf16" boxes set it.
    void setKeep(const QString& regex);
    QString keep() const;
    // The Mixed precision field (--scheme): rules or a scheme file's path.
    void setScheme(const QString& rules);
    QString scheme() const;
    void setFormat(const QString& format);
    void setSteps(int steps);
    void setCalibration(int samples, int seqLen, int batch);
    void setEvalWindows(int windows); // 0: no perplexity evaluation
    void setTrackedLayer(int layer);  // whose A2 the dashboard shows
    void setCalibrationText(const QString& path); // empty: the built-in text
    void setEvaluationText(const QString& path);  // empty: WikiText-2's test split in the data folder
    void setRunDir(const QString& dir);           // empty: a new folder under the data location
    QString runDir() const;
    QString device() const;

    // Starts the run; false with *error (also emitted as errorOccurred) when it cannot start.
    bool start(QString* error = nullptr);

signals:
    void threadsChanged(int threads); // libtorch threads were set from the form
    void deviceChanged(const QString& device);

    void runFinished(bool ok, const QString& runDir, const QString& message);
    // The format of each quantization point in the run the form describes (its Format and Mixed
    // precision on the open model; run::previewScheme), by full point name; empty when the scheme
    // does not resolve or no model is open. The Model dock's Format column.
    void pointFormatsChanged(const QMap<QString, QString>& formats);
    void errorOccurred(const QString& message);

protected:
    bool eventFilter(QObject* watched, QEvent* event) override; // the form's width (fitFormWidth)

private:
    void fitFormWidth();
    void updateSchemePreview();
    QGroupBox* createMethodBox(QWidget* parent);
    QGroupBox* createTrainingBox(QWidget* parent);
    QGroupBox* createDataBox(QWidget* parent);
    void updateMemoryEstimate();
    void updateT1BiasAuto();
    void saveSettings() const;
    void loadSettings();
    QString defaultRunDir() const;

    QString m_modelDir, m_activeRunDir;
    TrainingDashboard* m_dashboard = nullptr;
    JobRunner* m_runner = nullptr;
    QComboBox *m_method, *m_format, *m_device, *m_block, *m_scaleMode;
    QSpinBox* m_threads;
    int m_defaultThreads = 1;
    QSpinBox* m_trackedLayer;
    QSpinBox *m_steps, *m_batch, *m_samples, *m_seqLen, *m_seed, *m_evalWindows, *m_foldedEvery, *m_metricsEvery;
    QDoubleSpinBox *m_lr, *m_temperature, *m_volumeWeight;
    QLineEdit *m_calibText, *m_evalText, *m_runDirEdit, *m_keep = nullptr, *m_scheme = nullptr;
    QLabel* m_schemeInfo = nullptr; // the scheme's bits per weight, or why it does not resolve
    QPushButton* m_run;
    QComboBox* m_t1Bias = nullptr;
    QCheckBox* m_skipExportCheck = nullptr;
    QLabel* m_memory = nullptr;
    QScrollArea* m_formScroll = nullptr;
    latmix::model::ModelConfig m_config; // of the open model, for the memory estimate
    int m_storedBytes = 0;               // its weights' element size; 0: no model
};

} // namespace latmix::gui
