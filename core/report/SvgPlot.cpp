#include "report/SvgPlot.h"

#include "util/Text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <utility>

namespace latmix::report {

using util::exactNumber;
namespace {

// The series colours of the GUI's plots (widgets/views/TrainingDashboard), then two more.
const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f"};

std::string px(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.3f", v);
    return b;
}

// A tick value without the last bits of float noise (0.018000000000000002 -> 0.018).
double clean(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.12g", v);
    return std::strtod(b, nullptr);
}

std::string tickText(double v, double step) {
    if (std::abs(v) < step * 1e-6) v = 0;
    char b[32];
    if (step >= 1e-3 && std::abs(v) < 1e6) {
        const int digits = std::clamp(static_cast<int>(-std::floor(std::log10(step) + 1e-9)), 0, 6);
        std::snprintf(b, sizeof b, "%.*f", digits, v);
    } else {
        std::snprintf(b, sizeof b, "%.3g", v);
    }
    return b;
}

// Approximate width of a text at 11 px sans-serif: enough to lay out the legend.
double textWidth(const std::string& s) {
    std::size_t chars = 0;
    for (unsigned char c : s) chars += (c & 0xC0) != 0x80; // UTF-8: count code points
    return 6.4 * static_cast<double>(chars);
}

} // namespace

std::string escapeXml(const std::string& text) {
    std::string out;
    out.reserve(text.size());
    for (char c : text) {
        switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&quot;"; break;
        case '\'': out += "&#39;"; break;
        default: out += c;
        }
    }
    return out;
}

Axis niceAxis(double lo, double hi, int ticks, bool extend, bool integer) {
    if (!std::isfinite(lo) || !std::isfinite(hi)) lo = 0, hi = 1;
    if (hi < lo) std::swap(lo, hi);
    if (!(hi > lo)) {
        const double pad = integer ? 1.0 : lo != 0 ? std::abs(lo) * 0.1 : 1.0;
        lo -= pad;
        hi += pad;
    }
    Axis a;
    const double raw = (hi - lo) / std::max(ticks, 1);
    const double mag = std::pow(10.0, std::floor(std::log10(raw)));
    const double norm = raw / mag;
    a.step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
    if (integer) a.step = std::max(1.0, std::round(a.step));
    a.min = extend ? clean(std::floor(lo / a.step + 1e-9) * a.step) : lo;
    a.max = extend ? clean(std::ceil(hi / a.step - 1e-9) * a.step) : hi;
    const auto first = static_cast<long long>(std::ceil(a.min / a.step - 1e-9));
    const auto last = static_cast<long long>(std::floor(a.max / a.step + 1e-9));
    for (long long k = first; k <= last; ++k) {
        double v = clean(static_cast<double>(k) * a.step);
        if (std::abs(v) < a.step * 1e-9) v = 0; // no "-0"
        a.ticks.push_back(v);
    }
    return a;
}

