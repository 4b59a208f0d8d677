// The run catalog (run/RunCatalog): a hand-written latmix.json read back field by field, the
// sweep's record read through it, files it refuses (named, with the field), the scan of a tree of
// run folders (nested, model/ and hidden folders skipped, depth limit, a symbolic link loop, a
// broken record reported and skipped) and the CSV parsed back with an RFC 4180 reader (a comma and
// quotes in a path).
#include "run/RunCatalog.h"
#include "run/RunColumns.h"
#include "run/Sweep.h"
#include "run/quantize/OptionTable.h"

#include <algorithm>

#include <ATen/ATen.h>
// Qt after ATen: Qt's `slots` macro breaks ATen headers.
#include "TestSupport.h"

#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

using namespace latmix;

namespace {

// A run record with known numbers (the values the tests expect below).
const char* const kLearnedRun = R"({
  "latmix_version": "0.1.0", "libtorch_version": "1.13.0", "created": "2026-01-02T03:04:05Z",
  "command": "latmix quantize --model m --out x", "model": "/models/m",
  "method": "latmix-qr", "method_description": "learned affine T1/T2 (QR) + T3, GPTQ",
  "format": {"format": "mxint4", "block": 16, "scale_mode": "ceil"},
  "seed": 7, "device": "cpu", "world_size": 1,
  "options": {"method": "latmix-qr", "steps": 250, "t1_bias": false, "lr": 0.002},
  "training": {"steps": 250, "batch": 2, "loss": "kl", "first_kl": 0.5, "final_kl": 0.125},
  "linears": [{"layer": 0, "linear": "self_attn.q_proj", "relative_error": 0.0625, "seconds": 1.0},
              {"layer": 1, "linear": "mlp.down_proj", "relative_error": 0.03125, "seconds": 1.0}],
  "perplexity": {"dataset": "wikitext-2 test", "seqlen": 512, "windows": 8,
                 "fp": 20.0, "folded_fp": 20.5, "w4a4": 25.0, "weights_only": 21.25},
  "zeroshot": {"average": 0.375, "seconds": 3.0,
               "tasks": {"piqa": {"acc": 0.5, "acc_norm": 0.25, "n": 8},
                         "lambada_openai": {"acc": 0.125, "perplexity": 99.5, "n": 8}}},
  "seconds": {"train": 12.5, "quantize": 1.0, "eval": 2.0, "total": 15.75}
})";

const char* const kRtnRun = R"({"method": "rtn", "format": {"format": "mxfp4", "block": 32, "scale_mode": "floor"},
  "seed": 0, "created": "2026-01-01T00:00:00Z", "command": "latmix quantize, with a comma and \u0022quotes\u0022",
  "linears": [], "seconds": {"train": 0.0, "total": 2.5}})";

bool writeText(const QString& path, const QByteArray& text) {
    QDir().mkpath(QFileInfo(path).absolutePath());
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly) || f.write(text) != text.size()) return false;
    f.close();
    return f.error() == QFileDevice::NoError;
}

// RFC 4180: records of fields, quoted fields may hold commas, doubled quotes and line breaks.
std::vector<std::vector<QString>> parseCsv(const QString& text) {
    std::vector<std::vector<QString>> rows;
    std::vector<QString> row;
    QString field;
    bool quoted = false, any = false;
    for (int i = 0; i < text.size(); ++i) {
        const QChar c = text[i];
        if (quoted) {
            if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') field += '"', ++i;
            else if (c == '"') quoted = false;
            else field += c;
        } else if (c == '"') {
            quoted = true;
        } else if (c == ',') {
            row.push_back(field), field.clear();
        } else if (c == '\n') {
            row.push_back(field), field.clear();
            rows.push_back(row), row.clear();
            any = false;
            continue;
        } else {
            field += c;
        }
        any = true;
    }
    if (any) row.push_back(field), rows.push_back(row);
    return rows;
}

} // namespace

class TestRunCatalog : public QObject {
    Q_OBJECT

