#pragma once
// The quantization error of each layer as a run quantizes it, layer by layer (issue 72; what
// llm-compressor #3154 asks for): one curve per kind of linear (q, k, v, o, gate, up, down; a
// sparse layer's experts averaged per kind), x the layer, y the relative error against the FP
// weights that core reports (run::RunHooks::onLayerQuantized). It only draws.
#include <QMap>
#include <QObject>
#include <QString>
#include <QVector>

#include <string>
#include <utility>
#include <vector>

class QCPItemText;
class QCustomPlot;
class QWidget;

namespace latmix::gui {

class LayerErrorPlot : public QObject {
    Q_OBJECT
public:
    LayerErrorPlot(QCustomPlot* plot, QObject* parent = nullptr);
    QCustomPlot* plot() const { return m_plot; }
    // Empties the curves (a new run).
    void clear();
    // Layer `layer`'s linears: the module after the layer prefix and its relative error.
    void addLayer(int layer, const std::vector<std::pair<std::string, double>>& errors);
    // The kind a linear's name belongs to: "q_proj", ..., "down_proj"; an expert's: "experts.up_proj".
    static QString kindOf(const QString& linear);
    // What is drawn, by kind: (layer, error) in the order added.
    QVector<QPair<int, double>> points(const QString& kind) const;

private:
    void redraw();
    QCustomPlot* m_plot;
    QCPItemText* m_hint = nullptr; // said while no layer is drawn
    QMap<QString, QVector<QPair<int, double>>> m_points; // by kind
};

} // namespace latmix::gui
