// `latmix sweep` (run/Sweep): the grid read and checked, the cells it expands to, a sweep
// cancelled after its first cell and run again (the finished cell skipped, the others run, the
// same numbers as a cell run alone), and the table's mean ± sample std and "within noise" marks
// worked by hand, the FP perplexity measured once per evaluation setting, a resumed sweep's
// progress spanning only the cells it runs.
#include "run/Sweep.h"

#include <ATen/ATen.h>
// Qt after ATen: Qt's `slots` macro breaks ATen headers.
#include "CliRunner.h"
#include "TestData.h"
#include "TestSupport.h"

#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include <fstream>
#include <vector>

using namespace latmix;

namespace {

QString writeGrid(const QTemporaryDir& dir, const QString& name, const std::string& text) {
    const QString path = dir.filePath(name);
    std::ofstream(path.toStdString()) << text;
    return path;
}

QString readAll(const QString& path) {
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? QString::fromUtf8(f.readAll()) : QString();
}

// Stops the sweep once `cells` cells have reported progress.
class CancelAfterCells : public JobContext {
public:
    explicit CancelAfterCells(int cells) : m_cells(cells) {}
    void progress(double, const std::string& message) override {
        if (message.rfind("cell ", 0) == 0) ++m_done;
    }
    bool cancelRequested() const override { return m_done >= m_cells; }

private:
    int m_cells, m_done = 0;
};

// Counts the progress messages that start a stage's prefix ("perplexity FP: ...").
class CountStage : public JobContext {
public:
    explicit CountStage(std::string stage) : m_stage(std::move(stage)) {}
    void progress(double fraction, const std::string& message) override {
        if (message.find(m_stage) != std::string::npos) ++count;
        if (message.rfind("cell ", 0) == 0) cellEnds.push_back(fraction);
        monotone = monotone && fraction >= last;
        last = fraction;
    }
    int count = 0;
    std::vector<double> cellEnds; // the fraction reported as each cell ends
    bool monotone = true;
    double last = 0;

private:
    std::string m_stage;
};

} // namespace

class TestSweep : public QObject {
    Q_OBJECT

