// util/LargeBlockCache: large CPU tensors freed are kept and handed out again at the same rounded
// size (the same block, so no page faults), small ones go to libtorch's own allocator, the cache
// never holds more than its cap, a block larger than the cap is given back at once, and the
// raw interface (raw_allocate / raw_deallocate) works for blocks of either kind.
#include "util/LargeBlockCache.h"

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>

#include <QtTest>

#include <cstdint>

using namespace latmix::util;

namespace {
constexpr qint64 kMiB = 1 << 20;
at::Tensor bytes(qint64 n) { return at::empty({n}, at::TensorOptions().dtype(at::kByte)); }
} // namespace

class TestLargeBlockCache : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() { installLargeBlockCache(32 * kMiB, 256 * kMiB); }
    void init() { releaseLargeBlockCache(); }

    // A block freed and asked for again at a size of the same 2 MiB granule is the same block.
    void reuse_data() {
        QTest::addColumn<qint64>("first");
        QTest::addColumn<qint64>("second");
        QTest::addColumn<bool>("same");
        QTest::newRow("same size") << 40 * kMiB << 40 * kMiB << true;
        QTest::newRow("same granule") << 40 * kMiB + 1 << 42 * kMiB << true;
        QTest::newRow("next granule") << 40 * kMiB << 42 * kMiB + 1 << false;
        QTest::newRow("below the minimum") << 8 * kMiB << 8 * kMiB << false;
    }
    void reuse() {
        QFETCH(qint64, first);
        QFETCH(qint64, second);
        QFETCH(bool, same);
        const auto before = largeBlockCacheStats();
        QVERIFY(before.installed);
        const void* p = nullptr;
        {
            at::Tensor a = bytes(first);
            a.fill_(7); // touched: a reused block carries old bytes, which at::empty allows
            p = a.data_ptr();
        }
        at::Tensor b = bytes(second);
        const auto after = largeBlockCacheStats();
        if (same) {
            QCOMPARE(b.data_ptr(), p);
            QCOMPARE(after.hits - before.hits, std::int64_t(1));
            b.zero_();
            QCOMPARE(b.sum().item<std::int64_t>(), std::int64_t(0));
        } else if (first >= 32 * kMiB) {
            QCOMPARE(after.hits, before.hits); // a different granule: a new block
            QCOMPARE(after.misses - before.misses, std::int64_t(2));
        } else {
            QCOMPARE(after.hits, before.hits); // small: libtorch's own allocator, not counted
            QCOMPARE(after.misses, before.misses);
        }
    }

    // Freed blocks beyond the cap are given back (the largest first); the cache stays within it.
    void staysWithinCap_data() {
        QTest::addColumn<int>("blocks");
        QTest::addColumn<qint64>("size");
        QTest::newRow("4 x 48 MiB (fits)") << 4 << 48 * kMiB;
        QTest::newRow("8 x 48 MiB (over)") << 8 << 48 * kMiB;
        QTest::newRow("one over the cap") << 1 << 300 * kMiB;
    }
    void staysWithinCap() {
        QFETCH(int, blocks);
        QFETCH(qint64, size);
        const auto before = largeBlockCacheStats();
        {
            std::vector<at::Tensor> live;
            for (int i = 0; i < blocks; ++i) live.push_back(bytes(size + i * 2 * kMiB)); // distinct granules
        }
        const auto after = largeBlockCacheStats();
        std::int64_t total = 0;
        for (int i = 0; i < blocks; ++i) total += size + i * 2 * kMiB;
        QVERIFY2(after.cachedBytes <= 256 * kMiB, qPrintable(QString::number(after.cachedBytes)));
        if (total <= 256 * kMiB) {
            QCOMPARE(after.cachedBytes, total);
            QCOMPARE(after.evictedBytes, before.evictedBytes);
        } else if (size > 256 * kMiB) {
            QCOMPARE(after.cachedBytes, std::int64_t(0)); // never cached
        } else {
            QVERIFY(after.evictedBytes > before.evictedBytes);
            QCOMPARE(after.cachedBytes + (after.evictedBytes - before.evictedBytes), total);
        }
    }

    // ATen's raw_allocate / raw_deallocate (some kernels' scratch buffers, e.g. the bf16 matmul's)
    // free through raw_deleter() whatever the size: small blocks are the default allocator's.
    void rawAllocateAnySize_data() {
        QTest::addColumn<qint64>("size");
        QTest::newRow("small") << qint64(4096);
        QTest::newRow("large") << 48 * kMiB;
    }
    void rawAllocateAnySize() {
        QFETCH(qint64, size);
        c10::Allocator* a = c10::GetCPUAllocator();
        QVERIFY(a->raw_deleter() != nullptr);
        const auto before = largeBlockCacheStats();
        void* p = a->raw_allocate(static_cast<std::size_t>(size));
        QVERIFY(p != nullptr);
        static_cast<char*>(p)[size - 1] = 1; // writable to its end
        a->raw_deallocate(p);
        const auto after = largeBlockCacheStats();
        QCOMPARE(after.cachedBytes - before.cachedBytes, size >= 32 * kMiB ? std::int64_t(48 * kMiB) : std::int64_t(0));
    }

    // The cache never lifts the peak: blocks in use (large and libtorch's own small ones) plus
    // cached blocks stay within the high-water mark of blocks in use, so a heap that grows after
    // a large block was freed takes the cached block's place instead of adding to it.
    void neverAboveHighWater_data() {
        QTest::addColumn<int>("smallMiB"); // allocated in 4 MiB tensors after the large block is freed
        QTest::addColumn<qint64>("stillCached");
        QTest::newRow("nothing grows") << 0 << 64 * kMiB;
        QTest::newRow("the heap grows 8 MiB") << 8 << qint64(0);
        QTest::newRow("the heap grows 80 MiB") << 80 << qint64(0);
    }
    void neverAboveHighWater() {
        QFETCH(int, smallMiB);
        QFETCH(qint64, stillCached);
        auto within = [](const LargeBlockCacheStats& s) {
            return s.cachedBytes + s.inUseBytes <= s.peakInUseBytes;
        };
        at::Tensor a = bytes(64 * kMiB), b = bytes(64 * kMiB);
        const auto full = largeBlockCacheStats();
        QVERIFY(full.inUseBytes >= 128 * kMiB);
        QCOMPARE(full.peakInUseBytes, full.inUseBytes);
        a = at::Tensor();
        QCOMPARE(largeBlockCacheStats().cachedBytes, 64 * kMiB); // freed below the peak: kept
        std::vector<at::Tensor> heap;
        for (int i = 0; i < smallMiB / 4; ++i) {
            heap.push_back(bytes(4 * kMiB));
            QVERIFY(within(largeBlockCacheStats()));
        }
        const auto after = largeBlockCacheStats();
        QCOMPARE(after.cachedBytes, stillCached);
        QVERIFY2(within(after), qPrintable(QString("cached %1 + in use %2 > peak %3")
                                               .arg(after.cachedBytes).arg(after.inUseBytes).arg(after.peakInUseBytes)));
        QVERIFY(after.inUseBytes - full.inUseBytes + 64 * kMiB >= smallMiB * kMiB); // the small blocks were counted
    }

    // Cap 0: nothing is kept.
    void capZeroKeepsNothing() {
        installLargeBlockCache(32 * kMiB, 0);
        { at::Tensor a = bytes(64 * kMiB); }
        QCOMPARE(largeBlockCacheStats().cachedBytes, std::int64_t(0));
        installLargeBlockCache(32 * kMiB, 256 * kMiB);
    }
};

QTEST_GUILESS_MAIN(TestLargeBlockCache)
#include "tst_largeblockcache.moc"
