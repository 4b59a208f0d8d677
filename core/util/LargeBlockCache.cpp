#include "util/LargeBlockCache.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

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
        return p;
    }

    // Takes back a block of ours; false (nothing done) for any other pointer.
    bool give(void* p) {
        std::unique_lock<std::mutex> lock(m_mutex);
        const auto it = m_live.find(p);
        if (it == m_live.end()) return false;
        const std::size_t bytes = it->second;
        m_live.erase(it);
        if (bytes > m_cap) {
            lock.unlock();
            std::free(p);
            return true;
        }
        // Full: the largest cached blocks go first (they are the least likely to be asked for again
        // at the same size, and free the most).
        std::vector<void*> drop = evictLocked(m_cap - bytes);
        m_free.emplace(bytes, p);
        m_cached += bytes;
        lock.unlock();
        for (void* d : drop) std::free(d);
        return true;
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

    void dropAll() {
        std::vector<void*> drop;
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            drop = evictLocked(0);
        }
        for (void* d : drop) std::free(d);
    }

    void dropAllLocked() {
        for (void* d : evictLocked(0)) std::free(d);
    }

    LargeBlockCacheStats stats() {
        std::lock_guard<std::mutex> lock(m_mutex);
        return {m_hits, m_misses, static_cast<std::int64_t>(m_cached), m_evicted, true};
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

    std::mutex m_mutex;
    std::multimap<std::size_t, void*> m_free;      // size -> block
    std::unordered_map<void*, std::size_t> m_live; // block -> size, for blocks handed out
    std::size_t m_cached = 0, m_cap = 0;
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
        if (n < minBytes) return m_fallback->allocate(n);
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
