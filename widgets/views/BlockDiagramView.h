#pragma once
// "Where the transforms live": one Llama-family decoder layer drawn as a data-flow diagram
// (SPEC §4), for users of QuaRot / SpinQuant who ask where a rotation is applied. The residual
// stream runs along the top; the attention and MLP branches hang below it. T1 (residual stream),
// T2 (value path) and T3 (online block Hadamard before down_proj) are coloured badges on the
// edges they act on; the four activation quantization points are clickable markers on the edges
// entering their linears, named by core (model::pointName). The drawing fits the widget: the
// largest font that lets everything fit without overlaps is chosen at layout time.
// Core headers first: they pull in ATen/core/Tensor.h only, which is safe next to Qt's keywords.
#include "model/QuantizationPoints.h"
#include "model/ModelConfig.h"

#include <QList>
#include <QMap>
#include <QPointF>
#include <QRectF>
#include <QString>
#include <QStringList>
#include <QWidget>

#include <memory>
#include <optional>

class QSpinBox;

namespace latmix::gui {

class ElidedLabel;
struct BlockDiagramScene; // the display list of one layout (BlockDiagramView.cpp)

class BlockDiagramView : public QWidget {
    Q_OBJECT

public:
    explicit BlockDiagramView(QWidget* parent = nullptr);
    ~BlockDiagramView() override;

    // The layer count (layer spin box), the q_norm/k_norm boxes (Qwen3), the biases (Qwen2 q/k/v,
    // attention_bias, mlp_bias), the head counts (GQA) and the T3 block come from config. The
    // selected point keeps its kind; the layer is kept when the model has it, else 0.
    void setModel(const latmix::model::ModelConfig& config);
    // Back to the generic Llama block, layer 0, "open a model to pick a layer"; no point selected.
    void clearModel();
    bool hasModel() const { return m_config.has_value(); }

    int layer() const;
    int layerCount() const; // 1 without a model
    // Shows layer (clamped); a selected point moves to the same kind in that layer (no signal).
    void setLayer(int layer);

    // Highlights the marker of pointName (a name of model::pointNamesWithExperts, an expert's own
    // point at its layer's down_proj marker; or of layer 0 without a model) and shows its layer;
    // false, and nothing changes, for any other name.
    // Does not emit pointSelected.
    bool selectPoint(const QString& pointName);
    QString currentPoint() const; // empty when none is selected

    // Where things are drawn, in widget coordinates, for the widget's current size (laid out on
    // demand, the same layout the next paint uses). Empty rects for what is not drawn.
    QRectF markerRect(latmix::model::PointKind kind) const;
    QRectF transformRect(int t) const; // t = 1, 2, 3: the T1 / T2 / T3 badge
    // Each point's format in the run the Calibration form describes (CalibrationView::
    // pointFormatsChanged): the linears' weight tags say it ("W: MXFP8"); empty: "W: MX".
    void setPointFormats(const QMap<QString, QString>& formats);
    QString weightTagShown(const QString& module) const; // the tag drawn on a linear's box ("q_proj")
    // Boxes by their Hugging Face module names: embed_tokens, input_layernorm, q_proj, k_proj,
    // v_proj, q_norm, k_norm (Qwen3 only), attention, o_proj, post_attention_layernorm,
    // gate_proj, up_proj, act_fn, down_proj, lm_head.
    QRectF boxRect(const QString& module) const;
    QStringList modules() const;         // the boxes drawn, in drawing order
    QString boxText(const QString& module) const; // the lines a box shows, joined by '\n'
    QList<QRectF> labelRects() const;    // every text drawn (boxes, tags, badges, markers, legend)
    QString toolTipAt(const QPointF& pos) const; // what hovering pos shows; empty over nothing
    double fontPointSize() const;        // the size the layout chose for box titles

signals:
    // The user clicked a marker (or moved to one with the arrow keys, or pressed Enter/Space on
    // the current one): core's point name, "layers.3.self_attn.qkv.input".
    void pointSelected(const QString& pointName);

protected:
    bool event(QEvent* event) override;
    void paintEvent(QPaintEvent* event) override;
    void resizeEvent(QResizeEvent* event) override;
    void changeEvent(QEvent* event) override;
    void mousePressEvent(QMouseEvent* event) override;
    void mouseReleaseEvent(QMouseEvent* event) override;
    void mouseMoveEvent(QMouseEvent* event) override;
    void keyPressEvent(QKeyEvent* event) override;

private:
    // The point of a marker: model::pointName, or in a sparse layer's down_proj place its experts'
    // item ("layers.1.mlp.experts.E.down_proj.input", FormWidgets::expertItem).
    QString pointAt(int layer, latmix::model::PointKind kind) const;
    const BlockDiagramScene& scene() const;
    void invalidate();
    int markerAt(const QPointF& pos) const; // PointKind as int, -1 for none
    void choose(int kind, bool emitSignal);
    void updateHeader();

    std::optional<latmix::model::ModelConfig> m_config;
    QMap<QString, QString> m_formats; // setPointFormats
    std::optional<latmix::model::PointKind> m_kind; // the selected point's kind
    QWidget* m_header = nullptr;
    QSpinBox* m_layerSpin = nullptr;
    ElidedLabel* m_hint = nullptr;
    int m_pressed = -1;
    mutable std::unique_ptr<BlockDiagramScene> m_scene;
};

} // namespace latmix::gui
