#include "BlockDiagramView.h"

// Core headers first (through BlockDiagramView.h): ATen/core/Tensor.h only, safe next to Qt.
#include "BlockDiagramLayout.h"
#include "ElidedLabel.h"
#include "FormWidgets.h"

#include <QColor>
#include <QEvent>
#include <QHBoxLayout>
#include <QHelpEvent>
#include <QKeyEvent>
#include <QLabel>
#include <QMouseEvent>
#include <QPainter>
#include <QPen>
#include <QPolygonF>
#include <QSpinBox>
#include <QToolTip>
#include <QVBoxLayout>
#include <QVector>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

namespace latmix::gui {

using model::PointKind;
using Role = BlockDiagramScene::Role;
using Fill = BlockDiagramScene::Fill;

namespace {

constexpr PointKind kKinds[] = {PointKind::QkvInput, PointKind::OProjInput, PointKind::GateUpInput,
                                PointKind::DownProjInput};

// Fixed hues for what the diagram explains (the transforms, the quantization points, quantized
// weights): saturated enough to read on both the light and the dark palette; text on them is white.
QColor transformColour(int t) {
    static const QColor c[] = {QColor(0x1f, 0x77, 0xd0), QColor(0xe0, 0x7b, 0x00), QColor(0x8e, 0x44, 0xad)};
    return c[std::clamp(t, 0, 2)];
}
const QColor kMarkerColour(0xd6, 0x2d, 0x5a);
const QColor kWeightColour(0x2e, 0x9e, 0x5b);

QColor mix(const QColor& a, const QColor& b, double t) {
    return QColor::fromRgbF(float(a.redF() * (1 - t) + b.redF() * t), float(a.greenF() * (1 - t) + b.greenF() * t),
                            float(a.blueF() * (1 - t) + b.blueF() * t));
}

} // namespace

BlockDiagramView::BlockDiagramView(QWidget* parent) : QWidget(parent) {
    setObjectName(QStringLiteral("blockDiagramView"));
    setMouseTracking(true);
    setFocusPolicy(Qt::StrongFocus);
    setMinimumSize(320, 240);

    m_header = new QWidget(this);
    m_header->setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Fixed);
    auto* row = new QHBoxLayout(m_header);
    row->setContentsMargins(0, 0, 0, 0);
    auto* label = new QLabel(tr("&Layer"), m_header);
    m_layerSpin = new QSpinBox(m_header);
    m_layerSpin->setObjectName(QStringLiteral("layerSpin"));
    m_layerSpin->setToolTip(tr("The decoder layer whose quantization points the markers name"));
    label->setBuddy(m_layerSpin);
    m_hint = new ElidedLabel(m_header, Qt::ElideRight);
    m_hint->setObjectName(QStringLiteral("blockDiagramHint"));
    row->addWidget(label);
    row->addWidget(m_layerSpin);
    row->addSpacing(12);
    row->addWidget(m_hint, 1);
    auto* outer = new QVBoxLayout(this);
    outer->setContentsMargins(8, 6, 8, 6);
    outer->addWidget(m_header);
    outer->addStretch(1);
    connect(m_layerSpin, qOverload<int>(&QSpinBox::valueChanged), this, [this] {
        invalidate();
        update();
    });
    updateHeader();
}

BlockDiagramView::~BlockDiagramView() = default;

void BlockDiagramView::setModel(const model::ModelConfig& config) {
    m_config = config;
    const int n = std::max(1, config.numLayers);
    const int keep = layer() < n ? layer() : 0;
    m_layerSpin->setRange(0, n - 1);
    m_layerSpin->setValue(keep);
    updateHeader();
    invalidate();
    update();
}

void BlockDiagramView::clearModel() {
    m_config.reset();
    m_kind.reset();
    m_layerSpin->setRange(0, 0);
    updateHeader();
    invalidate();
    update();
}

