#include "LayoutCheck.h"

#include "ElidedLabel.h"
#include "MainWindow.h"

#include <qcustomplot.h>

#include <QCoreApplication>
#include <QDockWidget>
#include <QFontMetricsF>
#include <QScrollArea>
#include <QScrollBar>
#include <QStyle>
#include <QTabWidget>
#include <QTableView>

#include <algorithm>

namespace latmix::gui {
namespace {

// The pixel extents of an axis' visible tick labels along the axis, in tick order.
struct LabelSpan {
    QString text;
    double lo, hi;
};

QVector<LabelSpan> labelSpans(QCPAxis* axis) {
    QVector<LabelSpan> spans;
    if (!axis->visible() || !axis->tickLabels()) return spans;
    const QVector<double> ticks = axis->tickVector();
    const QVector<QString> labels = axis->tickVectorLabels();
    const QFontMetricsF fm(axis->tickLabelFont());
    const bool horizontal = axis->orientation() == Qt::Horizontal;
    for (int i = 0; i < ticks.size() && i < labels.size(); ++i) {
        if (!axis->range().contains(ticks[i]) || labels[i].isEmpty()) continue;
        // Numbers in "eb" format draw as a base and a superscript; their plain text is wider
        // than what is drawn, so the check is conservative for them.
        const QRectF r = fm.boundingRect(labels[i]);
        const double centre = axis->coordToPixel(ticks[i]);
        const double half = (horizontal ? r.width() : r.height()) / 2;
        spans.push_back({labels[i], centre - half, centre + half});
    }
    std::sort(spans.begin(), spans.end(), [](const LabelSpan& a, const LabelSpan& b) { return a.lo < b.lo; });
    return spans;
}

// Share of the plot's drawn points (of graphs with data, in the visible ranges) that fall
// inside the legend's rectangle.
double legendCover(QCustomPlot* p) {
    if (!p->legend || !p->legend->visible() || p->legend->itemCount() == 0) return 0;
    const QRectF legend = p->legend->outerRect();
    long inside = 0, total = 0;
    for (int g = 0; g < p->graphCount(); ++g) {
        QCPGraph* graph = p->graph(g);
        if (!graph->visible()) continue;
        for (const auto& d : *graph->data()) {
            if (!graph->keyAxis()->range().contains(d.key) || !graph->valueAxis()->range().contains(d.value)) continue;
            const QPointF px(graph->keyAxis()->coordToPixel(d.key), graph->valueAxis()->coordToPixel(d.value));
            ++total;
            if (legend.contains(px)) ++inside;
        }
    }
    return total ? double(inside) / double(total) : 0;
}

// The window: its docks open, its minimum (over every tab) within its size.
QStringList windowProblems(MainWindow& window) {
    QStringList problems;
    const QSize size = window.size();
    for (const char* dock : {"modelDock", "jobsDock"})
        if (auto* d = window.findChild<QDockWidget*>(QLatin1String(dock)); !d || !d->isVisible())
            problems << QString("%1 is not shown").arg(dock);
    for (int i = 0; i < window.viewTabs()->count(); ++i) { // every view's minimum, not only the current one's
        window.viewTabs()->setCurrentIndex(i);
        QCoreApplication::processEvents();
        const QSize least = window.minimumSizeHint().expandedTo(window.minimumSize());
        if (least.width() > size.width() || least.height() > size.height())
            problems << QString("%1: the window cannot be smaller than %2x%3")
                            .arg(window.viewTabs()->widget(i)->objectName())
                            .arg(least.width())
                            .arg(least.height());
    }
    return problems;
}

// Text: elided labels that fit and keep their tool tip, tables that cut no name (and, from 1280
// px up, hide no column behind a sideways scroll bar), forms that never scroll sideways.
QStringList textProblems(QWidget* view, const QSize& size) {
    QStringList problems;
    for (ElidedLabel* l : view->findChildren<ElidedLabel*>()) {
        if (!l->isVisible()) continue;
        if (l->fontMetrics().horizontalAdvance(l->text()) > l->contentsRect().width() || l->toolTip() != l->fullText() ||
            (l->text() != l->fullText() && !l->text().contains(QChar(0x2026))))
            problems << QString("%1/%2: '%3' does not fit or lost its tooltip").arg(view->objectName(), l->objectName(), l->text());
    }
    for (QTableView* t : view->findChildren<QTableView*>()) {
        if (!t->isVisible() || !t->model() || t->model()->columnCount() == 0) continue;
        if (size.width() >= 1280 && t->horizontalScrollBar()->maximum() > 0)
            // The bar counts pixels or, scrolling per item (a table's default), columns.
            problems << QString("%1/%2: columns hidden behind a horizontal scroll bar (%3 %4)")
                            .arg(view->objectName(), t->objectName())
                            .arg(t->horizontalScrollBar()->maximum())
                            .arg(t->horizontalScrollMode() == QAbstractItemView::ScrollPerPixel ? "px" : "columns");
        // Narrower, a table may scroll sideways, but never cuts a name (issue 71).
        const int column = t->horizontalHeader()->sectionSize(0);
        const int margins = 2 * (t->style()->pixelMetric(QStyle::PM_FocusFrameHMargin, nullptr, t) + 1);
        for (int r = 0; r < t->model()->rowCount(); ++r) {
            const QString text = t->model()->index(r, 0).data().toString();
            if (t->fontMetrics().horizontalAdvance(text) + margins > column)
                problems << QString("%1/%2: '%3' is cut in a column of %4 px").arg(view->objectName(), t->objectName(), text).arg(column);
        }
    }
    for (QScrollArea* a : view->findChildren<QScrollArea*>())
        if (a->isVisible() && a->widget() && a->widget()->width() > a->viewport()->width())
            problems << QString("%1/%2: the form is %3 px wide in %4 px")
                            .arg(view->objectName(), a->widget()->objectName())
                            .arg(a->widget()->width())
                            .arg(a->viewport()->width());
    return problems;
}

// One axis: two labels at least, none overlapping.
QStringList axisProblems(const QString& where, QCPAxis* axis) {
    QStringList problems;
    const auto spans = labelSpans(axis);
    const char* which = axis->orientation() == Qt::Horizontal ? "x" : "y";
    // A scale needs two numbers to be read (a lone "0" under 40 steps says nothing).
    if (axis->visible() && axis->tickLabels() && spans.size() < 2)
        problems << QString("%1 %2 axis: %3 tick label(s) over %4 .. %5")
                        .arg(where, which)
                        .arg(spans.size())
                        .arg(axis->range().lower)
                        .arg(axis->range().upper);
    for (int i = 1; i < spans.size(); ++i)
        if (spans[i].lo < spans[i - 1].hi - 0.5)
            problems << QString("%1 %2 axis: tick labels '%3' and '%4' overlap").arg(where, which, spans[i - 1].text, spans[i].text);
    return problems;
}

// Names above peaks (the largest channels) never run together or leave the plot.
QStringList peakNameProblems(const QString& where, QCustomPlot* p) {
    QStringList problems;
    QVector<QRectF> names;
    for (int i = 0; i < p->itemCount(); ++i) {
        auto* t = qobject_cast<QCPItemText*>(p->item(i));
        if (!t || !t->visible() || t->objectName() != QLatin1String("peakLabel")) continue;
        const QPointF at = t->position->pixelPosition();
        const QFontMetricsF fm(t->font());
        const double w = fm.horizontalAdvance(t->text());
        // Where QCustomPlot draws it: centred on its point, or beginning or ending there.
        const Qt::Alignment a = t->positionAlignment();
        const double left = a & Qt::AlignLeft ? at.x() : a & Qt::AlignRight ? at.x() - w : at.x() - w / 2;
        const QRectF r(left, at.y() - fm.height(), w, fm.height());
        const QRectF axes(p->axisRect()->rect());
        if (r.left() < axes.left() || r.right() > axes.right() || r.top() < 0 || r.bottom() > p->height())
            problems << QString("%1: name '%2' leaves the plot or crosses an axis").arg(where, t->text());
        for (const QRectF& o : names)
            if (o.intersects(r)) problems << QString("%1: name '%2' overlaps another").arg(where, t->text());
        names << r;
    }
    return problems;
}

// One plot: the palette's colours, its axes, its legend and peak names.
QStringList plotProblems(QWidget* view, QCustomPlot* p) {
    QStringList problems;
    const QString where = view->objectName() + "/" + p->objectName();
    // In the palette's colours, whichever theme was chosen after the plot was built.
    if (p->xAxis->tickLabelColor() != view->palette().color(QPalette::Text))
        problems << QString("%1: axis labels in %2 on a palette whose text is %3")
                        .arg(where, p->xAxis->tickLabelColor().name(), view->palette().color(QPalette::Text).name());
    for (QCPAxis* axis : p->axisRect()->axes()) problems << axisProblems(where, axis);
    for (int i = 0; p->legend->visible() && i < p->legend->itemCount(); ++i) {
        QCPAbstractLegendItem* item = p->legend->item(i);
        if (!item) continue; // an empty cell of the last row
        if (item->outerRect().width() + 0.5 < item->minimumOuterSizeHint().width())
            problems << QString("%1: legend entry %2 is cut (%3 of %4 px)")
                            .arg(where)
                            .arg(i)
                            .arg(item->outerRect().width())
                            .arg(item->minimumOuterSizeHint().width());
    }
    problems << peakNameProblems(where, p);
    const double cover = legendCover(p);
    if (cover > 0.02) problems << QString("%1: the legend covers %2% of the points").arg(where).arg(cover * 100, 0, 'f', 1);
    return problems;
}

} // namespace

QStringList layoutProblems(MainWindow& window) {
    const int current = window.viewTabs()->currentIndex();
    QStringList problems = windowProblems(window);
    for (int tab = 0; tab < window.viewTabs()->count(); ++tab) {
        QWidget* view = window.viewTabs()->widget(tab);
        window.viewTabs()->setCurrentIndex(tab);
        // Layouts settle and the queued replots run, as they would before a user looks.
        for (int i = 0; i < 5; ++i) {
            QCoreApplication::sendPostedEvents();
            QCoreApplication::processEvents();
        }
        problems << textProblems(view, window.size());
        for (QCustomPlot* p : view->findChildren<QCustomPlot*>())
            if (p->isVisible() && p->width() >= 50 && p->height() >= 50) problems << plotProblems(view, p);
    }
    window.viewTabs()->setCurrentIndex(current);
    return problems;
}

} // namespace latmix::gui
