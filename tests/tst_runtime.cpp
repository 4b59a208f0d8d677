// Process-wide runtime settings: libtorch's thread count and the BLAS the executables load.
#include "util/Runtime.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <QtTest>

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

    // The executables carry a DT_RPATH to the OpenMP OpenBLAS (core/CMakeLists.txt): libtorch's
    // own libblas.so.3 must resolve there, not to the system-wide alternative.
    void loadsOpenMpOpenBlas() {
        const QString dir = QStringLiteral(LATMIX_OPENBLAS_OPENMP_DIR);
        if (dir.isEmpty() || !QFileInfo::exists(dir + "/libblas.so.3"))
            QSKIP("libopenblas0-openmp is not installed (packaging/install-deps.sh installs it)");
        const auto c = at::matmul(at::ones({64, 64}), at::ones({64, 64})); // BLAS in use, not just mapped
        QCOMPARE(c[3][5].item<float>(), 64.0f);
        const std::string blas = blasLibrary();
        QVERIFY2(blas.rfind(dir.toStdString() + "/", 0) == 0, ("loaded BLAS: " + blas).c_str());
        QVERIFY(blasSharesOpenMpPool());
    }
};

QTEST_GUILESS_MAIN(TestRuntime)
#include "tst_runtime.moc"
