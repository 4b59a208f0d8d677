// The runs tab (offscreen) on run folders written here by hand (latmix.json with known numbers,
// train.h5 series through io/TensorFile): every cell is the number of the file (recovery worked
// by hand), a broken run is reported by file name, model/ folders are not runs; sorting is by
// value with absent numbers last; selected runs overlay exactly their series and per-linear
// errors; the CSV is core's table; a run that appears on disk shows up without a rescan.
#include "io/TensorFile.h"
#include "run/RunCatalog.h"
#include "run/RunColumns.h"

#include <ATen/ATen.h>
// Qt after ATen: Qt's `slots` macro breaks ATen headers.
#include "RunsView.h"
#include "ElidedLabel.h"
#include "WidgetLookup.h"

#include <qcustomplot.h>

#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QLabel>
#include <QPushButton>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QTableView>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>

using latmix::gui::RunsView;

namespace {

void writeText(const QString& path, const QByteArray& text) {
    QDir().mkpath(QFileInfo(path).path());
    // As the CLI does: a temporary name, then renamed.
    QFile f(path + ".tmp");
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(text);
    f.close();
    QFile::remove(path);
    QVERIFY(QFile::rename(path + ".tmp", path));
}

QByteArray runJson(const QString& method, double fp, double w4a4, double zeroShot, int steps, const QList<double>& linearErrors,
                   const QString& created, const QString& format = QStringLiteral("mxfp4")) {
    QByteArray j = "{\"latmix_version\":\"0.1.0\",\"created\":\"" + created.toUtf8() + "\",\"command\":\"latmix quantize x\","
                   "\"method\":\"" + method.toUtf8() + "\",\"format\":{\"format\":\"" + format.toUtf8() +
                   "\",\"block\":32,\"scale_mode\":\"floor\"},"
                   "\"seed\":0,\"training\":{\"steps\":" + QByteArray::number(steps) + "},"
                   "\"perplexity\":{\"fp\":" + QByteArray::number(fp, 'g', 17) + ",\"w4a4\":" + QByteArray::number(w4a4, 'g', 17) +
                   // a learned run's record carries the KL to the FP model; the older RTN one has none
                   (method == "latmix-lu" ? ",\"kl\":{\"tokens\":62,\"mean\":0.12345,\"stderr\":0.01,\"p99\":0.9,"
                                            "\"top1_agreement\":0.875,\"top1_stderr\":0.04,\"delta_ppl\":1.5,\"delta_ppl_stderr\":0.2}"
                                          : "") + "},"
                   "\"seconds\":{\"train\":" + QByteArray::number(steps * 1.5) + ",\"total\":100},";
    if (zeroShot >= 0) j += "\"zeroshot\":{\"average\":" + QByteArray::number(zeroShot, 'g', 17) + ",\"tasks\":{}},";
    j += "\"linears\":[";
    const char* names[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
    for (int i = 0; i < linearErrors.size(); ++i)
        j += QByteArray(i ? "," : "") + "{\"layer\":" + QByteArray::number(i / 7) + ",\"linear\":\"" + names[i % 7] +
             "\",\"relative_error\":" + QByteArray::number(linearErrors[i], 'g', 17) + "}";
    return j + "]}";
}

// train.h5 with the series readDistillSeries reads: loss = 2 / step, the rest constant.
void writeSeries(const QString& runDir, int steps) {
    std::vector<std::pair<std::string, at::Tensor>> t;
    t.emplace_back("series/step", at::arange(1, steps + 1, at::kLong));
    for (const char* name : {"loss", "kl", "vol", "lr", "seconds", "teacher_seconds", "student_seconds", "backward_seconds",
                             "metrics_seconds", "a1_condition", "a1_orthogonality", "a1_off_block", "a2_condition",
                             "a2_orthogonality", "a2_off_block"}) {
        at::Tensor v = std::string(name) == "loss" ? 2.0 / at::arange(1, steps + 1, at::kDouble) : at::full({steps}, 0.5, at::kDouble);
        t.emplace_back(std::string("series/") + name, v);
    }
    latmix::io::writeTensorFile(QDir(runDir).filePath("train.h5").toStdString(), t);
}

QString cell(const RunsView& v, int row, int column) {
    auto* m = v.table()->model();
    return m->data(m->index(row, column)).toString();
}

int rowOf(const RunsView& v, const QString& dirEnd) {
    auto* m = v.table()->model();
    for (int r = 0; r < m->rowCount(); ++r)
        if (m->data(m->index(r, RunsView::Name), RunsView::kDirRole).toString().endsWith(dirEnd)) return r;
    return -1;
}

QString curvesTitle(const RunsView& v) {
    auto* title = qobject_cast<QCPTextElement*>(latmix::test::child<QCustomPlot>(&v, "runsCurvesPlot")->plotLayout()->element(0, 0));
    return title ? title->text() : QString();
}

QVector<double> graphValues(QCustomPlot* p, int graph) {
    QVector<double> v;
    for (const auto& d : *p->graph(graph)->data()) v << d.value;
    return v;
}

} // namespace

class TestRunsView : public QObject {
    Q_OBJECT

