#pragma once
// The libtorch calls that differ between Debian 12's libtorch 1.13 and libtorch 2.x (Debian 13's
// 2.6, PyTorch's own builds), one shim each with what differs. The rest of the project uses only
// APIs common to both; a call that differs gets a shim here and nowhere else. Light on purpose:
// no ATen or CUDA header, so any file may include it.
// Where a shim needs the version: TORCH_VERSION_MAJOR / _MINOR from <torch/version.h>.
// Today the whole code base builds unchanged on 1.13 and 2.6 but for the ones below.
#include <cstdint>
#include <type_traits>
#include <utility>

namespace latmix::compat {

// Peak bytes held by tensors on CUDA device `device` since the last resetCudaPeakMemory (0 without
// CUDA). The caching allocator's statistics moved between 1.13 and 2.x (TorchCompat.cpp).
std::int64_t cudaPeakAllocatedBytes(int device);
void resetCudaPeakMemory(int device);
// Whether float32 matrix products on CUDA may run in TF32 on the tensor cores (10-bit mantissa;
// PyTorch's torch.backends.cuda.matmul.allow_tf32, off by default since 1.12). The same call in
// 1.13 and 2.x (2.9 adds a finer-grained API; this one still sets the matmul precision).
void allowTf32Matmuls(bool allow);
bool tf32MatmulsAllowed();
// TF32 products allowed (or not) while it lives, the setting before it restored at its end.
class Tf32Matmuls {
public:
    explicit Tf32Matmuls(bool allow) : m_before(tf32MatmulsAllowed()) { allowTf32Matmuls(allow); }
    ~Tf32Matmuls() { allowTf32Matmuls(m_before); }
    Tf32Matmuls(const Tf32Matmuls&) = delete;
    Tf32Matmuls& operator=(const Tf32Matmuls&) = delete;

private:
    bool m_before;
};

// c10d::TCPStoreOptions (dist/ProcessGroup.cpp): libtorch 2.x added useLibUV, on by default since
// 2.4, which needs a libtorch built with libuv; 1.13 has no such field and only the plain TCP
// backend. Both sides of a rendezvous then use the same backend whatever the build.
template <class Options, class = void>
struct HasUseLibUV : std::false_type {};
template <class Options>
struct HasUseLibUV<Options, std::void_t<decltype(std::declval<Options&>().useLibUV)>> : std::true_type {};
template <class Options>
void preferPlainTcpStore(Options& o) {
    if constexpr (HasUseLibUV<Options>::value) o.useLibUV = false;
}

// c10d::ProcessGroupNCCL (dist/ProcessGroup.cpp): libtorch 2.x wants shutdown() before the group is
// destroyed (else it warns and may hang at exit); older ones have no such call.
template <class Group, class = void>
struct HasShutdown : std::false_type {};
template <class Group>
struct HasShutdown<Group, std::void_t<decltype(std::declval<Group&>().shutdown())>> : std::true_type {};
template <class Group>
void shutdownProcessGroup(Group& g) {
    if constexpr (HasShutdown<Group>::value) g.shutdown();
}
// c10::Allocator (util/LargeBlockCache.cpp, the host allocator behind libtorch's CPU tensors):
// allocate() is const in 1.13 and non-const in 2.x, and 2.x adds the pure virtual copy_data().
// The allocator declares both spellings without `override`; whichever the base class has is
// overridden, so no version test is needed.
} // namespace latmix::compat
