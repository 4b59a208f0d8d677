#pragma once
// Runs the built `latmix` executable (LATMIX_BIN_DIR) the way a user would, for the CLI tests.
#include <QByteArray>
#include <QFile>
#include <QProcess>
#include <QString>
#include <QStringList>

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

// A small calibration text for the CLI tests (one sentence, 40 times); false if unwritable.
inline bool writeCalibrationText(const QString& path) {
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly)) return false;
    for (int i = 0; i < 40; ++i) f.write("The quick brown fox jumps over the lazy dog while the workbench measures errors. ");
    f.close(); // flushes: a failed write shows in error()
    return f.error() == QFileDevice::NoError;
}

} // namespace latmix::test