    QTemporaryDir m_tmp;
    QString m_root;

private slots:
    void init() {
        m_root = m_tmp.filePath(QStringLiteral("runs-%1").arg(QDateTime::currentMSecsSinceEpoch()));
        writeText(m_root + "/lu-a/latmix.json",
                  runJson("latmix-lu", 11.0, 12.5, 0.41, 20, {0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07}, "2026-11-20T10:00:00Z"));
        writeSeries(m_root + "/lu-a", 20);
        writeText(m_root + "/grid/cells/rtn-mxfp4-s0/latmix.json",
                  runJson("rtn", 11.0, 20.0, -1, 0, {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7}, "2026-11-21T09:30:00Z"));
        // Not runs: a model folder's copy, and a record cut short.
        writeText(m_root + "/lu-a/model/latmix.json", runJson("rtn", 1, 1, -1, 0, {}, "2026-11-21T09:30:00Z"));
        writeText(m_root + "/broken/latmix.json", "{\"method\": \"rtn\", ");
    }

    void tableShowsTheFiles() {
        RunsView v;
        v.setFolders({m_root});
        QCOMPARE(v.table()->model()->rowCount(), 2);
        const int a = rowOf(v, "/lu-a"), r = rowOf(v, "/rtn-mxfp4-s0");
        QVERIFY(a >= 0 && r >= 0);
        QCOMPARE(cell(v, a, RunsView::column("method")), QString("latmix-lu"));
        QCOMPARE(cell(v, a, RunsView::column("format")), QString("mxfp4"));
        QCOMPARE(cell(v, a, RunsView::column("block")), QString("32"));
        QCOMPARE(cell(v, a, RunsView::column("steps")), QString("20"));
        QCOMPARE(cell(v, a, RunsView::column("w4a4_ppl")), QString("12.50"));
        QCOMPARE(cell(v, a, RunsView::column("fp_ppl")), QString("11.00"));
        QCOMPARE(cell(v, a, RunsView::column("recovery")), QString("88.00")); // 11 / 12.5
        QCOMPARE(cell(v, a, RunsView::column("zeroshot_average")), QString("0.410"));
        QCOMPARE(cell(v, a, RunsView::column("kl_mean")), QString("0.1235"));
        QCOMPARE(cell(v, a, RunsView::column("top1_agreement")), QString("87.5"));
        QCOMPARE(cell(v, r, RunsView::column("kl_mean")), QString("–"));
        QCOMPARE(cell(v, a, RunsView::column("train_seconds")), QString("30"));
        QCOMPARE(cell(v, a, RunsView::column("created")), QString("26-11-20 10:00"));
        QCOMPARE(cell(v, r, RunsView::Name), QString("grid/rtn-mxfp4-s0"));
        QCOMPARE(cell(v, r, RunsView::column("recovery")), QString("55.00")); // 11 / 20
        QCOMPARE(cell(v, r, RunsView::column("zeroshot_average")), QString("–"));
        QCOMPARE(cell(v, r, RunsView::column("folded_fp_ppl")), QString("–"));
        QCOMPARE(v.problems().size(), 1);
        QVERIFY2(v.problems().first().contains("broken/latmix.json"), qPrintable(v.problems().first()));
        QCOMPARE(v.findChild<latmix::gui::ElidedLabel*>("runsStatus")->fullText(), "2 runs in " + m_root);
        // The skipped folder says why, one click away (issue 71: "1 folder skipped" alone).
        auto* skipped = v.findChild<QPushButton*>("runsSkippedButton");
        QVERIFY(skipped && !skipped->isHidden());
        QCOMPARE(skipped->text(), QString("1 folder skipped: why?"));
        QVERIFY2(skipped->toolTip().contains("broken/latmix.json"), qPrintable(skipped->toolTip()));
    }

