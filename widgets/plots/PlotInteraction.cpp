#include "PlotInteraction.h"

#include "PlotExport.h"

#include <qcustomplot.h>

#include <QFileDialog>
#include <QFileInfo>
#include <QMenu>
#include <QMessageBox>
#include <QRegularExpression>

namespace latmix::gui::PlotInteraction {
namespace {

QString number(double v) { return QString::number(v, 'g', 4); }

QString titleOf(const QCustomPlot* plot) {
    for (int i = 0; i < plot->plotLayout()->elementCount(); ++i)
        if (auto* t = qobject_cast<QCPTextElement*>(plot->plotLayout()->elementAt(i)); t && !t->text().isEmpty())
            return t->text();
    return {};
}

// The readout's tracer and label, made the first time the mouse moves over the plot.
struct Readout {
    QCPItemTracer* tracer;
    QCPItemText* label;
};

Readout readoutItems(QCustomPlot* plot) {
    auto* tracer = plot->findChild<QCPItemTracer*>(QStringLiteral("hoverTracer"));
    auto* label = plot->findChild<QCPItemText*>(QStringLiteral("hoverLabel"));
    if (tracer && label) return {tracer, label};
    tracer = new QCPItemTracer(plot);
    tracer->setObjectName(QStringLiteral("hoverTracer"));
    tracer->setStyle(QCPItemTracer::tsCircle);
    tracer->setSize(7);
    tracer->setVisible(false);
    label = new QCPItemText(plot);
    label->setObjectName(QStringLiteral("hoverLabel"));
    label->setPositionAlignment(Qt::AlignLeft | Qt::AlignBottom);
    label->position->setType(QCPItemPosition::ptAbsolute);
    label->setPadding(QMargins(4, 2, 4, 2));
    label->setClipToAxisRect(false);
    label->setVisible(false);
    return {tracer, label};
}

void showReadout(QCustomPlot* plot, const QPointF& pos) {
    Readout r = readoutItems(plot);
    const QString text = readoutAt(plot, pos);
    int index = -1;
    auto* graph = qobject_cast<QCPGraph*>(plot->plottableAt(pos, false, &index));
    r.tracer->setVisible(graph && index >= 0);
    if (graph && index >= 0) {
        r.tracer->setGraph(graph);
        r.tracer->setGraphKey(graph->data()->at(index)->key);
        r.tracer->setPen(graph->pen());
    }
    r.label->setVisible(!text.isEmpty());
    if (!text.isEmpty()) {
        const QPalette pal = plot->palette();
        r.label->setText(text);
        r.label->setColor(pal.color(QPalette::ToolTipText));
        r.label->setBrush(pal.color(QPalette::ToolTipBase));
        r.label->setPen(QPen(pal.color(QPalette::Mid)));
        // Beside the cursor, kept inside the plot.
        const QFontMetrics fm(r.label->font());
        const QSize size = fm.size(0, text) + QSize(10, 6);
        const double x = std::min(pos.x() + 12, double(plot->width() - size.width()));
        const double y = std::max(pos.y() - 8, double(size.height()));
        r.label->position->setCoords(std::max(0.0, x), y);
    }
    plot->replot(QCustomPlot::rpQueuedReplot);
}

void hideReadout(QCustomPlot* plot) {
    Readout r = readoutItems(plot);
    if (!r.tracer->visible() && !r.label->visible()) return;
    r.tracer->setVisible(false);
    r.label->setVisible(false);
    plot->replot(QCustomPlot::rpQueuedReplot);
}

// The mouse leaving the plot hides the readout.
class LeaveFilter : public QObject {
public:
    explicit LeaveFilter(QCustomPlot* plot) : QObject(plot), m_plot(plot) {}
    bool eventFilter(QObject*, QEvent* event) override {
        if (event->type() == QEvent::Leave) hideReadout(m_plot);
        return false;
    }

private:
    QCustomPlot* m_plot;
};

void exportAs(QCustomPlot* plot, const QString& filter) {
    QString selected = filter;
    const QString path = QFileDialog::getSaveFileName(plot, QObject::tr("Export plot"), suggestedFileName(plot),
                                                      PlotExport::fileFilters().join(QStringLiteral(";;")), &selected);
    if (path.isEmpty()) return;
    QString file = path;
    if (QFileInfo(file).suffix().isEmpty()) {
        const int a = selected.indexOf(QLatin1String("*.")), b = selected.indexOf(')', a);
        if (a >= 0 && b > a) file += selected.mid(a + 1, b - a - 1);
    }
    const QString error = PlotExport::save(plot, file);
    if (!error.isEmpty()) QMessageBox::warning(plot, QObject::tr("Export plot"), error);
}

} // namespace

QString suggestedFileName(const QCustomPlot* plot) {
    QString view;
    for (const QObject* o = plot->parent(); o; o = o->parent())
        if (o->objectName().endsWith(QLatin1String("View"))) {
            view = o->objectName().chopped(4);
            break;
        }
    QString title = titleOf(plot);
    if (title.isEmpty()) title = plot->objectName();
    QString name = (view.isEmpty() ? title : view + QLatin1Char(' ') + title).toLower();
    name.replace(QRegularExpression(QStringLiteral("[^a-z0-9]+")), QStringLiteral("-"));
    while (name.startsWith(QLatin1Char('-'))) name.remove(0, 1);
    while (name.endsWith(QLatin1Char('-'))) name.chop(1);
    return name.isEmpty() ? QStringLiteral("plot") : name;
}

QString readoutAt(QCustomPlot* plot, const QPointF& pos) {
    int index = -1;
    QCPAbstractPlottable* p = plot->plottableAt(pos, false, &index);
    if (!p) return {};
    const QString series = p->name().isEmpty() ? QString() : p->name() + QStringLiteral(": ");
    if (auto* map = qobject_cast<QCPColorMap*>(p)) {
        double key = 0, value = 0;
        map->pixelsToCoords(pos, key, value);
        int cx = 0, cy = 0;
        map->data()->coordToCell(key, value, &cx, &cy);
        if (cx < 0 || cy < 0 || cx >= map->data()->keySize() || cy >= map->data()->valueSize()) return {};
        return QStringLiteral("%1x=%2, y=%3: %4").arg(series, number(key), number(value), number(map->data()->cell(cx, cy)));
    }
    if (index < 0) return {};
    if (auto* graph = qobject_cast<QCPGraph*>(p)) {
        const auto d = graph->data()->at(index);
        return QStringLiteral("%1x=%2, y=%3").arg(series, number(d->key), number(d->value));
    }
    if (auto* bars = qobject_cast<QCPBars*>(p)) {
        const auto d = bars->data()->at(index);
        return QStringLiteral("%1x=%2, y=%3").arg(series, number(d->key), number(d->value));
    }
    if (auto* curve = qobject_cast<QCPCurve*>(p)) {
        const auto d = curve->data()->at(index);
        return QStringLiteral("%1x=%2, y=%3").arg(series, number(d->key), number(d->value));
    }
    return {};
}

void enable(QCustomPlot* plot) {
    if (plot->property("latmixInteractive").toBool()) return;
    plot->setProperty("latmixInteractive", true);
    plot->setInteractions(plot->interactions() | QCP::iRangeDrag | QCP::iRangeZoom);
    plot->setMouseTracking(true);
    QObject::connect(plot, &QCustomPlot::mouseMove, plot, [plot](QMouseEvent* e) { showReadout(plot, e->position()); });
    plot->installEventFilter(new LeaveFilter(plot));
    plot->setContextMenuPolicy(Qt::CustomContextMenu);
    QObject::connect(plot, &QWidget::customContextMenuRequested, plot, [plot](const QPoint& pos) {
        QMenu menu(plot);
        menu.addAction(QObject::tr("Reset view"), plot, [plot] {
            plot->rescaleAxes();
            plot->replot();
        });
        menu.addSeparator();
        menu.addAction(QObject::tr("Export image…"), plot, [plot] { exportAs(plot, PlotExport::fileFilters().at(0)); });
        menu.addAction(QObject::tr("Export data as CSV…"), plot, [plot] { exportAs(plot, PlotExport::fileFilters().at(3)); });
        menu.exec(plot->mapToGlobal(pos));
    });
}

} // namespace latmix::gui::PlotInteraction
