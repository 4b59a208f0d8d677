#pragma once
// The weights tab: what the MX weight quantizer sees in one linear of the open model, and in the
// same linear once an open run's transforms are folded in (γ, T1, T2, T3: analysis::loadLinearWeights).
// core's metrics::profileWeights measures both; the view draws its numbers unchanged: the
// weight's magnitude per input channel (log scale, the largest channels named), the mean MX
// round-to-nearest error of each group of B input channels, and the error of every group of
// every band of output rows as two heat maps (original, folded) on one colour scale. Loading
// and profiling run on a worker thread (AnalysisView).
#include "AnalysisView.h"
#include "metrics/WeightProfile.h"
#include "model/ModelConfig.h"

#include <optional>

#include <QString>
#include <QStringList>

class QComboBox;
class QCustomPlot;
class QLabel;
class QPushButton;
class QSpinBox;

namespace latmix::gui {

class WeightView : public AnalysisView {
    Q_OBJECT

public:
    explicit WeightView(QWidget* parent = nullptr);

    void setModelDir(const QString& dir); // sets the layer range; empty disables
    QString modelDir() const { return m_modelDir; }
    // A finished run of the open model with a transforms.h5: the folded side is that run's
    // weight. Without one (or an empty path) only the original weight is shown.
    void setRun(const QString& runDir);
    QString runDir() const { return m_runDir; }

    static QStringList linears(); // model::names::kBlockLinears, in layer order
    // The linear's module name: the combo's, or for an expert kind of a mixture-of-experts model
    // that kind of the chosen expert ("mlp.experts.5.up_proj").
    bool selectLinear(int layer, const QString& linear);
    // A quantization point selects the first linear reading it (qkv → q_proj, gate_up → gate_proj).
    bool selectPoint(const QString& point);
    int layer() const;
    QString linear() const;
    void setFormat(const QString& format);

    // Loads and profiles the current linear on the worker thread; false and *error when it
    // cannot start. profileFinished follows.
    bool analyze(QString* error = nullptr);

    const latmix::metrics::WeightProfile& lastProfile() const { return m_profile; }
    // Errors at or below this are drawn at it on the log colour scale (an exact group has none).
    static constexpr double kErrorFloor = 1e-30;

signals:
    void profileFinished(bool ok, const QString& message);

private:
    void showProfile();
    // A setting changed: analyze (AnalysisView::settingChanged) once a model is open.
    void analyzeIfAutomatic();
    void showHeatmap(QCustomPlot* plot, const latmix::metrics::WeightSide* side, double lo, double hi);

    // The linears the combo offers for the open model: the block linears, or for a mixture of
    // experts attention, the router and the three expert kinds (with the expert spin box).
    void fillLinears(const latmix::model::ModelConfig* config);

    QString m_modelDir;
    QString m_runDir;
    QStringList m_runKept; // the open run's linears kept in bf16 (--keep), by module name
    QString m_runName;     // that run's folder name
    std::optional<latmix::model::ModelConfig> m_config;
    latmix::metrics::WeightProfile m_profile;
    QSpinBox* m_layer;
    QSpinBox* m_expert;
    QComboBox* m_linear;
    QComboBox* m_format;
    QPushButton* m_analyze;
    QLabel* m_runLabel;
    QLabel* m_summary;
    QCustomPlot* m_channelPlot;
    QCustomPlot* m_groupPlot;
    QCustomPlot* m_heatBefore;
    QCustomPlot* m_heatAfter;
};

} // namespace latmix::gui
