#pragma once
// The calibration / training dashboard: live curves of a LATMiX training run (loss, KL, the
// volume term, lr; orthogonality deviation, off-block norm and condition number of A1 and of
// one layer's A2; the folded FP perplexity when the run tracks it), optional smoothing, overlays of finished runs read from their train.h5, a
// heatmap of A1 and of A1 minus its block-diagonal part (refreshed at a throttled rate),
// progress with ETA, pause and cancel. It only displays: the job itself runs elsewhere
// (JobRunner); feed it with beginRun / addStep / setMatrices / setProgress / finishRun.
#include "train/Distillation.h"

#include <ATen/core/Tensor.h>

#include <QColor>
#include <QElapsedTimer>
#include <QList>
#include <QString>
#include <QStringList>
#include <QVector>
#include <QWidget>

#include <string>
#include <utility>
#include <vector>

class QCustomPlot;
class QDoubleSpinBox;
class QGridLayout;
class QLabel;
class QProgressBar;
class QPushButton;
class QTimer;

namespace latmix::gui {

class ElidedLabel;
class LayerErrorPlot;

class TrainingDashboard : public QWidget {
    Q_OBJECT

public:
    // The quantities plotted, by the names tests and CSV exports use.
    // loss, kl, vol, lr, a1_orth, a1_offblock, a1_cond, a2_orth, a2_offblock, a2_cond, folded_ppl
    static QStringList quantities();

    explicit TrainingDashboard(QWidget* parent = nullptr);

    // A new live run (replaces the previous live run; overlays stay). blockSize: the MX block
    // the off-block norm refers to.
    void beginRun(const QString& name, int totalSteps, int blockSize);
    void addStep(const latmix::train::DistillStep& step);
    // Latest A1 / A2 (float32 CPU); the heatmaps redraw at most every heatmapIntervalMs.
    void setMatrices(int step, const at::Tensor& a1, const at::Tensor& a2);
    void setProgress(double fraction, const QString& message, double etaSeconds);
    // A layer's linears as the run quantized them (run::RunHooks::onLayerQuantized).
    void addLayerErrors(int layer, const std::vector<std::pair<std::string, double>>& errors);
    const LayerErrorPlot* layerErrorPlot() const { return m_layerErrors; }
    void finishRun(bool ok, const QString& message);
    bool isRunning() const { return m_running; }

    // Overlay of a finished run from its HDF5 run file; false with *error naming the file.
    bool addOverlay(const QString& runFile, QString* error = nullptr);
    void clearOverlays();
    int runCount() const { return static_cast<int>(m_runs.size()); } // live run + overlays

    // Exponential smoothing of loss, KL and volume term (0: raw values, up to 0.99).
    void setSmoothing(double alpha);
    double smoothing() const { return m_smoothing; }
    void setHeatmapInterval(int ms) { m_heatmapIntervalMs = ms; }
    // The layer whose A2 the run reports (titles the A2 plot).
    void setTrackedLayer(int layer);

    // What the plots hold (read back from QCustomPlot's data), for tests: the y values of
    // quantity for run index (0: the first run added).
    QVector<double> plottedValues(int run, const QString& quantity) const;
    QVector<double> plottedSteps(int run, const QString& quantity) const;
    // The steps of the heatmap currently drawn (-1: none) and the heatmap's cell values.
    int heatmapStep() const { return m_heatmapStep; }
    QVector<double> heatmapValues(bool offBlock) const;

    QCustomPlot* lossPlot() const { return m_lossPlot; }
    QCustomPlot* volumePlot() const { return m_volPlot; }
    QCustomPlot* lrPlot() const { return m_lrPlot; }
    QCustomPlot* a1Plot() const { return m_a1Plot; }
    QCustomPlot* a2Plot() const { return m_a2Plot; }
    QString statusText() const;
    bool isPaused() const;

signals:
    void pauseToggled(bool paused);
    void cancelRequested();

protected:
    void changeEvent(QEvent* event) override;
    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    struct Run {
        QString name;
        QString file; // an overlay's train.h5; empty for the live run
        QColor color;
        bool live = false;
        std::vector<latmix::train::DistillStep> steps;
    };
    QLayout* createHeader();
    QLayout* createOptionsRow();
    QWidget* createPlots();
    double lastStepSeconds() const; // the live run's last step, 0 before its first
    // The plots in as many columns (3, 2 or 1) as the dashboard's width holds at their minimum
    // width; more rows scroll.
    void reflowPlots(int width);
    void rebuildGraphs();
    QList<QWidget*> trainingCells() const;
    void scheduleReplot();
    void drawHeatmaps();
    void applyTheme();

    std::vector<Run> m_runs; // [0..]: overlays and the live run, in the order added
    int m_liveRun = -1;
    bool m_running = false;
    int m_totalSteps = 0;
    int m_blockSize = 32;
    double m_smoothing = 0.0;

    at::Tensor m_a1, m_a2;
    int m_matrixStep = -1, m_heatmapStep = -1;
    int m_heatmapIntervalMs = 500;
    QElapsedTimer m_heatmapClock;

    LayerErrorPlot* m_layerErrors = nullptr; // the layers' quantization error as the run goes
    QCustomPlot *m_lossPlot, *m_volPlot, *m_lrPlot, *m_a1Plot, *m_a2Plot, *m_heatPlot, *m_offPlot;
    QWidget* m_heatCell = nullptr;   // A1 and its off-block part side by side: one cell of the grid
    QWidget* m_plotArea = nullptr;   // the grid's widget, inside a vertical scroll area
    QGridLayout* m_plotGrid = nullptr;
    int m_plotColumns = 0, m_plotCells = 0;
    ElidedLabel* m_title;
    QLabel* m_status;
    QProgressBar* m_progress;
    QPushButton* m_pause;
    QPushButton* m_cancel;
    QDoubleSpinBox* m_smoothingBox;
    QTimer* m_replotTimer;
    QTimer* m_heatmapTimer;
};

} // namespace latmix::gui
