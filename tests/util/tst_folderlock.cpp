// util::FolderLock, the one-writer rule of run folders and export targets (issue 17.5): a second
// claim on a held target stops with the holder's pid, host, start time and command; the lock of a
// process that ended, even by kill -9, is taken over and named as stale; a released lock leaves
// no file. The other process is a real one: flock(1) from util-linux holds the lock file the way
// a latmix process does (flock(2) on .NAME.lock), so the kernel's release on kill is what is tested.
#include "TestSupport.h"
#include "util/FolderLock.h"

#include <QDir>
#include <QFile>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <stdexcept>
#include <string>

#include <unistd.h>

using latmix::util::FolderLock;

namespace {

// The error of a second claim on target (empty when it succeeds).
QString errorOf(const std::string& target) {
    return latmix::test::errorOf([&] { FolderLock again(target, "run folder", "second"); });
}

QString hostName() {
    char buf[256] = {};
    ::gethostname(buf, sizeof buf - 1);
    return QString::fromLocal8Bit(buf);
}

QByteArray readFile(const QString& path) {
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

} // namespace

class TestFolderLock : public QObject {
    Q_OBJECT
private slots:
    void lockPathIsBesideTheTarget_data() {
        QTest::addColumn<QString>("target");
        QTest::addColumn<QString>("lock");
        QTest::newRow("folder") << "/a/b/run" << "/a/b/.run.lock";
        QTest::newRow("trailing slash") << "/a/b/run/" << "/a/b/.run.lock";
        QTest::newRow("relative") << "run" << "./.run.lock";
        QTest::newRow("dot segments") << "/a/x/../b/run" << "/a/b/.run.lock";
    }
    void lockPathIsBesideTheTarget() {
        QFETCH(QString, target);
        QFETCH(QString, lock);
        QCOMPARE(QString::fromStdString(FolderLock::lockPathOf(target.toStdString())), lock);
    }

    // Held in this process: a second claim names this process; released, the file is gone and
    // the target can be claimed again.
    void secondClaimNamesTheHolder() {
        QTemporaryDir tmp;
        const std::string target = tmp.filePath("sub/run").toStdString(); // parent folders are created
        {
            FolderLock first(target, "run folder", "latmix quantize --out run");
            QVERIFY(first.staleNote().empty());
            const QString msg = errorOf(target);
            QVERIFY2(msg.startsWith("run folder '" + QString::fromStdString(target) +
                                    "' is being written by another latmix process: pid " +
                                    QString::number(::getpid()) + " on host " + hostName() +
                                    " (started 20"),
                     qPrintable(msg));
            QVERIFY2(msg.contains("`latmix quantize --out run`)"), qPrintable(msg));
            QVERIFY2(msg.contains(QString::fromStdString(first.lockPath())), qPrintable(msg));
        }
        QVERIFY(!QFile::exists(QString::fromStdString(FolderLock::lockPathOf(target))));
        FolderLock again(target, "run folder", "third");
        QVERIFY(again.staleNote().empty());
    }

    // Another process holds the lock; killed with SIGKILL it cannot clean up, yet its lock is free
    // at once and taken over as stale, naming it.
    void killedHolderLeavesAStaleLock() {
        QTemporaryDir tmp;
        const std::string target = tmp.filePath("run").toStdString();
        const QString lockPath = QString::fromStdString(FolderLock::lockPathOf(target));
        {
            QFile f(lockPath);
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write("pid 424242\nhost elsewhere\nstarted 2026-01-02T03:04:05Z\ncommand latmix quantize --out run\n");
        }
        QProcess holder;
        // "held" once flock(1) holds the lock (before that the file would look stale). --close: only
        // flock(1) itself holds it, not the shell it runs (which ends when its stdin closes).
        holder.start("flock", {"--exclusive", "--close", lockPath, "sh", "-c", "echo held; read x"});
        QVERIFY(holder.waitForStarted());
        QVERIFY(holder.waitForReadyRead(10000));
        QCOMPARE(holder.readAllStandardOutput(), QByteArray("held\n"));
        const QString msg = errorOf(target);
        QVERIFY2(msg.contains("is being written by another latmix process: pid 424242 on host elsewhere (started "
                              "2026-01-02T03:04:05Z, `latmix quantize --out run`)"),
                 qPrintable(msg));
        holder.kill(); // SIGKILL
        QVERIFY(holder.waitForFinished());
        holder.close(); // the shell's stdin: it ends too
        FolderLock taken(target, "run folder", "after the kill");
        QCOMPARE(QString::fromStdString(taken.staleNote()),
                 "took over the lock of run folder '" + QString::fromStdString(target) +
                     "' left by pid 424242 on host elsewhere (started 2026-01-02T03:04:05Z, `latmix quantize --out "
                     "run`), which ended without releasing it");
        // The file now names this process.
        QVERIFY(readFile(lockPath).startsWith("pid " + QByteArray::number(::getpid()) + "\n"));
    }
};

QTEST_GUILESS_MAIN(TestFolderLock)
#include "tst_folderlock.moc"
