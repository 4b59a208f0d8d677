#pragma once
#include <cstdint>
// Process-wide runtime facts and settings: libtorch threads, version, devices.
#include <string>
#include <vector>

namespace latmix {

// Sets libtorch's intra-op thread count. requested > 0 wins; else the LATMIX_THREADS
// environment variable; else OMP_NUM_THREADS (torchrun sets it to 1 for each of several ranks);
// else the number of cores, divided by LOCAL_WORLD_SIZE when several ranks share the machine
// (torchrun and `--nproc` set it). Returns the count in effect.
int configureThreads(int requested = 0);
int threadCount();

// The BLAS library loaded in this process (the path of libopenblas*.so / libblas.so.3 in
// /proc/self/maps), or "" when none is. The executables ask for the OpenMP OpenBLAS
// (core/CMakeLists.txt says why); this tells whether they got it.
std::string blasLibrary();
bool blasSharesOpenMpPool(); // true for the OpenMP build of OpenBLAS
// The kernel set OpenBLAS picked for this CPU ("Haswell", "SkylakeX", "Zen", ...; OPENBLAS_CORETYPE
// overrides it), or "" when the loaded BLAS is not OpenBLAS.
std::string blasCoreName();
// The vector instruction set ATen's CPU kernels dispatch to ("AVX512", "AVX2", "DEFAULT";
// ATEN_CPU_CAPABILITY lowers it), or "" when this libtorch does not say.
std::string atenCpuCapability();

// When the BLAS runs its own pthreads (the pthread OpenBLAS, e.g. libopenblas0-openmp not
// installed), libtorch's OpenMP threads spin after each parallel region while OpenBLAS's wait for
// the next matmul: on a few cores they fight, and a float32 forward runs at half speed, training
// on libtorch 2.x up to 50x slower. libgomp reads OMP_WAIT_POLICY only when it is loaded, before
// main, so in that case, when it is unset, this sets it to PASSIVE and re-executes the program
// once (argv as main got it). With the OpenMP OpenBLAS there is one pool and spinning is faster:
// nothing is done. Returns normally when nothing was to be done or the re-exec failed.
void preferPassiveOpenMpWait(char** argv);

// Keeps freed tensor memory in the process for the next allocation of its size: glibc maps every
// block above a threshold that adapts up to 32 MiB and gives it back on free, and trims the heap's
// top above twice that, so a training step that allocates and frees the same temporaries faults
// their pages in again each time (a quarter of a step's time at brownpy-13M). Fixed at 32 MiB
// (blocks below it come from the heap) with 256 MiB of free heap kept before trimming; larger
// blocks are still mapped and returned. Nothing is changed when GLIBC_TUNABLES sets the
// allocator's own (glibc.malloc.*). Larger tensors are kept for reuse by util/LargeBlockCache
// (LATMIX_CPU_CACHE_MIB=0 turns that off). Called by the executables at start.
void configureAllocator();

std::string libtorchVersion(); // e.g. "1.13.0"
// The compiler and CMake build type this binary was built with, e.g. "GCC 12.2.0, Release".
std::string buildDescription();
std::string latmixVersion();

// "cpu" plus "cuda:N" for each CUDA device libtorch can use.
std::vector<std::string> availableDevices();
// Human-readable compute device for status bars: "CPU" or "CUDA: <name>".
std::string deviceDescription();
// Total memory of CUDA device `index` in bytes (0 without CUDA or without that device).
std::int64_t cudaTotalMemory(int index);

// Gives back to the system what freed tensors left in the process: the blocks util/LargeBlockCache
// keeps and the free pages of glibc's heaps (malloc_trim). Blocks under configureAllocator's 32 MiB
// come from the heaps, and a mixture of experts' layer is hundreds of them (an expert's [768,
// 2048] in float64 is 12 MiB): freed between others, they stay resident, and a Qwen3-MoE-shaped
// quantize run carried the fold's 8 GiB of them into every later stage. Called between stages.
void releaseFreeHostMemory();
// The heaps' part of it alone (malloc_trim), for a loop over many small weights that keeps each
// one's result: temporaries freed between kept results leave holes that the next, smaller, kept
// result splits, so the next temporary finds no hole wide enough and the heap grows by one per
// iteration (a Qwen3-MoE-shaped layer's 384 expert linears grew it by 4.8 GiB for 2.4 GiB kept).
// Trimming gives the holes' whole pages back; the large-block cache is left alone. Such loops
// trim after every kTrimEvery weights: a trim after every one made an RTN run of the Qwen3-MoE
// shape 13% slower (the holes' pages faulted in again); one in 16 leaves at most 16 holes
// resident and cost nothing measurable.
void trimHeaps();
constexpr int kTrimEvery = 16;

// The process's peak resident memory in MiB since it started or since the last
// resetPeakResident (VmHWM of /proc/self/status; getrusage's ru_maxrss where that is unreadable).
double peakResidentMiB();
// Starts the peak again from the current resident size ("5" to /proc/self/clear_refs, Linux 4.0
// on), so that each stage of a run has its own peak beside --dry-run's estimate of it. Returns
// false where the kernel refuses; peakResidentMiB then goes on with the process's peak.
bool resetPeakResident();

} // namespace latmix
