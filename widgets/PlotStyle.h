#pragma once
// Plots draw themselves, so they follow the widget palette (light / dark theme) by hand.
#include <QFont>
#include <QPalette>
#include <QString>

class QCustomPlot;

namespace latmix::gui::PlotStyle {

// Background, axes, grid, legend and title in the palette's Base / Text colours.
void apply(QCustomPlot* plot, const QPalette& palette);

// A bold title on top, then the legend as one centred horizontal row between the title and the
// axis rect: inside the axes a legend hides exactly what matters (outlier spikes, worst blocks).
void addTitleAndLegend(QCustomPlot* plot, const QString& title, const QFont& base);

} // namespace latmix::gui::PlotStyle
