#include "util/LargeBlockCache.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

namespace latmix::util {
namespace {

constexpr std::size_t kGranule = std::size_t(2) << 20; // 2 MiB: a huge page, and the rounding of sizes

std::size_t roundUp(std::size_t n) { return (n + kGranule - 1) / kGranule * kGranule; }

// The cache proper. Never destroyed (tensors may be freed during static destruction).
class BlockCache {
public:
    void* take(std::size_t bytes) {
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            auto it = m_free.find(bytes);
            if (it != m_free.end()) {
                void* p = it->second;
                m_free.erase(it);
                m_cached -= bytes;
                m_live[p] = bytes;
                m_liveBytes += bytes;
                ++m_hits;
                return p;
            }
            ++m_misses;
            // A new block: the cached ones go back first, so that the cache never adds to the
            // process's peak (a run whose sizes repeat, a training step or a view's layers,
            // still finds its blocks; one whose live memory grows keeps nothing in reserve).
            dropAllLocked();
        }
        void* p = nullptr;
        if (::posix_memalign(&p, kGranule, bytes) != 0 || !p) return nullptr;
#ifdef MADV_HUGEPAGE
        ::madvise(p, bytes, MADV_HUGEPAGE); // advice only: without THP the pages stay 4 KiB
#endif
        std::lock_guard<std::mutex> lock(m_mutex);
        m_live[p] = bytes;
        m_liveBytes += bytes;
        notePeak();
        return p;
    }

    // Takes back a block of ours; false (nothing done) for any other pointer.
    bool give(void* p) {
        std::unique_lock<std::mutex> lock(m_mutex);
        const auto it = m_live.find(p);
        if (it == m_live.end()) return false;
        const std::size_t bytes = it->second;
        m_live.erase(it);
        m_liveBytes -= bytes;
        // Kept only within the cap and below the high-water mark of the bytes in use: tensors in
        // use plus cached blocks never exceed the most the process has had in use, so the cache
        // does not lift the peak (a 1B training step: 3981 MiB resident without this rule, as
        // against 3770 MiB with no cache at all, while the blocks freed at its peak waited for
        // sizes the heap's growth never asked for again).
        const std::size_t room = std::min(m_cap, headroomLocked());
        if (bytes > room) {
            lock.unlock();
            std::free(p);
            return true;
        }
        // Full: the largest cached blocks go first (they are the least likely to be asked for again
        // at the same size, and free the most).
        std::vector<void*> drop = evictLocked(room - bytes);
        m_free.emplace(bytes, p);
        m_cached += bytes;
        lock.unlock();
        for (void* d : drop) std::free(d);
        return true;
    }

    // libtorch's own allocator served or freed a small block: the bytes in use moved, so the
    // cache shrinks to stay under the high-water mark (a lock only while something is cached).
    void smallMoved(std::int64_t delta) {
        const std::int64_t now = m_smallBytes.fetch_add(delta, std::memory_order_relaxed) + delta;
        if (delta <= 0) return;
        std::int64_t peak = m_smallPeak.load(std::memory_order_relaxed);
        while (now > peak && !m_smallPeak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
        }
        if (now <= peak) return; // within the heap's high-water mark: nothing in use grew
        notePeak();
        if (m_cached.load(std::memory_order_relaxed) == 0) return; // nothing to trim
        std::vector<void*> drop;
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            drop = evictLocked(headroomLocked());
        }
        for (void* d : drop) std::free(d);
    }

