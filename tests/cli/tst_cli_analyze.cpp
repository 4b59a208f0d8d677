// `latmix analyze` as a user runs it: on the demo model with a small calibration text, the
// table, the JSON and the HDF5 file; on bad arguments, one-line errors and no output files.
#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include "CliRunner.h"
#include "TestData.h"
#include <QTemporaryDir>
#include <QtTest>

class TestCliAnalyze : public QObject {
    Q_OBJECT

    using Result = latmix::test::CliResult;

    QTemporaryDir m_tmp;
    QString m_model, m_calib;

    static Result run(const QStringList& args) { return latmix::test::runLatmixInProcess(args); }

    QStringList baseArgs(const QString& out) const {
        return {"analyze", "--model", m_model, "--calib", m_calib, "--samples", "2", "--seqlen", "32", "--points",
                "layers\\.0\\.(self_attn\\.qkv|mlp\\.down_proj)", "--format", "mxfp4", "--block", "32",
                "--transforms", "none,block-hadamard,learned-affine-lu", "--steps", "5", "--out", out};
    }

private slots:
    void initTestCase() {
        const QString error = latmix::test::writeDemoFixture(m_tmp, m_model, m_calib);
        QVERIFY2(error.isEmpty(), qPrintable(error));
    }

    void analyzesDemoModel() {
        const QString out = m_tmp.filePath("analysis.h5"), json = m_tmp.filePath("analysis.json");
        const Result r = run(baseArgs(out) << "--json" << json);
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QVERIFY(QFile::exists(out));
        QVERIFY(!QFile::exists(out + ".partial"));
        // The table: a row per point and transform.
        for (const char* row : {"layers.0.self_attn.qkv.input", "layers.0.mlp.down_proj.input"})
            for (const char* kind : {"none", "block-hadamard", "learned-affine-lu"})
                QVERIFY2(r.out.contains(QRegularExpression(QString("%1\\s+%2\\s+\\d").arg(QRegularExpression::escape(row), kind))),
                         qPrintable(r.out));
        QVERIFY(r.out.contains("E(T)"));
        QVERIFY(r.out.contains("block-size sweep"));

        QFile f(json);
        QVERIFY(f.open(QIODevice::ReadOnly));
        QJsonParseError error;
        const QJsonDocument doc = QJsonDocument::fromJson(f.readAll(), &error);
        QVERIFY2(!doc.isNull(), qPrintable(error.errorString()));
        const QJsonObject root = doc.object();
        QCOMPARE(root["attributes"].toObject()["format"].toString(), QString("mxfp4"));
        const QJsonArray points = root["points"].toArray();
        QCOMPARE(points.size(), 2);
        QCOMPARE(points[0].toObject()["name"].toString(), QString("layers.0.self_attn.qkv.input"));
        QCOMPARE(points[1].toObject()["name"].toString(), QString("layers.0.mlp.down_proj.input"));
        for (const auto& p : points) {
            const QJsonObject point = p.toObject();
            QCOMPARE(point["rows"].toInt(), 64);
            const QJsonArray transforms = point["transforms"].toArray();
            QCOMPARE(transforms.size(), 3);
            const QStringList kinds{"none", "block-hadamard", "learned-affine-lu"};
            for (int i = 0; i < 3; ++i) {
                const QJsonObject t = transforms[i].toObject();
                QCOMPARE(t["kind"].toString(), kinds[i]);
                QVERIFY2(!t.contains("error"), qPrintable(t["error"].toString()));
                QVERIFY(t["mse"].toDouble() > 0);
                const int dim = point["dim"].toInt();
                QCOMPARE(t["per_block_error"].toArray().size(), (dim + 31) / 32);
                QVERIFY(t["sweep"].toArray().size() >= 4); // 8 .. 64 at least (dims 128, 384)
            }
            QCOMPARE(transforms[0].toObject()["condition_number"].toDouble(), 1.0); // identity: σ = 1 (QCOMPARE: 1e-12 relative)
            const QJsonObject training = transforms[2].toObject()["training"].toObject();
            QCOMPARE(training["steps"].toInt(), 5);
            QCOMPARE(training["history"].toObject()["loss"].toArray().size(), 5);
        }
    }

    void readsActivationRunFile() {
        const QString run1 = m_tmp.filePath("run.h5"), out = m_tmp.filePath("from-run.h5");
        Result r = run({"capture", "--model", m_model, "--calib", m_calib, "--points", "layers\\.1\\.mlp\\.down_proj",
                        "--samples", "1", "--seqlen", "32", "--out", run1});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        r = run({"analyze", "--activations", run1, "--transforms", "none,hadamard", "--out", out, "--max-rows", "16"});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QVERIFY(r.out.contains("16 rows per point"));
        QVERIFY(r.out.contains(QRegularExpression("layers.1.mlp.down_proj.input\\s+hadamard\\s+\\d")));
        QVERIFY(QFile::exists(out));
    }

