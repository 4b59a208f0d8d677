// Every plot of every view of the main window, filled with real results on the demo model
// (activations, a transform comparison, a short calibration, the weights of a linear before and
// after the calibration's folding, the runs table with that run selected), at 1280×800 and 1920×1080 in the
// light and the dark theme: no two tick labels of an axis overlap, no two names of peaks overlap, no legend entry is cut, a
// legend covers at most a small share of the points its plot draws, no table hides columns
// behind a horizontal scroll bar, no form is wider than its scroll area, and every plot is drawn in the palette of
// the theme chosen last. Geometry is read back from QCustomPlot after a
// real layout and replot (offscreen), not assumed.
#include "import/DemoModel.h"

#include <ATen/ATen.h>
// Qt after ATen: Qt's `slots` macro breaks ATen headers.
#include "ActivationView.h"
#include "CalibrationView.h"
#include "ComparisonView.h"
#include "ElidedLabel.h"
#include "JobRunner.h"
#include "MainWindow.h"
#include "MxExplorerView.h"
#include "RunsView.h"
#include "WeightView.h"
#include "util/Runtime.h"
#include "TestData.h"

#include <qcustomplot.h>

#include <QCheckBox>
#include <QFileInfo>
#include <QLabel>
#include <QSignalSpy>
#include <QScrollArea>
#include <QScrollBar>
#include <QTabWidget>
#include <QTableView>
#include <QTemporaryDir>
#include <QtTest>
#include <QDockWidget>

#include <algorithm>

using namespace latmix;
using latmix::gui::MainWindow;

namespace {

// The pixel extents of an axis' visible tick labels along the axis, in tick order.
struct LabelSpan {
    QString text;
    double lo, hi;
};

QVector<LabelSpan> labelSpans(QCPAxis* axis) {
    QVector<LabelSpan> spans;
    if (!axis->visible() || !axis->tickLabels()) return spans;
    const QVector<double> ticks = axis->tickVector();
    const QVector<QString> labels = axis->tickVectorLabels();
    const QFontMetricsF fm(axis->tickLabelFont());
    const bool horizontal = axis->orientation() == Qt::Horizontal;
    for (int i = 0; i < ticks.size() && i < labels.size(); ++i) {
        if (!axis->range().contains(ticks[i]) || labels[i].isEmpty()) continue;
        // Numbers in "eb" format draw as a base and a superscript; their plain text is wider
        // than what is drawn, so the check is conservative for them.
        const QRectF r = fm.boundingRect(labels[i]);
        const double centre = axis->coordToPixel(ticks[i]);
        const double half = (horizontal ? r.width() : r.height()) / 2;
        spans.push_back({labels[i], centre - half, centre + half});
    }
    std::sort(spans.begin(), spans.end(), [](const LabelSpan& a, const LabelSpan& b) { return a.lo < b.lo; });
    return spans;
}

// Share of the plot's drawn points (of graphs with data, in the visible ranges) that fall
// inside the legend's rectangle.
double legendCover(QCustomPlot* p) {
    if (!p->legend || !p->legend->visible() || p->legend->itemCount() == 0) return 0;
    const QRectF legend = p->legend->outerRect();
    long inside = 0, total = 0;
    for (int g = 0; g < p->graphCount(); ++g) {
        QCPGraph* graph = p->graph(g);
        if (!graph->visible()) continue;
        for (const auto& d : *graph->data()) {
            if (!graph->keyAxis()->range().contains(d.key) || !graph->valueAxis()->range().contains(d.value)) continue;
            const QPointF px(graph->keyAxis()->coordToPixel(d.key), graph->valueAxis()->coordToPixel(d.value));
            ++total;
            if (legend.contains(px)) ++inside;
        }
    }
    return total ? double(inside) / double(total) : 0;
}

} // namespace

class TestPlotLayout : public QObject {
    Q_OBJECT

