#include "util/TorchCompat.h"

#ifdef LATMIX_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/Exception.h>
#endif

#include <ATen/Context.h>

#include <cstddef>

namespace latmix::compat {

#ifdef LATMIX_WITH_CUDA
// The statistics' struct and its StatType enum live in c10::cuda::CUDACachingAllocator in 1.13
// and in c10::CachingDeviceAllocator in 2.x (moved in 2.5); the device index is an int in 1.13 and
// a c10::DeviceIndex in 2.x. Naming neither (auto, index 0 = StatType::AGGREGATE in both, an
// implicit conversion of the index) compiles against both.
constexpr std::size_t kAggregate = 0;

// libtorch 2.x creates the allocator's per-device state at the first allocation and refuses the
// statistics of a device it has not seen yet ("Invalid device argument"): nothing allocated there
// yet means a peak of 0 and nothing to reset.
std::int64_t cudaPeakAllocatedBytes(int device) {
    try {
        const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
        return stats.allocated_bytes[kAggregate].peak;
    } catch (const c10::Error&) {
        return 0;
    }
}

void resetCudaPeakMemory(int device) {
    try {
        c10::cuda::CUDACachingAllocator::resetPeakStats(device);
    } catch (const c10::Error&) {
    }
}
#else
std::int64_t cudaPeakAllocatedBytes(int) { return 0; }
void resetCudaPeakMemory(int) {}
#endif

void allowTf32Matmuls(bool allow) { at::globalContext().setAllowTF32CuBLAS(allow); }
bool tf32MatmulsAllowed() { return at::globalContext().allowTF32CuBLAS(); }

} // namespace latmix::compat
