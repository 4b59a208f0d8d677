#pragma once
// MX format explorer, the workbench's central view: quantizes a synthetic LLM-like activation
// vector with the chosen MX format and shows, live, what the format does to it (original vs
// dequantized values) and where the error lands (per-block squared error E_B).
#include "mx/MxFormat.h"
#include "mx/SyntheticActivations.h"

#include <QString>
#include <QVector>
#include <QWidget>

class QCheckBox;
class QComboBox;
class QCPBars;
class QCPGraph;
class QCustomPlot;
class QDoubleSpinBox;
class QLabel;
class QSpinBox;

namespace latmix::gui {

class MxExplorerView : public QWidget {
    Q_OBJECT

public:
    explicit MxExplorerView(QWidget* parent = nullptr);

    // The configuration the controls currently describe (not validated).
    latmix::mx::MxConfig config() const;
    // The synthetic vector's parameters as set in the controls.
    latmix::mx::SyntheticSpec syntheticSpec() const;

    // What the plots were last given, read back from QCustomPlot's data containers, so that
    // tests check what is drawn rather than an intermediate copy. Empty after an error.
    QVector<double> originalValues() const;
    QVector<double> dequantizedValues() const;
    QVector<double> blockErrors() const;

    // The summary line under the controls (format, MSE, worst block, or the error message).
    QString summaryText() const;
    // True when the last recompute() failed and the summary shows the error.
    bool hasError() const { return m_hasError; }

    // Selects a format by its core name ("mxfp4", "nvfp4", ...); false if there is none.
    bool selectFormat(const QString& name);

public slots:
    // Rebuild the vector, quantize, measure and replot. Runs on every control change.
    void recompute();

signals:
    // Emitted after each recompute(); ok is false when core threw and the plots were cleared.
    void recomputed(bool ok);

protected:
    void changeEvent(QEvent* event) override;

private:
    QWidget* buildControls();
    void setupSignalPlot();
    void setupErrorPlot();
    void onFormatChanged();
    void offerScaleModes(bool nvfp4);
    void applyPlotTheme();
    void applyErrorScale();
    void drawBlockBands(int length, int blockSize);
    void clearPlots();

    QComboBox* m_formatCombo = nullptr;
    QComboBox* m_blockCombo = nullptr;
    QComboBox* m_scaleModeCombo = nullptr;
    QSpinBox* m_lengthSpin = nullptr;
    QSpinBox* m_outlierCountSpin = nullptr;
    QDoubleSpinBox* m_outlierScaleSpin = nullptr;
    QSpinBox* m_seedSpin = nullptr;
    QCheckBox* m_logScaleCheck = nullptr;
    QLabel* m_summaryLabel = nullptr;

    QCustomPlot* m_signalPlot = nullptr;
    QCustomPlot* m_errorPlot = nullptr;
    QCPGraph* m_originalGraph = nullptr;
    QCPGraph* m_dequantizedGraph = nullptr;
    QCPGraph* m_mseLine = nullptr;
    QCPBars* m_errorBars = nullptr;

    QString m_userBlock = QStringLiteral("32"); // block chosen before nvfp4 forced 16
    double m_mse = 0.0;
    bool m_hasError = false;
};

} // namespace latmix::gui
