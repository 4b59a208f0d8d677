#pragma once
// Process-wide runtime facts and settings: libtorch threads, version, devices.
#include <string>
#include <vector>

namespace latmix {

// Sets libtorch's intra-op thread count. requested > 0 wins; else the LATMIX_THREADS
// environment variable; else the number of cores. Returns the count in effect.
int configureThreads(int requested = 0);
int threadCount();

// libtorch's OpenMP threads spin after each parallel region while OpenBLAS (pthreads) starts its
// own threads for the next matmul: on a few cores they fight, and a float32 forward pass runs
// at half speed. libgomp reads OMP_WAIT_POLICY only when it is loaded, before main, so when it
// is unset this sets it to PASSIVE and re-executes the program once (argv as main got it).
// Returns normally when nothing was to be done or the re-exec failed.
void preferPassiveOpenMpWait(char** argv);

std::string libtorchVersion(); // e.g. "1.13.0"
std::string latmixVersion();

// "cpu" plus "cuda:N" for each CUDA device libtorch can use.
std::vector<std::string> availableDevices();
// Human-readable compute device for status bars: "CPU" or "CUDA: <name>".
std::string deviceDescription();

} // namespace latmix
