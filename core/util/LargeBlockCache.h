#pragma once
// A cache of large host blocks behind libtorch's CPU allocator.
//
// glibc serves requests above its mmap threshold (at most 32 MiB) with a fresh mmap and returns
// them with munmap, so every large temporary (a float32 layer converted from bf16, a batch of
// activations at 8192 features) is faulted in page by page and zeroed by the kernel each time it
// is allocated. At the Llama-3.2-1B shape that was over 6 million page faults and half the CPU
// time of the workbench's transform comparison (docs/research/results.md). This cache keeps freed blocks
// of at least `minBytes` (sizes rounded up to 2 MiB) up to `capBytes` in all, and serves a request
// of the same rounded size from them; a request it cannot serve first gives every cached block
// back. It counts the bytes of every tensor block in use (its own, and those of libtorch's
// allocator, which serves the smaller requests, at their high-water mark: glibc keeps freed heap
// pages) and keeps cached blocks only below the high-water mark of that sum, so the cache does
// not raise the process's peak (a 1B training step kept 0.9 GiB more without the first rule,
// 0.2 GiB more without the second). New blocks
// are asked for as transparent huge pages (MADV_HUGEPAGE), so their first touch faults 2 MiB at a
// time. It is PyTorch's CUDA caching allocator's idea on the host, exact sizes only.
#include <cstddef>
#include <cstdint>

namespace latmix::util {

struct LargeBlockCacheStats {
    std::int64_t hits = 0;         // requests served from the cache
    std::int64_t misses = 0;       // large requests that allocated a new block
    std::int64_t cachedBytes = 0;  // freed blocks held now
    std::int64_t evictedBytes = 0; // freed blocks given back because the cache was full
    std::int64_t inUseBytes = 0;   // large blocks in use now, plus libtorch's own at their high-water mark
    std::int64_t peakInUseBytes = 0; // its high-water mark; cachedBytes + inUseBytes stays below it
    bool installed = false;
};

// Puts the cache in front of libtorch's CPU allocator (c10::SetCPUAllocator), once per process;
// later calls only change the limits. capBytes 0 turns caching off (blocks are freed at once).
void installLargeBlockCache(std::size_t minBytes, std::size_t capBytes);

// The default limits: blocks from 32 MiB (below, glibc's heap keeps freed memory itself), at most
// min(2 GiB, an eighth of the physical memory) cached; LATMIX_CPU_CACHE_MIB overrides the cap
// (0: no cache).
void installDefaultLargeBlockCache();

LargeBlockCacheStats largeBlockCacheStats();

// Gives every cached block back to the system and restarts the high-water mark from the bytes in
// use now (a long idle phase, a test).
void releaseLargeBlockCache();

} // namespace latmix::util
