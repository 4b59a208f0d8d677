#pragma once
// The CLI tests run the `latmix` command line in process (runLatmixInProcess: latmix_cli's
// cli::run with stdin, stdout and stderr redirected to files), and the built executable
// (LATMIX_BIN_DIR) once per command the way a user would (runLatmix), so that both the commands'
// behaviour and the shipped binary are covered without paying a process start per row.
#include "cli/Cli.h"

#include <QByteArray>
#include <QFile>
#include <QJsonArray>
#include <QJsonObject>
#include <QProcess>
#include <QString>
#include <QStringList>
#include <QTemporaryDir>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/resource.h>
#include <stdio_ext.h>
#include <unistd.h>

namespace latmix::test {

struct CliResult {
    int exitCode; // -1 when the process did not start, crashed or timed out
    QString out, err;
};

inline CliResult runLatmix(const QStringList& args, int timeoutMs, const QByteArray& input = {}) {
    QProcess p;
    p.start(QString::fromLocal8Bit(qgetenv("LATMIX_BIN_DIR")) + "/latmix", args);
    if (!p.waitForStarted()) return {-1, {}, "could not start latmix: " + p.errorString()};
    if (!input.isEmpty()) p.write(input);
    p.closeWriteChannel();
    if (!p.waitForFinished(timeoutMs)) {
        p.kill();
        p.waitForFinished();
        return {-1, QString::fromUtf8(p.readAllStandardOutput()),
                QString("latmix did not finish within %1 s: ").arg(timeoutMs / 1000) + QString::fromUtf8(p.readAllStandardError())};
    }
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, QString::fromUtf8(p.readAllStandardOutput()),
            QString::fromUtf8(p.readAllStandardError())};
}

// The executable with one more environment variable (the fault injections of app/cli/CliProgress.h):
// whether it ended by a signal (kill -9, a crash), its exit status, and what it wrote to stderr. No
// core file is written for a deliberate crash.
struct SignalledResult {
    bool signalled = false; // QProcess::CrashExit
    int exitCode = -1;
    QString err;
};
inline SignalledResult runLatmixWithEnv(const QStringList& args, const QString& name, const QString& value) {
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(name, value);
    p.setProcessEnvironment(env);
    p.setChildProcessModifier([] {
        const rlimit none{0, 0};
        ::setrlimit(RLIMIT_CORE, &none);
    });
    p.start(QString::fromLocal8Bit(qgetenv("LATMIX_BIN_DIR")) + "/latmix", args);
    SignalledResult r;
    if (!p.waitForStarted() || !p.waitForFinished(300000)) {
        p.kill();
        p.waitForFinished();
        r.err = "latmix did not start or finish: " + p.errorString();
        return r;
    }
    r.signalled = p.exitStatus() == QProcess::CrashExit;
    r.exitCode = p.exitCode();
    r.err = QString::fromUtf8(p.readAllStandardError());
    return r;
}

// The same command in this process: exit status, and what it wrote to stdout and stderr.
inline CliResult runLatmixInProcess(const QStringList& args, const QByteArray& input = {}) {
    QTemporaryDir dir;
    const QByteArray in = dir.filePath("stdin").toLocal8Bit(), out = dir.filePath("stdout").toLocal8Bit(),
                     err = dir.filePath("stderr").toLocal8Bit();
    {
        QFile f(QString::fromLocal8Bit(in));
        if (!f.open(QIODevice::WriteOnly) || f.write(input) != input.size()) return {-1, {}, "cannot write " + f.fileName()};
    }
    std::cout.flush();
    std::cerr.flush();
    std::fflush(stdout);
    std::fflush(stderr);
    const int saved[3] = {::dup(0), ::dup(1), ::dup(2)};
    const int fds[3] = {::open(in.constData(), O_RDONLY), ::open(out.constData(), O_WRONLY | O_CREAT | O_TRUNC, 0600),
                        ::open(err.constData(), O_WRONLY | O_CREAT | O_TRUNC, 0600)};
    for (int i = 0; i < 3; ++i) {
        ::dup2(fds[i], i);
        ::close(fds[i]);
    }
    auto resetStdin = [] {
        __fpurge(stdin); // drop what stdio buffered from the other file
        std::clearerr(stdin);
        std::cin.clear();
    };
    resetStdin();
    std::vector<std::string> storage{"latmix"};
    for (const QString& a : args) storage.push_back(a.toStdString());
    std::vector<char*> argv;
    for (auto& a : storage) argv.push_back(a.data());
    argv.push_back(nullptr);
    int code = -1;
    try {
        code = latmix::cli::run(static_cast<int>(storage.size()), argv.data(), /*mayReexec=*/false);
    } catch (...) {
        code = -1; // cli::run reports every error itself; an escaping exception is a defect
    }
    std::cout.flush();
    std::cerr.flush();
    std::fflush(stdout);
    std::fflush(stderr);
    for (int i = 0; i < 3; ++i) {
        ::dup2(saved[i], i);
        ::close(saved[i]);
    }
    resetStdin();
    auto readAll = [](const QByteArray& path) {
        QFile f(QString::fromLocal8Bit(path));
        return f.open(QIODevice::ReadOnly) ? QString::fromUtf8(f.readAll()) : QString();
    };
    return {code, readAll(out), readAll(err)};
}

// A small calibration text for the CLI tests (one sentence, 40 times); false if unwritable.
inline bool writeCalibrationText(const QString& path) {
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly)) return false;
    for (int i = 0; i < 40; ++i) f.write("The quick brown fox jumps over the lazy dog while the workbench measures errors. ");
    f.close(); // flushes: a failed write shows in error()
    return f.error() == QFileDevice::NoError;
}

// The CLI tests' fixture in dir: the demo model (`latmix demo-model`, dir/demo) and the small
// calibration text (dir/calib.txt). Returns "" on success, else what failed.
inline QString writeDemoFixture(const QTemporaryDir& dir, QString& model, QString& calib) {
    if (!dir.isValid()) return "no temporary folder: " + dir.errorString();
    model = dir.filePath("demo");
    const CliResult r = runLatmixInProcess({"demo-model", model});
    if (r.exitCode != 0) return "latmix demo-model failed: " + r.err;
    calib = dir.filePath("calib.txt");
    if (!writeCalibrationText(calib)) return "cannot write " + calib;
    return {};
}

// Two runs' latmix.json against each other: the same training end (final KL) and the same
// per-linear relative errors, exactly. "" when they agree, else the first difference.
inline QString runsDiffer(const QJsonObject& a, const QJsonObject& b) {
    const double ka = a["training"].toObject()["final_objective"].toDouble(), kb = b["training"].toObject()["final_objective"].toDouble();
    if (ka != kb) return QString("final KL %1 vs %2").arg(ka, 0, 'g', 17).arg(kb, 0, 'g', 17);
    const QJsonArray la = a["linears"].toArray(), lb = b["linears"].toArray();
    if (la.size() != lb.size()) return QString("%1 vs %2 linears").arg(la.size()).arg(lb.size());
    for (int i = 0; i < la.size(); ++i) {
        const double ea = la[i].toObject()["relative_error"].toDouble(), eb = lb[i].toObject()["relative_error"].toDouble();
        if (ea != eb) return QString("linear %1: relative error %2 vs %3").arg(i).arg(ea, 0, 'g', 17).arg(eb, 0, 'g', 17);
    }
    return {};
}

} // namespace latmix::test
