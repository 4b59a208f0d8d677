// The process group (dist/ProcessGroup.h) apart from what the ranks compute: the world as
// torchrun's environment gives it, the backend --dist-backend chooses, a rendezvous that cannot
// form (different runs, nobody at the address, a port already taken) and a peer that failed, each
// an error naming its cause, never a hang; and, on a GPU, one rank's NCCL group whose collectives
// stay on the device. tst_distributed checks what data-parallel ranks compute.
#include "dist/LocalLaunch.h"
#include "dist/ProcessGroup.h"

#include <ATen/ATen.h>
// Qt after ATen: Qt's `slots` macro breaks ATen headers.
#include "DeviceRows.h"
#include "DistRanks.h"
#include "TestSupport.h"
#include "TestData.h"

#include <QtTest>

#include <future>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

using namespace latmix;
using test::kTimeout;
using test::onThreads;
using test::worldOf;

class TestProcessGroup : public QObject {
    Q_OBJECT

private slots:
    // A build against PyTorch's wheel has NCCL only (docs/developer/gpu.md): what needs ranks on
    // CPUs (Gloo) is skipped there.
    void init() {
        static const QStringList withoutGloo{"worldFromEnvironment", "backendChoice", "ncclOneRankOnDevice"};
        if (!dist::available() && !withoutGloo.contains(QString::fromLatin1(QTest::currentTestFunction())))
            LATMIX_PREREQUISITE_SKIP("this build has no c10d Gloo: install libgloo-dev (packaging/install-deps.sh does) and configure again");
    }

    // Ranks started for different runs stop at the rendezvous, each naming the difference.
    void differentRunsAreRefused() {
        const int port = dist::freeLoopbackPort();
        const auto errors = onThreads(2, [&](int r) {
            dist::Group::connect(worldOf(r, 2, port), r == 0 ? "method latmix-lu\nseed 0\n" : "method latmix-lu\nseed 1\n",
                                 kTimeout);
        });
        for (const auto& e : errors) {
            QVERIFY2(e.find("different runs") != std::string::npos, e.c_str());
            QVERIFY2(e.find("'seed 0' vs 'seed 1'") != std::string::npos || e.find("'seed 1' vs 'seed 0'") != std::string::npos,
                     e.c_str());
        }
    }

    // Nobody at MASTER_ADDR:MASTER_PORT: an error naming the address after the timeout.
    void unreachableRendezvousFails() {
        const int port = dist::freeLoopbackPort();
        try {
            dist::Group::connect(worldOf(1, 2, port), "run", std::chrono::milliseconds(2000));
            QFAIL("no error without rank 0");
        } catch (const std::runtime_error& e) {
            const QString m = e.what();
            QVERIFY2(m.contains("rank 1 could not reach the rendezvous at 127.0.0.1:" + QString::number(port)),
                     qPrintable(m));
            QVERIFY2(m.contains("MASTER_ADDR"), qPrintable(m));
        }
    }

