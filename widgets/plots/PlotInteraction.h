#pragma once
// What every workbench plot does under the mouse, set in one place (issue 71): drag to pan and
// the wheel to zoom (each axis rectangle's axes), a readout of the point under the cursor (a
// graph's or bar's series, x and y with a tracer on the point; a colour map's cell and its
// value), and a context menu to reset the view and to export the picture or the data under a
// file name made from the view and the plot's title ("calibration-loss-objective.png").
#include <QString>

class QCustomPlot;

namespace latmix::gui::PlotInteraction {

void enable(QCustomPlot* plot);

// "<view>-<title>": the enclosing view's name without "View" and the plot's title (else its
// object name), lower case, words joined by '-'.
QString suggestedFileName(const QCustomPlot* plot);

// The readout's text for the point under pos (plot coordinates); empty where there is none.
QString readoutAt(QCustomPlot* plot, const QPointF& pos);

} // namespace latmix::gui::PlotInteraction
