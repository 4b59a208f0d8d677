#include "PlotStyle.h"

#include <qcustomplot.h>

namespace latmix::gui::PlotStyle {

void apply(QCustomPlot* p, const QPalette& pal) {
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

// Title on top, then the legend as one horizontal row above the axis rect: inside the axes a
// legend would hide exactly what matters here (outlier spikes, the worst blocks).
void addTitleAndLegend(QCustomPlot* p, const QString& title, const QFont& base) {
    QFont bold = base;
    bold.setPointSize(base.pointSize() + 1);
    bold.setBold(true);
    p->plotLayout()->insertRow(0);
    p->plotLayout()->addElement(0, 0, new QCPTextElement(p, title, bold));
    p->legend->setVisible(true);
    p->axisRect()->insetLayout()->take(p->legend);
    // Centred: empty elements either side take the spare width (stretch 1 against ~0).
    auto* row = new QCPLayoutGrid;
    p->plotLayout()->insertRow(1);
    p->plotLayout()->addElement(1, 0, row);
    row->addElement(0, 0, new QCPLayoutElement(p));
    row->addElement(0, 1, p->legend);
    row->addElement(0, 2, new QCPLayoutElement(p));
    row->setColumnStretchFactors({1.0, 0.001, 1.0});
    p->legend->setFillOrder(QCPLegend::foColumnsFirst);
    p->legend->setColumnSpacing(24);
    p->legend->setBorderPen(Qt::NoPen);
    p->legend->setMargins(QMargins(4, 0, 4, 0));
    p->plotLayout()->setRowStretchFactor(0, 0.001);
    p->plotLayout()->setRowStretchFactor(1, 0.001);
    p->plotLayout()->setRowSpacing(0);
}

} // namespace latmix::gui::PlotStyle
