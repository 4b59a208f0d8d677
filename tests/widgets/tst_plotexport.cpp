// Plot export (PNG, SVG, PDF, CSV) of a plot with known data: the CSV holds exactly the data,
// the images are real files of the asked size, errors name the file and leave nothing behind.
// And what every plot does under the mouse (PlotInteraction, issue 71): pan and zoom, a readout
// of the point under the cursor, export names made from the view and the title.
#include "PlotExport.h"
#include "PlotInteraction.h"

#include <qcustomplot.h>

#include <QFile>
#include <QFileInfo>
#include <QImage>
#include <QTemporaryDir>
#include <QtTest>

using namespace latmix::gui;

class TestPlotExport : public QObject {
    Q_OBJECT

    static void fill(QCustomPlot& p) {
        p.xAxis->setLabel("step");
        p.yAxis->setLabel("loss");
        QCPGraph* g = p.addGraph();
        g->setName("run a");
        g->setData({1, 2, 3}, {0.5, 0.25, 0.125});
        QCPGraph* h = p.addGraph();
        h->setName("run, b"); // a comma: quoted in the CSV
        h->setData({1, 2}, {1e-3, 2.5e10});
        p.rescaleAxes();
    }

private slots:
    void csvHoldsTheData() {
        QCustomPlot p;
        fill(p);
        QCOMPARE(PlotExport::dataCsv(&p), QString("series,step,loss\n"
                                                  "run a,1,0.5\nrun a,2,0.25\nrun a,3,0.125\n"
                                                  "\"run, b\",1,0.001\n\"run, b\",2,2.5e+10\n"));
    }

    void colorMapCells() {
        QCustomPlot p;
        auto* m = new QCPColorMap(p.xAxis, p.yAxis);
        m->setName("A1");
        m->data()->setSize(2, 2);
        m->data()->setRange(QCPRange(0, 1), QCPRange(0, 1));
        m->data()->setCell(0, 0, 1.0);
        m->data()->setCell(1, 0, -2.0);
        m->data()->setCell(0, 1, 3.0);
        m->data()->setCell(1, 1, 4.5);
        QCOMPARE(PlotExport::dataCsv(&p), QString("series,x,y,z\nA1,0,0,1\nA1,1,0,-2\nA1,0,1,3\nA1,1,1,4.5\n"));
    }

    void writesEachFormat_data() {
        QTest::addColumn<QString>("suffix");
        QTest::addColumn<QByteArray>("magic");
        QTest::newRow("png") << "png" << QByteArray("\x89PNG");
        QTest::newRow("svg") << "svg" << QByteArray("<?xml");
        QTest::newRow("pdf") << "pdf" << QByteArray("%PDF");
        QTest::newRow("csv") << "csv" << QByteArray("series");
    }
    void writesEachFormat() {
        QFETCH(QString, suffix);
        QFETCH(QByteArray, magic);
        QTemporaryDir tmp;
        QCustomPlot p;
        fill(p);
        const QString file = tmp.filePath("plot." + suffix);
        QCOMPARE(PlotExport::save(&p, file, 400, 300), QString());
        QFile f(file);
        QVERIFY(f.open(QIODevice::ReadOnly));
        QCOMPARE(f.read(magic.size()), magic);
        QVERIFY(!QFile::exists(file + ".part"));
        if (suffix == "png") {
            const QImage img(file);
            QCOMPARE(img.size(), QSize(800, 600)); // written at 2× for sharp figures
        }
    }

    // The readout names the series and the point under the cursor (a graph's nearest point, a
    // colour map's cell with its value), and nothing away from the data; pan and zoom are on.
    void readoutUnderTheCursor() {
        QCustomPlot p;
        p.resize(400, 300);
        fill(p);
        auto* m = new QCPColorMap(p.xAxis2, p.yAxis2);
        m->setName("A1");
        m->data()->setSize(2, 2);
        m->data()->setRange(QCPRange(0, 1), QCPRange(0, 1));
        m->data()->setCell(1, 0, -2.0);
        p.xAxis2->setRange(-0.5, 1.5);
        p.yAxis2->setRange(-0.5, 1.5);
        m->setVisible(false); // the graphs first
        PlotInteraction::enable(&p);
        QVERIFY(p.interactions().testFlag(QCP::iRangeDrag) && p.interactions().testFlag(QCP::iRangeZoom));
        p.replot();
        const QPointF atPoint(p.xAxis->coordToPixel(2), p.yAxis->coordToPixel(0.25));
        QCOMPARE(PlotInteraction::readoutAt(&p, atPoint), QString("run a: x=2, y=0.25"));
        QCOMPARE(PlotInteraction::readoutAt(&p, QPointF(1, 1)), QString()); // a corner, far from any point
        for (int g = 0; g < p.graphCount(); ++g) p.graph(g)->setVisible(false);
        m->setVisible(true);
        p.replot();
        const QPointF atCell(p.xAxis2->coordToPixel(1), p.yAxis2->coordToPixel(0));
        QCOMPARE(PlotInteraction::readoutAt(&p, atCell), QString("A1: x=1, y=0: -2"));
    }

    // Export names: the view and the title ("calibration-loss-objective"), else the plot's name.
    void exportNamesAfterTheView() {
        QWidget view;
        view.setObjectName("calibrationView");
        auto* p = new QCustomPlot(&view);
        p->setObjectName("lossPlot");
        QCOMPARE(PlotInteraction::suggestedFileName(p), QString("calibration-lossplot"));
        p->plotLayout()->insertRow(0);
        p->plotLayout()->addElement(0, 0, new QCPTextElement(p, "Loss, objective"));
        QCOMPARE(PlotInteraction::suggestedFileName(p), QString("calibration-loss-objective"));
        QCustomPlot alone;
        QCOMPARE(PlotInteraction::suggestedFileName(&alone), QString("plot"));
    }

    void errorsNameTheFile() {
        QCustomPlot p;
        fill(p);
        QTemporaryDir tmp;
        const QString bad = tmp.filePath("plot.bmpx");
        QVERIFY(PlotExport::save(&p, bad).contains("plot.bmpx"));
        QVERIFY(!QFile::exists(bad));
        const QString missing = tmp.filePath("no/such/dir/plot.png");
        const QString error = PlotExport::save(&p, missing, 100, 100);
        QVERIFY2(error.contains(missing), qPrintable(error));
        QVERIFY(!QFile::exists(missing) && !QFile::exists(missing + ".part"));
    }
};

QTEST_MAIN(TestPlotExport)
#include "tst_plotexport.moc"
