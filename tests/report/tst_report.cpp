// The HTML run report (report/Report) and `latmix report` / `latmix runs` (SvgPlot by hand:
// tst_svgplot): the curves of a real learned run (the demo model, a few steps)
// mapped back through the axis mapping the SVG states and compared with train.h5 read by
// train::readDistillSeries; every perplexity, zero-shot score and weight error of latmix.json
// (read here with Qt's own JSON parser) in the tables; text escaped; a page with nothing
// external; a run without train.h5; the file written atomically and not at all for a bad run;
// the CLI's output and one-line errors.
#include "report/Report.h"
#include "run/RunCatalog.h"
#include "train/Distillation.h"

#include <ATen/ATen.h>
// Qt after ATen: Qt's `slots` macro breaks ATen headers.
#include "CliRunner.h"
#include "SvgReading.h"
#include "TestData.h"
#include "TestSupport.h"

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QMap>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <tuple>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

using namespace latmix;
using latmix::test::attributes;
using latmix::test::Plot;
using latmix::test::plotOf;
using latmix::test::unescape;
using latmix::test::xmlError;

namespace {

QString readAll(const QString& path) {
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? QString::fromUtf8(f.readAll()) : QString();
}

bool writeText(const QString& path, const QByteArray& text) {
    QDir().mkpath(QFileInfo(path).absolutePath());
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly) || f.write(text) != text.size()) return false;
    f.close();
    return f.error() == QFileDevice::NoError;
}

QJsonObject readJson(const QString& path) { return QJsonDocument::fromJson(readAll(path).toUtf8()).object(); }

// The <figure class="plot" id="plot-ID"> of a page ("" when absent).
QString figure(const QString& html, const QString& id) {
    const QString start = "<figure class=\"plot\" id=\"plot-" + id + "\">";
    const int a = html.indexOf(start);
    if (a < 0) return {};
    const int b = html.indexOf("</figure>", a);
    return html.mid(a, b - a);
}

QStringList svgs(const QString& html) {
    QStringList out;
    static const QRegularExpression re("<svg[^>]*>.*?</svg>", QRegularExpression::DotMatchesEverythingOption);
    for (auto it = re.globalMatch(html); it.hasNext();) out << it.next().captured(0);
    return out;
}

// The results-table cell of a data-key: its data-value and shown text ("" when absent).
std::pair<QString, QString> resultCell(const QString& html, const QString& key) {
    const QRegularExpression row("<tr data-key=\"" + QRegularExpression::escape(key) +
                                 "\"><th>[^<]*</th><td class=\"num\" data-value=\"([^\"]*)\">([^<]*)</td></tr>");
    const auto m = row.match(html);
    return m.hasMatch() ? std::make_pair(m.captured(1), m.captured(2)) : std::make_pair(QString(), QString());
}
// A cell with data-key="KEY" anywhere (zero-shot table): its data-value.
QString keyedValue(const QString& html, const QString& key) {
    const QRegularExpression re("data-key=\"" + QRegularExpression::escape(key) + "\" data-value=\"([^\"]*)\"");
    const auto m = re.match(html);
    return m.hasMatch() ? m.captured(1) : QString();
}

using Field = std::function<double(const train::DistillStep&)>;
Field fieldOf(const QString& key) {
    if (key == "loss") return [](const train::DistillStep& s) { return s.loss; };
    if (key == "objective") return [](const train::DistillStep& s) { return s.objective; };
    if (key == "vol") return [](const train::DistillStep& s) { return s.vol; };
    if (key == "lr") return [](const train::DistillStep& s) { return s.lr; };
    if (key == "a1_cond") return [](const train::DistillStep& s) { return s.a1Condition; };
    if (key == "a1_orth") return [](const train::DistillStep& s) { return s.a1Orthogonality; };
    if (key == "a1_offblock") return [](const train::DistillStep& s) { return s.a1OffBlock; };
    if (key == "folded_ppl") return [](const train::DistillStep& s) { return s.foldedPerplexity; };
    return nullptr;
}

