#pragma once
// Process-wide runtime facts and settings: libtorch threads, version, devices.
#include <string>
#include <vector>

namespace latmix {

// Sets libtorch's intra-op thread count. requested > 0 wins; else the LATMIX_THREADS
// environment variable; else the number of cores. Returns the count in effect.
int configureThreads(int requested = 0);
int threadCount();

std::string libtorchVersion(); // e.g. "1.13.0"
std::string latmixVersion();

// "cpu" plus "cuda:N" for each CUDA device libtorch can use.
std::vector<std::string> availableDevices();
// Human-readable compute device for status bars: "CPU" or "CUDA: <name>".
std::string deviceDescription();

} // namespace latmix