    QTemporaryDir m_tmp;
    MainWindow* m_window = nullptr;

private slots:
    void initTestCase() {
        const QString model = m_tmp.filePath("demo");
        importing::writeDemoModel(model.toStdString());
        m_window = new MainWindow;
        QVERIFY(m_window->openCheckpoint(model, false));
        m_window->resize(1280, 800);
        m_window->show();
        // Fill every view with real numbers.
        auto* cal = m_window->calibrationView();
        QSignalSpy calDone(cal, &gui::CalibrationView::runFinished);
        cal->setMethod("latmix-lu");
        cal->setSteps(60);
        cal->setCalibration(4, 32, 2);
        // A perplexity for the runs table where WikiText-2 is at hand.
        cal->setEvalWindows(QFileInfo::exists(test::dataDir() + "/wikitext-2/wiki.test.raw") ? 1 : 0);
        cal->setRunDir(m_tmp.filePath("run"));
        QString why;
        QVERIFY2(cal->start(&why), qPrintable(why));
        if (!calDone.wait(300000)) {
            auto* status = m_window->findChild<QLabel*>("dashboardStatus");
            QFAIL(qPrintable("calibration did not finish: " + (status ? status->text() : QString("?")) + " running " +
                             QString::number(cal->runner()->isRunning())));
        }
        auto* act = m_window->activationView();
        QSignalSpy actDone(act, &gui::ActivationView::profileFinished);
        act->setCalibration(2, 32);
        QVERIFY(act->selectPoint("layers.1.mlp.down_proj.input"));
        while (act->runner()->isRunning()) QVERIFY(actDone.wait(60000));
        if (actDone.isEmpty()) {
            QVERIFY(act->analyze());
            QVERIFY(actDone.wait(60000));
        }
        auto* cmp = m_window->comparisonView();
        QSignalSpy cmpDone(cmp, &gui::ComparisonView::comparisonFinished);
        cmp->setCalibration(2, 32, 20);
        QVERIFY(cmp->selectPoint("layers.1.mlp.down_proj.input"));
        QVERIFY(cmp->compare());
        QVERIFY(cmpDone.wait(120000));
        QVERIFY(cmp->compareAcrossLayers("hadamard"));
        QVERIFY(cmpDone.wait(120000));
        QVERIFY2(calDone.last().at(0).toBool(), qPrintable(calDone.last().at(2).toString()));
        // The finished run is the weights view's folded side and a row of the runs table.
        auto* weights = m_window->weightView();
        QCOMPARE(weights->runDir(), m_tmp.filePath("run"));
        QSignalSpy wDone(weights, &gui::WeightView::profileFinished);
        QVERIFY(weights->selectLinear(1, "mlp.down_proj"));
        while (weights->runner()->isRunning()) QVERIFY(wDone.wait(60000));
        QString error;
        QVERIFY2(weights->analyze(&error), qPrintable(error));
        QVERIFY(wDone.wait(60000));
        QVERIFY2(wDone.last().at(0).toBool(), qPrintable(wDone.last().at(1).toString()));
        auto* runs = m_window->runsView();
        runs->selectRuns({m_tmp.filePath("run")});
        QCOMPARE(runs->selectedRuns().size(), 1);
    }
    void cleanupTestCase() { delete m_window; }