    QTemporaryDir m_tmp;

private slots:
    // Every field of the summary equals the number written in the file; recovery is FP / W4A4
    // worked by hand: 20 / 25 = 0.8.
    void readsHandWrittenRecord() {
        const QString dir = m_tmp.filePath("learned");
        QVERIFY(writeText(dir + "/latmix.json", kLearnedRun));
        QVERIFY(writeText(dir + "/train.h5", "stand-in")); // only its presence is read here
        const run::RunSummary s = run::readRunSummary(dir.toStdString());
        QCOMPARE(QString::fromStdString(s.dir), dir);
        QCOMPARE(s.method, std::string("latmix-qr"));
        QCOMPARE(s.methodDescription, std::string("learned affine T1/T2 (QR) + T3, GPTQ"));
        QCOMPARE(s.format, std::string("mxint4"));
        QCOMPARE(s.block, 16);
        QCOMPARE(s.scaleMode, std::string("ceil"));
        QCOMPARE(s.steps, 250);
        QCOMPARE(s.seed, std::uint64_t(7));
        QCOMPARE(s.created, std::string("2026-01-02T03:04:05Z"));
        QCOMPARE(s.command, std::string("latmix quantize --model m --out x"));
        QCOMPARE(s.model, std::string("/models/m"));
        QCOMPARE(s.device, std::string("cpu"));
        QCOMPARE(s.latmixVersion, std::string("0.1.0"));
        QCOMPARE(s.fpPerplexity, 20.0);
        QCOMPARE(s.foldedFpPerplexity, 20.5);
        QCOMPARE(s.w4a4Perplexity, 25.0);
        QCOMPARE(s.weightsOnlyPerplexity, 21.25);
        QCOMPARE(s.evalSeqLen, 512);
        QCOMPARE(s.evalWindows, 8);
        QCOMPARE(s.recovery, 0.8);
        QCOMPARE(s.zeroShotAverage, 0.375);
        QCOMPARE(int(s.zeroShot.size()), 2);
        QCOMPARE(s.zeroShot[0].task, std::string("piqa")); // the file's order
        QCOMPARE(s.zeroShot[0].acc, 0.5);
        QCOMPARE(s.zeroShot[0].accNorm, 0.25);
        QVERIFY(std::isnan(s.zeroShot[0].perplexity));
        QCOMPARE(s.zeroShot[1].task, std::string("lambada_openai"));
        QCOMPARE(s.zeroShot[1].n, 8);
        QVERIFY(std::isnan(s.zeroShot[1].accNorm));
        QCOMPARE(s.zeroShot[1].perplexity, 99.5);
        QCOMPARE(s.trainSeconds, 12.5);
        QCOMPARE(s.totalSeconds, 15.75);
        QCOMPARE(s.firstObjective, 0.5);
        QCOMPARE(s.finalObjective, 0.125);
        QVERIFY(s.hasTrainSeries);
        QCOMPARE(int(s.linears.size()), 2);
        QCOMPARE(s.linears[1].layer, 1);
        QCOMPARE(s.linears[1].linear, std::string("mlp.down_proj"));
        QCOMPARE(s.linears[1].relativeError, 0.03125);
        QCOMPARE(s.latmixJson(), (dir + "/latmix.json").toStdString());
        // The options object, read through the option table: the ones given, the rest defaults;
        // the Runs view's line of settings names the changed ones as the workbench does.
        QVERIFY(s.options);
        QCOMPARE(s.options->steps, 250);
        QCOMPARE(s.options->lr, 0.002);
        QCOMPARE(s.options->t1Bias, std::optional<bool>(false));
        QCOMPARE(s.options->batch, run::RunConfig{}.batch);
        const auto settings = run::changedSettings(*s.options, run::Face::Workbench);
        const std::vector<std::string> expected{"Method: latmix-qr", "Learned T1 bias: off", "Steps: 250",
                                                "Learning rate: 0.002"};
        for (const auto& e : expected)
            QVERIFY2(std::find(settings.begin(), settings.end(), e) != settings.end(), e.c_str());
        QCOMPARE(settings.size(), expected.size());
        QVERIFY(run::changedSettings(run::RunConfig{}, run::Face::Cli).empty());

        // The sweep's table reads the same numbers through it.
        run::SweepCell cell;
        cell.name = "cell";
        cell.method = "latmix-qr";
        const run::SweepRecord r = run::readSweepRecord(cell, s.latmixJson());
        QCOMPARE(r.run.fpPerplexity, 20.0);
        QCOMPARE(r.run.w4a4Perplexity, 25.0);
        QCOMPARE(r.run.foldedFpPerplexity, 20.5);
        QCOMPARE(r.run.weightsOnlyPerplexity, 21.25);
        QCOMPARE(r.run.finalObjective, 0.125);
        QCOMPARE(r.run.zeroShotAverage, 0.375);
        QCOMPARE(r.run.trainSeconds, 12.5);
        QCOMPARE(r.run.totalSeconds, 15.75);
    }

