#include "AnalysisPlots.h"
#include "PlotStyle.h"

#include <qcustomplot.h>

#include <QColor>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace latmix::gui::AnalysisPlots {
namespace {

// tab10: distinguishable, and readable on light and dark backgrounds.
const QColor kPalette[] = {{0x1f, 0x77, 0xb4}, {0xff, 0x7f, 0x0e}, {0x2c, 0xa0, 0x2c}, {0xd6, 0x27, 0x28},
                           {0x94, 0x67, 0xbd}, {0x8c, 0x56, 0x4b}, {0xe3, 0x77, 0xc2}, {0x7f, 0x7f, 0x7f},
                           {0xbc, 0xbd, 0x22}, {0x17, 0xbe, 0xcf}};

void prepare(QCustomPlot* p, const QString& title, const QString& xLabel, const QString& yLabel) {
    p->clearGraphs();
    p->clearPlottables();
    if (p->plotLayout()->rowCount() > 1 || !p->plotLayout()->hasElement(0, 0) ||
        !qobject_cast<QCPAxisRect*>(p->plotLayout()->element(0, 0))) {
        // Already prepared once: only the title text changes.
        PlotStyle::setTitle(p, title);
    } else {
        p->plotLayout()->insertRow(0);
        QFont f = p->font();
        f.setBold(true);
        f.setPointSize(f.pointSize() + 1);
        p->plotLayout()->addElement(0, 0, new QCPTextElement(p, title, f));
    }
    p->xAxis->setLabel(xLabel);
    p->yAxis->setLabel(yLabel);
    p->yAxis->setScaleType(QCPAxis::stLogarithmic);
    p->yAxis->setTicker(PlotStyle::logTicker());
    p->yAxis->setNumberFormat("g"); // plain 0.035: the ranges here span one or two decades
    p->yAxis->setNumberPrecision(3); // 0.0125: linear steps of a narrow range (PlotStyle::logTicker)
    p->legend->setVisible(true);
    PlotStyle::placeLegendAbove(p); // one name per transform: inside the axes it would hide curves
}

QPen penFor(int i) { return QPen(kPalette[i % 10], 2.0); }

// Log axes cannot show zeros; the smallest positive value sets the floor.
void fitLogRange(QCustomPlot* p) {
    p->rescaleAxes();
    QCPRange r = p->yAxis->range();
    if (r.lower <= 0) r.lower = r.upper * 1e-6;
    p->yAxis->setRange(r.lower / 1.5, r.upper * 1.5);
}

bool save(QCustomPlot& p, const QString& file, QString* error, int width, int height) {
    p.resize(width, height);
    p.replot();
    if (p.savePng(file, width, height)) return true;
    if (error) *error = QStringLiteral("cannot write '%1'").arg(file);
    return false;
}

QVector<double> doubles(const QJsonValue& v) {
    QVector<double> out;
    for (const auto& x : v.toArray()) out.push_back(x.toDouble());
    return out;
}

QVector<PointCurves> parseAnalysis(const QJsonObject& root, const QString& file) {
    const auto need = [&](const QJsonObject& o, const char* key) {
        if (!o.contains(QLatin1String(key)))
            throw std::runtime_error("analysis file '" + file.toStdString() + "' lacks the field '" + key + "'");
        return o.value(QLatin1String(key));
    };
    const QJsonObject attributes = root.value(QStringLiteral("attributes")).toObject();
    QString format = attributes.value(QStringLiteral("format")).toString();
    if (attributes.contains(QStringLiteral("block")))
        format += QStringLiteral(", block ") + attributes.value(QStringLiteral("block")).toVariant().toString();
    QVector<PointCurves> out;
    for (const auto& pv : need(root, "points").toArray()) {
        const QJsonObject p = pv.toObject();
        PointCurves c;
        c.point = need(p, "name").toString();
        c.format = format;
        for (const auto& tv : need(p, "transforms").toArray()) {
            const QJsonObject t = tv.toObject();
            if (t.contains(QStringLiteral("error"))) continue; // e.g. no Hadamard for this width
            TransformCurves tc;
            tc.transform = need(t, "kind").toString();
            tc.perBlockError = doubles(need(t, "per_block_error"));
            for (const auto& sv : t.value(QStringLiteral("sweep")).toArray()) {
                tc.sweepBlocks.push_back(sv.toObject().value(QStringLiteral("block")).toDouble());
                tc.sweepMse.push_back(sv.toObject().value(QStringLiteral("mse")).toDouble());
            }
            c.transforms.push_back(tc);
        }
        out.push_back(c);
    }
    return out;
}

} // namespace

