#include "util/TorchCompat.h"

#ifdef LATMIX_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <cstddef>

namespace latmix::compat {

#ifdef LATMIX_WITH_CUDA
// The statistics' struct and its StatType enum live in c10::cuda::CUDACachingAllocator in 1.13
// and in c10::CachingDeviceAllocator in 2.x (moved in 2.5); the device index is an int in 1.13 and
// a c10::DeviceIndex in 2.x. Naming neither (auto, index 0 = StatType::AGGREGATE in both, an
// implicit conversion of the index) compiles against both.
constexpr std::size_t kAggregate = 0;

std::int64_t cudaPeakAllocatedBytes(int device) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
    return stats.allocated_bytes[kAggregate].peak;
}

void resetCudaPeakMemory(int device) { c10::cuda::CUDACachingAllocator::resetPeakStats(device); }
#else
std::int64_t cudaPeakAllocatedBytes(int) { return 0; }
void resetCudaPeakMemory(int) {}
#endif

} // namespace latmix::compat
