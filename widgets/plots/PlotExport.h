#pragma once
// Export of any workbench plot: the picture as PNG, SVG or PDF and the plotted data as CSV.
// Every file is written under a temporary name and renamed when complete, so a failed or
// interrupted export never leaves a half-written file under the chosen name.
#include <QString>
#include <QStringList>

class QCustomPlot;

namespace latmix::gui::PlotExport {

// "PNG image (*.png)", "SVG image (*.svg)", "PDF document (*.pdf)", "CSV data (*.csv)".
QStringList fileFilters();

// The plotted data in long form, one row per point: "series,x,y" for graphs, curves and bars;
// a colour map adds its cells as "series,x,y,z" (x, y: cell centres). Series names are the
// plottables' names; the header names the axes.
QString dataCsv(QCustomPlot* plot);

// Writes the plot to path, the format chosen by its suffix (png, svg, pdf, csv). Returns an
// empty string on success, else a message naming the file and the cause.
QString save(QCustomPlot* plot, const QString& path, int width = 0, int height = 0);

} // namespace latmix::gui::PlotExport
