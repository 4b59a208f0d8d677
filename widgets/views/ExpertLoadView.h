#pragma once
// The experts tab: how many calibration tokens the router of a mixture-of-experts model sends to
// each expert, layer by layer (analysis::measureModelExpertLoad on a worker thread). Where MoE
// quantization error usually hides: an expert that few tokens reach gets its GPTQ Hessian from few
// rows, and under 0.5 % of a layer's tokens none at all (rounded to nearest, docs/spec.md). A
// heat map of every layer × expert, each cell the expert's tokens over the balanced share
// (tokens × k / experts), on a log colour scale; the summary names the idle and starved experts.
#include "AnalysisView.h"
#include "eval/ExpertLoad.h"

#include <QString>

class QCustomPlot;
class QLabel;
class QPushButton;
class QSpinBox;

namespace latmix::gui {

class ExpertLoadView : public AnalysisView {
    Q_OBJECT

public:
    explicit ExpertLoadView(QWidget* parent = nullptr);

    // A mixture-of-experts model enables the view; any other (or none) says why it is empty.
    void setModelDir(const QString& dir);
    QString modelDir() const { return m_modelDir; }
    // Measures on the worker thread; false and *error when it cannot start. loadFinished follows.
    bool measure(QString* error = nullptr);

    const latmix::eval::ExpertLoad& lastLoad() const { return m_load; }
    // Cells below this share of the balanced load (idle experts included) are drawn at it.
    static constexpr double kShareFloor = 1e-3;

signals:
    void loadFinished(bool ok, const QString& message);

private:
    void showLoad();

    QString m_modelDir;
    bool m_moe = false;
    latmix::eval::ExpertLoad m_load;
    QSpinBox* m_windows;
    QSpinBox* m_seqLen;
    QPushButton* m_measure;
    QLabel* m_summary;
    QCustomPlot* m_plot;
};

} // namespace latmix::gui