void drawPerBlockError(QCustomPlot* p, const PointCurves& c) {
    prepare(p, QStringLiteral("Per-block error, %1 (%2)").arg(c.point, c.format), QStringLiteral("MX block index"),
            QStringLiteral("E_B (mean squared error per block)"));
    for (int i = 0; i < c.transforms.size(); ++i) {
        const auto& t = c.transforms[i];
        QVector<double> x(t.perBlockError.size());
        for (int k = 0; k < x.size(); ++k) x[k] = k;
        auto* g = p->addGraph();
        g->setName(t.transform);
        g->setPen(penFor(i));
        g->setLineStyle(QCPGraph::lsStepCenter);
        g->setData(x, t.perBlockError, true);
    }
    fitLogRange(p);
    int blocks = 0;
    for (const auto& t : c.transforms) blocks = std::max(blocks, static_cast<int>(t.perBlockError.size()));
    p->xAxis->setRange(-0.5, blocks - 0.5); // centred steps reach half a block beyond the ends
    PlotStyle::integerTicks(p->xAxis);
}

void drawBlockSizeSweep(QCustomPlot* p, const PointCurves& c) {
    prepare(p, QStringLiteral("E(T) vs MX block size, %1 (%2)").arg(c.point, c.format), QStringLiteral("block size B"),
            QStringLiteral("E(T)"));
    p->xAxis->setScaleType(QCPAxis::stLogarithmic);
    auto ticker = PlotStyle::logTicker();
    ticker->setLogBase(2);
    p->xAxis->setTicker(ticker);
    p->xAxis->setNumberFormat("f");
    p->xAxis->setNumberPrecision(0);
    for (int i = 0; i < c.transforms.size(); ++i) {
        const auto& t = c.transforms[i];
        auto* g = p->addGraph();
        g->setName(t.transform);
        g->setPen(penFor(i));
        g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 6));
        g->setData(t.sweepBlocks, t.sweepMse, true);
    }
    fitLogRange(p);
    p->xAxis->setRange(p->xAxis->range().lower / 1.3, p->xAxis->range().upper * 1.3);
}

bool savePerBlockErrorPng(const PointCurves& c, const QString& file, QString* error, int width, int height) {
    QCustomPlot p;
    drawPerBlockError(&p, c);
    return save(p, file, error, width, height);
}

bool saveBlockSizeSweepPng(const PointCurves& c, const QString& file, QString* error, int width, int height) {
    QCustomPlot p;
    drawBlockSizeSweep(&p, c);
    return save(p, file, error, width, height);
}

QVector<PointCurves> loadAnalysisJson(const QString& file) {
    QFile f(file);
    if (!f.open(QIODevice::ReadOnly)) throw std::runtime_error("cannot read analysis file '" + file.toStdString() + "'");
    QJsonParseError perr;
    const QJsonDocument doc = QJsonDocument::fromJson(f.readAll(), &perr);
    if (doc.isNull())
        throw std::runtime_error("'" + file.toStdString() + "' is not JSON: " + perr.errorString().toStdString());
    return parseAnalysis(doc.object(), file);
}

} // namespace latmix::gui::AnalysisPlots
