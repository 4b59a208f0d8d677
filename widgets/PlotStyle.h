#pragma once
// Plots draw themselves, so they follow the widget palette (light / dark theme) by hand.
#include <QFont>
#include <QPalette>
#include <QString>
#include <QVector>

class QCustomPlot;

namespace at {
class Tensor;
}

namespace latmix::gui::PlotStyle {

// Background, axes, grid, legend and title in the palette's Base / Text colours; also
// fitTicks (connected once per plot).
void apply(QCustomPlot* plot, const QPalette& palette);

// The legend moved out of the axis rect into centred rows right above it (as many entries a row
// as fit the plot's width, fitTicks):
// inside the axes a legend hides exactly what matters (outlier spikes, the worst blocks).
// Nothing happens when it is already outside.
void placeLegendAbove(QCustomPlot* plot);

// A bold title on top, then the legend above the axis rect (placeLegendAbove).
void addTitleAndLegend(QCustomPlot* plot, const QString& title, const QFont& base);

// Tick counts from the axis length: before every replot each axis asks for as many ticks as
// labels of its current width (horizontal) or two text lines (vertical) fit, 1 to 8, so labels
// never run together ("0102030405060") on a narrow plot. Axes with hand-placed text labels keep
// them. A legend above the axes gets as many entries a row as fit. Connected once per plot.
void fitTicks(QCustomPlot* plot);

// A tensor's values as a plot series, in float64 (empty for an undefined tensor).
QVector<double> values(const at::Tensor& t);

} // namespace latmix::gui::PlotStyle