void BlockDiagramView::updateHeader() {
    m_layerSpin->setEnabled(m_config.has_value());
    if (!m_config) {
        m_hint->setFullText(tr("Generic Llama block: open a model to pick a layer"));
        return;
    }
    const model::ModelConfig& c = *m_config;
    const QString mlp = c.moe ? tr("router + %1 experts of %2, top %3")
                                    .arg(c.moe->numExperts)
                                    .arg(c.moe->expertWidth)
                                    .arg(c.moe->expertsPerToken)
                              : tr("intermediate %1").arg(c.intermediateSize);
    m_hint->setFullText(tr("%1 · %2 layers · hidden %3 · %4 q / %5 kv heads · %6")
                            .arg(QString::fromStdString(c.architectureName))
                            .arg(c.numLayers)
                            .arg(c.hiddenSize)
                            .arg(c.numHeads)
                            .arg(c.numKvHeads)
                            .arg(mlp));
}

int BlockDiagramView::layer() const { return m_layerSpin->value(); }

int BlockDiagramView::layerCount() const { return m_config ? std::max(1, m_config->numLayers) : 1; }

void BlockDiagramView::setLayer(int layer) { m_layerSpin->setValue(std::clamp(layer, 0, layerCount() - 1)); }

QString BlockDiagramView::pointAt(int layer, PointKind kind) const {
    // A sparse layer's down_proj marker stands for every expert's own down_proj input.
    if (kind == PointKind::DownProjInput && m_config && m_config->isSparseLayer(layer))
        return FormWidgets::expertItem(QString::fromStdString(model::expertPointName(layer, 0, kind))).item;
    return QString::fromStdString(model::pointName(layer, kind));
}

bool BlockDiagramView::selectPoint(const QString& pointName) {
    const QString name = FormWidgets::expertItem(pointName).item; // one expert's point: its layer's experts
    for (int l = 0; l < layerCount(); ++l)
        for (PointKind kind : kKinds)
            if (pointAt(l, kind) == name) {
                m_kind = kind;
                setLayer(l);
                update();
                return true;
            }
    return false;
}

QString BlockDiagramView::currentPoint() const {
    return m_kind ? pointAt(layer(), *m_kind) : QString();
}

void BlockDiagramView::invalidate() { m_scene.reset(); }

void BlockDiagramView::setPointFormats(const QMap<QString, QString>& formats) {
    m_formats = formats;
    invalidate();
    update();
}

QString BlockDiagramView::weightTagShown(const QString& module) const {
    for (const auto& box : scene().boxes)
        if (box.module == module)
            for (const auto& t : scene().texts)
                if (t.role == BlockDiagramScene::Role::Tag && box.rect.contains(t.rect.center())) return t.text;
    return {};
}

