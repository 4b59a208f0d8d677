// Process-wide runtime settings and facts: libtorch's thread count, the BLAS the executables load, the peak resident memory.
#include "util/Runtime.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "TestData.h"

#include <QtTest>

#include <algorithm>
#include <cstring>
#include <sys/mman.h>
#include <thread>

#include <string>

using namespace latmix;

class TestRuntime : public QObject {
    Q_OBJECT
private slots:
    void threads_data() {
        QTest::addColumn<int>("requested");
        QTest::newRow("one") << 1;
        QTest::newRow("two") << 2;
    }
    void threads() {
        QFETCH(int, requested);
        QCOMPARE(configureThreads(requested), requested);
        QCOMPARE(threadCount(), requested);
        QCOMPARE(at::get_num_threads(), requested);
    }

    // Without a request: LATMIX_THREADS, else OMP_NUM_THREADS (torchrun's 1 per rank), else the
    // cores shared among LOCAL_WORLD_SIZE ranks.
    void threadsFromEnvironment_data() {
        QTest::addColumn<QString>("latmixThreads");
        QTest::addColumn<QString>("ompThreads");
        QTest::addColumn<QString>("localRanks");
        QTest::addColumn<int>("expected"); // 0: the cores; -k: the cores / k (at least 1)
        QTest::newRow("LATMIX_THREADS wins") << "3" << "1" << "2" << 3;
        QTest::newRow("torchrun's OMP_NUM_THREADS") << "" << "1" << "4" << 1;
        QTest::newRow("cores") << "" << "" << "" << 0;
        QTest::newRow("cores shared by 2 ranks") << "" << "" << "2" << -2;
    }
    void threadsFromEnvironment() {
        QFETCH(QString, latmixThreads);
        QFETCH(QString, ompThreads);
        QFETCH(QString, localRanks);
        QFETCH(int, expected);
        const QByteArray saved[] = {qgetenv("LATMIX_THREADS"), qgetenv("OMP_NUM_THREADS"), qgetenv("LOCAL_WORLD_SIZE")};
        const char* names[] = {"LATMIX_THREADS", "OMP_NUM_THREADS", "LOCAL_WORLD_SIZE"};
        const QString values[] = {latmixThreads, ompThreads, localRanks};
        for (int i = 0; i < 3; ++i)
            if (values[i].isEmpty())
                qunsetenv(names[i]);
            else
                qputenv(names[i], values[i].toLocal8Bit());
        const int cores = static_cast<int>(std::thread::hardware_concurrency());
        const int want = expected > 0 ? expected : expected == 0 ? cores : std::max(1, cores / -expected);
        const int got = configureThreads(0);
        for (int i = 0; i < 3; ++i)
            if (saved[i].isNull())
                qunsetenv(names[i]);
            else
                qputenv(names[i], saved[i]);
        QCOMPARE(got, want);
    }

    // The executables carry a DT_RPATH to the OpenMP OpenBLAS (core/CMakeLists.txt): libtorch's
    // own libblas.so.3 must resolve there, not to the system-wide alternative.
    void loadsOpenMpOpenBlas() {
        const QString dir = QStringLiteral(LATMIX_OPENBLAS_OPENMP_DIR);
        if (dir.isEmpty() || !QFileInfo::exists(dir + "/libblas.so.3"))
            LATMIX_PREREQUISITE_SKIP("libopenblas0-openmp is not installed (packaging/install-deps.sh installs it)");
        const auto c = at::matmul(at::ones({64, 64}), at::ones({64, 64})); // BLAS in use, not just mapped
        QCOMPARE(c[3][5].item<float>(), 64.0f);
        const std::string blas = blasLibrary();
        QVERIFY2(blas.rfind(dir.toStdString() + "/", 0) == 0, ("loaded BLAS: " + blas).c_str());
        QVERIFY(blasSharesOpenMpPool());
    }

    // A quantize run's peak per stage (run/QuantizeRun.cpp): memory touched raises the peak by its
    // size; after it is returned and the peak started again, the peak no longer holds it.
    void peakResidentPerStage_data() {
        QTest::addColumn<int>("mib");
        QTest::newRow("64 MiB") << 64;
        QTest::newRow("256 MiB") << 256;
    }
    void peakResidentPerStage() {
        QFETCH(int, mib);
        const std::size_t bytes = std::size_t(mib) << 20;
        if (!resetPeakResident()) LATMIX_PREREQUISITE_SKIP("this kernel does not let a process reset its VmHWM (/proc/self/clear_refs)");
        const double before = peakResidentMiB();
        void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        QVERIFY(p != MAP_FAILED);
        std::memset(p, 1, bytes); // every page resident
        const double during = peakResidentMiB();
        ::munmap(p, bytes);
        QVERIFY2(during >= before + 0.9 * mib, qPrintable(QString("peak %1 MiB before, %2 MiB with %3 MiB touched").arg(before).arg(during).arg(mib)));
        // Returned memory leaves the peak where it was (the kernel's page counts are approximate:
        // what it records at the unmap may be a few pages short of what it reported before).
        QVERIFY2(peakResidentMiB() >= before + 0.9 * mib, qPrintable(QString("peak %1 MiB after the unmap").arg(peakResidentMiB())));
        QVERIFY(resetPeakResident());
        const double after = peakResidentMiB();
        QVERIFY2(after <= during - 0.5 * mib, qPrintable(QString("peak %1 MiB after the reset, %2 MiB before it").arg(after).arg(during)));
    }
};

QTEST_GUILESS_MAIN(TestRuntime)
#include "tst_runtime.moc"
