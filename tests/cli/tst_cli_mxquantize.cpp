// `latmix mx-quantize` (in process): golden outputs, packed bytes, clear errors. And the built
// executable once per command (binarySmoke).
#include "CliRunner.h"
#include <QTemporaryDir>
#include <QtTest>

class TestCliMxQuantize : public QObject {
    Q_OBJECT

    using Result = latmix::test::CliResult;

    static Result run(const QStringList& args, const QByteArray& input) {
        return latmix::test::runLatmixInProcess(args, input);
    }

private slots:
    // The shipped binary starts, parses and runs: every command's help, and mx-quantize for real
    // (golden output as in dequantizes()). The other CLI tests run their commands in process.
    void binarySmoke_data() {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QByteArray>("input");
        QTest::addColumn<QString>("expectedOut"); // substring
        for (const char* c : {"mx-quantize", "bench", "eval", "capture", "demo-model", "import-llama2c", "analyze",
                              "quantize", "export"})
            QTest::addRow("%s --help", c) << QStringList{c, "--help"} << QByteArray() << QString(c);
        QTest::newRow("mx-quantize ties") << QStringList{"mx-quantize", "--format", "mxfp4"} << QByteArray("4 0.25 0.75")
                                          << "4\n0\n1\n";
        QTest::newRow("--version") << QStringList{"--version"} << QByteArray() << "libtorch";
    }
    void binarySmoke() {
        QFETCH(QStringList, args);
        QFETCH(QByteArray, input);
        QFETCH(QString, expectedOut);
        if (qEnvironmentVariableIsEmpty("LATMIX_BIN_DIR")) QFAIL("LATMIX_BIN_DIR is not set (run through ctest)");
        const Result r = latmix::test::runLatmix(args, 60000, input);
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QVERIFY2(r.out.contains(expectedOut), qPrintable(r.out));
    }

    void dequantizes_data() {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QByteArray>("input");
        QTest::addColumn<QString>("expected");
        // scale 1 (amax 4): SPEC §1 E2M1 ties, printed with %.9g
        QTest::newRow("e2m1 ties") << QStringList{"mx-quantize", "--format", "mxfp4"}
                                   << QByteArray("4 0.25 0.75\n1.25 1.75 2.5 3.5 -2.5")
                                   << "4\n0\n1\n1\n2\n2\n4\n-2\n";
        QTest::newRow("ceil 7*2^3") << QStringList{"mx-quantize", "--scale-mode", "ceil"} << QByteArray("56 8 -20")
                                    << "64\n8\n-16\n";
        QTest::newRow("floor 7*2^3") << QStringList{"mx-quantize", "--scale-mode", "floor"} << QByteArray("56 8 -20")
                                     << "48\n8\n-16\n";
        QTest::newRow("int4 block 2") << QStringList{"mx-quantize", "--format", "mxint4", "--block", "2"}
                                      << QByteArray("1.9 0.3 7.6 -7.8") << "1.75\n0.25\n7\n-7\n";
        QTest::newRow("nan block") << QStringList{"mx-quantize", "--block", "2"} << QByteArray("nan 1 2 3")
                                   << "nan\nnan\n2\n3\n";
        QTest::newRow("mxfp8 keeps 0.1 to 9 digits") << QStringList{"mx-quantize", "--format", "mxfp8_e4m3"}
                                                     << QByteArray("0.1") << "0.1015625\n";
    }
    void dequantizes() {
        QFETCH(QStringList, args);
        QFETCH(QByteArray, input);
        QFETCH(QString, expected);
        const Result r = run(args, input);
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QCOMPARE(r.out, expected);
    }

    void packed() {
        const Result r = run({"mx-quantize", "--packed"}, "1 2 3 4 6");
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        // amax 6 -> scale 2^0, byte 0x7f; codes 1->2, 2->4, 3->5, 4->6, 6->7, two per byte, even low
        QCOMPARE(r.out, QString("format mxfp4 block 32 scale-mode floor values 5 blocks 1\n"
                                "scales-e8m0 7f\ncodes 42 65 07\n"));
    }

    void readsFile() {
        QTemporaryDir dir;
        QFile f(dir.filePath("in.txt"));
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("3\n-5\n");
        f.close();
        const Result r = run({"mx-quantize", "--input", f.fileName()}, "");
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QCOMPARE(r.out, QString("3\n-4\n")); // amax 5 -> scale 1; 5 ties to 4
    }

    void rejectsBadInput_data() {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QByteArray>("input");
        QTest::addColumn<QString>("messagePart");
        QTest::newRow("unknown format") << QStringList{"mx-quantize", "--format", "fp4"} << QByteArray("1")
                                        << "unknown MX format 'fp4'; choose one of mxfp4";
        QTest::newRow("block not power of two") << QStringList{"mx-quantize", "--block", "24"} << QByteArray("1")
                                                << "block size 24 is not a power of two";
        QTest::newRow("unknown scale mode") << QStringList{"mx-quantize", "--scale-mode", "up"} << QByteArray("1")
                                            << "unknown scale mode 'up'";
        QTest::newRow("not a number") << QStringList{"mx-quantize"} << QByteArray("1 2 abc 4")
                                      << "not a number: 'abc' (value 3 of stdin)";
        QTest::newRow("no numbers") << QStringList{"mx-quantize"} << QByteArray("  \n") << "no numbers in stdin";
        QTest::newRow("missing file") << QStringList{"mx-quantize", "--input", "/nonexistent/x.txt"} << QByteArray()
                                      << "cannot open input file '/nonexistent/x.txt'";
        QTest::newRow("nvfp4 block 32") << QStringList{"mx-quantize", "--format", "nvfp4", "--block", "32"}
                                        << QByteArray("1") << "nvfp4 uses blocks of 16";
    }
    void rejectsBadInput() {
        QFETCH(QStringList, args);
        QFETCH(QByteArray, input);
        QFETCH(QString, messagePart);
        const Result r = run(args, input);
        QVERIFY(r.exitCode != 0);
        QVERIFY(r.out.isEmpty());
        QVERIFY2(r.err.contains(messagePart), qPrintable(r.err));
        QCOMPARE(r.err.trimmed().count('\n'), 0); // one line
    }
};

QTEST_GUILESS_MAIN(TestCliMxQuantize)
#include "tst_cli_mxquantize.moc"
