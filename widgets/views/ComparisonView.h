#pragma once
// The transform comparison tab (paper §3, SPEC §3) on the open model: pick a quantization
// point and the transforms to compare; the activations of that point are captured from
// calibration windows, every transform is built (learned kinds trained layer-locally) and
// measured, and the view shows a sortable table of the metrics per transform (E(T), per-block
// mean / max, the bound, κ, ‖AᵀA − I‖, off-block norm), the per-block error against the block
// index and E(T) against the MX block size. "Across layers" draws a layer × MX-block heatmap of
// the per-block error of one point kind for one transform over the whole model.
// Work runs on a worker thread (AnalysisView); results are core's numbers, unchanged.
#include "AnalysisView.h"
#include "FormWidgets.h"
#include "train/TransformAnalysis.h"

#include <QMap>
#include <QPair>
#include <QString>
#include <QStringList>
#include <QVector>

#include <functional>
#include <memory>
#include <string>

class QCheckBox;
class QComboBox;
class QCustomPlot;
class QLabel;
class QListWidget;
class QPushButton;
class QSpinBox;
class QTableWidget;

namespace latmix::gui {

class ComparisonView : public AnalysisView {
    Q_OBJECT

public:
    explicit ComparisonView(QWidget* parent = nullptr);

    void setModelDir(const QString& dir); // fills the point list; empty disables
    QString modelDir() const { return m_modelDir; }

    // Scripted use and tests.
    bool selectPoint(const QString& point);
    void setTransforms(const QStringList& kinds);
    void setFormat(const QString& format);
    void setCalibration(int samples, int seqLen, int steps);
    QString currentPoint() const;
    QStringList checkedTransforms() const;
    latmix::train::AnalysisOptions analysisOptions() const;
    int samples() const;
    int seqLen() const;

    // Starts the comparison at the current point / the across-layers heatmap for the current
    // point's kind and heatmapTransform; false (errorOccurred) when it cannot start.
    bool compare(QString* error = nullptr);
    bool compareAcrossLayers(const QString& heatmapTransform, QString* error = nullptr);

    // The last results, as received from core.
    const latmix::train::AnalysisResult& lastResult() const { return m_result; }
    QTableWidget* table() const { return m_table; }
    // Heatmap rows (layers) of per-block errors as drawn, and the points they came from.
    QVector<QVector<double>> heatmapRows() const;
    QStringList heatmapPoints() const { return m_heatmapPoints; }
    // "Hold the colour scale": the next maps use the scale of the map drawn when it was ticked
    // (values beyond it take the end colours), so that two transforms' maps compare by colour.
    void setHoldColourScale(bool hold);
    // The log10 range of the map's colours as drawn last (empty before any map).
    QPair<double, double> heatmapColourRange() const { return m_heatmapScale; }

    // Calibration ids of the built-in text (or LATMIX calibration file) for the model; public
    // so tests can reproduce exactly what the view measured.
    static std::vector<int> calibrationIds(const std::string& modelDir);

signals:
    void comparisonFinished(bool ok, const QString& message);
    // E(T) per point for one transform, once measured (colours the model's point tree).
    void pointMetricsKnown(const QString& metric, const QMap<QString, double>& values);

private:
    QWidget* createForm();
    void createTable();
    QWidget* createPlots();
    // Captures the activations of the points matching regex and analyses them on the worker
    // thread; done() gets the result on this thread. Shared by compare and compareAcrossLayers.
    // onePoint: the request is for that point alone, which the last capture may already hold
    // (compareAcrossLayers captures every layer's point of one kind; see CaptureCache).
    bool runAnalysis(const QString& title, const QString& failure, const std::string& regex,
                     const std::string& onePoint,
                     const std::function<void(latmix::train::AnalysisOptions&)>& adjust, QString* error,
                     std::function<void(latmix::train::AnalysisResult&&)> done);
    void showResult();
    void showHeatmap(const QStringList& points, const QVector<QVector<double>>& rows, const QString& kind);

    QString m_modelDir;
    struct CaptureCache;
    std::shared_ptr<CaptureCache> m_captureCache; // the last capture; read and written by one job at a time
    latmix::train::AnalysisResult m_result;
    QStringList m_heatmapPoints;
    QVector<QVector<double>> m_heatmapRows;
    QPair<double, double> m_heatmapScale{0, 0}; // as drawn last
    bool m_scaleHeld = false;                   // m_heatmapScale applies to the next maps
    FormWidgets::PointPicker m_point;
    QComboBox* m_format;
    QComboBox* m_heatmapKind;
    QListWidget* m_kinds;
    QSpinBox* m_samples;
    QSpinBox* m_seqLen;
    QSpinBox* m_steps;
    QPushButton* m_compare;
    QPushButton* m_acrossLayers;
    QCheckBox* m_holdScale;
    QTableWidget* m_table;
    QCustomPlot* m_perBlockPlot;
    QCustomPlot* m_sweepPlot;
    QCustomPlot* m_heatmapPlot;
};

} // namespace latmix::gui
