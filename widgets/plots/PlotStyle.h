#pragma once
// Plots draw themselves, so they follow the widget palette (light / dark theme) by hand.
#include <QFont>
#include <QList>
#include <QPalette>
#include <QColor>
#include <QPointF>
#include <QSharedPointer>
#include <QString>
#include <QStringList>
#include <QVector>

class QCPAxis;
class QCPAxisTickerLog;
class QCPColorMap;
class QCustomPlot;
class QWidget;

namespace at {
class Tensor;
}

namespace latmix::gui::PlotStyle {

// Background, axes, grid, legend and title in the palette's Base / Text colours; also
// fitTicks (connected once per plot).
void apply(QCustomPlot* plot, const QPalette& palette);
// apply to each plot, then replot it (a view's palette changed); queued: at the next event loop turn.
void restyle(const QList<QCustomPlot*>& plots, const QPalette& palette, bool queued = false);

// The ticker of every logarithmic axis: QCustomPlot's (powers of the base), except that over
// less than 1.6 powers of ten QCustomPlot places evenly spaced linear steps, which bunch up at
// the top of a log axis (0.00025, 0.0005, … 0.00125 over 6e-5 … 1.3e-3: the last two labels
// run together). There the ticks are, of d × 10^k for the digit sets {1}, {1, 3}, {1, 2, 5},
// {1, …, 9} and of QCustomPlot's linear steps, the set with the most ticks (two to
// tickCount + 1) none of which is nearer the next than half an even spread on the axis (as
// matplotlib's log locator labels narrow ranges); QCustomPlot's linear steps when none is.
QSharedPointer<QCPAxisTickerLog> logTicker(int tickCount = 5);

// Ticks at whole numbers only, for an axis that counts things (layers, experts, MX blocks,
// channels, tokens, steps, rows): four layers get 0, 1, 2, 3 on a tall axis, never -0.5 or 1.5.
// The step is a nice multiple of 1 when the count fitTicks asks for would be denser.
void integerTicks(QCPAxis* axis);

// The legend moved out of the axis rect into centred rows right above it (as many entries a row
// as fit the plot's width, fitTicks):
// inside the axes a legend hides exactly what matters (outlier spikes, the worst blocks).
// Nothing happens when it is already outside.
void placeLegendAbove(QCustomPlot* plot);

// A bold title on top, then the legend above the axis rect (placeLegendAbove).
void addTitleAndLegend(QCustomPlot* plot, const QString& title, const QFont& base);

// The text of the title addTitleAndLegend (or any title in the layout's first cell) put on top;
// nothing when the plot has none.
void setTitle(QCustomPlot* plot, const QString& title);

// A view's plot: object name, a minimum size of 240×180, addTitleAndLegend with parent's font,
// and the context menu that exports it (PlotExport).
QCustomPlot* newPlot(QWidget* parent, const char* objectName, const QString& title);

// Names above points of a plot (the largest channels), given in order of importance: a text
// (object name "peakLabel") centred above each point, or beginning (ending) at it where the point
// is too near the axes' left (right) end for that. Before every replot, at most maxShown are
// shown: a name whose text would overlap one shown before it, or leave the plot, is hidden,
// so the most important names always show and none run together at any plot size.
void addPeakLabels(QCustomPlot* plot, const QVector<QPointF>& points, const QStringList& texts, const QColor& colour,
                   int maxShown = 5);

// Tick counts from the axis length: before every replot each axis asks for as many ticks as
// labels of its current width (horizontal) or two text lines (vertical) fit, 1 to 8, so labels
// never run together ("0102030405060") on a narrow plot; where one step fits, that step exactly,
// so that two ticks are labelled. A layout that resized an axis to fit another count draws once more. Axes with
// hand-placed text labels keep them. A legend above the axes gets as many entries a row as fit.
// Connected once per plot.
void fitTicks(QCustomPlot* plot);

// A heat map redrawn: the plot's plottables and the colour scales an earlier addHeatmap put
// beside the axes removed.
void clearHeatmap(QCustomPlot* plot);
// A colour map of keys × values cells on the plot's axes (cells to fill, ranges to set), with its
// colour scale labelled scaleLabel right of the axes (logarithmic when asked, its margins aligned
// with the axis rect's), the thermal gradient, no interpolation, out of the legend.
QCPColorMap* addHeatmap(QCustomPlot* plot, int keys, int values, const QString& scaleLabel, bool logScale);

// A tensor's values as a plot series, in float64 (empty for an undefined tensor).
QVector<double> values(const at::Tensor& t);

// The i-th series' colour (eight of them, then again): the runs' curves, the layers' error curves.
QColor seriesColour(int i);

} // namespace latmix::gui::PlotStyle
