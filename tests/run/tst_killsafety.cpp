// Issue 17.4: `kill -9` at any moment of quantize, capture, analyze and export leaves either a
// resumable run or nothing that looks complete. The real `latmix` executable is started with
// LATMIX_KILL_AFTER_PROGRESS=N (app/cli/CliProgress.h), which makes it SIGKILL itself at its N-th
// progress report, for N = 1, 2, 4, 8, ... until a run gets through; each row thereby stops the
// command in each of its stages (training steps, folding, each layer's quantization,
// evaluation, writing). After every kill the output is checked:
//   quantize: the run folder is absent, empty, or unfinished (run/UnfinishedRun.h: the marker,
//     no latmix.json; the runs catalog lists no result and --resume continues it), or finished
//     with everything latmix.json names; resumed (or run again when it never started), it
//     finishes with the same results as an uninterrupted run (training resumes from its last
//     checkpoint with the same batches);
//   capture, analyze: the output file is absent (only its ".partial" may be left), or complete;
//   export: the target folder is absent (only a hidden temporary sibling may be left), or a
//     complete export that verifies against the run.
#include "export/Export.h"
#include "run/RunCatalog.h"
#include "run/UnfinishedRun.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include "CliRunner.h"
#include "TestData.h"

using namespace latmix;

namespace {

struct Killed {
    bool killed = false; // ended by SIGKILL (else it finished by itself)
    int exitCode = -1;
    QString err;
};

// The executable with the kill after n progress reports.
Killed runKilledAfter(const QStringList& args, long long n) {
    const auto r = test::runLatmixWithEnv(args, "LATMIX_KILL_AFTER_PROGRESS", QString::number(n));
    return {r.signalled, r.exitCode, r.err};
}

QJsonObject readJson(const QString& path) {
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) return {};
    return QJsonDocument::fromJson(f.readAll()).object();
}

// Every entry of a folder (names), for messages.
QString listing(const QString& dir) { return QDir(dir).entryList(QDir::AllEntries | QDir::Hidden | QDir::NoDotAndDotDot).join(", "); }

} // namespace

class TestKillSafety : public QObject {
    Q_OBJECT
    using Result = test::CliResult;
    QTemporaryDir m_tmp;
    QString m_model, m_calib;

    static Result run(const QStringList& args) { return test::runLatmixInProcess(args); }
    QStringList quantizeArgs(const QString& out, const QString& method) const {
        return {"quantize", "--model", m_model, "--method", method, "--format", "mxfp4", "--steps", "6", "--calib", m_calib,
                "--calib-samples", "4", "--seqlen", "32", "--batch", "2", "--device", "cpu", "--checkpoint-every", "2",
                "--eval-seqlen", "32", "--eval-windows", "2", "--out", out};
    }

private slots:
    void initTestCase() {
        const QString error = test::writeDemoFixture(m_tmp, m_model, m_calib);
        QVERIFY2(error.isEmpty(), qPrintable(error));
    }