// The largest title size (up to 1.5× the widget font) at which everything fits, then the largest
// gap scale (up to 2×) at that size, the drawing centred vertically in what is left.
const BlockDiagramScene& BlockDiagramView::scene() const {
    if (m_scene) return *m_scene;
    BlockDiagramInfo info;
    info.hasModel = m_config.has_value();
    info.layer = layer();
    info.numLayers = layerCount();
    if (m_config) {
        const model::ModelConfig& c = *m_config;
        info.heads = c.numHeads;
        info.kvHeads = c.numKvHeads;
        info.qkNorm = c.qkNorm;
        info.qkvBias = c.qkvBias;
        info.oBias = c.oProjBias;
        info.mlpBias = c.mlpBias;
        if (c.latmix && c.latmix->t3Block > 0) info.t3Block = c.latmix->t3Block;
        if (c.isSparseLayer(info.layer)) info.experts = c.moe->numExperts, info.expertsPerToken = c.moe->expertsPerToken;
    }
    for (PointKind kind : kKinds) {
        // A sparse layer's down_proj inputs are its experts' ("layers.0.mlp.experts.*.down_proj.input").
        const bool perExpert = info.experts > 0 && kind == PointKind::DownProjInput;
        info.points[int(kind)] = perExpert ? QString::fromStdString(model::expertPointName(info.layer, 0, kind))
                                                 .replace(QStringLiteral(".experts.0."), QStringLiteral(".experts.*."))
                                           : QString::fromStdString(model::pointName(info.layer, kind));
        if (m_config) info.widths[int(kind)] = model::pointWidth(*m_config, kind);
        info.formats[int(kind)] = m_formats.value(perExpert ? QString::fromStdString(model::expertPointName(info.layer, 0, kind))
                                                            : info.points[int(kind)]);
    }
    const QMargins mg = layout()->contentsMargins();
    QRectF canvas = QRectF(rect()).adjusted(mg.left(), mg.top() + m_header->sizeHint().height() + 6, -mg.right(),
                                            -mg.bottom());
    const double base = font().pointSizeF() > 0 ? font().pointSizeF() : 9.0;
    const double minPt = std::min(6.0, base);
    auto build = [&](double pt, double gap, const QRectF& area) { return layoutBlockDiagram(*this, info, pt, gap, area); };
    BlockDiagramScene best = build(minPt, 1.0, canvas);
    for (double pt = base * 1.5; pt > minPt; pt -= 0.25) {
        BlockDiagramScene s = build(pt, 1.0, canvas);
        if (s.fits) {
            best = std::move(s);
            break;
        }
    }
    if (best.fits) {
        for (double gap = 1.1; gap <= 2.0; gap += 0.1) {
            BlockDiagramScene s = build(best.pt, gap, canvas);
            if (!s.fits) break;
            best = std::move(s);
        }
        const double spare = canvas.bottom() - best.bottom;
        if (spare > 1) best = build(best.pt, best.gap, canvas.adjusted(0, spare / 2, 0, 0));
    }
    best.canvas = canvas;
    m_scene = std::make_unique<BlockDiagramScene>(std::move(best));
    return *m_scene;
}

QRectF BlockDiagramView::markerRect(PointKind kind) const { return scene().markers[int(kind)].rect; }

QRectF BlockDiagramView::transformRect(int t) const { return t >= 1 && t <= 3 ? scene().badges[t - 1] : QRectF(); }

QRectF BlockDiagramView::boxRect(const QString& module) const {
    for (const auto& b : scene().boxes)
        if (b.module == module) return b.rect;
    return {};
}

QStringList BlockDiagramView::modules() const {
    QStringList names;
    for (const auto& b : scene().boxes) names << b.module;
    return names;
}

QString BlockDiagramView::boxText(const QString& module) const {
    for (const auto& b : scene().boxes)
        if (b.module == module) return b.lines.join(QLatin1Char('\n'));
    return {};
}

QList<QRectF> BlockDiagramView::labelRects() const {
    QList<QRectF> rects;
    for (const auto& t : scene().texts) rects << t.rect;
    for (const auto& m : scene().markers) rects << m.label;
    return rects;
}

QString BlockDiagramView::toolTipAt(const QPointF& pos) const {
    const BlockDiagramScene& s = scene();
    for (const auto& m : s.markers)
        if (m.rect.contains(pos) || m.label.contains(pos)) return m.tip;
    for (const auto& [rect, tip] : s.tips)
        if (rect.contains(pos)) return tip;
    return {};
}

double BlockDiagramView::fontPointSize() const { return scene().pt; }

int BlockDiagramView::markerAt(const QPointF& pos) const {
    const BlockDiagramScene& s = scene();
    const double slop = 0.2 * s.unit;
    for (int k = 0; k < 4; ++k)
        if (s.markers[k].rect.adjusted(-slop, -slop, slop, slop).contains(pos) || s.markers[k].label.contains(pos))
            return k;
    return -1;
}

void BlockDiagramView::choose(int kind, bool emitSignal) {
    m_kind = kKinds[kind];
    update();
    if (emitSignal) emit pointSelected(currentPoint());
}

bool BlockDiagramView::event(QEvent* event) {
    if (event->type() == QEvent::ToolTip) {
        auto* help = static_cast<QHelpEvent*>(event);
        const QString tip = toolTipAt(help->pos());
        if (tip.isEmpty()) {
            QToolTip::hideText();
            event->ignore();
        } else {
            QToolTip::showText(help->globalPos(), tip, this);
        }
        return true;
    }
    return QWidget::event(event);
}