    QTemporaryDir m_tmp;

private slots:
    void cellsOfAGrid() {
        const QString grid = writeGrid(m_tmp, "grid.json",
                                       R"({"model": "m", "methods": ["rtn", "latmix-lu"], "formats": ["mxfp4", "mxint4"],
                                           "seeds": [0, 5], "options": {"steps": 7, "t3": "none"},
                                           "variants": [{"name": "Full"}, {"name": "T1 only", "t2": "none"}]})");
        // A name with punctuation gives one '-' per run of it.
        const QString punct = writeGrid(m_tmp, "punct.json", R"j({"model": "m", "methods": ["latmix-lu"],
            "variants": [{"name": "Learned orth. + bias, block", "t1": "learned-rotation-bias"}, {"name": "(T1)"}]})j");
        const auto p = run::readSweepGrid(punct.toStdString());
        QCOMPARE(QString::fromStdString(p.cells[0].name), QString("latmix-lu-mxfp4-learned-orth-bias-block-s0"));
        QCOMPARE(QString::fromStdString(p.cells[1].name), QString("latmix-lu-mxfp4-t1-s0"));
        const auto g = run::readSweepGrid(grid.toStdString());
        QCOMPARE(int(g.cells.size()), 2 * 2 * 2 * 2);
        QCOMPARE(QString::fromStdString(g.model), m_tmp.filePath("m")); // relative to the grid file
        const auto& c = g.cells[5]; // rtn, mxint4, Full, seed 5
        QCOMPARE(QString::fromStdString(c.name), QString("rtn-mxint4-full-s5"));
        QCOMPARE(c.options.steps, 7);
        QCOMPARE(c.options.t3Block, 0);
        QCOMPARE(int(c.options.seed), 5);
        QCOMPARE(QString::fromStdString(g.cells[14].name), QString("latmix-lu-mxint4-t1-only-s0"));
        QCOMPARE(QString::fromStdString(g.cells[14].options.t2Kind), QString("none"));
        QCOMPARE(QString::fromStdString(run::readSweepGrid(grid.toStdString(), "/elsewhere").model), QString("/elsewhere"));
    }

    // Every grid shipped in docs/grids reads, and each of its cells is a method the quantize
    // run accepts (kinds, granularity, loss), so none of them fails hours into a sweep.
    void shippedGridsAreValid() {
        const QString configs = qEnvironmentVariable("LATMIX_CONFIGS_DIR");
        if (configs.isEmpty()) LATMIX_PREREQUISITE_SKIP("LATMIX_CONFIGS_DIR not set: run it through ctest, or set it to resources/configs");
        const QDir grids(configs + "/../../docs/grids");
        const QStringList files = grids.entryList({"*.json"}, QDir::Files);
        QVERIFY2(files.size() >= 8, qPrintable(grids.absolutePath()));
        for (const QString& f : files) {
            try {
                const auto g = run::readSweepGrid(grids.filePath(f).toStdString());
                QVERIFY2(!g.cells.empty(), qPrintable(f));
                for (const auto& c : g.cells) run::runMethod(c.options);
            } catch (const std::exception& e) {
                QFAIL(qPrintable(f + ": " + QString::fromStdString(e.what())));
            }
        }
    }

    void badGrids_data() {
        QTest::addColumn<QString>("text");
        QTest::addColumn<QString>("message");
        QTest::newRow("not JSON") << "{" << "not JSON";
        QTest::newRow("unknown key") << R"({"model":"m","methods":["rtn"],"method":"x"})" << "unknown key 'method'";
        QTest::newRow("no methods") << R"({"model":"m"})" << "'methods' is missing";
        QTest::newRow("unknown method") << R"({"model":"m","methods":["awq"]})" << "unknown method 'awq'";
        QTest::newRow("unknown format") << R"({"model":"m","methods":["rtn"],"formats":["mxfp5"]})" << "mxfp5";
        QTest::newRow("unknown option") << R"({"model":"m","methods":["rtn"],"options":{"stepz":3}})" << "unknown option 'stepz'";
        QTest::newRow("option type") << R"({"model":"m","methods":["rtn"],"options":{"steps":"many"}})" << "option 'steps' must be an integer";
        QTest::newRow("unknown kind") << R"({"model":"m","methods":["rtn"],"variants":[{"name":"x","t1":"magic"}]})"
                                      << "unknown --t1 transform kind 'magic'";
        QTest::newRow("variant without name") << R"({"model":"m","methods":["rtn"],"variants":[{"name":"a"},{"t2":"none"}]})"
                                              << "every variant needs a \"name\"";
        QTest::newRow("same folder twice") << R"({"model":"m","methods":["rtn"],"variants":[{"name":"a b"},{"name":"a-b"}]})"
                                           << "two cells would share the folder rtn-mxfp4-a-b-s0";
        QTest::newRow("bad seed") << R"({"model":"m","methods":["rtn"],"seeds":[-1]})" << "not a non-negative integer";
        QTest::newRow("unknown task") << R"({"model":"m","methods":["rtn"],"options":{"eval_tasks":"mmlu"}})" << "unknown zero-shot task";
        QTest::newRow("no model") << R"({"methods":["rtn"]})" << "no model";
    }
    void badGrids() {
        QFETCH(QString, text);
        QFETCH(QString, message);
        const QString grid = writeGrid(m_tmp, "bad.json", text.toStdString());
        const QString e = test::errorOf([&] { run::readSweepGrid(grid.toStdString()); });
        QVERIFY2(e.contains(message) && e.contains(grid), qPrintable(e));
    }

    // Three cells; cancelled after the first, the tables say 1 of 3; run again: the first is
    // skipped, the other two run; the numbers are those of the cells' own runs.
    void resumesWhereItStopped() {
        if (!QFile::exists(test::dataDir() + "/wikitext-2/wiki.test.raw"))
            LATMIX_DATA_SKIP("WikiText-2 test split not found (LATMIX_DATA_DIR)");
        const QString calib = m_tmp.filePath("calib.txt");
        QVERIFY(test::writeCalibrationText(calib));
        const QString grid = writeGrid(
            m_tmp, "sweep.json",
            "{\"model\": \"" + test::demoModelDir().toStdString() + "\", \"methods\": [\"rtn\", \"gptq\"], "
            "\"formats\": [\"mxfp4\"], \"seeds\": [0, 1], \"options\": {\"calib_samples\": 4, \"seqlen\": 32, "
            "\"eval_seqlen\": 32, \"eval_windows\": 2, \"calib\": \"calib.txt\", \"device\": \"cpu\"}, "
            "\"variants\": [{\"name\": \"v\"}]}");
        auto g = run::readSweepGrid(grid.toStdString());
        g.cells.pop_back(); // gptq seed 1: three cells
        const QString out = m_tmp.filePath("sweep");
        CancelAfterCells stop(1);
        QVERIFY(test::errorOf([&] { run::runSweep(g, out.toStdString(), stop); }).contains("cancel"));
        QVERIFY2(readAll(out + "/results.md").contains("1 of 3 cells finished (the sweep was interrupted"),
                 qPrintable(readAll(out + "/results.md")));
        QCOMPARE(readAll(out + "/results.csv").count('\n'), 2); // header + one cell
        std::vector<std::string> seen;
        CountStage fpStage("perplexity FP");
        const auto r = run::runSweep(g, out.toStdString(), fpStage, [&](int, const run::SweepCell& c, bool done) {
            seen.push_back(c.name + (done ? ":skipped" : ":ran"));
        });
        QCOMPARE(seen, (std::vector<std::string>{"rtn-mxfp4-v-s0:skipped", "rtn-mxfp4-v-s1:ran", "gptq-mxfp4-v-s0:ran"}));
        QCOMPARE(r.ran, 2);
        QCOMPARE(r.skipped, 1);
        QCOMPARE(int(r.records.size()), 3);
        QVERIFY(readAll(out + "/results.md").contains("3 of 3 cells finished."));
        for (const auto& rec : r.records) {
            QVERIFY(rec.run.w4a4Perplexity > 1);
            const auto again = run::readSweepRecord(g.cells[0], (out + "/cells/" + QString::fromStdString(rec.name) + "/latmix.json").toStdString());
            QCOMPARE(again.run.w4a4Perplexity, rec.run.w4a4Perplexity);
        }
        // The two cells run now share one FP pass (same text, windows, device): its two windows
        // once, not twice; the number is the one the first process measured, bit for bit.
        QCOMPARE(fpStage.count, 2);
        QVERIFY(r.records[0].run.fpPerplexity > 1);
        QCOMPARE(r.records[1].run.fpPerplexity, r.records[0].run.fpPerplexity);
        QCOMPARE(r.records[2].run.fpPerplexity, r.records[0].run.fpPerplexity);
        // The progress covers the two cells run now, not the skipped one: ETAs derive from it.
        QCOMPARE(fpStage.cellEnds, (std::vector<double>{0.0, 0.5, 1.0}));
        QVERIFY(fpStage.monotone);
        // RTN reads no calibration: both seeds give the same model.
        QCOMPARE(r.records[0].run.w4a4Perplexity, r.records[1].run.w4a4Perplexity);
    }

    // The Markdown table by hand: seeds 10 and 12 -> 11.00 ± 1.41 (sample std); a row at 11.5
    // (one seed, std 0) is within noise of it (0.5 <= 1.414), one at 20 is not. The CSV holds each
    // cell's numbers under the runs table's keys, exact.
    void tableByHand() {
        auto rec = [](const char* method, double ppl, std::uint64_t seed) {
            run::SweepRecord r;
            r.name = method + std::string("-s") + std::to_string(seed);
            r.method = method;
            r.format = "mxfp4";
            r.seed = seed;
            r.run.w4a4Perplexity = ppl;
            r.run.fpPerplexity = 9;
            r.run.totalSeconds = 2;
            r.run.bitsPerWeight = 4.25;
            return r;
        };
        const std::vector<run::SweepRecord> records = {rec("a", 10, 0), rec("a", 12, 1), rec("b", 11.5, 0), rec("c", 20, 0)};
        const QString md = QString::fromStdString(run::sweepMarkdown(records, 5));
        QVERIFY2(md.contains("| a | mxfp4 | 2 | 11.00 ± 1.41 | best |"), qPrintable(md));
        QVERIFY2(md.contains("| b | mxfp4 | 1 | 11.50 | within noise |"), qPrintable(md));
        QVERIFY2(md.contains("| c | mxfp4 | 1 | 20.00 |  |"), qPrintable(md));
        QVERIFY2(md.contains("| 4.25 |"), qPrintable(md)); // bits per weight
        QVERIFY(md.contains("4 of 5 cells finished"));
        // The quantized column is named by the formats' bits: W4A4 here; with an 8-bit row, which
        // is the best of its own format, "quantized".
        QVERIFY2(md.contains("| seeds | W4A4 ppl | vs best |"), qPrintable(md));
        auto mixed = records;
        mixed.push_back(rec("c", 30, 0));
        mixed.back().format = "mxfp8_e4m3";
        const QString mixedMd = QString::fromStdString(run::sweepMarkdown(mixed, 6));
        QVERIFY2(mixedMd.contains("| seeds | quantized ppl | vs best |") && mixedMd.contains("| c | mxfp8_e4m3 | 1 | 30.00 | best |"),
                 qPrintable(mixedMd));
        auto csvCell = [](const QString& csv, int row, const QString& column) {
            const QStringList lines = csv.split('\n', Qt::SkipEmptyParts);
            const int c = lines[0].split(',').indexOf(column);
            return c < 0 ? QString("<no %1>").arg(column) : lines[row].split(',').value(c);
        };
        QString csv = QString::fromStdString(run::sweepCsv(records));
        QCOMPARE(csvCell(csv, 2, "cell"), QString("a-s1"));
        QCOMPARE(csvCell(csv, 2, "w4a4_ppl"), QString("12"));
        QCOMPARE(csvCell(csv, 2, "fp_ppl"), QString("9"));
        QCOMPARE(csvCell(csv, 2, "bits_per_weight"), QString("4.25"));
        QCOMPARE(csvCell(csv, 2, "kl_mean"), QString()); // absent
        QCOMPARE(csvCell(csv, 2, "total_seconds"), QString("2"));
        // The KL columns: the seeds' mean KL (0.1, 0.3 -> 0.2000 ± 0.1414) and top-1 agreement in
        // percent (80, 60 -> 70.0 ± 14.1).
        auto withKl = records;
        for (int i : {0, 1}) withKl[i].run.kl.tokens = 100;
        withKl[0].run.kl.mean = 0.1, withKl[0].run.kl.p99 = 0.5, withKl[0].run.kl.top1 = 0.8;
        withKl[1].run.kl.mean = 0.3, withKl[1].run.kl.p99 = 0.9, withKl[1].run.kl.top1 = 0.6;
        const QString klMd = QString::fromStdString(run::sweepMarkdown(withKl, 5));
        QVERIFY2(klMd.contains("| W4A4 ppl | vs best | KL | KL p99 | Top-1 |") &&
                     klMd.contains("| a | mxfp4 | 2 | 11.00 ± 1.41 | best | 0.2000 ± 0.1414 | 0.7000 ± 0.2828 | 70.0 ± 14.1 |"),
                 qPrintable(klMd));
        csv = QString::fromStdString(run::sweepCsv(withKl));
        QCOMPARE(csvCell(csv, 2, "kl_mean"), QString("0.3"));
        QCOMPARE(csvCell(csv, 2, "top1_agreement"), QString("0.6"));
    }
};

QTEST_GUILESS_MAIN(TestSweep)
#include "tst_sweep.moc"
