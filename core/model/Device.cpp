#include "model/Device.h"

#include <ATen/Context.h> // at::hasCUDA
#include <torch/cuda.h>
#include <torch/version.h> // TORCH_VERSION

#include <stdexcept>

namespace latmix::model {

c10::Device deviceFromName(const std::string& name) {
    if (name == "auto") return torch::cuda::is_available() ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
    const std::string use = "; use cpu, cuda, cuda:N or auto";
    if (name != "cpu" && name.rfind("cuda", 0) != 0) throw std::invalid_argument("unknown device '" + name + "'" + use);
    c10::Device d(c10::kCPU);
    try {
        d = c10::Device(name);
    } catch (const std::exception&) { // c10's own message carries a backtrace
        throw std::invalid_argument("unknown device '" + name + "'" + use);
    }
    return d.is_cuda() && !d.has_index() ? c10::Device(c10::kCUDA, 0) : d;
}

c10::Device parseDevice(const std::string& name) {
    const c10::Device d = deviceFromName(name);
    if (!d.is_cuda()) return d;
    const auto n = static_cast<int>(torch::cuda::device_count());
    if (d.index() < n) return d;
    std::string available = "cpu";
    for (int i = 0; i < n; ++i) available += ", cuda:" + std::to_string(i);
    const std::string why = !at::hasCUDA() ? "this libtorch " + std::string(TORCH_VERSION) + " is a CPU-only build"
                            : n == 0       ? "libtorch sees no CUDA device (driver loaded? CUDA_VISIBLE_DEVICES?)"
                                           : "this machine has " + std::to_string(n) + " CUDA device(s)";
    throw std::invalid_argument("device '" + name + "' is not available: " + why + " (available: " + available +
                                "); choose one of those with --device" +
                                (at::hasCUDA() ? "" : ", or build against a CUDA libtorch (README, \"GPU\")"));
}

std::string deviceOfLocalRank(const std::string& device, int localRank) {
    const std::string mine = "cuda:" + std::to_string(localRank);
    if (device == "cuda") return mine;
    if (device == "auto") return torch::cuda::is_available() ? mine : "cpu";
    return device;
}

at::ScalarType parseDtype(const std::string& name) {
    if (name == "float32") return at::kFloat;
    if (name == "bfloat16") return at::kBFloat16;
    throw std::invalid_argument("unknown dtype '" + name + "'; use float32 or bfloat16");
}

} // namespace latmix::model