// A run record with known numbers and text to escape (the run folder has "&" in its name).
const char* const kRtnRun = R"({
  "latmix_version": "0.1.0", "libtorch_version": "1.13.0", "created": "2026-01-02T03:04:05Z",
  "command": "latmix quantize --calib \u0022a<b>&c.txt\u0022 --out x", "model": "/models/m",
  "method": "rtn", "method_description": "<script>alert(\u0022x\u0022)</script> & co",
  "format": {"format": "mxfp4", "block": 32, "scale_mode": "floor"}, "seed": 3, "device": "cpu",
  "calibration": {"source": "calib.txt", "samples": 4, "seqlen": 32},
  "weight_quantization": {"algorithm": "rtn", "damping": 0.01, "column_block": 128, "act_order": false},
  "linears": [{"layer": 0, "linear": "self_attn.q_proj", "relative_error": 0.25},
              {"layer": 0, "linear": "mlp.down_proj", "relative_error": 0.125},
              {"layer": 1, "linear": "self_attn.q_proj", "relative_error": 0.75},
              {"layer": 1, "linear": "mlp.down_proj", "relative_error": 0.375}],
  "perplexity": {"dataset": "wikitext-2 test", "seqlen": 64, "windows": 4,
                 "fp": 20.0, "folded_fp": 0.0, "w4a4": 25.0, "weights_only": 21.125},
  "zeroshot": {"average": 0.375, "tasks": {"piqa": {"acc": 0.5, "acc_norm": 0.25, "n": 8},
                                           "boolq": {"acc": 0.5, "n": 8}}},
  "seconds": {"train": 0.0, "quantize": 1.5, "eval": 2.0, "total": 3.5}
})";

} // namespace

class TestReport : public QObject {
    Q_OBJECT

    using Result = latmix::test::CliResult;

    QTemporaryDir m_tmp;
    QString m_learned, m_rtn, m_noSeries;
    bool m_evaluated = false; // the learned run has perplexities and the folded FP series

    static Result run(const QStringList& args) { return latmix::test::runLatmixInProcess(args); }

private slots:
    void initTestCase() {
        QVERIFY(m_tmp.isValid());
        const QString model = m_tmp.filePath("demo"), calib = m_tmp.filePath("calib.txt");
        const Result d = run({"demo-model", model});
        QVERIFY2(d.exitCode == 0, qPrintable(d.err));
        QVERIFY(latmix::test::writeCalibrationText(calib));
        // A real learned run: 6 steps of LATMiX-LU on the demo model; with the WikiText-2 test
        // split, evaluated and with the folded FP perplexity tracked every 2 steps.
        m_learned = m_tmp.filePath("learned");
        QStringList args = {"quantize", "--model", model, "--method", "latmix-lu", "--format", "mxfp4", "--steps", "6",
                            "--calib", calib, "--calib-samples", "4", "--seqlen", "32", "--batch", "2", "--device", "cpu",
                            "--out", m_learned};
        m_evaluated = QFile::exists(latmix::test::dataDir() + "/wikitext-2/wiki.test.raw");
        if (m_evaluated) args << "--eval-seqlen" << "32" << "--eval-windows" << "2" << "--folded-eval-every" << "2";
        const Result q = run(args);
        QVERIFY2(q.exitCode == 0, qPrintable(q.err));
        QVERIFY(QFile::exists(m_learned + "/train.h5"));
        m_rtn = m_tmp.filePath("rtn r&d");
        QVERIFY(writeText(m_rtn + "/latmix.json", kRtnRun));
        // A learned method's record whose train.h5 is gone.
        m_noSeries = m_tmp.filePath("no-series");
        QVERIFY(writeText(m_noSeries + "/latmix.json", readAll(m_learned + "/latmix.json").toUtf8()));
    }

