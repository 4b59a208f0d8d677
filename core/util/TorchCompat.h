#pragma once
// The libtorch calls that differ between Debian 12's libtorch 1.13 and libtorch 2.x (Debian 13's
// 2.6, PyTorch's own builds), one shim each with what differs. The rest of the project uses only
// APIs common to both; a call that differs gets a shim here and nowhere else. Light on purpose:
// no ATen or CUDA header, so any file may include it.
// Where a shim needs the version: TORCH_VERSION_MAJOR / _MINOR from <torch/version.h>.
// Today the whole code base builds unchanged on 1.13 and 2.6 but for the one below.
#include <cstdint>

namespace latmix::compat {

// Peak bytes held by tensors on CUDA device `device` since the last resetCudaPeakMemory (0 without
// CUDA). The caching allocator's statistics moved between 1.13 and 2.x (TorchCompat.cpp).
std::int64_t cudaPeakAllocatedBytes(int device);
void resetCudaPeakMemory(int device);

} // namespace latmix::compat