    // --expert-points on a mixture of experts: each expert's own down_proj input, as many rows as
    // tokens routed to it (the layer's experts together: every token k times); refused with a run
    // file, and without the flag the error says how experts' points are reached.
    void analyzesEachExpertsOwnPoint() {
        const QString out = m_tmp.filePath("experts.h5"), json = m_tmp.filePath("experts.json");
        const QStringList args{"analyze", "--model", latmix::test::smallMoeModelDir(), "--calib", m_calib, "--samples",
                               "2", "--seqlen", "32", "--points", "layers\\.1\\.mlp\\.experts\\.[0-9]+\\.down_proj",
                               "--transforms", "none,hadamard", "--steps", "5", "--out", out, "--json", json};
        Result r = run(args);
        QVERIFY2(r.exitCode != 0 && r.err.contains("--expert-points"), qPrintable(r.err));
        QVERIFY(!QFile::exists(out));
        r = run(QStringList(args) << "--expert-points");
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QVERIFY2(r.out.contains(QRegularExpression("\\d+ to \\d+ rows per point")), qPrintable(r.out));
        QFile f(json);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QJsonArray points = QJsonDocument::fromJson(f.readAll()).object()["points"].toArray();
        QCOMPARE(points.size(), 8); // experts 0-7, each got tokens on these windows
        int rows = 0;
        for (int e = 0; e < 8; ++e) {
            const QJsonObject point = points[e].toObject();
            QCOMPARE(point["name"].toString(), QString("layers.1.mlp.experts.%1.down_proj.input").arg(e));
            QCOMPARE(point["dim"].toInt(), 32); // moe_intermediate_size
            rows += point["rows"].toInt();
        }
        QCOMPARE(rows, 2 * 32 * 2); // windows × tokens × top-2

        r = run({"analyze", "--activations", m_tmp.filePath("run.h5"), "--expert-points", "--out", out});
        QVERIFY2(r.exitCode != 0 && r.err.contains("--expert-points needs --model"), qPrintable(r.err));
    }

    void rejectsBadArguments_data() {
        QTest::addColumn<QStringList>("replace"); // option, value pairs replacing those of baseArgs
        QTest::addColumn<QString>("messagePart");
        QTest::newRow("unknown transform") << QStringList{"--transforms", "none,fancy"} << "unknown transform 'fancy'";
        QTest::newRow("unknown format") << QStringList{"--format", "fp4"} << "unknown MX format 'fp4'";
        QTest::newRow("block not power of two") << QStringList{"--block", "24"} << "block size 24 is not a power of two";
        QTest::newRow("sweep block") << QStringList{"--sweep-blocks", "8,12"} << "--sweep-blocks: '12'";
        QTest::newRow("no point matches") << QStringList{"--points", "layers\\.99\\."} << "no quantization point";
        QTest::newRow("bad regex") << QStringList{"--points", "layers(("} << "invalid --points regex";
        QTest::newRow("missing calibration") << QStringList{"--calib", "/nonexistent/calib.txt"} << "/nonexistent/calib.txt";
        QTest::newRow("model and activations") << QStringList{"--activations", "run.h5"} << "exactly one of --model";
        QTest::newRow("missing model") << QStringList{"--model", "/nonexistent/model"} << "/nonexistent/model";
    }
    void rejectsBadArguments() {
        QFETCH(QStringList, replace);
        QFETCH(QString, messagePart);
        const QString out = m_tmp.filePath("bad.h5");
        QStringList args = baseArgs(out);
        for (int i = 0; i + 1 < replace.size(); i += 2) {
            const int at = args.indexOf(replace[i]);
            if (at >= 0) args[at + 1] = replace[i + 1];
            else args << replace[i] << replace[i + 1];
        }
        const Result r = run(args);
        QVERIFY(r.exitCode != 0);
        QVERIFY2(r.err.contains(messagePart), qPrintable(r.err));
        QVERIFY2(r.err.startsWith("latmix: error:"), qPrintable(r.err));
        QCOMPARE(r.err.trimmed().count('\n'), 0); // one line: checked before any work starts
        QVERIFY(!QFile::exists(out));
        QVERIFY(!QFile::exists(out + ".partial"));
    }

    void missingOutIsAnError() {
        QStringList args = baseArgs("x.h5");
        args.removeLast();
        args.removeLast();
        const Result r = run(args);
        QVERIFY(r.exitCode != 0);
        QVERIFY2(r.err.contains("analyze needs --out"), qPrintable(r.err));
        QCOMPARE(r.err.trimmed().count('\n'), 0);
    }
};

QTEST_GUILESS_MAIN(TestCliAnalyze)
#include "tst_cli_analyze.moc"