    // A cap of 0 gives every cached block back.
    void setCap(std::size_t cap) {
        std::vector<void*> drop;
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            m_cap = cap;
            drop = evictLocked(m_cap);
        }
        for (void* d : drop) std::free(d);
    }

    // Every cached block back, and the high-water mark starts again from what is in use now.
    void dropAll() {
        std::vector<void*> drop;
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            drop = evictLocked(0);
            m_smallPeak.store(m_smallBytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
            m_peakInUse.store(inUseLocked(), std::memory_order_relaxed);
        }
        for (void* d : drop) std::free(d);
    }

    void dropAllLocked() {
        for (void* d : evictLocked(0)) std::free(d);
    }

    LargeBlockCacheStats stats() {
        std::lock_guard<std::mutex> lock(m_mutex);
        return {m_hits, m_misses, static_cast<std::int64_t>(m_cached), m_evicted,
                static_cast<std::int64_t>(inUseLocked()), static_cast<std::int64_t>(m_peakInUse.load()), true};
    }

private:
    // Takes cached blocks out, the largest first, until at most `limit` bytes stay cached; the
    // caller frees them (outside the lock where it can).
    std::vector<void*> evictLocked(std::size_t limit) {
        std::vector<void*> drop;
        while (m_cached > limit && !m_free.empty()) {
            auto last = std::prev(m_free.end());
            m_cached -= last->first;
            m_evicted += static_cast<std::int64_t>(last->first);
            drop.push_back(last->second);
            m_free.erase(last);
        }
        return drop;
    }

    // Large blocks handed out, plus libtorch's small blocks at their high-water mark: glibc keeps
    // freed heap memory resident (Runtime.cpp sets its trim threshold to 256 MiB), so small
    // blocks freed still hold pages that a cached block would add to.
    std::size_t inUseLocked() const {
        const std::int64_t small = m_smallPeak.load(std::memory_order_relaxed);
        return m_liveBytes.load(std::memory_order_relaxed) + static_cast<std::size_t>(std::max<std::int64_t>(small, 0));
    }
    void notePeak() { // atomics only: callable without the lock
        const std::size_t used = inUseLocked();
        std::size_t peak = m_peakInUse.load(std::memory_order_relaxed);
        while (used > peak && !m_peakInUse.compare_exchange_weak(peak, used, std::memory_order_relaxed)) {
        }
    }
    // How many bytes may be cached now without lifting in-use + cached above the high-water mark.
    std::size_t headroomLocked() const {
        const std::size_t used = inUseLocked(), peak = m_peakInUse.load(std::memory_order_relaxed);
        return peak > used ? peak - used : 0;
    }

    std::mutex m_mutex;
    std::multimap<std::size_t, void*> m_free;      // size -> block
    std::unordered_map<void*, std::size_t> m_live; // block -> size, for blocks handed out
    std::atomic<std::size_t> m_cached{0}; // changed under the lock; read without it by smallMoved
    std::size_t m_cap = 0;
    // Large blocks handed out (changed under the lock), and the high-water mark of all in use.
    std::atomic<std::size_t> m_liveBytes{0}, m_peakInUse{0};
    std::atomic<std::int64_t> m_smallBytes{0}, m_smallPeak{0}; // libtorch's own (small) blocks in use; their most
    std::int64_t m_hits = 0, m_misses = 0, m_evicted = 0;
};

BlockCache& cache() {
    static BlockCache* c = new BlockCache; // leaked on purpose: outlives every tensor
    return *c;
}

// libtorch's own CPU allocator's raw deleter, for the blocks it served (below the minimum).
c10::DeleterFnPtr g_fallbackDeleter = nullptr;

// The deleter of every block this allocator hands out, and its raw_deleter: ATen's
// raw_allocate / raw_deallocate (scratch buffers of some kernels) free through raw_deleter()
// whatever the size, so it must take the fallback's small blocks too.
void giveBack(void* p) {
    if (!p || cache().give(p)) return;
    // c10's default CPU allocator takes its blocks from glibc (posix_memalign) on Linux, in
    // libtorch 1.13 and 2.x alike, so glibc can say how large a block is.
    cache().smallMoved(-static_cast<std::int64_t>(::malloc_usable_size(p)));
    g_fallbackDeleter(p);
}

