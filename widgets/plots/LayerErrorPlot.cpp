#include "LayerErrorPlot.h"

#include "PlotStyle.h"

#include <qcustomplot.h>

#include <algorithm>
#include <map>

namespace latmix::gui {

LayerErrorPlot::LayerErrorPlot(QCustomPlot* plot, QObject* parent) : QObject(parent), m_plot(plot) {
    m_plot->xAxis->setLabel(tr("layer"));
    PlotStyle::integerTicks(m_plot->xAxis);
    // Empty until a run quantizes (issue 71: in a real X window an empty frame read as a failure).
    m_hint = new QCPItemText(m_plot);
    m_hint->setObjectName(QStringLiteral("layerErrorHint"));
    m_hint->position->setType(QCPItemPosition::ptAxisRectRatio);
    m_hint->position->setCoords(0.5, 0.5);
    m_hint->setText(tr("Each layer's error appears here\nas Run calibration quantizes it"));
    m_hint->setColor(m_plot->palette().color(QPalette::PlaceholderText));
}

void LayerErrorPlot::clear() {
    m_points.clear();
    redraw();
}

QString LayerErrorPlot::kindOf(const QString& linear) {
    const QString last = linear.section(QLatin1Char('.'), -1);
    return linear.contains(QLatin1String("experts.")) ? QStringLiteral("experts.") + last : last;
}

void LayerErrorPlot::addLayer(int layer, const std::vector<std::pair<std::string, double>>& errors) {
    std::map<QString, std::pair<double, int>> sums; // kind → (sum, count): experts averaged
    for (const auto& [linear, error] : errors) {
        auto& s = sums[kindOf(QString::fromStdString(linear))];
        s.first += error;
        ++s.second;
    }
    for (const auto& [kind, s] : sums) m_points[kind].append({layer, s.first / s.second});
    redraw();
}

QVector<QPair<int, double>> LayerErrorPlot::points(const QString& kind) const { return m_points.value(kind); }

void LayerErrorPlot::redraw() {
    m_plot->clearGraphs();
    m_hint->setVisible(m_points.isEmpty());
    int i = 0;
    for (auto it = m_points.cbegin(); it != m_points.cend(); ++it, ++i) {
        QCPGraph* g = m_plot->addGraph();
        g->setName(it.key());
        g->setPen(QPen(PlotStyle::seriesColour(i), 1.5));
        g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 4));
        for (const auto& [layer, error] : it.value()) g->addData(layer, error);
    }
    // A linear axis from 0: the kinds of linear sit within a decade of each other, and a log axis
    // over so narrow a range showed a single tick label (seen in a real X window).
    m_plot->rescaleAxes();
    m_plot->xAxis->setRange(m_plot->xAxis->range().lower - 0.5, m_plot->xAxis->range().upper + 0.5);
    m_plot->yAxis->setRange(0, std::max(1e-12, m_plot->yAxis->range().upper * 1.1));
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

} // namespace latmix::gui
