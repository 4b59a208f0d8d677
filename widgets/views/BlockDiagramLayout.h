#pragma once
// The display list of BlockDiagramView: where every box, edge, badge, marker and text of the
// decoder-layer diagram goes, laid out from font metrics for one title size and gap scale so that
// nothing overlaps. The view picks the largest size that fits and paints the list.
#include <QFont>
#include <QPair>
#include <QPointF>
#include <QPolygonF>
#include <QRectF>
#include <QString>
#include <QStringList>
#include <QVector>

#include <array>

class QWidget;

namespace latmix::gui {

// What the diagram shows of the model (or of the generic Llama block without one). points are
// core's names of the layer's four quantization points, in PointKind order.
struct BlockDiagramInfo {
    bool hasModel = false;
    int layer = 0, numLayers = 1, heads = 0, kvHeads = 0;
    int t3Block = 32; // SPEC §4: T3 is a block Hadamard of block 32 unless the run says otherwise
    bool qkNorm = false, qkvBias = false, oBias = false, mlpBias = false;
    int experts = 0, expertsPerToken = 0; // a sparse (mixture-of-experts) layer: the MLP boxes are its experts
    std::array<QString, 4> points;
    std::array<int, 4> widths{}; // 0: unknown (no model)
    // The format of the linears reading each point in the run the Calibration form describes
    // ("mxfp4", "mxfp8", "bf16"; empty: unknown, tagged "MX"), in PointKind order.
    std::array<QString, 4> formats;
};

struct BlockDiagramScene {
    enum class Role { Title, Sub, Tag, Badge }; // the font and ink of a text
    enum class Fill { Linear, Norm, Op, Stub }; // a box's kind: linears carry weights quantized to MX
    struct Text {
        QRectF rect;
        QString text;
        Role role;
        bool opaque = false; // painted over a background patch (the frame title on the frame line)
    };
    struct Box {
        QString module;
        QRectF rect;
        Fill fill;
        QStringList lines;
    };
    struct Chip {
        QRectF rect;
        int colour; // 0..2: T1..T3, 3: the weight tag
    };
    struct Marker {
        QRectF rect, label;
        QString name, text, tip;
    };
    QRectF canvas, frame;
    double pt = 0, gap = 1, unit = 0, bottom = 0;
    bool fits = false;
    QVector<Box> boxes;
    QVector<Text> texts;
    QVector<Chip> chips;
    QVector<QPolygonF> arrows, lines; // arrows end in an arrowhead
    QVector<QPointF> forks, adds;
    double addRadius = 0;
    std::array<QRectF, 3> badges;
    std::array<Marker, 4> markers;
    QRectF legendMarker;
    QVector<QPair<QRectF, QString>> tips; // hover areas after the markers; first match wins
};

// The font of a text role for title size pt.
QFont blockDiagramFont(QFont base, double pt, BlockDiagramScene::Role role);

// The diagram laid out in canvas (widget coordinates) with widget's font metrics; fits says
// whether all of it lies inside canvas.
BlockDiagramScene layoutBlockDiagram(const QWidget& widget, const BlockDiagramInfo& info, double pt, double gap,
                                     const QRectF& canvas);

} // namespace latmix::gui