    void quantize_data() {
        QTest::addColumn<QString>("method");
        QTest::newRow("latmix-lu (trains, GPTQ)") << "latmix-lu";
        QTest::newRow("rtn") << "rtn";
    }
    void quantize() {
        QFETCH(QString, method);
        if (!QFile::exists(test::dataDir() + "/wikitext-2/wiki.test.raw"))
            LATMIX_DATA_SKIP("no WikiText-2 under LATMIX_DATA_DIR (the runs' evaluation)");
        const QString ref = m_tmp.filePath("ref-" + method);
        const Result whole = run(quantizeArgs(ref, method));
        QVERIFY2(whole.exitCode == 0, qPrintable(whole.err));
        const QJsonObject want = readJson(ref + "/latmix.json");
        QVERIFY(want.contains("perplexity"));

        int kills = 0, unfinished = 0, resumedTraining = 0;
        QStringList seen; // what each kill left, for the log
        // Reports before the folder is claimed (tokenizing, the weights' check) leave nothing: they
        // are passed quickly; from the first kill that leaves something, every third report.
        bool reached = false;
        for (long long n = 1;; n = reached ? n + 3 : n + std::max(1LL, n / 4)) {
            QVERIFY2(n < (1LL << 20), "the run never got through");
            const QString out = m_tmp.filePath(QString("killed-%1-%2").arg(method).arg(n));
            const Killed k = runKilledAfter(quantizeArgs(out, method), n);
            if (!k.killed) {
                QVERIFY2(k.exitCode == 0, qPrintable(k.err));
                break;
            }
            ++kills;
            const QString what = QString("killed at progress report %1: folder [%2]").arg(n).arg(listing(out));
            const bool finished = QFile::exists(out + "/latmix.json");
            const bool marked = run::hasUnfinishedMarker(out.toStdString());
            QString state = !QFileInfo::exists(out) ? "absent" : QDir(out).isEmpty() ? "empty" : finished ? "finished" : "?";
            if (marked && !finished)
                state = "unfinished: " + QString::fromStdString(run::readUnfinishedRun(out.toStdString()).stage) +
                        (QFile::exists(out + "/train.h5") ? ", train.h5" : "");
            seen << QString("%1 %2").arg(n).arg(state);
            if (finished) { // everything it names is there
                QVERIFY2(QFile::exists(out + "/model/config.json") && QFile::exists(out + "/model/model.safetensors"), qPrintable(what));
                if (method.startsWith("latmix")) QVERIFY2(QFile::exists(out + "/train.h5") && QFile::exists(out + "/transforms.h5"), qPrintable(what));
                QVERIFY(run::readRunSummary(out.toStdString()).w4a4Perplexity > 0);
            } else if (QFileInfo::exists(out) && !QDir(out).isEmpty()) {
                // Not finished and not empty: it says it is unfinished, and readers see no run.
                QVERIFY2(marked, qPrintable(what));
                ++unfinished;
                std::vector<std::string> problems;
                QVERIFY(run::scanRuns(out.toStdString(), &problems).empty());
                QVERIFY2(problems.size() == 1 && problems[0].find("unfinished run of " + method.toStdString()) != std::string::npos,
                         problems.empty() ? "no problem reported" : problems[0].c_str());
                QVERIFY_THROWS_EXCEPTION(std::runtime_error, run::readRunSummary(out.toStdString()));
                // A new run without --resume does not start it over (its training would be lost).
                if (unfinished == 1) {
                    const Result fresh = run(quantizeArgs(out, method));
                    QVERIFY(fresh.exitCode != 0);
                    QVERIFY2(fresh.err.contains("is an unfinished run of " + method) && fresh.err.contains("--resume"),
                             qPrintable(fresh.err));
                }
            }
            if (state == "absent" && kills > 1 && !reached) continue; // the first one is run again below
            reached = reached || state != "absent";
            // Resumed (or run again when nothing was written), it finishes like the whole run.
            const bool resume = marked && !finished;
            // The folder alone says what to resume (the marker's options, run/UnfinishedRun.h).
            const Result again = run(resume ? QStringList{"quantize", "--resume", out} : quantizeArgs(out, method));
            QVERIFY2(again.exitCode == 0, qPrintable(what + "\n" + again.err));
            QVERIFY2(!run::hasUnfinishedMarker(out.toStdString()), qPrintable(what));
            QVERIFY2(!QFileInfo::exists(out + "/folded.partial"), qPrintable(what));
            const QJsonObject got = readJson(out + "/latmix.json");
            if (resume && got["training"].toObject()["resumed_from_step"].toInt() > 0) ++resumedTraining;
            for (const char* key : {"perplexity"}) {
                const QJsonObject a = want[key].toObject(), b = got[key].toObject();
                for (const char* v : {"fp", "w4a4"}) {
                    // Same machine and thread count, the same batches from the checkpoint: the resumed
                    // run repeats the same float operations; 1e-6 is slack, not a rounding bound.
                    const double x = a[v].toDouble(), y = b[v].toDouble();
                    QVERIFY2(x > 0 && std::abs(x - y) <= 1e-6 * x,
                             qPrintable(what + QString(": %1 perplexity %2 vs %3 uninterrupted").arg(v).arg(y).arg(x)));
                }
            }
        }
        qInfo("%s: killed at progress report %s", qPrintable(method), qPrintable(seen.join("; ")));
        // The kills reached the stages: several left an unfinished run, and a learned run was
        // resumed from a checkpoint at least once.
        QVERIFY2(kills >= 10 && unfinished >= 4, qPrintable(QString("%1 kills, %2 unfinished").arg(kills).arg(unfinished)));
        if (method.startsWith("latmix")) QVERIFY(resumedTraining >= 1);
    }