namespace {

// The plot's box in the SVG and its axes; x and y mapped into the box.
struct Frame {
    double left, top, boxW, boxH;
    Axis ax, ay;
    double mapX(double x) const { return left + (x - ax.min) / (ax.max - ax.min) * boxW; }
    double mapY(double y) const { return top + (ay.max - y) / (ay.max - ay.min) * boxH; }
};

struct LegendItem {
    double x, y;
    std::size_t series;
};

// Legend rows under the title (only with several series), wrapped at the right edge; returns
// the box's top below them.
double layoutLegend(const std::vector<PlotSeries>& series, double width, double left, double right,
                    std::vector<LegendItem>& legend) {
    double top = 30;
    if (series.size() <= 1) return top;
    double x = left, y = top + 4;
    for (std::size_t i = 0; i < series.size(); ++i) {
        const double w = 28 + textWidth(series[i].name) + 14;
        if (x + w > width - right && x > left) {
            x = left;
            y += 16;
        }
        legend.push_back({x, y, i});
        x += w;
    }
    return y + 14;
}

// Grid, ticks, their labels and the axis labels.
void writeAxes(std::ostringstream& s, const Frame& f, const PlotOptions& o) {
    const double left = f.left, top = f.top, boxW = f.boxW, boxH = f.boxH;
    s << "<g class=\"grid\">\n";
    for (double t : f.ax.ticks) {
        const double x = f.mapX(t);
        s << "<line x1=\"" << px(x) << "\" y1=\"" << px(top) << "\" x2=\"" << px(x) << "\" y2=\"" << px(top + boxH)
          << "\"/>\n";
    }
    for (double t : f.ay.ticks) {
        const double y = f.mapY(t);
        s << "<line x1=\"" << px(left) << "\" y1=\"" << px(y) << "\" x2=\"" << px(left + boxW) << "\" y2=\"" << px(y)
          << "\"/>\n";
    }
    s << "</g>\n<g class=\"axis\">\n";
    s << "<rect x=\"" << px(left) << "\" y=\"" << px(top) << "\" width=\"" << px(boxW) << "\" height=\"" << px(boxH)
      << "\" fill=\"none\"/>\n";
    for (double t : f.ax.ticks) {
        const double x = f.mapX(t);
        s << "<line x1=\"" << px(x) << "\" y1=\"" << px(top + boxH) << "\" x2=\"" << px(x) << "\" y2=\""
          << px(top + boxH + 4) << "\"/>";
        s << "<text class=\"tick x-tick\" x=\"" << px(x) << "\" y=\"" << px(top + boxH + 16)
          << "\" text-anchor=\"middle\">" << tickText(t, f.ax.step) << "</text>\n";
    }
    for (double t : f.ay.ticks) {
        const double y = f.mapY(t);
        s << "<line x1=\"" << px(left - 4) << "\" y1=\"" << px(y) << "\" x2=\"" << px(left) << "\" y2=\"" << px(y)
          << "\"/>";
        s << "<text class=\"tick y-tick\" x=\"" << px(left - 6) << "\" y=\"" << px(y + 4)
          << "\" text-anchor=\"end\">" << tickText(t, f.ay.step) << "</text>\n";
    }
    s << "<text class=\"axis-label\" x=\"" << px(left + boxW / 2) << "\" y=\"" << px(top + boxH + 36)
      << "\" text-anchor=\"middle\">" << escapeXml(o.xLabel) << "</text>\n";
    s << "<text class=\"axis-label\" transform=\"translate(14 " << px(top + boxH / 2)
      << ") rotate(-90)\" text-anchor=\"middle\">" << escapeXml(o.yLabel) << "</text>\n";
    s << "</g>\n";
}

const char* colorOf(std::size_t series) { return kColors[series % (sizeof kColors / sizeof kColors[0])]; }

void writeLegend(std::ostringstream& s, const std::vector<LegendItem>& legend, const std::vector<PlotSeries>& series) {
    for (const auto& item : legend) {
        const char* c = colorOf(item.series);
        s << "<g class=\"legend\"><line x1=\"" << px(item.x) << "\" y1=\"" << px(item.y - 4) << "\" x2=\""
          << px(item.x + 22) << "\" y2=\"" << px(item.y - 4) << "\" stroke=\"" << c << "\" stroke-width=\"2\""
          << (series[item.series].dashed ? " stroke-dasharray=\"5 3\"" : "") << "/><text x=\"" << px(item.x + 28) << "\" y=\"" << px(item.y) << "\">"
          << escapeXml(series[item.series].name) << "</text></g>\n";
    }
}

// One series: a polyline per run of finite points (a gap splits it unless connectGaps), with
// markers where asked or where a run is a single point.
void writeSeries(std::ostringstream& s, const Frame& f, const PlotSeries& ser, std::size_t si) {
    const char* c = colorOf(si);
    std::vector<std::vector<std::pair<double, double>>> runs(1);
    const std::size_t n = std::min(ser.x.size(), ser.y.size());
    for (std::size_t i = 0; i < n; ++i) {
        if (std::isfinite(ser.x[i]) && std::isfinite(ser.y[i])) {
            runs.back().emplace_back(f.mapX(ser.x[i]), f.mapY(ser.y[i]));
        } else if (!ser.connectGaps && !runs.back().empty()) {
            runs.emplace_back();
        }
    }
    const std::string key = escapeXml(ser.key.empty() ? ser.name : ser.key);
    s << "<g class=\"series-group\" data-series=\"" << key << "\">\n";
    for (const auto& run : runs) {
        if (run.empty()) continue;
        s << "<polyline class=\"series\" data-series=\"" << key << "\" fill=\"none\" stroke=\"" << c
          << "\" stroke-width=\"1.5\"" << (ser.dashed ? " stroke-dasharray=\"5 3\"" : "") << " points=\"";
        for (std::size_t i = 0; i < run.size(); ++i)
            s << (i ? " " : "") << px(run[i].first) << "," << px(run[i].second);
        s << "\"/>\n";
        if (ser.markers || run.size() == 1)
            for (const auto& p : run)
                s << "<circle cx=\"" << px(p.first) << "\" cy=\"" << px(p.second) << "\" r=\"2.5\" fill=\"" << c
                  << "\"/>\n";
    }
    s << "</g>\n";
}

} // namespace