    // What a method without training or evaluation leaves: absent numbers under the header's
    // conventions; a NaN perplexity (written as null) and folded_fp 0 are absent too.
    void absentNumbers() {
        const QString dir = m_tmp.filePath("rtn");
        QVERIFY(writeText(dir + "/latmix.json", kRtnRun));
        run::RunSummary s = run::readRunSummary(dir.toStdString());
        QCOMPARE(s.steps, 0);
        QCOMPARE(s.fpPerplexity, 0.0);
        QCOMPARE(s.recovery, 0.0);
        QVERIFY(s.finalObjective < 0 && s.zeroShotAverage < 0);
        QVERIFY(!s.hasTrainSeries);
        QVERIFY(!run::RunSummary::hasValue(s.fpPerplexity) && !run::RunSummary::hasValue(s.finalObjective, true));
        QVERIFY(writeText(dir + "/latmix.json",
                          R"({"method": "gptq", "perplexity": {"fp": null, "folded_fp": 0.0, "w4a4": 30.5}})"));
        s = run::readRunSummary(dir.toStdString());
        QCOMPARE(s.fpPerplexity, 0.0);
        QCOMPARE(s.foldedFpPerplexity, 0.0);
        QCOMPARE(s.w4a4Perplexity, 30.5);
        QCOMPARE(s.recovery, 0.0);
    }

    // The column label over several runs: the paper's W/A bits when every format shares them
    // (mxfp4 and nvfp4 are both 4-bit), "quantized" otherwise.
    void precisionOverRuns_data() {
        QTest::addColumn<QStringList>("formats");
        QTest::addColumn<QString>("label");
        QTest::newRow("one mxfp4") << QStringList{"mxfp4"} << "W4A4";
        QTest::newRow("mxfp4 and nvfp4") << QStringList{"mxfp4", "nvfp4", "mxint4"} << "W4A4";
        QTest::newRow("8-bit") << QStringList{"mxfp8_e4m3", "mxint8"} << "W8A8";
        QTest::newRow("4 and 8 bits") << QStringList{"mxfp4", "mxfp8_e4m3"} << "quantized";
        QTest::newRow("unknown format") << QStringList{"mxfp4", "fp3"} << "quantized";
        QTest::newRow("no runs") << QStringList{} << "quantized";
    }
    void precisionOverRuns() {
        QFETCH(QStringList, formats);
        QFETCH(QString, label);
        std::vector<run::RunSummary> runs;
        for (const auto& f : formats) runs.emplace_back().format = f.toStdString();
        QCOMPARE(QString::fromStdString(run::precisionLabel(runs)), label);
    }

    void refusesBadRecords_data() {
        QTest::addColumn<QByteArray>("content"); // empty: no file
        QTest::addColumn<QString>("says");
        QTest::newRow("missing") << QByteArray() << "latmix.json: missing";
        QTest::newRow("not JSON") << QByteArray(R"({"method": )") << "not JSON";
        QTest::newRow("not an object") << QByteArray("[1, 2]") << "not an object";
        QTest::newRow("no method") << QByteArray("{}") << R"(no "method")";
        QTest::newRow("perplexity text") << QByteArray(R"({"method": "rtn", "perplexity": {"fp": "high"}})")
                                         << R"("perplexity.fp" is string)";
        QTest::newRow("linears object") << QByteArray(R"({"method": "rtn", "linears": {}})") << R"("linears" is object)";
        QTest::newRow("error text")
            << QByteArray(R"({"method": "rtn", "linears": [{"layer": 0, "linear": "q", "relative_error": "x"}]})")
            << R"("linears[0].relative_error" is string)";
        QTest::newRow("steps fraction") << QByteArray(R"({"method": "rtn", "training": {"steps": 2.5}})")
                                        << R"("training.steps" is number)";
        // Counts held as int: 2^32 + 5 would have wrapped to 5 steps.
        QTest::newRow("steps past int") << QByteArray(R"({"method": "rtn", "training": {"steps": 4294967301}})")
                                        << R"("training.steps")";
        QTest::newRow("negative block") << QByteArray(R"({"method": "rtn", "format": {"block": -32}})")
                                        << R"("format.block")";
        QTest::newRow("options value") << QByteArray(R"({"method": "rtn", "options": {"steps": "many"}})")
                                       << R"(option 'steps')";
        QTest::newRow("options key") << QByteArray(R"({"method": "rtn", "options": {"stepz": 3}})") << "stepz";
        QTest::newRow("seed past int64") << QByteArray(R"({"method": "rtn", "seed": 18446744073709551615})")
                                         << R"("seed")";
    }
    void refusesBadRecords() {
        QFETCH(QByteArray, content);
        QFETCH(QString, says);
        const QString dir = m_tmp.filePath("bad-" + QString(QTest::currentDataTag()).replace(' ', '-'));
        QDir().mkpath(dir);
        if (!content.isEmpty()) QVERIFY(writeText(dir + "/latmix.json", content));
        const QString error = latmix::test::errorOf([&] { run::readRunSummary(dir.toStdString()); });
        QVERIFY2(error.contains(dir + "/latmix.json"), qPrintable(error));
        QVERIFY2(error.contains(says), qPrintable(error));
        // A run folder that does not exist is named as such.
        const QString none = latmix::test::errorOf([&] { run::readRunSummary((dir + "/none").toStdString()); });
        QVERIFY2(none.contains(dir + "/none/latmix.json") && none.contains("does not exist"), qPrintable(none));
    }

