// Out of memory in a job's stage becomes one message that names the stage, keeps libtorch's
// first line (device and sizes) and gives the way out; other errors pass through untouched.
#include "util/OutOfMemory.h"

#include <c10/util/Exception.h>

#include <QtTest>

#include <new>
#include <stdexcept>
#include <string>

using namespace latmix;

namespace {
// What libtorch's CUDA caching allocator throws (its text, shortened; several lines).
[[noreturn]] void throwCudaOom() {
    throw c10::OutOfMemoryError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                                "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB\n"
                                "Of the allocated memory 75.10 GiB is allocated by PyTorch");
}
} // namespace

class TestOutOfMemory : public QObject {
    Q_OBJECT
private slots:
    void stageMessage_data() {
        QTest::addColumn<int>("thrown"); // 0 CUDA OOM, 1 host bad_alloc, 2 OOM of an inner stage
        QTest::addColumn<QString>("message");
        QTest::newRow("CUDA allocator") << 0
                                        << "out of memory in training step 3/10: CUDA out of memory. Tried to allocate "
                                           "2.00 GiB. GPU 0 has a total capacity of 79.19 GiB; use a smaller --batch";
        QTest::newRow("host allocator") << 1 << "out of host memory in training step 3/10; use a smaller --batch";
        QTest::newRow("inner stage said it") << 2 << "out of memory in GPTQ of layer 1: x; use --offload";
    }
    void stageMessage() {
        QFETCH(int, thrown);
        QFETCH(QString, message);
        try {
            guardMemory("training step 3/10", "use a smaller --batch", [&] {
                if (thrown == 0) throwCudaOom();
                if (thrown == 1) throw std::bad_alloc();
                guardMemory("GPTQ of layer 1", "use --offload", [] { throw c10::OutOfMemoryError({"f", "f.cpp", 1}, "x"); });
            });
            QFAIL("no exception");
        } catch (const OutOfMemory& e) {
            QCOMPARE(QString::fromStdString(e.what()), message);
        }
    }

    void otherErrorsPassUnchanged() {
        try {
            guardMemory("evaluation window 1/4", "advice", []() -> int { throw std::invalid_argument("bad window"); });
            QFAIL("no exception");
        } catch (const OutOfMemory&) {
            QFAIL("an ordinary error was reported as out of memory");
        } catch (const std::invalid_argument& e) {
            QCOMPARE(std::string(e.what()), std::string("bad window"));
        }
    }

    void valuePassesThrough() {
        QCOMPARE(guardMemory("stage", "advice", [] { return 42.5; }), 42.5);
        int calls = 0;
        guardMemory("stage", "advice", [&] { ++calls; });
        QCOMPARE(calls, 1);
    }
};

QTEST_GUILESS_MAIN(TestOutOfMemory)
#include "tst_outofmemory.moc"