void BlockDiagramView::resizeEvent(QResizeEvent* event) {
    invalidate();
    QWidget::resizeEvent(event);
}

void BlockDiagramView::changeEvent(QEvent* event) {
    if (event->type() == QEvent::FontChange || event->type() == QEvent::StyleChange) invalidate();
    if (event->type() == QEvent::PaletteChange || event->type() == QEvent::FontChange) update();
    QWidget::changeEvent(event);
}

void BlockDiagramView::mousePressEvent(QMouseEvent* event) {
    m_pressed = event->button() == Qt::LeftButton ? markerAt(event->position()) : -1;
    QWidget::mousePressEvent(event);
}

void BlockDiagramView::mouseReleaseEvent(QMouseEvent* event) {
    const int kind = event->button() == Qt::LeftButton ? markerAt(event->position()) : -1;
    if (kind >= 0 && kind == m_pressed) choose(kind, true);
    m_pressed = -1;
    QWidget::mouseReleaseEvent(event);
}

void BlockDiagramView::mouseMoveEvent(QMouseEvent* event) {
    if (markerAt(event->position()) >= 0)
        setCursor(Qt::PointingHandCursor);
    else
        unsetCursor();
    QWidget::mouseMoveEvent(event);
}

// Arrow keys walk the four points in data-flow order, Enter / Space picks the current one again.
void BlockDiagramView::keyPressEvent(QKeyEvent* event) {
    const int cur = m_kind ? int(*m_kind) : -1;
    switch (event->key()) {
    case Qt::Key_Down:
    case Qt::Key_Right: choose(cur < 0 ? 0 : (cur + 1) % 4, true); return;
    case Qt::Key_Up:
    case Qt::Key_Left: choose(cur < 0 ? 3 : (cur + 3) % 4, true); return;
    case Qt::Key_Return:
    case Qt::Key_Enter:
    case Qt::Key_Space: choose(cur < 0 ? 0 : cur, true); return;
    default: QWidget::keyPressEvent(event);
    }
}

namespace {

QPolygonF diamond(const QRectF& r) {
    return QPolygonF({QPointF(r.center().x(), r.top()), QPointF(r.right(), r.center().y()),
                      QPointF(r.center().x(), r.bottom()), QPointF(r.left(), r.center().y())});
}

// A polyline whose last segment ends in a filled arrowhead at its last point.
void drawArrow(QPainter& p, QPolygonF poly, double size, const QColor& colour) {
    const QPointF tip = poly.last(), prev = poly[poly.size() - 2];
    QPointF dir = tip - prev;
    const double len = std::hypot(dir.x(), dir.y());
    if (len <= 0) return;
    dir /= len;
    const QPointF normal(-dir.y(), dir.x()), back = tip - dir * size;
    poly.last() = tip - dir * std::min(size * 0.6, len);
    p.setBrush(Qt::NoBrush);
    p.drawPolyline(poly);
    p.setBrush(colour);
    p.drawPolygon(QPolygonF({tip, back + normal * size * 0.45, back - normal * size * 0.45}));
}

} // namespace