    // A tree: nested runs found, model/ and hidden folders skipped, the depth limit kept, a link
    // back to the root visited once, a broken record reported by its file and skipped.
    void scansTree() {
        const QString root = m_tmp.filePath("tree");
        QVERIFY(writeText(root + "/a/latmix.json", kRtnRun));
        QVERIFY(writeText(root + "/sweep/cells/x-s0/latmix.json", kLearnedRun));
        QVERIFY(writeText(root + "/sweep/cells/x-s0/model/latmix.json", kRtnRun)); // inside a run's model/
        QVERIFY(writeText(root + "/sweep/cells/y-s0/latmix.json", kRtnRun));
        QVERIFY(writeText(root + "/.hidden/latmix.json", kRtnRun));
        QVERIFY(writeText(root + "/a/folded.partial/latmix.json", kRtnRun));
        QVERIFY(writeText(root + "/broken/latmix.json", R"({"method": "rtn", "seed": )"));
        QVERIFY(writeText(root + "/d1/d2/d3/d4/d5/d6/latmix.json", kRtnRun));    // depth 6: found
        QVERIFY(writeText(root + "/d1/d2/d3/d4/d5/d6/d7/latmix.json", kRtnRun)); // depth 7: beyond
        std::filesystem::create_directory_symlink(root.toStdString(), (root + "/sweep/loop").toStdString());

        std::vector<std::string> problems;
        const auto runs = run::scanRuns(root.toStdString(), &problems);
        QStringList dirs;
        for (const auto& r : runs) dirs << QString::fromStdString(r.dir);
        const QStringList expected = {root + "/a", root + "/d1/d2/d3/d4/d5/d6", root + "/sweep/cells/x-s0",
                                      root + "/sweep/cells/y-s0"};
        QCOMPARE(dirs, expected);
        QCOMPARE(runs[2].method, std::string("latmix-qr"));
        QCOMPARE(int(problems.size()), 1);
        const QString p = QString::fromStdString(problems[0]);
        QVERIFY2(p.contains(root + "/broken/latmix.json") && p.contains("not JSON"), qPrintable(p));
        // Without a list for problems the broken run is still skipped; a smaller depth finds less.
        QCOMPARE(int(run::scanRuns(root.toStdString()).size()), 4);
        QCOMPARE(int(run::scanRuns(root.toStdString(), nullptr, 2).size()), 1); // a only
        // A root that is not a folder.
        const QString e = latmix::test::errorOf([&] { run::scanRuns((root + "/a/latmix.json").toStdString()); });
        QVERIFY2(e.contains(root + "/a/latmix.json") && e.contains("not a folder"), qPrintable(e));
    }