    // The learned run's curves, mapped back through the stated axes, are train.h5's series.
    void curvesMatchTrainSeries_data() {
        QTest::addColumn<QString>("plot");
        QTest::addColumn<QString>("series");
        QTest::newRow("loss") << "loss" << "loss";
        QTest::newRow("objective") << "loss" << "objective";
        QTest::newRow("volume") << "vol" << "vol";
        QTest::newRow("lr") << "lr" << "lr";
        QTest::newRow("A1 condition") << "a1_cond" << "a1_cond";
        QTest::newRow("A1 orthogonality") << "a1_orth" << "a1_orth";
        QTest::newRow("A1 off-block") << "a1_orth" << "a1_offblock";
        QTest::newRow("folded FP perplexity") << "folded_ppl" << "folded_ppl";
    }
    void curvesMatchTrainSeries() {
        QFETCH(QString, plot);
        QFETCH(QString, series);
        if (series == "folded_ppl" && !m_evaluated) LATMIX_DATA_SKIP("WikiText-2 test split not found (LATMIX_DATA_DIR)");
        const QString html = QString::fromStdString(report::runReportHtml(m_learned.toStdString()));
        const QString fig = figure(html, plot);
        QVERIFY2(!fig.isEmpty(), qPrintable("no plot-" + plot));
        const QString svg = svgs(fig).value(0);
        QVERIFY2(xmlError(svg).isEmpty(), qPrintable(xmlError(svg)));
        const Plot p = plotOf(svg);
        QVERIFY(p.width > 0 && p.height > 0 && p.xmax > p.xmin && p.ymax > p.ymin);
        // The series as train.h5 holds it (finite steps), the folded one with its start before step 1.
        const auto steps = train::readDistillSeries((m_learned + "/train.h5").toStdString());
        QCOMPARE(int(steps.size()), 6);
        std::vector<std::pair<double, double>> expected;
        if (series == "folded_ppl") {
            const double start = train::readFoldedPerplexityStart((m_learned + "/train.h5").toStdString());
            QVERIFY(std::isfinite(start));
            expected.emplace_back(0, start);
        }
        const Field field = fieldOf(series);
        QVERIFY(field);
        for (const auto& s : steps)
            if (std::isfinite(field(s))) expected.emplace_back(s.step, field(s));
        QVERIFY(expected.size() >= 2);
        const auto lines = p.lines(svg, series);
        QVERIFY(!lines.empty());
        std::vector<std::pair<double, double>> got;
        for (const auto& l : lines) got.insert(got.end(), l.begin(), l.end());
        QCOMPARE(int(got.size()), int(expected.size()));
        for (std::size_t i = 0; i < got.size(); ++i) {
            QVERIFY2(std::abs(got[i].first - expected[i].first) <= p.xTol(),
                     qPrintable(QString("point %1: x %2, step %3").arg(i).arg(got[i].first).arg(expected[i].first)));
            QVERIFY2(std::abs(got[i].second - expected[i].second) <= p.yTol(),
                     qPrintable(QString("step %1: %2 drawn, %3 in train.h5 (tolerance %4)")
                                    .arg(expected[i].first).arg(got[i].second, 0, 'g', 10)
                                    .arg(expected[i].second, 0, 'g', 10).arg(p.yTol())));
            QVERIFY(got[i].second >= p.ymin - p.yTol() && got[i].second <= p.ymax + p.yTol());
        }
        // Every step has a value of the per-step series: one unbroken line.
        if (series == "loss" || series == "objective" || series == "lr") QCOMPARE(int(lines.size()), 1);
    }