void BlockDiagramView::paintEvent(QPaintEvent*) {
    const BlockDiagramScene& s = scene();
    const double u = s.unit;
    QPainter p(this);
    p.setRenderHint(QPainter::Antialiasing);
    const QPalette& pal = palette();
    const QColor base = pal.color(QPalette::Base), ink = pal.color(QPalette::Text);
    const QColor lineColour = mix(base, ink, 0.7), border = mix(base, ink, 0.5);
    p.fillRect(rect(), pal.color(QPalette::Window));
    p.setPen(QPen(mix(base, ink, 0.2), 1));
    p.setBrush(base);
    p.drawRect(s.canvas.adjusted(0.5, 0.5, -0.5, -0.5));

    p.setPen(QPen(mix(base, ink, 0.45), 1, Qt::DashLine));
    p.setBrush(Qt::NoBrush);
    p.drawRoundedRect(s.frame, 0.4 * u, 0.4 * u);

    p.setPen(QPen(lineColour, std::max(1.2, u / 11), Qt::SolidLine, Qt::RoundCap, Qt::RoundJoin));
    for (const QPolygonF& l : s.lines) p.drawPolyline(l);
    for (const QPolygonF& a : s.arrows) drawArrow(p, a, 0.4 * u, lineColour);
    p.setBrush(lineColour);
    for (const QPointF& f : s.forks) p.drawEllipse(f, 0.14 * u, 0.14 * u);
    p.setBrush(base);
    const double r = s.addRadius;
    for (const QPointF& a : s.adds) {
        p.drawEllipse(a, r, r);
        p.drawLine(a - QPointF(0.55 * r, 0), a + QPointF(0.55 * r, 0));
        p.drawLine(a - QPointF(0, 0.55 * r), a + QPointF(0, 0.55 * r));
    }

    for (const auto& b : s.boxes) {
        static const QColor tint[] = {QColor(0x4a, 0x90, 0xd9), QColor(0x9a, 0x9a, 0x9a), QColor(0x4c, 0xaf, 0x50)};
        p.setBrush(b.fill == Fill::Stub ? base : mix(base, tint[int(b.fill)], 0.14));
        p.setPen(QPen(border, 1.2, b.fill == Fill::Stub ? Qt::DashLine : Qt::SolidLine));
        p.drawRoundedRect(b.rect, 0.3 * u, 0.3 * u);
    }
    for (const auto& c : s.chips) {
        if (c.colour < 3) {
            p.setPen(Qt::NoPen);
            p.setBrush(transformColour(c.colour));
            p.drawRoundedRect(c.rect, c.rect.height() / 2, c.rect.height() / 2);
        } else {
            p.setPen(QPen(kWeightColour, 1));
            p.setBrush(mix(base, kWeightColour, 0.22));
            p.drawRoundedRect(c.rect, 0.2 * u, 0.2 * u);
        }
    }
    for (const auto& t : s.texts) {
        if (t.opaque) p.fillRect(t.rect.adjusted(-0.3 * u, 0, 0.3 * u, 0), base);
        p.setFont(blockDiagramFont(font(), s.pt, t.role));
        p.setPen(t.role == Role::Badge ? QColor(Qt::white) : ink);
        p.drawText(t.rect, Qt::AlignCenter, t.text);
    }

    p.setFont(blockDiagramFont(font(), s.pt, Role::Sub));
    const QColor highlight = pal.color(QPalette::Highlight);
    for (int k = 0; k < 4; ++k) {
        const auto& m = s.markers[k];
        const bool selected = m_kind && int(*m_kind) == k;
        if (selected) {
            p.setPen(QPen(highlight, 2.2));
            p.setBrush(Qt::NoBrush);
            p.drawEllipse(m.rect.adjusted(-0.22 * u, -0.22 * u, 0.22 * u, 0.22 * u));
            p.setPen(Qt::NoPen);
            p.setBrush(highlight);
            p.drawRoundedRect(m.label.adjusted(-0.15 * u, 0, 0.15 * u, 0), 0.2 * u, 0.2 * u);
        }
        p.setPen(QPen(base, 1));
        p.setBrush(kMarkerColour);
        p.drawPolygon(diamond(m.rect));
        p.setPen(selected ? pal.color(QPalette::HighlightedText) : ink);
        p.drawText(m.label, Qt::AlignCenter, m.text);
        if (selected && hasFocus()) {
            p.setPen(QPen(ink, 1, Qt::DotLine));
            p.setBrush(Qt::NoBrush);
            p.drawRect(m.rect.united(m.label).adjusted(-0.3 * u, -0.2 * u, 0.3 * u, 0.2 * u));
        }
    }
    p.setPen(QPen(base, 1));
    p.setBrush(kMarkerColour);
    p.drawPolygon(diamond(s.legendMarker));
}

} // namespace latmix::gui