    // Rank 0 cannot host the rendezvous on a port already taken: an error naming the address and
    // MASTER_PORT, not a hang.
    void takenPortFails() {
        const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        QVERIFY(fd >= 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof a;
        QVERIFY(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
        QVERIFY(::listen(fd, 4) == 0);
        QVERIFY(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
        const int port = ntohs(a.sin_port);
        try {
            dist::Group::connect(worldOf(0, 2, port), "run", std::chrono::milliseconds(2000));
            ::close(fd);
            QFAIL("no error on a taken port");
        } catch (const std::runtime_error& e) {
            ::close(fd);
            const QString m = e.what();
            QVERIFY2(m.contains("rank 0 could not host the rendezvous at 127.0.0.1:" + QString::number(port)),
                     qPrintable(m));
            QVERIFY2(m.contains("MASTER_PORT"), qPrintable(m));
        }
    }

    // The three reductions on two ranks (Gloo), against values worked by hand: rank r holds
    // (1 + r, 5 − 3r, −2 − r); sum (3, 7, −5), mean half of it, maximum (2, 5, −2).
    void reductionsByHand_data() {
        QTest::addColumn<QString>("op");
        QTest::addColumn<QVector<double>>("want");
        QTest::newRow("sum") << "sum" << QVector<double>{3, 7, -5};
        QTest::newRow("mean") << "mean" << QVector<double>{1.5, 3.5, -2.5};
        QTest::newRow("max") << "max" << QVector<double>{2, 5, -2};
    }
    void reductionsByHand() {
        QFETCH(QString, op);
        QFETCH(QVector<double>, want);
        const int port = dist::freeLoopbackPort();
        std::vector<at::Tensor> got(2);
        const auto errors = onThreads(2, [&](int r) {
            auto g = dist::Group::connect(worldOf(r, 2, port), "run", std::chrono::milliseconds(5000));
            at::Tensor x = at::tensor(std::vector<float>{1.0f + r, 5.0f - 3 * r, -2.0f - r});
            if (op == "sum") g->allreduceSum({x});
            if (op == "mean") g->allreduceMean({x});
            if (op == "max") g->allreduceMax({x});
            got[std::size_t(r)] = x;
        });
        QVERIFY2(errors[0].empty() && errors[1].empty(), (errors[0] + " | " + errors[1]).c_str());
        for (const auto& x : got)
            for (int i = 0; i < 3; ++i) QCOMPARE(x[i].item<double>(), want[i]);
    }

    // A rank that fails leaves its cause; the other's next collective fails naming it. Rank 0
    // starts that collective only after rank 1 has reported and left (reportFailure returns once
    // the store holds the report).
    void failedPeerIsNamed() {
        const int port = dist::freeLoopbackPort();
        std::promise<void> reported;
        std::shared_future<void> rank1Gone = reported.get_future().share();
        const auto errors = onThreads(2, [&](int r) {
            auto g = dist::Group::connect(worldOf(r, 2, port), "run", std::chrono::milliseconds(5000));
            auto x = at::ones({4});
            g->allreduceMean({x}); // both alive: fine
            if (r == 1) {
                g->reportFailure("loss is NaN at step 3");
                g.reset(); // the process would exit here
                reported.set_value();
                return;
            }
            rank1Gone.wait();
            g->allreduceMean({x});
        });
        QVERIFY2(errors[1].empty(), errors[1].c_str());
        QVERIFY2(errors[0].find("rank 0 of 2: all-reduce") != std::string::npos, errors[0].c_str());
        QVERIFY2(errors[0].find("rank 1 stopped: loss is NaN at step 3") != std::string::npos, errors[0].c_str());
    }

    // The environment as torchrun sets it; malformed values are named.
    void worldFromEnvironment_data() {
        QTest::addColumn<QStringList>("env"); // NAME=VALUE
        QTest::addColumn<QString>("error");   // empty: valid
        QTest::addColumn<int>("rank");
        QTest::newRow("unset") << QStringList{} << "" << 0;
        QTest::newRow("torchrun") << QStringList{"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500"}
                                  << "" << 1;
        QTest::newRow("rank too large") << QStringList{"RANK=2", "WORLD_SIZE=2", "MASTER_ADDR=a", "MASTER_PORT=1"}
                                        << "RANK=2 is outside [0, WORLD_SIZE=2)" << 0;
        QTest::newRow("no port") << QStringList{"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=a"} << "MASTER_PORT is not set" << 0;
        QTest::newRow("bad port") << QStringList{"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=a", "MASTER_PORT=70000"}
                                  << "MASTER_PORT=70000 is not a TCP port" << 0;
        QTest::newRow("not a number") << QStringList{"WORLD_SIZE=two"} << "WORLD_SIZE='two'" << 0;
    }
    void worldFromEnvironment() {
        QFETCH(QStringList, env);
        QFETCH(QString, error);
        QFETCH(int, rank);
        const char* names[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"};
        for (const char* n : names) qunsetenv(n);
        for (const auto& kv : env) qputenv(kv.section('=', 0, 0).toLocal8Bit(), kv.section('=', 1).toLocal8Bit());
        try {
            const dist::World w = dist::worldFromEnvironment();
            QVERIFY2(error.isEmpty(), "no error");
            QCOMPARE(w.rank, rank);
            QCOMPARE(w.size, env.isEmpty() ? 1 : 2);
        } catch (const std::runtime_error& e) {
            QVERIFY2(!error.isEmpty() && QString(e.what()).contains(error), e.what());
        }
        for (const char* n : names) qunsetenv(n);
    }

    // --dist-backend: what each name and device gives, and the refusals (one line, naming gloo).
    void backendChoice_data() {
        QTest::addColumn<QString>("name");
        QTest::addColumn<bool>("onCuda");
        QTest::addColumn<QString>("want"); // "gloo", "nccl", or the error's words
        QTest::newRow("gloo on cpu") << "gloo" << false << "gloo";
        QTest::newRow("gloo on cuda") << "gloo" << true << "gloo";
        QTest::newRow("auto on cpu") << "auto" << false << "gloo";
        QTest::newRow("auto on cuda") << "auto" << true << (dist::ncclAvailable() ? "nccl" : "gloo");
        QTest::newRow("nccl on cuda") << "nccl" << true
                                      << (dist::ncclAvailable() ? "nccl" : "this build of latmix has no NCCL");
        QTest::newRow("nccl on cpu") << "nccl" << false << "these run on the CPU: use --dist-backend gloo";
        QTest::newRow("unknown") << "mpi" << false << "'mpi' is not one of gloo, nccl, auto";
    }
    void backendChoice() {
        QFETCH(QString, name);
        QFETCH(bool, onCuda);
        QFETCH(QString, want);
        try {
            const auto b = dist::chooseBackend(name.toStdString(), onCuda);
            QCOMPARE(QString(dist::backendName(b)), want);
        } catch (const std::invalid_argument& e) {
            QVERIFY2(QString(e.what()).contains(want), e.what());
            QVERIFY2(!QString(e.what()).contains('\n'), e.what());
        }
    }

    // One rank on one GPU through NCCL: the group forms, the collectives run on the device (one
    // rank: the sum and the mean are the tensor itself, bit for bit; a broadcast leaves it), the
    // tensors stay where they were, and the bytes are counted.
    void ncclOneRankOnDevice_data() {
        test::addDeviceColumn();
        for (const QString& dev : test::acceleratorDevices()) QTest::newRow(qPrintable(dev)) << dev;
    }
    void ncclOneRankOnDevice() {
        QFETCH(QString, device);
        LATMIX_REQUIRE_DEVICE(dev, device);
        if (!dist::ncclAvailable()) QFAIL("a CUDA build without NCCL: configure must find nccl.h (docs/developer/gpu.md)");
        auto g = dist::Group::connect(worldOf(0, 1, dist::freeLoopbackPort()), "one rank", kTimeout, dist::Backend::Nccl,
                                      dev.index());
        QCOMPARE(int(g->backend()), int(dist::Backend::Nccl));
        const auto a = at::randn({1000}, at::TensorOptions().dtype(at::kFloat).device(dev));
        const auto h = at::randn({64, 64}, at::TensorOptions().dtype(at::kDouble).device(dev));
        const auto a0 = a.clone(), h0 = h.clone();
        g->allreduceMean({a});
        g->allreduceSum({h});
        g->broadcast({a, h});
        g->barrier();
        QVERIFY(a.device() == dev && h.device() == dev);
        QVERIFY(at::equal(a, a0) && at::equal(h, h0));
        QCOMPARE(g->bytesCommunicated(), std::uint64_t(8 * (1000 + 64 * 64 + 1000 + 64 * 64)));
    }
};

QTEST_GUILESS_MAIN(TestProcessGroup)
#include "tst_processgroup.moc"