    // A column no run fills is hidden (a 1280 px window then holds the rest without scrolling
    // sideways, issue 71); one run that fills it brings it back.
    void emptyColumnsHidden_data() {
        QTest::addColumn<QString>("folder");
        QTest::addColumn<bool>("hidden");
        QTest::newRow("only the rtn cell: no zero-shot, no KL") << "/grid" << true;
        QTest::newRow("with the latmix run that has them") << "" << false;
    }
    void emptyColumnsHidden() {
        QFETCH(QString, folder);
        QFETCH(bool, hidden);
        RunsView v;
        v.setFolders({m_root + folder});
        for (int c : {RunsView::column("zeroshot_average"), RunsView::column("kl_mean"), RunsView::column("top1_agreement")})
            QVERIFY2(v.table()->isColumnHidden(c) == hidden, qPrintable(QString("column %1").arg(c)));
        for (int c : {RunsView::Name, RunsView::column("method"), RunsView::column("w4a4_ppl"), RunsView::column("created")})
            QVERIFY2(!v.table()->isColumnHidden(c), qPrintable(QString("column %1").arg(c)));
    }

    // The quantized perplexity's column is named by the runs' formats: the paper's W4A4 when
    // every run is 4-bit, W8A8 when every run is 8-bit, "Quantized" when they mix.
    void quantizedColumnNamedByFormats_data() {
        QTest::addColumn<QStringList>("formats");
        QTest::addColumn<QString>("header");
        QTest::newRow("mxfp4 and nvfp4") << QStringList{"mxfp4", "nvfp4"} << "W4A4";
        QTest::newRow("mxfp8_e4m3 and mxint8") << QStringList{"mxfp8_e4m3", "mxint8"} << "W8A8";
        QTest::newRow("mxfp4 and mxfp8_e4m3") << QStringList{"mxfp4", "mxfp8_e4m3"} << "Quantized";
    }
    void quantizedColumnNamedByFormats() {
        QFETCH(QStringList, formats);
        QFETCH(QString, header);
        QTemporaryDir dir;
        const QString root = dir.path();
        for (const QString& f : formats)
            writeText(root + "/" + f + "/latmix.json", runJson("rtn", 11.0, 12.0, -1, 0, {}, "2026-11-20T10:00:00Z", f));
        RunsView v;
        v.setFolders({root});
        QCOMPARE(v.table()->model()->rowCount(), formats.size());
        QCOMPARE(v.table()->model()->headerData(RunsView::column("w4a4_ppl"), Qt::Horizontal).toString(), header);
    }

    void sortsByValue_data() {
        QTest::addColumn<int>("column");
        QTest::addColumn<int>("order");
        QTest::addColumn<QString>("first");
        QTest::newRow("W4A4 ascending") << int(RunsView::column("w4a4_ppl")) << int(Qt::AscendingOrder) << "/lu-a";
        QTest::newRow("W4A4 descending") << int(RunsView::column("w4a4_ppl")) << int(Qt::DescendingOrder) << "/rtn-mxfp4-s0";
        QTest::newRow("0-shot descending: absent last") << int(RunsView::column("zeroshot_average")) << int(Qt::DescendingOrder) << "/lu-a";
        QTest::newRow("0-shot ascending: absent first") << int(RunsView::column("zeroshot_average")) << int(Qt::AscendingOrder) << "/rtn-mxfp4-s0";
        QTest::newRow("date descending") << int(RunsView::column("created")) << int(Qt::DescendingOrder) << "/rtn-mxfp4-s0";
    }
    void sortsByValue() {
        QFETCH(int, column);
        QFETCH(int, order);
        QFETCH(QString, first);
        RunsView v;
        v.setFolders({m_root});
        v.table()->sortByColumn(column, Qt::SortOrder(order));
        QCOMPARE(rowOf(v, first), 0);
    }