    // Each perplexity > 0 of latmix.json (absent: 0) is a row with its exact value and its
    // value to 3 decimals; recovery = FP / W4A4; the zero-shot scores.
    void resultsTable_data() {
        QTest::addColumn<QString>("which");
        QTest::newRow("hand-written") << "rtn";
        QTest::newRow("learned run") << "learned";
    }
    void resultsTable() {
        QFETCH(QString, which);
        const QString dir = which == "rtn" ? m_rtn : m_learned;
        if (which == "learned" && !m_evaluated) LATMIX_DATA_SKIP("WikiText-2 test split not found (LATMIX_DATA_DIR)");
        const QString html = QString::fromStdString(report::runReportHtml(dir.toStdString()));
        const QJsonObject j = readJson(dir + "/latmix.json");
        const QJsonObject ppl = j["perplexity"].toObject();
        QVERIFY(!ppl.isEmpty());
        int rows = 0;
        for (const char* key : {"fp", "folded_fp", "w4a4", "weights_only"}) {
            const double v = ppl[key].toDouble();
            const auto [value, shown] = resultCell(html, key);
            if (v > 0) {
                QVERIFY2(!value.isEmpty(), key);
                QCOMPARE(value.toDouble(), v);
                QCOMPARE(shown, QString::number(v, 'f', 3));
                ++rows;
            } else {
                QVERIFY2(value.isEmpty(), key); // 0: not measured, no value shown
            }
        }
        QCOMPARE(rows, which == "rtn" ? 3 : 4);
        const double recovery = ppl["fp"].toDouble() / ppl["w4a4"].toDouble();
        QCOMPARE(resultCell(html, "recovery").first.toDouble(), recovery);
        QCOMPARE(resultCell(html, "recovery").second, QString::number(100 * recovery, 'f', 2) + " %");
        if (which == "rtn") {
            QCOMPARE(resultCell(html, "bits_per_weight").second, QString("4.25")); // MXFP4: 4 + 8/32
            QCOMPARE(resultCell(html, "recovery").second, QString("80.00 %")); // 20 / 25
            const QJsonObject tasks = j["zeroshot"].toObject()["tasks"].toObject();
            QCOMPARE(tasks.size(), 2);
            for (const QString& task : tasks.keys()) {
                const QJsonObject t = tasks[task].toObject();
                for (const char* metric : {"acc", "acc_norm"}) {
                    const QString v = keyedValue(html, "zeroshot:" + task + ":" + metric);
                    if (t.contains(metric)) QCOMPARE(v.toDouble(), t[metric].toDouble());
                    else QVERIFY(v.isEmpty());
                }
            }
            QCOMPARE(resultCell(html, "zeroshot_average").first.toDouble(), 0.375);
            QCOMPARE(resultCell(html, "seconds:total").first.toDouble(), 3.5);
            QCOMPARE(resultCell(html, "seconds:total").second, QString("3.5 s"));
        } else {
            const double finalKl = j["training"].toObject()["final_objective"].toDouble();
            QCOMPARE(resultCell(html, "final_objective").first.toDouble(), finalKl);
            // The run's KL to the FP model (SPEC §7): each value exact, with its standard error.
            const QJsonObject kl = ppl["kl"].toObject();
            QVERIFY(kl["tokens"].toInt() > 0);
            QCOMPARE(resultCell(html, "kl_p99").first.toDouble(), kl["p99"].toDouble());
            for (const auto& [key, value, se] : {std::tuple<const char*, const char*, const char*>{"kl_mean", "mean", "stderr"},
                                                 {"top1_agreement", "top1_agreement", "top1_stderr"},
                                                 {"delta_ppl", "delta_ppl", "delta_ppl_stderr"}}) {
                const QRegularExpression cell("<tr data-key=\"" + QString(key) + "\"><th>[^<]*</th><td class=\"num\" data-value=\"([^\"]*)\" "
                                              "data-stderr=\"([^\"]*)\">[^<]* ± [^<]*</td></tr>");
                const auto m = cell.match(html);
                QVERIFY2(m.hasMatch(), key);
                QCOMPARE(m.captured(1).toDouble(), kl[value].toDouble());
                QCOMPARE(m.captured(2).toDouble(), kl[se].toDouble());
            }
        }
    }

