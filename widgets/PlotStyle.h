#pragma once
// Plots draw themselves, so they follow the widget palette (light / dark theme) by hand.
#include <QPalette>

class QCustomPlot;

namespace latmix::gui::PlotStyle {

// Background, axes, grid, legend and title in the palette's Base / Text colours.
void apply(QCustomPlot* plot, const QPalette& palette);

} // namespace latmix::gui::PlotStyle
