#include "util/Runtime.h"
#include "util/LargeBlockCache.h"

#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <torch/cuda.h>
#include <torch/version.h>
#ifdef LATMIX_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <malloc.h>
#include <sys/resource.h>
#include <dlfcn.h>
#include <fstream>
#include <thread>
#include <unistd.h>

namespace latmix {

int configureThreads(int requested) {
    int n = requested;
    if (n <= 0) {
        if (const char* env = std::getenv("LATMIX_THREADS")) n = std::atoi(env);
    }
    if (n <= 0) {
        if (const char* env = std::getenv("OMP_NUM_THREADS")) n = std::atoi(env);
    }
    if (n <= 0) {
        // Ranks sharing the cores: one pool of all cores per rank would oversubscribe them (with
        // spinning OpenMP workers, 2 ranks x 2 threads on 2 cores ran a step 5.5x slower).
        n = static_cast<int>(std::thread::hardware_concurrency());
        if (const char* env = std::getenv("LOCAL_WORLD_SIZE"))
            if (const int ranks = std::atoi(env); ranks > 1) n = std::max(1, n / ranks);
    }
    if (n <= 0) n = 1;
    at::set_num_threads(n);
    return at::get_num_threads();
}

int threadCount() { return at::get_num_threads(); }

std::string blasLibrary() {
    std::ifstream maps("/proc/self/maps");
    std::string line, blas;
    while (std::getline(maps, line)) {
        const auto slash = line.find('/');
        if (slash == std::string::npos) continue;
        const std::string path = line.substr(slash);
        const std::string name = path.substr(path.rfind('/') + 1);
        if (name.rfind("libopenblas", 0) == 0) return path; // the implementation behind libblas.so.3
        if (name.rfind("libblas.so", 0) == 0 && blas.empty()) blas = path;
    }
    return blas;
}

bool blasSharesOpenMpPool() { return blasLibrary().find("/openblas-openmp/") != std::string::npos; }

std::string blasCoreName() {
    // OpenBLAS's own C API, found in the loaded library without linking it (another BLAS: "").
    using CoreName = char* (*)();
    const auto f = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
    const char* name = f ? f() : nullptr;
    return name ? name : "";
}

std::string buildDescription() {
#if defined(__clang__)
    std::string compiler = "clang " __clang_version__;
#elif defined(__GNUC__)
    std::string compiler = "GCC " __VERSION__;
#else
    std::string compiler = "unknown compiler";
#endif
#ifdef LATMIX_BUILD_TYPE
    compiler += std::string(", ") + LATMIX_BUILD_TYPE;
#endif
    return compiler;
}

std::string atenCpuCapability() {
    // libtorch 1.13 does not export at::native::get_cpu_capability(); its configuration summary
    // carries the same value (ATEN_CPU_CAPABILITY applied) on a line of its own in 1.13 and 2.x.
    const std::string config = at::show_config();
    const std::string key = "CPU capability usage: ";
    const auto pos = config.find(key);
    if (pos == std::string::npos) return "";
    const auto begin = pos + key.size();
    return config.substr(begin, config.find('\n', begin) - begin);
}

void preferPassiveOpenMpWait(char** argv) {
    if (std::getenv("OMP_WAIT_POLICY") != nullptr) return; // the user's choice, or done already
    if (blasSharesOpenMpPool()) return;
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    execv("/proc/self/exe", argv); // returns only on failure: carry on with spinning threads
}

void configureAllocator() {
    util::installDefaultLargeBlockCache(); // blocks above glibc's largest mmap threshold (util/LargeBlockCache.h)
    if (const char* t = std::getenv("GLIBC_TUNABLES"); t && std::strstr(t, "glibc.malloc.")) return; // the user's
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

std::string libtorchVersion() {
    return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
           std::to_string(TORCH_VERSION_PATCH);
}

std::string latmixVersion() { return LATMIX_VERSION; }

// torch::cuda::device_count() is the same call in libtorch 1.13 and 2.x.
static int cudaDeviceCount() { return static_cast<int>(torch::cuda::device_count()); }

std::vector<std::string> availableDevices() {
    std::vector<std::string> d{"cpu"};
    for (int i = 0; i < cudaDeviceCount(); ++i) d.push_back("cuda:" + std::to_string(i));
    return d;
}

std::int64_t cudaTotalMemory(int index) {
    if (index < 0 || index >= cudaDeviceCount()) return 0;
#ifdef LATMIX_WITH_CUDA
    return static_cast<std::int64_t>(at::cuda::getDeviceProperties(index)->totalGlobalMem);
#else
    return 0;
#endif
}

std::string deviceDescription() {
    if (cudaDeviceCount() == 0) return "CPU";
#ifdef LATMIX_WITH_CUDA
    return std::string("CUDA: ") + at::cuda::getDeviceProperties(0)->name;
#else
    return "CUDA";
#endif
}

void releaseFreeHostMemory() {
    util::releaseLargeBlockCache();
    trimHeaps();
}

void trimHeaps() { ::malloc_trim(0); }

double peakResidentMiB() {
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
        if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0; // "VmHWM:  123456 kB"
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_maxrss) / 1024.0; // KiB on Linux
}

bool resetPeakResident() {
    std::ofstream clear("/proc/self/clear_refs");
    return static_cast<bool>(clear << "5" << std::flush);
}

} // namespace latmix
