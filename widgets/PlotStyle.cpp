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

} // namespace latmix::gui::PlotStyle
