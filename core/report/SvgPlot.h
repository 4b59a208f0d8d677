#pragma once
// Small self-contained SVG line plots for the HTML report: no script, no external resource, so a
// report opens offline and in any browser. The axis mapping is stated on the <svg> element so
// that a reader (a test, a script) can map the drawn points back to data:
//   data-left, data-top, data-width, data-height   the plot box in SVG user units (pixels)
//   data-xmin, data-xmax, data-ymin, data-ymax     the data values at its edges
//   px = left + (x − xmin) / (xmax − xmin) · width
//   py = top + (ymax − y) / (ymax − ymin) · height
// Each series is drawn as <polyline class="series" data-series="KEY" points="px,py ...">; a
// non-finite value ends a polyline and the next finite one starts a new one (a gap), unless the
// series connects across missing points (sparse series such as a value tracked every k steps).
#include <string>
#include <vector>

namespace latmix::report {

// Text for HTML and SVG: & < > " ' as entities.
std::string escapeXml(const std::string& text);


struct PlotSeries {
    std::string name;           // the legend's text
    std::string key;            // the polylines' data-series (empty: the name)
    std::vector<double> x, y;   // same length; a non-finite x or y is a missing point
    bool connectGaps = false;   // draw through missing points (sparse series)
    bool markers = false;       // a small circle at every finite point
    bool dashed = false;        // a dashed line (a second series close to the first)
};

struct PlotOptions {
    std::string title, xLabel, yLabel;
    int width = 600, height = 300; // the whole SVG
    bool integerX = false;         // x ticks at integers only (steps, layers)
};

// An axis: its range and the ticks inside it (multiples of 1, 2 or 5 × 10^k).
struct Axis {
    double min = 0, max = 1;
    std::vector<double> ticks;
    double step = 0.2;
};
// The axis over [lo, hi] with about `ticks` ticks; extend: the range grows to the ticks outside
// it (y axes), else it is [lo, hi] (x axes). An empty range (lo == hi) is widened around lo.
Axis niceAxis(double lo, double hi, int ticks, bool extend, bool integer = false);

// The plot: title, axes with tick labels and axis labels, a legend when several series, the
// series. A plot without any finite point says "no data" in its box.
std::string svgLinePlot(const std::vector<PlotSeries>& series, const PlotOptions& options);

} // namespace latmix::report
