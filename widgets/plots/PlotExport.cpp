#include "PlotExport.h"

#include "util/AtomicFile.h"

#include <qcustomplot.h>

#include <QFile>
#include <QFileInfo>
#include <QPainter>
#include <QSaveFile>
#include <QSvgGenerator>
#include <QTextStream>

namespace latmix::gui::PlotExport {

namespace {

QString number(double v) { return QString::number(v, 'g', 10); }

QString quoted(QString s) {
    if (s.contains(',') || s.contains('"') || s.contains('\n')) s = '"' + s.replace('"', "\"\"") + '"';
    return s;
}

QString seriesName(const QCPAbstractPlottable* p, int index) {
    return p->name().isEmpty() ? QStringLiteral("series %1").arg(index + 1) : p->name();
}

// QCustomPlot writes PNG and PDF straight to the path: write to core's temporary name
// (util/AtomicFile) and rename it over the destination once the writer succeeded.
template <typename Write>
QString writeViaTemporary(const QString& path, Write&& write) {
    latmix::util::AtomicFile file(path.toStdString());
    if (!write(QString::fromStdString(file.tempPath())))
        return QStringLiteral("Cannot write %1: check the folder exists and is writable").arg(path);
    try {
        file.commit();
    } catch (const std::exception& e) {
        return QString::fromStdString(e.what());
    }
    return {};
}

} // namespace

QStringList fileFilters() {
    return {QStringLiteral("PNG image (*.png)"), QStringLiteral("SVG image (*.svg)"), QStringLiteral("PDF document (*.pdf)"),
            QStringLiteral("CSV data (*.csv)")};
}

QString dataCsv(QCustomPlot* plot) {
    QString out;
    QTextStream s(&out);
    const QString xName = plot->xAxis->label().isEmpty() ? QStringLiteral("x") : plot->xAxis->label();
    const QString yName = plot->yAxis->label().isEmpty() ? QStringLiteral("y") : plot->yAxis->label();
    bool hasMap = false;
    for (int i = 0; i < plot->plottableCount(); ++i)
        if (qobject_cast<QCPColorMap*>(plot->plottable(i))) hasMap = true;
    s << "series," << quoted(xName) << ',' << quoted(yName) << (hasMap ? ",z" : "") << '\n';
    for (int i = 0; i < plot->plottableCount(); ++i) {
        QCPAbstractPlottable* p = plot->plottable(i);
        const QString name = quoted(seriesName(p, i));
        const QString pad = hasMap ? QStringLiteral(",") : QString();
        if (auto* g = qobject_cast<QCPGraph*>(p)) {
            for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it)
                s << name << ',' << number(it->key) << ',' << number(it->value) << pad << '\n';
        } else if (auto* c = qobject_cast<QCPCurve*>(p)) {
            for (auto it = c->data()->constBegin(); it != c->data()->constEnd(); ++it)
                s << name << ',' << number(it->key) << ',' << number(it->value) << pad << '\n';
        } else if (auto* b = qobject_cast<QCPBars*>(p)) {
            for (auto it = b->data()->constBegin(); it != b->data()->constEnd(); ++it)
                s << name << ',' << number(it->key) << ',' << number(it->value) << pad << '\n';
        } else if (auto* m = qobject_cast<QCPColorMap*>(p)) {
            QCPColorMapData* d = m->data();
            for (int y = 0; y < d->valueSize(); ++y)
                for (int x = 0; x < d->keySize(); ++x) {
                    double kx = 0, vy = 0;
                    d->cellToCoord(x, y, &kx, &vy);
                    s << name << ',' << number(kx) << ',' << number(vy) << ',' << number(d->cell(x, y)) << '\n';
                }
        }
    }
    return out;
}

QString save(QCustomPlot* plot, const QString& path, int width, int height) {
    const QString suffix = QFileInfo(path).suffix().toLower();
    const int w = width > 0 ? width : plot->width(), h = height > 0 ? height : plot->height();
    if (suffix == QLatin1String("csv")) {
        QSaveFile f(path);
        if (!f.open(QIODevice::WriteOnly | QIODevice::Text)) return QStringLiteral("Cannot write %1: %2").arg(path, f.errorString());
        f.write(dataCsv(plot).toUtf8());
        if (!f.commit()) return QStringLiteral("Cannot write %1: %2").arg(path, f.errorString());
        return {};
    }
    if (suffix == QLatin1String("png"))
        return writeViaTemporary(path, [&](const QString& tmp) { return plot->savePng(tmp, w, h, 2.0, -1, 96, QCP::ruDotsPerInch) ; });
    if (suffix == QLatin1String("pdf"))
        return writeViaTemporary(path, [&](const QString& tmp) { return plot->savePdf(tmp, w, h, QCP::epNoCosmetic); });
    if (suffix == QLatin1String("svg")) {
        return writeViaTemporary(path, [&](const QString& tmp) {
            QSvgGenerator gen;
            gen.setFileName(tmp);
            gen.setSize(QSize(w, h));
            gen.setViewBox(QRect(0, 0, w, h));
            gen.setTitle(plot->objectName());
            QCPPainter painter;
            if (!painter.begin(&gen)) return false;
            plot->toPainter(&painter, w, h);
            return painter.end() && QFileInfo(tmp).size() > 0;
        });
    }
    return QStringLiteral("Cannot export to %1: unknown file type '.%2'; use .png, .svg, .pdf or .csv").arg(path, suffix);
}

} // namespace latmix::gui::PlotExport
