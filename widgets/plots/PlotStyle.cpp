#include "AtenHeaders.h"

#include "PlotStyle.h"

#include "PlotInteraction.h"

#include <qcustomplot.h>

#include <algorithm>
#include <functional>
#include <typeinfo>
#include <cmath>
#include <vector>

namespace latmix::gui::PlotStyle {
namespace {

// Two ticks at least inside the range, at the nicest step that gives them: 1e-4 and 1.5e-4 over
// 9.3e-5 .. 1.9e-4, 2 and 4 over 1.05 .. 6.9, where QCustomPlot's readable step on a short axis
// leaves one (a scale needs two numbers to be read, tst_plotlayout). `apart` says whether a set
// is far enough apart; the first found of 2..4 steps per range wins.
QVector<double> twoTicksAtLeast(const QCPRange& range, const std::function<bool(const QVector<double>&)>& apart) {
    for (int n = 2; n <= 4; ++n) {
        const double raw = (range.upper - range.lower) / n;
        if (!(raw > 0)) break;
        const double unit = std::pow(10.0, std::floor(std::log10(raw)));
        for (double nice : {1.0, 2.0, 2.5, 5.0, 10.0}) {
            if (nice * unit < raw) continue;
            QVector<double> ticks;
            for (double t = std::ceil(range.lower / (nice * unit)) * nice * unit; t <= range.upper; t += nice * unit) ticks << t;
            if (ticks.size() >= 2 && apart(ticks)) return ticks;
            break;
        }
    }
    return {};
}


class LogTicker : public QCPAxisTickerLog {
protected:
    QVector<double> createTickVector(double tickStep, const QCPRange& range) override {
        const double decades = range.lower > 0 ? std::log10(range.upper / range.lower) : 0;
        if (logBase() != 10 || !(range.lower > 0)) return QCPAxisTickerLog::createTickVector(tickStep, range);
        if (decades >= 1.6) {
            // A short axis over decades (one tick's room): its first and last decade, so that the
            // scale reads (1e-05 and 0.001 over 1e-6 .. 1e-2), rather than the one tick QCP leaves.
            QVector<double> ticks;
            for (double t : QCPAxisTickerLog::createTickVector(tickStep, range))
                if (range.contains(t)) ticks << t;
            const int first = int(std::ceil(std::log10(range.lower))), last = int(std::floor(std::log10(range.upper)));
            if (ticks.size() < 2 && last > first) return {std::pow(10.0, first), std::pow(10.0, last)};
            return QCPAxisTickerLog::createTickVector(tickStep, range);
        }
        // Two to tickCount + 1 ticks, none nearer the next than half an even spread on the axis.
        const double halfEven = 0.5 * decades / (tickCount() + 1);
        auto spread = [&](const QVector<double>& ticks) {
            if (ticks.size() < 2 || ticks.size() > tickCount() + 1) return false;
            for (int i = 1; i < ticks.size(); ++i)
                if (std::log10(ticks[i] / ticks[i - 1]) < halfEven) return false;
            return true;
        };
        QVector<double> best, linear;
        for (double t : QCPAxisTicker::createTickVector(tickStep, range))
            if (t > 0 && range.contains(t)) linear << t;
        const std::vector<int> digitSets[] = {{1}, {1, 3}, {1, 2, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9}};
        for (const auto& digits : digitSets) {
            QVector<double> ticks;
            for (int k = int(std::floor(std::log10(range.lower))); k <= int(std::ceil(std::log10(range.upper))); ++k)
                for (int d : digits)
                    if (const double t = d * std::pow(10.0, k); range.contains(t)) ticks << t;
            if (spread(ticks) && ticks.size() > best.size()) best = ticks;
        }
        if (spread(linear) && linear.size() > best.size()) best = linear;
        // Under half a decade on a short axis (one tick's room): two ticks at a linear step.
        if (best.size() < 2)
            best = twoTicksAtLeast(range, [&](const QVector<double>& ticks) {
                for (int i = 1; i < ticks.size(); ++i)
                    if (std::log10(ticks[i] / ticks[i - 1]) < halfEven) return false;
                return true;
            });
        return best.isEmpty() ? QCPAxisTicker::createTickVector(tickStep, range) : best;
    }
};

// ticks when two of them at least fall inside range, else the ticks more() makes (when it makes
// two or more): one rule for the tickers below.
template <typename More>
QVector<double> twoInsideOr(const QVector<double>& ticks, const QCPRange& range, More&& more) {
    int inside = 0;
    for (double t : ticks) inside += range.contains(t);
    if (inside >= 2) return ticks;
    const QVector<double> other = more();
    return other.size() >= 2 ? other : ticks;
}

// The default linear ticker, with twoTicksAtLeast where it would leave fewer than two.
class ReadableTicker : public QCPAxisTicker {
protected:
    QVector<double> createTickVector(double tickStep, const QCPRange& range) override {
        return twoInsideOr(QCPAxisTicker::createTickVector(tickStep, range), range,
                           [&] { return twoTicksAtLeast(range, [](const QVector<double>&) { return true; }); });
    }
};

// Whole numbers only; where a multiple-of-two step leaves one inside (steps 1 .. 3 of a short
// run), every whole number instead (issue 71: "2" alone under a run of three steps).
class IntegerTicker : public QCPAxisTickerFixed {
protected:
    QVector<double> createTickVector(double tickStep, const QCPRange& range) override {
        return twoInsideOr(QCPAxisTickerFixed::createTickVector(tickStep, range), range, [&] {
            QVector<double> whole;
            for (double t = std::ceil(range.lower); t <= std::floor(range.upper); t += 1.0) whole << t;
            return whole;
        });
    }
};

} // namespace

void integerTicks(QCPAxis* axis) {
    QSharedPointer<QCPAxisTickerFixed> t(new IntegerTicker);
    t->setTickStep(1.0);
    t->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
    t->setTickCount(axis->ticker()->tickCount());
    axis->setTicker(t);
}

QColor seriesColour(int i) {
    static const QColor c[] = {QColor(31, 119, 180), QColor(214, 39, 40), QColor(44, 160, 44), QColor(148, 103, 189),
                               QColor(255, 127, 14), QColor(23, 190, 207), QColor(140, 86, 75), QColor(227, 119, 194)};
    return c[i % 8];
}

QSharedPointer<QCPAxisTickerLog> logTicker(int tickCount) {
    QSharedPointer<QCPAxisTickerLog> t(new LogTicker);
    t->setTickCount(tickCount);
    return t;
}

void apply(QCustomPlot* p, const QPalette& pal) {
    fitTicks(p);
    const QColor bg = pal.color(QPalette::Base), fg = pal.color(QPalette::Text);
    QColor grid = fg;
    grid.setAlpha(45);
    p->setBackground(bg);
    for (QCPAxis* axis : {p->xAxis, p->yAxis, p->yAxis2}) {
        axis->setBasePen(QPen(fg));
        axis->setTickPen(QPen(fg));
        axis->setSubTickPen(QPen(fg));
        axis->setTickLabelColor(fg);
        axis->setLabelColor(fg);
        axis->grid()->setPen(QPen(grid, 1, Qt::DotLine));
        axis->grid()->setZeroLinePen(QPen(grid, 1, Qt::DotLine));
    }
    // y = 0 is the one reference line worth emphasising.
    QColor zero = fg;
    zero.setAlpha(110);
    p->yAxis->grid()->setZeroLinePen(QPen(zero, 1));
    p->legend->setBrush(Qt::NoBrush);
    p->legend->setTextColor(fg);
    if (p->plotLayout()->elementCount() > 0)
        if (auto* title = qobject_cast<QCPTextElement*>(p->plotLayout()->element(0, 0))) title->setTextColor(fg);
}

void restyle(const QList<QCustomPlot*>& plots, const QPalette& palette, bool queued) {
    for (QCustomPlot* p : plots) {
        apply(p, palette);
        p->replot(queued ? QCustomPlot::rpQueuedReplot : QCustomPlot::rpRefreshHint);
    }
}

void placeLegendAbove(QCustomPlot* p) {
    QCPLayoutInset* inset = p->axisRect()->insetLayout();
    bool inside = false;
    for (int i = 0; i < inset->elementCount(); ++i) inside = inside || inset->elementAt(i) == p->legend;
    if (!inside) return; // already placed
    inset->take(p->legend);
    inset->simplify();
    // The row of the axis rect: the legend row goes right above it, centred by empty elements
    // either side that take the spare width (stretch 1 against ~0).
    QCPLayoutGrid* grid = p->plotLayout();
    int axisRow = 0;
    for (int r = 0; r < grid->rowCount(); ++r)
        if (grid->hasElement(r, 0) && grid->element(r, 0) == p->axisRect()) axisRow = r;
    grid->insertRow(axisRow);
    auto* row = new QCPLayoutGrid;
    grid->addElement(axisRow, 0, row);
    row->addElement(0, 0, new QCPLayoutElement(p));
    row->addElement(0, 1, p->legend);
    row->addElement(0, 2, new QCPLayoutElement(p));
    row->setColumnStretchFactors({1.0, 0.001, 1.0});
    p->legend->setFillOrder(QCPLegend::foColumnsFirst);
    p->legend->setWrap(4); // then as many a row as fit (fitTicks)
    p->legend->setColumnSpacing(16);
    p->legend->setBorderPen(Qt::NoPen);
    p->legend->setMargins(QMargins(4, 0, 4, 0));
    for (int r = 0; r < grid->rowCount(); ++r)
        if (!(grid->hasElement(r, 0) && grid->element(r, 0) == p->axisRect())) grid->setRowStretchFactor(r, 0.001);
    grid->setRowSpacing(0);
}

void addTitleAndLegend(QCustomPlot* p, const QString& title, const QFont& base) {
    QFont bold = base;
    bold.setPointSize(base.pointSize() + 1);
    bold.setBold(true);
    p->plotLayout()->insertRow(0);
    p->plotLayout()->addElement(0, 0, new QCPTextElement(p, title, bold));
    p->legend->setVisible(true);
    placeLegendAbove(p);
}

void setTitle(QCustomPlot* p, const QString& title) {
    if (!p->plotLayout()->hasElement(0, 0)) return;
    if (auto* t = qobject_cast<QCPTextElement*>(p->plotLayout()->element(0, 0))) t->setText(title);
}

namespace {

// The axis' length in pixels, as the last layout left it: what its tick count is fitted to and
// what the cap below is keyed on.
double axisLength(const QCPAxis* axis) {
    return axis->orientation() == Qt::Horizontal ? axis->axisRect()->width() : axis->axisRect()->height();
}

// The tick count an axis of plot asks for: as many labels as fit its current length (fitTicks).
int fittingTickCount(QCPAxis* axis) {
    const QFontMetricsF fm(axis->tickLabelFont());
    double extent = 0;
    if (axis->orientation() == Qt::Horizontal) {
        // The labels drawn last, at least three digits wide: short integer labels
        // (groups, layers) get the ticks they fit, not those of "0.000".
        double widest = fm.horizontalAdvance(QStringLiteral("000"));
        for (const QString& label : axis->tickVectorLabels()) widest = std::max(widest, fm.horizontalAdvance(label));
        extent = widest + fm.horizontalAdvance(QStringLiteral("000")); // a label and a gap
    } else {
        extent = 2.2 * fm.height();
    }
    const double length = axisLength(axis);
    // QCustomPlot treats the count as a target and may place one or two more ticks at
    // "nice" steps: ask for fewer than fit.
    int count = std::clamp(static_cast<int>(length / extent) - 1, 1, 8);
    // More ticks can mean longer labels ("0", "1" become "0.25", "0.5", ...) and so
    // fewer ticks next time: once a count had to come down at this axis length and
    // range, it is the most they get, so the count settles instead of going back and forth.
    const QVariantList cap = axis->property("latmixTickCap").toList(); // length, range + the count
    if (cap.size() == 4 && cap.mid(0, 3) == QVariantList{length, axis->range().lower, axis->range().upper})
        count = std::min(count, cap[3].toInt());
    return count;
}

bool fitsTicks(const QCPAxis* axis) {
    const QSharedPointer<QCPAxisTicker> ticker = axis->ticker();
    return axis->visible() && axis->tickLabels() && ticker && !ticker.dynamicCast<QCPAxisTickerText>(); // text: placed by hand
}

} // namespace

void fitTicks(QCustomPlot* p) {
    if (p->property("latmixFitTicks").toBool()) return;
    p->setProperty("latmixFitTicks", true);
    QObject::connect(p, &QCustomPlot::beforeReplot, p, [p] {
        bool changed = false;
        for (QCPAxisRect* rect : p->axisRects()) {
            for (QCPAxis* axis : rect->axes()) {
                if (!fitsTicks(axis)) continue;
                // The plain linear ticker (no log, fixed, text or date one set on purpose) gets
                // twoTicksAtLeast, keeping its settings.
                if (typeid(*axis->ticker()) == typeid(QCPAxisTicker)) {
                    QSharedPointer<QCPAxisTicker> readable(new ReadableTicker);
                    readable->setTickCount(axis->ticker()->tickCount());
                    readable->setTickOrigin(axis->ticker()->tickOrigin());
                    axis->setTicker(readable);
                }
                const QSharedPointer<QCPAxisTicker> ticker = axis->ticker();
                const int count = fittingTickCount(axis);
                if (count < ticker->tickCount())
                    axis->setProperty("latmixTickCap",
                                      QVariantList{axisLength(axis), axis->range().lower, axis->range().upper, count});
                if (ticker->tickCount() != count) {
                    ticker->setTickCount(count);
                    changed = true;
                }
                // Room for one step: that step exactly (0 and 40 under 40 steps), not a nicer one
                // that leaves one label ("0", the next tick at 50 beyond the end).
                ticker->setTickStepStrategy(count == 1 ? QCPAxisTicker::tssMeetTickCount : QCPAxisTicker::tssReadability);
            }
        }
        // A legend above the axes (placeLegendAbove) gets as many entries a row as fit the
        // plot's width, so names are never cut.
        QCPLegend* legend = p->legend;
        if (legend && legend->visible() && legend->itemCount() > 0 && legend->layout() != p->axisRect()->insetLayout()) {
            int widest = 1;
            for (int i = 0; i < legend->itemCount(); ++i)
                if (QCPAbstractLegendItem* item = legend->item(i)) // empty cells of a re-flowed grid are null
                    widest = std::max(widest, item->minimumOuterSizeHint().width() + legend->columnSpacing());
            const int fit = std::clamp((p->width() - 16) / widest, 1, legend->itemCount());
            if (legend->wrap() != fit || legend->columnCount() > fit) {
                legend->setWrap(fit);
                legend->setFillOrder(QCPLegend::foColumnsFirst, true); // re-flows the entries already there
                changed = true;
            }
        }
        if (changed) p->replot(QCustomPlot::rpQueuedReplot);
    });
    // The counts above came from the last layout's axis lengths: when this layout resized an axis
    // (a tab shown for the first time, a window resized) so that it fits another count, draw once more.
    QObject::connect(p, &QCustomPlot::afterLayout, p, [p] {
        for (QCPAxisRect* rect : p->axisRects())
            for (QCPAxis* axis : rect->axes())
                if (fitsTicks(axis) && fittingTickCount(axis) != axis->ticker()->tickCount()) {
                    p->replot(QCustomPlot::rpQueuedReplot);
                    return;
                }
    });
}

void clearHeatmap(QCustomPlot* p) {
    p->clearPlottables();
    for (int i = p->plotLayout()->elementCount() - 1; i >= 0; --i)
        if (auto* scale = qobject_cast<QCPColorScale*>(p->plotLayout()->elementAt(i))) p->plotLayout()->remove(scale);
    p->plotLayout()->simplify();
}

QCPColorMap* addHeatmap(QCustomPlot* p, int keys, int values, const QString& scaleLabel, bool logScale) {
    auto* map = new QCPColorMap(p->xAxis, p->yAxis);
    map->removeFromLegend(); // the colour scale says what the colours are
    map->data()->setSize(keys, values);
    auto* scale = new QCPColorScale(p);
    p->plotLayout()->addElement(p->plotLayout()->rowCount() - 1, 1, scale); // beside the axis rect, below the title
    scale->setType(QCPAxis::atRight);
    if (logScale) {
        scale->setDataScaleType(QCPAxis::stLogarithmic);
        scale->axis()->setTicker(logTicker(4));
    }
    scale->setLabel(scaleLabel);
    map->setColorScale(scale);
    map->setGradient(QCPColorGradient::gpThermal);
    map->setInterpolate(false);
    auto* margins = new QCPMarginGroup(p);
    p->axisRect()->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
    scale->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
    return map;
}

QVector<double> values(const at::Tensor& t) {
    QVector<double> v;
    if (!t.defined()) return v;
    const at::Tensor c = t.to(at::kDouble).contiguous().cpu();
    v.reserve(static_cast<int>(c.numel()));
    for (std::int64_t i = 0; i < c.numel(); ++i) v << c.data_ptr<double>()[i];
    return v;
}

QCustomPlot* newPlot(QWidget* parent, const char* objectName, const QString& title) {
    auto* p = new QCustomPlot(parent);
    p->setObjectName(QLatin1String(objectName));
    p->setMinimumSize(220, 170); // two side by side beside a 260-px form fit a 1024-px window (tst_plotlayout)
    addTitleAndLegend(p, title, parent->font());
    PlotInteraction::enable(p);
    return p;
}

void addPeakLabels(QCustomPlot* plot, const QVector<QPointF>& points, const QStringList& texts, const QColor& colour,
                   int maxShown) {
    for (int i = 0; i < points.size() && i < texts.size(); ++i) {
        auto* label = new QCPItemText(plot);
        label->setObjectName(QStringLiteral("peakLabel"));
        label->position->setCoords(points[i].x(), points[i].y());
        label->setPositionAlignment(Qt::AlignBottom | Qt::AlignHCenter);
        label->setText(texts[i]);
        label->setColor(colour);
        label->setClipToAxisRect(false);
        label->setProperty("latmixPeakRank", i);
    }
    if (plot->property("latmixPeakLabels").toBool()) return;
    plot->setProperty("latmixPeakLabels", true);
    QObject::connect(plot, &QCustomPlot::beforeReplot, plot, [plot, maxShown] {
        QVector<QRectF> shown;
        // Between the axes' left and right ends (a name over the y axis hides its line and
        // labels), and within the plot from top to bottom.
        const QRect axes = plot->axisRect()->rect();
        const QRectF area(axes.left(), 0, axes.width(), plot->height());
        for (int i = 0; i < plot->itemCount(); ++i) {
            auto* label = qobject_cast<QCPItemText*>(plot->item(i));
            if (!label || label->objectName() != QLatin1String("peakLabel")) continue;
            // Items keep their creation order: the most important first.
            const QPointF at = label->position->pixelPosition();
            const QFontMetricsF fm(label->font());
            const QSizeF size(fm.horizontalAdvance(label->text()) + label->padding().left() + label->padding().right() + 4,
                              fm.height() + label->padding().top() + label->padding().bottom());
            // Centred above its point; at either end of the axes, beginning or ending at it instead.
            QRectF r(at.x() - size.width() / 2, at.y() - size.height(), size.width(), size.height());
            Qt::Alignment side = Qt::AlignHCenter;
            if (r.left() < area.left()) {
                side = Qt::AlignLeft;
                r.moveLeft(at.x());
            } else if (r.right() > area.right()) {
                side = Qt::AlignRight;
                r.moveRight(at.x());
            }
            label->setPositionAlignment(Qt::AlignBottom | side);
            const bool fits = shown.size() < maxShown && area.contains(r) &&
                              std::none_of(shown.begin(), shown.end(), [&](const QRectF& o) { return o.intersects(r); });
            label->setVisible(fits);
            if (fits) shown << r;
        }
    });
}

} // namespace latmix::gui::PlotStyle