    void selectionOverlaysTheirNumbers() {
        RunsView v;
        v.resize(1280, 800);
        v.setFolders({m_root});
        QStringList dirs;
        for (const auto& r : v.runs()) dirs << QString::fromStdString(r.dir);
        v.selectRuns(dirs);
        QCOMPARE(v.selectedRuns().size(), 2);
        // One training curve (the RTN run has no train.h5): loss = 2 / step as written.
        QCOMPARE(latmix::test::child<QCustomPlot>(&v, "runsCurvesPlot")->graphCount(), 1);
        const auto loss = graphValues(latmix::test::child<QCustomPlot>(&v, "runsCurvesPlot"), 0);
        QCOMPARE(loss.size(), 20);
        for (int i = 0; i < 20; ++i) QCOMPARE(loss[i], 2.0 / (i + 1));
        // Two weight-error series, each the run's "linears" in order.
        QCOMPARE(latmix::test::child<QCustomPlot>(&v, "runsWeightErrorPlot")->graphCount(), 2);
        QList<QVector<double>> got{graphValues(latmix::test::child<QCustomPlot>(&v, "runsWeightErrorPlot"), 0), graphValues(latmix::test::child<QCustomPlot>(&v, "runsWeightErrorPlot"), 1)};
        std::sort(got.begin(), got.end(), [](const auto& x, const auto& y) { return x[0] < y[0]; });
        QCOMPARE(got[0], (QVector<double>{0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07}));
        QCOMPARE(got[1], (QVector<double>{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7}));
        QCOMPARE(curvesTitle(v), QString("Training loss of the selected runs"));
        // One run selected: its series only; the RTN run alone: the title says why no curve.
        v.selectRuns({dirs.first()});
        QCOMPARE(latmix::test::child<QCustomPlot>(&v, "runsWeightErrorPlot")->graphCount(), 1);
        const QString rtn = dirs.filter("rtn-mxfp4-s0").value(0);
        QVERIFY(!rtn.isEmpty());
        v.selectRuns({rtn});
        QCOMPARE(latmix::test::child<QCustomPlot>(&v, "runsCurvesPlot")->graphCount(), 0);
        QCOMPARE(curvesTitle(v), QString("Training loss: none of the selected runs trains"));
    }

    void exportsCoresCsv() {
        RunsView v;
        v.setFolders({m_root});
        const QString path = m_tmp.filePath("runs.csv");
        QString error;
        QVERIFY2(v.exportCsv(path, &error), qPrintable(error));
        QFile f(path);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QByteArray text = f.readAll();
        QCOMPARE(text.toStdString(), latmix::run::runsCsv(latmix::run::scanRuns(m_root.toStdString())));
        QCOMPARE(text.count('\n'), 3); // header + two runs
        QVERIFY(!v.exportCsv(m_tmp.filePath("no/such/folder/runs.csv"), &error));
        QVERIFY(error.contains("runs.csv"));
    }

    void newRunsShowUpLive() {
        RunsView v;
        v.setFolders({m_root});
        QCOMPARE(v.table()->model()->rowCount(), 2);
        writeText(m_root + "/qr-b/latmix.json", runJson("latmix-qr", 11.0, 12.0, -1, 10, {}, "2026-11-22T08:00:00Z"));
        QTRY_COMPARE_WITH_TIMEOUT(v.table()->model()->rowCount(), 3, 10000);
        // A sweep started after the view: its folder first, the finished cell later, two levels down.
        QDir().mkpath(m_root + "/grid2/cells/gptq-mxfp4-s0");
        // The rescan that the new folder triggers watches the cell folder from then on.
        QTRY_VERIFY_WITH_TIMEOUT(v.watchedFolders().contains(m_root + "/grid2/cells/gptq-mxfp4-s0"), 10000);
        writeText(m_root + "/grid2/cells/gptq-mxfp4-s0/latmix.json", runJson("gptq", 11.0, 14.0, -1, 0, {}, "2026-11-22T09:00:00Z"));
        QTRY_COMPARE_WITH_TIMEOUT(v.table()->model()->rowCount(), 4, 10000);
        QVERIFY(rowOf(v, "/gptq-mxfp4-s0") >= 0);
    }

    void doubleClickOpensTheRun() {
        RunsView v;
        v.resize(1000, 700);
        v.show();
        QVERIFY(QTest::qWaitForWindowExposed(&v));
        v.setFolders({m_root});
        QSignalSpy opened(&v, &RunsView::runActivated);
        const int row = rowOf(v, "/lu-a");
        const QModelIndex cell = v.table()->model()->index(row, RunsView::column("method"));
        // The table lays out its rows in the event loop: wait until the cell lies in the viewport.
        QTRY_VERIFY(v.table()->viewport()->rect().contains(v.table()->visualRect(cell).center()));
        const QRect rect = v.table()->visualRect(cell);
        QTest::mouseClick(v.table()->viewport(), Qt::LeftButton, {}, rect.center());
        QTest::mouseDClick(v.table()->viewport(), Qt::LeftButton, {}, rect.center());
        QCOMPARE(opened.count(), 1);
        QVERIFY(opened.first().at(0).toString().endsWith("/lu-a"));
    }

    void folderThatDoesNotExistYet() {
        RunsView v;
        v.setFolders({m_tmp.filePath("not-yet")});
        QCOMPARE(v.table()->model()->rowCount(), 0);
        QVERIFY(v.problems().isEmpty());
    }
};

QTEST_MAIN(TestRunsView)
#include "tst_runsview.moc"
