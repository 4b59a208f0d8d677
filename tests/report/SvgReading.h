#pragma once
// Reading the SVG that report/SvgPlot writes, for the tests: a start tag's attributes, whether
// the SVG is well-formed, the axis mapping it states (data-left, data-xmin, ...) and its
// polylines mapped back to data through it.
#include <QMap>
#include <QRegularExpression>
#include <QString>
#include <QStringList>
#include <QXmlStreamReader>

#include <utility>
#include <vector>

namespace latmix::test {

// An attribute's text with the five XML entities read back.
inline QString unescape(QString s) {
    s.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&#39;", "'");
    return s.replace("&amp;", "&");
}

// The attributes of one start tag.
inline QMap<QString, QString> attributes(const QString& tag) {
    QMap<QString, QString> a;
    static const QRegularExpression re("([A-Za-z_:][-A-Za-z0-9_:.]*)=\"([^\"]*)\"");
    for (auto it = re.globalMatch(tag); it.hasNext();) {
        const auto m = it.next();
        a[m.captured(1)] = unescape(m.captured(2));
    }
    return a;
}

// The SVG's stated axis mapping, and its polylines' points mapped back to data.
struct Plot {
    double left = 0, top = 0, width = 0, height = 0, xmin = 0, xmax = 0, ymin = 0, ymax = 0;
    // Per polyline of a series: data points.
    std::vector<std::vector<std::pair<double, double>>> lines(const QString& svg, const QString& series) const {
        std::vector<std::vector<std::pair<double, double>>> out;
        static const QRegularExpression re("<polyline [^>]*>");
        for (auto it = re.globalMatch(svg); it.hasNext();) {
            const auto a = attributes(it.next().captured(0));
            if (a.value("data-series") != series) continue;
            std::vector<std::pair<double, double>> pts;
            for (const QString& p : a.value("points").split(' ', Qt::SkipEmptyParts)) {
                const QStringList xy = p.split(',');
                const double px = xy.value(0).toDouble(), py = xy.value(1).toDouble();
                pts.emplace_back(xmin + (px - left) / width * (xmax - xmin), ymax - (py - top) / height * (ymax - ymin));
            }
            out.push_back(pts);
        }
        return out;
    }
    // The data error of one printed pixel coordinate (3 decimals: ±0.0005 px), with margin.
    double xTol() const { return 0.001 / width * (xmax - xmin) + 1e-12; }
    double yTol() const { return 0.001 / height * (ymax - ymin) + 1e-12; }
};

inline Plot plotOf(const QString& svg) {
    const auto a = attributes(svg.left(svg.indexOf('>') + 1));
    Plot p;
    p.left = a.value("data-left").toDouble();
    p.top = a.value("data-top").toDouble();
    p.width = a.value("data-width").toDouble();
    p.height = a.value("data-height").toDouble();
    p.xmin = a.value("data-xmin").toDouble();
    p.xmax = a.value("data-xmax").toDouble();
    p.ymin = a.value("data-ymin").toDouble();
    p.ymax = a.value("data-ymax").toDouble();
    return p;
}

// Why an SVG is not well-formed XML ("" when it is).
inline QString xmlError(const QString& svg) {
    QXmlStreamReader r(svg);
    while (!r.atEnd()) r.readNext();
    return r.hasError() ? r.errorString() + " at line " + QString::number(r.lineNumber()) : QString();
}

} // namespace latmix::test