    // The layer × linear table holds each "linears" entry; the mean row and the plot's points
    // too (hand-written: q_proj (0.25 + 0.75) / 2 = 0.5, down_proj (0.125 + 0.375) / 2 = 0.25).
    void weightErrors_data() {
        QTest::addColumn<QString>("which");
        QTest::newRow("hand-written") << "rtn";
        QTest::newRow("learned run") << "learned";
    }
    void weightErrors() {
        QFETCH(QString, which);
        const QString dir = which == "rtn" ? m_rtn : m_learned;
        const QString html = QString::fromStdString(report::runReportHtml(dir.toStdString()));
        const QJsonArray linears = readJson(dir + "/latmix.json")["linears"].toArray();
        QVERIFY(!linears.isEmpty());
        // The table's cells by (layer, linear).
        QMap<QPair<int, QString>, double> cells;
        static const QRegularExpression rowRe("<tr data-layer=\"(\\d+)\">(.*?)</tr>");
        static const QRegularExpression cellRe("data-linear=\"([^\"]*)\" data-value=\"([^\"]*)\"");
        for (auto it = rowRe.globalMatch(html); it.hasNext();) {
            const auto m = it.next();
            for (auto c = cellRe.globalMatch(m.captured(2)); c.hasNext();) {
                const auto cm = c.next();
                cells[{m.captured(1).toInt(), unescape(cm.captured(1))}] = cm.captured(2).toDouble();
            }
        }
        QCOMPARE(cells.size(), linears.size());
        const QString svg = svgs(figure(html, "weight-errors")).value(0);
        QVERIFY2(xmlError(svg).isEmpty(), qPrintable(xmlError(svg)));
        const Plot p = plotOf(svg);
        for (const auto& v : linears) {
            const QJsonObject L = v.toObject();
            const int layer = L["layer"].toInt();
            const QString name = L["linear"].toString();
            QCOMPARE(cells.value({layer, name}, -1), L["relative_error"].toDouble());
            bool drawn = false;
            for (const auto& line : p.lines(svg, name))
                for (const auto& [x, y] : line)
                    if (std::abs(x - layer) <= p.xTol()) {
                        QVERIFY2(std::abs(y - L["relative_error"].toDouble()) <= p.yTol(), qPrintable(name));
                        drawn = true;
                    }
            QVERIFY2(drawn, qPrintable(QString("layer %1 %2 not drawn").arg(layer).arg(name)));
        }
        if (which == "rtn") {
            const QRegularExpression mean("<tr class=\"mean\"><th>mean</th>(.*?)</tr>");
            const QString row = mean.match(html.mid(html.indexOf("id=\"weight-errors\""))).captured(1);
            QVERIFY(row.contains("data-linear=\"self_attn.q_proj\" data-value=\"0.5\""));
            QVERIFY(row.contains("data-linear=\"mlp.down_proj\" data-value=\"0.25\""));
        }
    }

