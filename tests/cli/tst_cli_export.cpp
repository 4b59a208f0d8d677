// `latmix export` as a user runs it: a run folder (built here the way `latmix quantize` lays it
// out) exported in both formats, the printed report, and one-line errors with a non-zero exit
// status and no output folder on bad input.
#include "ExportTestRun.h"

#include "export/Export.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "TestData.h" // after ATen: Qt's slots macro breaks ATen headers
#include <QDir>
#include <QFile>
#include "CliRunner.h"
#include <QTemporaryDir>
#include <QtTest>

using namespace latmix;

class TestCliExport : public QObject {
    Q_OBJECT

    using Result = latmix::test::CliResult;

    QTemporaryDir m_tmp;
    QString m_run, m_headBiasRun;

    static Result run(const QStringList& args) { return latmix::test::runLatmixInProcess(args); }

private slots:
    void initTestCase() {
        const QString source = test::dataDir() + "/models/stories260K-hf";
        if (!QFile::exists(source + "/config.json")) LATMIX_DATA_SKIP(qPrintable("not found: " + source + " (set LATMIX_DATA_DIR)"));
        QVERIFY(m_tmp.isValid());
        m_run = m_tmp.filePath("run");
        test::RunVariant v;
        v.weights = mx::makeConfig(mx::Format::NvFp4);
        v.extraBiases = true;
        test::buildRun(source.toStdString(), m_run.toStdString(), v, "");
        // A run of a version that folded T1's bias into lm_head (issue 71).
        m_headBiasRun = m_tmp.filePath("run-head-bias");
        v.headBias = true;
        test::buildRun(source.toStdString(), m_headBiasRun.toStdString(), v, "");
    }

    void exports_data() {
        QTest::addColumn<QString>("format");
        QTest::addColumn<QStringList>("phrases");
        QTest::newRow("hf") << "hf" << QStringList{"(hf)", "verified against the run", "activations are unquantized"};
        QTest::newRow("compressed-tensors")
            << "compressed-tensors"
            << QStringList{"(compressed-tensors)", "35 block linears packed", "latmix_t3.safetensors", "1/g"};
    }
    void exports() {
        QFETCH(QString, format);
        QFETCH(QStringList, phrases);
        const QString out = m_tmp.filePath("out-" + format);
        const Result r = run({"export", m_run, "--format", format, "--out", out});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        for (const auto& p : phrases) QVERIFY2(r.out.contains(p), qPrintable("'" + p + "' not in:\n" + r.out));
        QVERIFY(QFile::exists(out + "/config.json"));
        QVERIFY(QFile::exists(out + "/latmix.json"));
        exporting::verifyExport(out.toStdString(), m_run.toStdString());

        // Again into the same folder: refused, then replaced with --overwrite.
        const Result again = run({"export", m_run, "--format", format, "--out", out});
        QCOMPARE(again.exitCode, 1);
        QVERIFY2(again.err.contains("--overwrite"), qPrintable(again.err));
        const Result over = run({"export", m_run, "--format", format, "--out", out, "--overwrite"});
        QVERIFY2(over.exitCode == 0, qPrintable(over.err));
    }

    void errors_data() {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("phrase");
        QTest::newRow("missing run") << QStringList{"export", "@/no-such-run", "--format", "hf", "--out", "@/o1"}
                                     << "no-such-run' does not exist";
        QTest::newRow("unknown format") << QStringList{"export", "@run", "--format", "onnx", "--out", "@/o2"}
                                        << "unknown export format 'onnx'; choose one of hf, compressed-tensors, gguf";
        for (const char* target : {"hf", "gguf"})
            QTest::newRow((std::string(target) + " of a run with an lm_head bias").c_str())
                << QStringList{"export", "@headbias", "--format", target, "--out", "@/o2"}
                << "its lm_head has a bias (T1's bias, folded there by versions before issue 71), which no runtime's";
        QTest::newRow("gguf into a folder") << QStringList{"export", "@run", "--format", "gguf", "--out", "@run"}
                                            << "is a folder; a GGUF export is one file";
        QTest::newRow("no --out") << QStringList{"export", "@run", "--format", "hf"} << "--out is required";
    }
    void errors() {
        QFETCH(QStringList, args);
        QFETCH(QString, phrase);
        for (auto& a : args) {
            if (a == "@run") a = m_run;
            else if (a == "@headbias") a = m_headBiasRun;
            else if (a.startsWith("@/")) a = m_tmp.filePath(a.mid(2));
        }
        const Result r = run(args);
        QVERIFY(r.exitCode != 0);
        QVERIFY2(r.err.contains(phrase), qPrintable(r.err));
        QVERIFY2(r.err.trimmed().count('\n') == 0 || phrase.contains("required"), qPrintable(r.err)); // one line
        QVERIFY(!QFile::exists(m_tmp.filePath("o1")) && !QFile::exists(m_tmp.filePath("o2")));
    }
};

QTEST_GUILESS_MAIN(TestCliExport)
#include "tst_cli_export.moc"
