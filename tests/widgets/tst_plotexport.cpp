// Plot export (PNG, SVG, PDF, CSV) of a plot with known data: the CSV holds exactly the data,
// the images are real files of the asked size, errors name the file and leave nothing behind.
#include "PlotExport.h"

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