    // Text from the run (command, description, folder name) is escaped everywhere.
    void escapesText() {
        const QString html = QString::fromStdString(report::runReportHtml(m_rtn.toStdString()));
        QVERIFY(html.contains("latmix quantize --calib &quot;a&lt;b&gt;&amp;c.txt&quot; --out x"));
        QVERIFY(html.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; co"));
        QVERIFY(html.contains("rtn r&amp;d"));
        QVERIFY(!html.contains("a<b>"));
        QVERIFY(!html.contains("<script"));
        QVERIFY(!html.contains("r&d"));
        for (const QString& svg : svgs(html)) QVERIFY2(xmlError(svg).isEmpty(), qPrintable(xmlError(svg)));
    }

    // Nothing external (no script, stylesheet link, image source, URL) and the elements closed;
    // every plot has a title, tick labels on both axes and axis labels.
    void selfContained() {
        const QString html = QString::fromStdString(report::runReportHtml(m_learned.toStdString()));
        QVERIFY(html.startsWith("<!DOCTYPE html>"));
        for (const char* bad : {"<script", "<link", "src=", "url(", "@import", "<img", "<iframe"})
            QVERIFY2(!html.contains(bad, Qt::CaseInsensitive), bad);
        const QStringList plots = svgs(html);
        QVERIFY(plots.size() >= 7); // loss, vol, lr, A1 x2, A2 x2 (+ folded), weight errors
        QCOMPARE(html.count("http"), html.count("xmlns=\"http://www.w3.org/2000/svg\""));
        for (const char* tag : {"svg", "table", "section", "figure", "tr", "g"})
            QCOMPARE(html.count(QRegularExpression(QString("<%1[\\s>]").arg(tag))), html.count(QString("</%1>").arg(tag)));
        for (const QString& svg : plots) {
            QVERIFY2(xmlError(svg).isEmpty(), qPrintable(xmlError(svg)));
            QVERIFY(svg.contains("<title>") && svg.contains("class=\"plot-title\""));
            QVERIFY(svg.count("class=\"tick x-tick\"") >= 2);
            QVERIFY(svg.count("class=\"tick y-tick\"") >= 2);
            QCOMPARE(svg.count("class=\"axis-label\""), 2);
        }
        // The sections the page promises.
        for (const char* id : {"id=\"results\"", "id=\"training\"", "id=\"weights\"", "id=\"configuration\"",
                               "id=\"provenance\"", "data-section=\"format\"", "data-section=\"transforms\"",
                               "data-section=\"training\"", "data-section=\"weight_quantization\"",
                               "data-section=\"calibration\""})
            QVERIFY2(html.contains(id), id);
        const QJsonObject j = readJson(m_learned + "/latmix.json");
        QVERIFY(html.contains("<tr data-key=\"command\"><th>command</th><td>" + j["command"].toString().toHtmlEscaped()));
        QVERIFY(html.contains("<title>LATMiX run: latmix-lu, mxfp4</title>"));
    }

    // Without train.h5: no curves, and the page says why.
    void withoutTrainSeries_data() {
        QTest::addColumn<QString>("which");
        QTest::addColumn<QString>("says");
        QTest::newRow("rtn") << "rtn" << "no training series (method rtn learns nothing)";
        QTest::newRow("learned, train.h5 gone") << "no-series" << "no training series: " + m_noSeries + "/train.h5 is missing";
    }
    void withoutTrainSeries() {
        QFETCH(QString, which);
        QFETCH(QString, says);
        const QString dir = which == "rtn" ? m_rtn : m_noSeries;
        const QString html = QString::fromStdString(report::runReportHtml(dir.toStdString()));
        QVERIFY2(html.contains(says.toHtmlEscaped()), qPrintable(says));
        QVERIFY(figure(html, "loss").isEmpty());
        QCOMPARE(svgs(html).size(), 1); // the weight errors only
        QVERIFY(!figure(html, "weight-errors").isEmpty());
    }

    // writeRunReport: the page, written atomically; for a bad run nothing is written and an
    // older file stays as it was.
    void writesAtomically() {
        const QString out = m_tmp.filePath("reports/sub/learned.html"); // folders created
        report::writeRunReport(m_learned.toStdString(), out.toStdString());
        QCOMPARE(readAll(out), QString::fromStdString(report::runReportHtml(m_learned.toStdString())));
        QVERIFY(!QFile::exists(out + ".partial"));
        const QString bad = m_tmp.filePath("bad-run");
        QVERIFY(writeText(bad + "/latmix.json", R"({"method": "rtn", "linears": [)"));
        QVERIFY(writeText(m_tmp.filePath("old.html"), "old"));
        for (const QString& target : {m_tmp.filePath("bad.html"), m_tmp.filePath("old.html")}) {
            const QString e = latmix::test::errorOf([&] { report::writeRunReport(bad.toStdString(), target.toStdString()); });
            QVERIFY2(e.contains(bad + "/latmix.json"), qPrintable(e));
            QVERIFY(!QFile::exists(target + ".partial"));
        }
        QVERIFY(!QFile::exists(m_tmp.filePath("bad.html")));
        QCOMPARE(readAll(m_tmp.filePath("old.html")), QString("old"));
    }

    void cliReport() {
        const QString out = m_tmp.filePath("cli/report.html");
        const Result r = run({"report", m_learned, "--out", out});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QVERIFY2(r.out.contains(out), qPrintable(r.out));
        QCOMPARE(readAll(out), QString::fromStdString(report::runReportHtml(m_learned.toStdString())));
        // Default: RUN_DIR/report.html.
        const Result d = run({"report", m_rtn});
        QVERIFY2(d.exitCode == 0, qPrintable(d.err));
        QVERIFY(readAll(m_rtn + "/report.html").contains("no training series (method rtn learns nothing)"));
        QVERIFY(QFile::remove(m_rtn + "/report.html"));
    }

    // One-line errors naming the path, exit 1, and no file at --out.
    void cliErrors_data() {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("names");
        const QString none = m_tmp.filePath("no-such-run"), broken = m_tmp.filePath("broken-run");
        const QString out = m_tmp.filePath("err.html");
        QTest::newRow("missing RUN_DIR") << QStringList{"report", none, "--out", out} << none + "/latmix.json";
        QTest::newRow("broken latmix.json") << QStringList{"report", broken, "--out", out} << broken + "/latmix.json";
        QTest::newRow("runs: missing ROOT") << QStringList{"runs", none, "--csv", out} << none;
    }
    void cliErrors() {
        QFETCH(QStringList, args);
        QFETCH(QString, names);
        QVERIFY(writeText(m_tmp.filePath("broken-run/latmix.json"), R"({"method": 3})"));
        const QString out = m_tmp.filePath("err.html");
        const Result r = run(args);
        QCOMPARE(r.exitCode, 1);
        QVERIFY2(r.err.contains(names), qPrintable(r.err));
        QCOMPARE(r.err.trimmed().count('\n'), 0);
        QVERIFY(r.err.startsWith("latmix: error: "));
        QVERIFY(!QFile::exists(out));
        QVERIFY(!QFile::exists(out + ".partial"));
    }

    // `latmix runs`: the table (a row a run, its method and folder), a broken record warned about
    // by file and skipped, the CSV a row a run.
    void cliRuns() {
        const QString root = m_tmp.filePath("catalog");
        QVERIFY(writeText(root + "/a/latmix.json", readAll(m_learned + "/latmix.json").toUtf8()));
        QVERIFY(writeText(root + "/b/latmix.json", kRtnRun));
        QVERIFY(writeText(root + "/c/latmix.json", "{"));
        const QString csv = m_tmp.filePath("catalog.csv");
        const Result r = run({"runs", root, "--csv", csv});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        const QStringList lines = r.out.split('\n', Qt::SkipEmptyParts);
        QVERIFY2(lines.size() >= 3, qPrintable(r.out));
        QVERIFY(lines[0].startsWith("Method") && lines[0].contains("Recov. %") && lines[0].endsWith("Run"));
        QVERIFY(lines[1].startsWith("latmix-lu") && lines[1].endsWith(root + "/a"));
        QVERIFY(lines[2].startsWith("rtn") && lines[2].endsWith(root + "/b"));
        QVERIFY2(lines[2].contains(" 80.00 ") && lines[2].contains(" 20.00 ") && lines[2].contains(" 25.00 "),
                 qPrintable(lines[2]));
        QVERIFY2(r.err.contains(root + "/c/latmix.json") && r.err.contains("not JSON"), qPrintable(r.err));
        QVERIFY(r.out.contains("2 runs under"));
        const QStringList rows = readAll(csv).split('\n', Qt::SkipEmptyParts);
        QCOMPARE(rows.size(), 3);
        QVERIFY2(rows[1].startsWith(root + "/a,latmix-lu,mxfp4,32,floor,4.25,6,"), qPrintable(rows[1])); // MXFP4: 4 + 8/32 bits
    }

    // The quantized model is named by the run's format (the paper's W4A4 for 4-bit formats) in
    // the report and in `latmix runs`' header; runs of 4 and 8 bits together: "quantized".
    void precisionNamedByFormat_data() {
        QTest::addColumn<QStringList>("formats");
        QTest::addColumn<QString>("label");
        QTest::newRow("mxfp4") << QStringList{"mxfp4"} << "W4A4";
        QTest::newRow("mxfp8_e4m3") << QStringList{"mxfp8_e4m3"} << "W8A8";
        QTest::newRow("mxint4 and mxfp8_e4m3") << QStringList{"mxint4", "mxfp8_e4m3"} << "quantized";
    }
    void precisionNamedByFormat() {
        QFETCH(QStringList, formats);
        QFETCH(QString, label);
        QTemporaryDir root;
        for (const QString& f : formats)
            QVERIFY(writeText(root.filePath(f + "/latmix.json"), QByteArray(kRtnRun).replace("\"mxfp4\"", "\"" + f.toUtf8() + "\"")));
        const Result r = run({"runs", root.path()});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QVERIFY2(r.out.startsWith("Method") && r.out.section('\n', 0, 0).contains(" " + label + " ppl "), qPrintable(r.out));
        QVERIFY2(r.out.contains(formats.size() == 1 ? "\n1 run under" : "\n2 runs under"), qPrintable(r.out));
        if (formats.size() > 1) return;
        const QString html = QString::fromStdString(report::runReportHtml(root.filePath(formats[0]).toStdString()));
        for (const QString& part : {label + " perplexity (quantized", "FP / " + label + " perplexity", "(" + label + " model)"})
            QVERIFY2(html.contains(part), qPrintable(part));
        QVERIFY(!html.contains(label == "W4A4" ? "W8A8" : "W4A4"));
    }

    // The shipped executable, once.
    void executable() {
        const QString out = m_tmp.filePath("exe.html");
        const Result r = latmix::test::runLatmix({"report", m_rtn, "--out", out}, 60000);
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QCOMPARE(readAll(out), QString::fromStdString(report::runReportHtml(m_rtn.toStdString())));
    }
};

QTEST_GUILESS_MAIN(TestReport)
#include "tst_report.moc"