    // Bits per weight by hand (elements' bits + 8 bits of scale per block; NVFP4's E4M3 scale is
    // 8 bits per 16): a uniform run's from its format, a scheme's as its record says.
    void bitsPerWeightByHand_data() {
        QTest::addColumn<QByteArray>("format");
        QTest::addColumn<QByteArray>("scheme");
        QTest::addColumn<double>("bits");
        QTest::newRow("mxfp4/32") << QByteArray(R"({"format": "mxfp4", "block": 32, "scale_mode": "floor"})") << QByteArray()
                                  << 4.25;
        QTest::newRow("mxfp4/16") << QByteArray(R"({"format": "mxfp4", "block": 16, "scale_mode": "floor"})") << QByteArray()
                                  << 4.5;
        QTest::newRow("nvfp4") << QByteArray(R"({"format": "nvfp4", "block": 16, "scale_mode": "floor"})") << QByteArray()
                               << 4.5;
        QTest::newRow("mxfp8/32") << QByteArray(R"({"format": "mxfp8_e4m3", "block": 32, "scale_mode": "floor"})")
                                  << QByteArray() << 8.25;
        QTest::newRow("scheme") << QByteArray(R"({"format": "mxfp4", "block": 32, "scale_mode": "floor"})")
                                << QByteArray(R"({"rules": "self_attn = mxfp8", "bits_per_weight": 5.25})") << 5.25;
    }
    void bitsPerWeightByHand() {
        QFETCH(QByteArray, format);
        QFETCH(QByteArray, scheme);
        QFETCH(double, bits);
        const QString dir = m_tmp.filePath("bits-" + QString(QTest::currentDataTag()).replace('/', '-'));
        QByteArray record = QByteArray(kRtnRun).replace(R"({"format": "mxfp4", "block": 32, "scale_mode": "floor"})", format);
        if (!scheme.isEmpty()) record.replace(R"("linears": [])", R"("linears": [], "weight_quantization": {"scheme": )" + scheme + "}");
        QVERIFY(writeText(dir + "/latmix.json", record));
        const run::RunSummary r = run::readRunSummary(dir.toStdString());
        QCOMPARE(r.bitsPerWeight, bits);
        QCOMPARE(QString::fromStdString(run::cellText(run::runColumn("bits_per_weight"), r)), QString::number(bits, 'f', 2));
    }

    // The CSV parsed back: header, a row a run, quoted fields (a comma and quotes in a path and
    // a command), numbers that read back exactly, absent numbers empty.
    void csvParsesBack() {
        const QString root = m_tmp.filePath("csv");
        const QString odd = root + "/a, \"b\" run";
        QVERIFY(writeText(odd + "/latmix.json", kLearnedRun));
        QVERIFY(writeText(root + "/rtn/latmix.json", kRtnRun));
        const auto runs = run::scanRuns(root.toStdString());
        QCOMPARE(int(runs.size()), 2);
        const auto rows = parseCsv(QString::fromStdString(run::runsCsv(runs)));
        QCOMPARE(int(rows.size()), 3);
        QStringList header;
        for (const auto& h : run::runsCsvColumns()) header << QString::fromStdString(h);
        QCOMPARE(QStringList(rows[0].begin(), rows[0].end()), header);
        auto cell = [&](std::size_t row, const char* column) {
            const int c = header.indexOf(column);
            return c < 0 || std::size_t(c) >= rows[row].size() ? QString("<no column %1>").arg(column) : rows[row][std::size_t(c)];
        };
        for (std::size_t r = 1; r < rows.size(); ++r) QCOMPARE(int(rows[r].size()), header.size());
        // Sorted by dir: "a, ..." before "rtn".
        QCOMPARE(cell(1, "dir"), odd);
        QCOMPARE(cell(1, "method"), QString("latmix-qr"));
        QCOMPARE(cell(1, "block"), QString("16"));
        QCOMPARE(cell(1, "steps"), QString("250"));
        QCOMPARE(cell(1, "fp_ppl").toDouble(), 20.0);
        QCOMPARE(cell(1, "w4a4_ppl").toDouble(), 25.0);
        QCOMPARE(cell(1, "weights_only_ppl").toDouble(), 21.25);
        QCOMPARE(cell(1, "recovery").toDouble(), 0.8);
        QCOMPARE(cell(1, "zeroshot_average").toDouble(), 0.375);
        QCOMPARE(cell(1, "final_objective").toDouble(), 0.125);
        QCOMPARE(cell(1, "total_seconds").toDouble(), 15.75);
        QCOMPARE(cell(1, "train_series"), QString("no"));
        QCOMPARE(cell(2, "dir"), root + "/rtn");
        QCOMPARE(cell(2, "command"), QString("latmix quantize, with a comma and \"quotes\""));
        for (const char* absent : {"fp_ppl", "w4a4_ppl", "folded_fp_ppl", "recovery", "zeroshot_average", "final_objective"})
            QVERIFY2(cell(2, absent).isEmpty(), absent);
        QCOMPARE(cell(2, "steps"), QString("0"));
        QCOMPARE(cell(2, "total_seconds").toDouble(), 2.5);
        // A number that needs all 17 digits reads back as the same double.
        run::RunSummary x = runs[1];
        x.fpPerplexity = 0.1 + 0.2;
        const auto again = parseCsv(QString::fromStdString(run::runsCsv({x})));
        QCOMPARE(again[1][std::size_t(header.indexOf("fp_ppl"))].toDouble(), 0.1 + 0.2);
    }
};

QTEST_GUILESS_MAIN(TestRunCatalog)
#include "tst_runcatalog.moc"