    void readable_data() {
        QTest::addColumn<QSize>("size");
        QTest::addColumn<int>("theme");
        // Issue 71: the sizes people have, with the Model and Jobs docks open (the window's minimum
        // was 1187 px wide, 1515 with the Jobs dock).
        QTest::newRow("1024x700 light") << QSize(1024, 700) << int(MainWindow::Theme::Light);
        QTest::newRow("1280x800 light") << QSize(1280, 800) << int(MainWindow::Theme::Light);
        QTest::newRow("1280x800 dark") << QSize(1280, 800) << int(MainWindow::Theme::Dark);
        QTest::newRow("1920x1080 light") << QSize(1920, 1080) << int(MainWindow::Theme::Light);
        QTest::newRow("1920x1080 dark") << QSize(1920, 1080) << int(MainWindow::Theme::Dark);
    }
    void readable() {
        QFETCH(QSize, size);
        QFETCH(int, theme);
        m_window->setTheme(MainWindow::Theme(theme));
        m_window->resize(size);
        QStringList problems;
        for (const char* dock : {"modelDock", "jobsDock"})
            if (!m_window->findChild<QDockWidget*>(dock)->isVisible()) problems << QString("%1 is not shown").arg(dock);
        for (int i = 0; i < m_window->viewTabs()->count(); ++i) { // every view's minimum, not only the current one's
            m_window->viewTabs()->setCurrentIndex(i);
            QCoreApplication::processEvents();
            const QSize least = m_window->minimumSizeHint().expandedTo(m_window->minimumSize());
            if (least.width() > size.width() || least.height() > size.height())
                problems << QString("%1: the window cannot be smaller than %2x%3")
                                .arg(m_window->viewTabs()->widget(i)->objectName())
                                .arg(least.width())
                                .arg(least.height());
        }
        for (int tab = 0; tab < m_window->viewTabs()->count(); ++tab) {
            QWidget* view = m_window->viewTabs()->widget(tab);
            m_window->viewTabs()->setCurrentIndex(tab);
            // Layouts settle and the queued replots run, as they would before a user looks.
            for (int i = 0; i < 5; ++i) {
                QCoreApplication::sendPostedEvents();
                QCoreApplication::processEvents();
            }
            // Elided titles show what fits and carry the whole text as their tooltip.
            for (gui::ElidedLabel* l : view->findChildren<gui::ElidedLabel*>()) {
                if (!l->isVisible()) continue;
                if (l->fontMetrics().horizontalAdvance(l->text()) > l->contentsRect().width() || l->toolTip() != l->fullText() ||
                    (l->text() != l->fullText() && !l->text().contains(QChar(0x2026))))
                    problems << QString("%1/%2: '%3' does not fit or lost its tooltip").arg(view->objectName(), l->objectName(), l->text());
            }
            if (size.width() >= 1280 && size.width() <= 1280) // the tables show every column without scrolling sideways
                for (QTableView* t : view->findChildren<QTableView*>())
                    if (t->isVisible() && t->model() && t->model()->columnCount() > 0 && t->horizontalScrollBar()->maximum() > 0)
                        problems << QString("%1/%2: columns hidden behind a horizontal scroll bar (%3 px)")
                                        .arg(view->objectName(), t->objectName())
                                        .arg(t->horizontalScrollBar()->maximum());
            // Narrower, a table may scroll sideways, but never cuts a name (issue 71): every cell
            // of its first column is as wide as its text.
            for (QTableView* t : view->findChildren<QTableView*>()) {
                if (!t->isVisible() || !t->model() || t->model()->columnCount() == 0) continue;
                const int column = t->horizontalHeader()->sectionSize(0);
                for (int r = 0; r < t->model()->rowCount(); ++r) {
                    const QString text = t->model()->index(r, 0).data().toString();
                    if (t->fontMetrics().horizontalAdvance(text) + 2 * (t->style()->pixelMetric(QStyle::PM_FocusFrameHMargin, nullptr, t) + 1) > column)
                        problems << QString("%1/%2: '%3' is cut in a column of %4 px").arg(view->objectName(), t->objectName(), text).arg(column);
                }
            }
            // Forms (the Calibration tab's) scroll down, never sideways: nothing cut at their right edge.
            for (QScrollArea* a : view->findChildren<QScrollArea*>())
                if (a->isVisible() && a->widget() && a->widget()->width() > a->viewport()->width())
                    problems << QString("%1/%2: the form is %3 px wide in %4 px")
                                    .arg(view->objectName(), a->widget()->objectName())
                                    .arg(a->widget()->width())
                                    .arg(a->viewport()->width());
            for (QCustomPlot* p : view->findChildren<QCustomPlot*>()) {
                if (!p->isVisible() || p->width() < 50 || p->height() < 50) continue;
                const QString where = view->objectName() + "/" + p->objectName();
                // In the palette's colours, whichever theme was chosen after the plot was built.
                if (p->xAxis->tickLabelColor() != view->palette().color(QPalette::Text))
                    problems << QString("%1: axis labels in %2 on a palette whose text is %3")
                                    .arg(where, p->xAxis->tickLabelColor().name(), view->palette().color(QPalette::Text).name());
                for (QCPAxis* axis : p->axisRect()->axes()) {
                    const auto spans = labelSpans(axis);
                    // A scale needs two numbers to be read (a lone "0" under 40 steps says nothing).
                    if (axis->visible() && axis->tickLabels() && spans.size() < 2)
                        problems << QString("%1 %2 axis: %3 tick label(s) over %4 .. %5")
                                        .arg(where, axis->orientation() == Qt::Horizontal ? "x" : "y")
                                        .arg(spans.size())
                                        .arg(axis->range().lower)
                                        .arg(axis->range().upper);
                    for (int i = 1; i < spans.size(); ++i)
                        if (spans[i].lo < spans[i - 1].hi - 0.5)
                            problems << QString("%1 %2 axis: tick labels '%3' and '%4' overlap")
                                            .arg(where, axis->orientation() == Qt::Horizontal ? "x" : "y", spans[i - 1].text,
                                                 spans[i].text);
                }
                for (int i = 0; p->legend->visible() && i < p->legend->itemCount(); ++i) {
                    QCPAbstractLegendItem* item = p->legend->item(i);
                    if (!item) continue; // an empty cell of the last row
                    if (item->outerRect().width() + 0.5 < item->minimumOuterSizeHint().width())
                        problems << QString("%1: legend entry %2 is cut (%3 of %4 px)")
                                        .arg(where)
                                        .arg(i)
                                        .arg(item->outerRect().width())
                                        .arg(item->minimumOuterSizeHint().width());
                }
                // Names above peaks (the largest channels) never run together or leave the plot.
                QVector<QRectF> names;
                for (int i = 0; i < p->itemCount(); ++i) {
                    auto* t = qobject_cast<QCPItemText*>(p->item(i));
                    if (!t || !t->visible() || t->objectName() != QLatin1String("peakLabel")) continue;
                    const QPointF at = t->position->pixelPosition();
                    const double w = QFontMetricsF(t->font()).horizontalAdvance(t->text());
                    // Where QCustomPlot draws it: centred on its point, or beginning or ending there.
                    const Qt::Alignment a = t->positionAlignment();
                    const double left = a & Qt::AlignLeft ? at.x() : a & Qt::AlignRight ? at.x() - w : at.x() - w / 2;
                    const QRectF r(left, at.y() - QFontMetricsF(t->font()).height(), w, QFontMetricsF(t->font()).height());
                    const QRectF axes(p->axisRect()->rect());
                    if (r.left() < axes.left() || r.right() > axes.right() || r.top() < 0 || r.bottom() > p->height())
                        problems << QString("%1: name '%2' leaves the plot or crosses an axis").arg(where, t->text());
                    for (const QRectF& o : names)
                        if (o.intersects(r)) problems << QString("%1: name '%2' overlaps another").arg(where, t->text());
                    names << r;
                }
                const double cover = legendCover(p);
                if (cover > 0.02) problems << QString("%1: the legend covers %2% of the points").arg(where).arg(cover * 100, 0, 'f', 1);
            }
        }
        QVERIFY2(problems.isEmpty(), qPrintable(problems.join("\n")));
    }
};

QTEST_MAIN(TestPlotLayout)
#include "tst_plotlayout.moc"