    // What --resume refuses, before it writes anything: a folder with no run, a finished run of a
    // method that trains nothing, an unfinished run of another method.
    void resumeRefusals() {
        const QString none = m_tmp.filePath("resume-nothing");
        Result r = run(quantizeArgs(none, "rtn") << "--resume");
        QVERIFY(r.exitCode != 0);
        QVERIFY2(r.err.contains("holds no run") && r.err.contains("run without --resume"), qPrintable(r.err));
        QVERIFY2(!QFileInfo::exists(none), "a refused run left its folder");

        const QString rtn = m_tmp.filePath("ref-rtn");
        if (!QFile::exists(rtn + "/latmix.json")) QVERIFY(run(quantizeArgs(rtn, "rtn")).exitCode == 0);
        r = run(quantizeArgs(rtn, "rtn") << "--resume");
        QVERIFY(r.exitCode != 0);
        QVERIFY2(r.err.contains("finished run of a method that trains nothing"), qPrintable(r.err));
        QVERIFY(QFile::exists(rtn + "/latmix.json")); // left as it was

        const QString lu = m_tmp.filePath("resume-other");
        const Killed k = runKilledAfter(quantizeArgs(lu, "latmix-lu"), 45); // in training (quantize's log)
        QVERIFY2(k.killed && run::hasUnfinishedMarker(lu.toStdString()), qPrintable(k.err));
        r = run(quantizeArgs(lu, "latmix-qr") << "--resume");
        QVERIFY(r.exitCode != 0);
        QVERIFY2(r.err.contains("continues only with its own method (latmix-lu)"), qPrintable(r.err));
        QVERIFY(run::hasUnfinishedMarker(lu.toStdString()) && !QFile::exists(lu + "/latmix.json"));
    }

    void singleFileOutputs_data() {
        QTest::addColumn<QString>("command");
        QTest::newRow("capture") << "capture";
        QTest::newRow("analyze") << "analyze";
    }
    void singleFileOutputs() {
        QFETCH(QString, command);
        int kills = 0;
        for (long long n = 1;; n *= 2) {
            QVERIFY2(n < (1LL << 20), "the command never got through");
            const QString dir = m_tmp.filePath(QString("%1-%2").arg(command).arg(n));
            QVERIFY(QDir().mkpath(dir));
            const QString out = dir + "/out.h5";
            QStringList args{command, "--model", m_model, "--calib", m_calib, "--samples", "2", "--seqlen", "32", "--points",
                             "layers\\.[01]\\.", "--out", out};
            if (command == "analyze") args << "--transforms" << "none,hadamard";
            const Killed k = runKilledAfter(args, n);
            if (!k.killed) {
                QVERIFY2(k.exitCode == 0, qPrintable(k.err));
                QVERIFY(QFile::exists(out));
                break;
            }
            ++kills;
            // Nothing at the output's name; at most the partial file beside it.
            QVERIFY2(!QFile::exists(out), qPrintable(QString("killed at %1: [%2]").arg(n).arg(listing(dir))));
            for (const QString& f : QDir(dir).entryList(QDir::Files | QDir::Hidden))
                QVERIFY2(f == "out.h5.partial", qPrintable(f));
            const Result again = run(args); // and the command runs again over what it left
            QVERIFY2(again.exitCode == 0, qPrintable(again.err));
            QVERIFY(QFile::exists(out) && !QFile::exists(out + ".partial"));
        }
        QVERIFY2(kills >= 2, qPrintable(QString("%1 kills").arg(kills)));
    }

    void exportFolder() {
        const QString runDir = m_tmp.filePath("ref-rtn");
        if (!QFile::exists(runDir + "/latmix.json")) QVERIFY(run(quantizeArgs(runDir, "rtn")).exitCode == 0);
        int kills = 0;
        for (long long n = 1;; n *= 2) {
            QVERIFY2(n < (1LL << 20), "the export never got through");
            const QString parent = m_tmp.filePath(QString("export-%1").arg(n)), out = parent + "/hf";
            QVERIFY(QDir().mkpath(parent));
            const QStringList args{"export", runDir, "--format", "hf", "--out", out};
            const Killed k = runKilledAfter(args, n);
            if (!k.killed) {
                QVERIFY2(k.exitCode == 0, qPrintable(k.err));
                break;
            }
            ++kills;
            QVERIFY2(!QFileInfo::exists(out), qPrintable(QString("killed at %1: [%2]").arg(n).arg(listing(parent))));
            const Result again = run(args);
            QVERIFY2(again.exitCode == 0, qPrintable(again.err));
            exporting::verifyExport(out.toStdString(), runDir.toStdString());
        }
        QVERIFY2(kills >= 1, qPrintable(QString("%1 kills").arg(kills)));
    }
};

QTEST_GUILESS_MAIN(TestKillSafety)
#include "tst_killsafety.moc"