// libtorch's CPU allocator interface differs between versions: allocate() is const in 1.13 and
// not in 2.x, and 2.x adds the pure virtual copy_data(). Both spellings are declared without
// `override`: the one that matches the installed libtorch's base class overrides it, the other
// is an ordinary member (core/util/TorchCompat.h lists this difference).
class LargeBlockAllocator final : public c10::Allocator {
public:
    explicit LargeBlockAllocator(c10::Allocator* fallback) : m_fallback(fallback) {}

    c10::DataPtr allocate(std::size_t n) const { return allocateBlock(n); }
    c10::DataPtr allocate(std::size_t n) { return allocateBlock(n); }
    c10::DeleterFnPtr raw_deleter() const { return &giveBack; }
    void copy_data(void* dest, const void* src, std::size_t count) const {
        if (count) std::copy_n(static_cast<const char*>(src), count, static_cast<char*>(dest));
    }

    std::size_t minBytes = std::size_t(32) << 20;

private:
    c10::DataPtr allocateBlock(std::size_t n) const {
        if (n < minBytes) {
            c10::DataPtr d = m_fallback->allocate(n);
            // Counted in the bytes in use when it will come back through giveBack (c10's
            // default allocator: the context is the block itself).
            if (void* p = d.get(); p && d.get_context() == p && d.compare_exchange_deleter(g_fallbackDeleter, &giveBack))
                cache().smallMoved(static_cast<std::int64_t>(::malloc_usable_size(p)));
            return d;
        }
        const std::size_t bytes = roundUp(n);
        void* p = cache().take(bytes);
        if (!p) {
            // Out of memory: give the cached blocks back and try once more; then the fallback's
            // own error (c10's "DefaultCPUAllocator: can't allocate memory", which util/OutOfMemory
            // recognises).
            cache().setCap(0);
            p = cache().take(bytes);
            if (!p) return m_fallback->allocate(n);
        }
        return {p, p, &giveBack, c10::Device(c10::DeviceType::CPU)};
    }

    c10::Allocator* m_fallback;
};

std::mutex g_installMutex;
LargeBlockAllocator* g_allocator = nullptr;

} // namespace

void installLargeBlockCache(std::size_t minBytes, std::size_t capBytes) {
    std::lock_guard<std::mutex> lock(g_installMutex);
    if (!g_allocator) {
        c10::Allocator* fallback = c10::GetDefaultCPUAllocator();
        g_fallbackDeleter = fallback->raw_deleter();
        if (!g_fallbackDeleter) return; // a libtorch whose CPU allocator has no raw deleter: leave it alone
        g_allocator = new LargeBlockAllocator(fallback); // leaked like the cache
        c10::SetCPUAllocator(g_allocator, /*priority=*/1);
    }
    g_allocator->minBytes = std::max<std::size_t>(minBytes, 1);
    cache().setCap(capBytes);
}

void installDefaultLargeBlockCache() {
    const long pages = ::sysconf(_SC_PHYS_PAGES), pageSize = ::sysconf(_SC_PAGESIZE);
    const std::size_t physical = pages > 0 && pageSize > 0 ? std::size_t(pages) * std::size_t(pageSize) : 0;
    std::size_t cap = std::min<std::size_t>(std::size_t(2) << 30, physical / 8);
    if (const char* env = std::getenv("LATMIX_CPU_CACHE_MIB"); env && *env) {
        char* end = nullptr;
        const unsigned long long mib = std::strtoull(env, &end, 10);
        if (end && *end == '\0') cap = static_cast<std::size_t>(mib) << 20;
    }
    installLargeBlockCache(std::size_t(32) << 20, cap);
}

LargeBlockCacheStats largeBlockCacheStats() {
    {
        std::lock_guard<std::mutex> lock(g_installMutex);
        if (!g_allocator) return {};
    }
    return cache().stats();
}

void releaseLargeBlockCache() { cache().dropAll(); }

} // namespace latmix::util
