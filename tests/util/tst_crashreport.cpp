// util/CrashReport on the real `latmix` executable: LATMIX_CRASH_AFTER_PROGRESS=N
// (app/cli/CliProgress.h) makes it call through a null function pointer at its N-th progress
// report, the hardest case for a report (the instruction pointer is 0, so the C library's
// unwinder stops at the signal frame). The report must still say where the process was: the
// signal and thread, the interrupted instruction, the return address on the stack (in the
// latmix executable: the caller of the null call) and, from the stack scan, further return
// addresses of the main thread's callers.
#include "CliRunner.h" // first: it may include libtorch headers, which Qt's macros break

#include <QRegularExpression>
#include <QTemporaryDir>
#include <QtTest>

#include "TestData.h"

class TestCrashReport : public QObject {
    Q_OBJECT
private slots:
    void nullCallIsLocated_data() {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<int>("report");
        const QString model = latmix::test::dataDir() + "/models/brownpy-13M";
        const QStringList eval{"eval", "--model", model, "--seqlen", "64", "--max-windows", "4", "--device", "cpu"};
        QTest::newRow("eval, first progress report") << eval << 1;
        QTest::newRow("eval, third progress report") << eval << 3;
        QTest::newRow("quantize rtn, second progress report")
            << QStringList{"quantize", "--model", model, "--method", "rtn", "--calib-samples", "2", "--seqlen", "32",
                           "--device", "cpu", "--out"}
            << 2; // the run folder is added below
    }
    void nullCallIsLocated() {
#ifdef __SANITIZE_ADDRESS__
        QSKIP("AddressSanitizer reports crashes itself (util/CrashReport steps aside)");
#endif
        QFETCH(QStringList, args);
        QFETCH(int, report);
        if (!QFile::exists(latmix::test::dataDir() + "/models/brownpy-13M/config.json"))
            LATMIX_DATA_SKIP("brownpy-13M not found (set LATMIX_DATA_DIR)");
        QTemporaryDir tmp;
        if (args.last() == "--out") args << tmp.filePath("run");
        const auto c = latmix::test::runLatmixWithEnv(args, "LATMIX_CRASH_AFTER_PROGRESS", QString::number(report));
        QVERIFY2(c.signalled, qPrintable("latmix did not crash: " + c.err));
        QVERIFY2(c.err.contains(QRegularExpression("latmix: crashed \\(signal SIGSEGV\\) in thread \\d+ \\(the main thread\\)")),
                 qPrintable(c.err));
        QVERIFY2(c.err.contains("instruction 0x0 (not in any loaded file)"), qPrintable(c.err));
        // The caller of the null call: CliProgress, compiled into the executable.
        QVERIFY2(c.err.contains(QRegularExpression("return address on the stack 0x[0-9a-f]+ in \\S*/latmix\\(\\+0x[0-9a-f]+\\)")),
                 qPrintable(c.err));
        // The scan finds more of the main thread's callers in the executable (the command, main).
        const int scanAt = c.err.indexOf("return addresses found on the stack");
        QVERIFY2(scanAt >= 0, qPrintable(c.err));
        const QString scan = c.err.mid(scanAt);
        QVERIFY2(c.err.indexOf("the call stack") < scanAt, qPrintable(c.err)); // the C library's unwinding first
        QCOMPARE(c.err.count("crashed (signal"), 1); // one report, even if a read in it had faulted
        const auto inLatmix = QRegularExpression("\\n  frame 0x[0-9a-f]+ in \\S*/latmix\\(\\+0x[0-9a-f]+\\)");
        int found = 0;
        for (auto it = inLatmix.globalMatch(scan); it.hasNext(); it.next()) ++found;
        QVERIFY2(found >= 2, qPrintable(QString("%1 return addresses in latmix found by the scan:\n%2").arg(found).arg(scan)));
    }
};

QTEST_GUILESS_MAIN(TestCrashReport)
#include "tst_crashreport.moc"