std::string svgLinePlot(const std::vector<PlotSeries>& series, const PlotOptions& o) {
    const double width = o.width, height = o.height;
    const double left = 72, right = 18, bottom = 46;
    std::vector<LegendItem> legend;
    const double top = layoutLegend(series, width, left, right, legend);
    const double boxW = width - left - right, boxH = std::max(40.0, height - top - bottom);
    const double svgH = top + boxH + bottom;

    double xlo = std::numeric_limits<double>::infinity(), xhi = -xlo, ylo = xlo, yhi = -xlo;
    for (const auto& s : series)
        for (std::size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i)
            if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) {
                xlo = std::min(xlo, s.x[i]);
                xhi = std::max(xhi, s.x[i]);
                ylo = std::min(ylo, s.y[i]);
                yhi = std::max(yhi, s.y[i]);
            }
    const bool empty = !std::isfinite(xlo);
    const Frame f{left, top, boxW, boxH,
                  niceAxis(empty ? 0 : xlo, empty ? 1 : xhi, std::max(2, static_cast<int>(boxW / 80)), false, o.integerX),
                  niceAxis(empty ? 0 : ylo, empty ? 1 : yhi, std::max(2, static_cast<int>(boxH / 45)), true)};

    std::ostringstream s;
    s << "<svg class=\"plot\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << o.width << "\" height=\""
      << px(svgH) << "\" viewBox=\"0 0 " << o.width << " " << px(svgH) << "\" role=\"img\" data-title=\""
      << escapeXml(o.title) << "\" data-left=\"" << px(left) << "\" data-top=\"" << px(top) << "\" data-width=\""
      << px(boxW) << "\" data-height=\"" << px(boxH) << "\" data-xmin=\"" << exactNumber(f.ax.min) << "\" data-xmax=\""
      << exactNumber(f.ax.max) << "\" data-ymin=\"" << exactNumber(f.ay.min) << "\" data-ymax=\"" << exactNumber(f.ay.max)
      << "\">\n";
    s << "<title>" << escapeXml(o.title) << "</title>\n";
    s << "<text class=\"plot-title\" x=\"" << px(left + boxW / 2) << "\" y=\"18\" text-anchor=\"middle\">"
      << escapeXml(o.title) << "</text>\n";
    writeAxes(s, f, o);
    writeLegend(s, legend, series);
    if (empty)
        s << "<text class=\"no-data\" x=\"" << px(left + boxW / 2) << "\" y=\"" << px(top + boxH / 2)
          << "\" text-anchor=\"middle\">no data</text>\n";
    for (std::size_t si = 0; si < series.size(); ++si) writeSeries(s, f, series[si], si);
    s << "</svg>\n";
    return s.str();
}

} // namespace latmix::report
