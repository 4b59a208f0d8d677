#pragma once
// Several processes working on one run (data-parallel calibration): a thin layer over libtorch's
// own c10d, never a protocol of ours. Ranks meet at a c10d::TCPStore that rank 0 hosts at
// MASTER_ADDR:MASTER_PORT (torchrun's rendezvous variables), then talk through
// c10d::ProcessGroupGloo or, on GPUs, c10d::ProcessGroupNCCL. The c10d, Gloo and NCCL headers stay
// in ProcessGroup.cpp.
//
// Failure: a collective that fails (a peer exited, was killed, or is unreachable within the
// timeout) throws std::runtime_error naming this rank, the operation and, when the failed rank
// left one through reportFailure(), its rank and cause. No call waits longer than the timeout.
#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace latmix::dist {

// Where this process stands in its world: torchrun's RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT.
struct World {
    int rank = 0;
    int size = 1;
    int localRank = 0;
    std::string masterAddr = "127.0.0.1";
    int masterPort = 29500;
};

// The world of this process from the environment; size 1 when WORLD_SIZE is unset. Throws
// std::runtime_error naming the variable when one is malformed or inconsistent (RANK outside
// [0, WORLD_SIZE), a port outside 1..65535, WORLD_SIZE > 1 without MASTER_ADDR/MASTER_PORT).
World worldFromEnvironment();

// Whether this build has c10d with Gloo (false: a libtorch without its distributed headers).
bool available();
// Whether this build has c10d's NCCL backend (a CUDA libtorch with NCCL's header at build time).
bool ncclAvailable();

// How the ranks talk: Gloo (CPU buffers, any device) or NCCL (the tensors stay on each rank's GPU).
enum class Backend { Gloo, Nccl };
// --dist-backend: "gloo", "nccl", or "auto" (NCCL when the ranks run on CUDA and this build has it,
// else Gloo). Throws std::invalid_argument naming the way out: NCCL on CPU devices (use gloo), NCCL
// in a build without it, an unknown name.
Backend chooseBackend(const std::string& name, bool ranksOnCuda);
const char* backendName(Backend b);

class Group {
public:
    // Rendezvous: rank 0 hosts the store, every rank connects within `timeout`, then each rank
    // publishes runKey (a text naming what the run computes: model, method, options, seed) and
    // compares it with every other rank's; a difference throws on every rank, naming the ranks
    // and the first differing line. A master that cannot be reached or a port already taken
    // throws naming MASTER_ADDR:MASTER_PORT and the way out.
    // With Backend::Nccl every rank's tensors live on cuda:cudaDevice; such a group is formed even
    // with one rank (one GPU: the NCCL path runs, every collective an identity).
    static std::shared_ptr<Group> connect(const World& world, const std::string& runKey,
                                          std::chrono::milliseconds timeout, Backend backend = Backend::Gloo,
                                          int cudaDevice = 0);
    ~Group();
    Group(const Group&) = delete;
    Group& operator=(const Group&) = delete;

    int rank() const;
    int size() const;
    Backend backend() const;
    bool isRoot() const { return rank() == 0; }

    // In place on every rank: the element-wise mean over ranks. Floating tensors of any device
    // and shape; they travel as one float64 buffer, on the CPU with Gloo, on the rank's GPU with
    // NCCL (exact for the float32 values summed here up to the order of the ranks' additions,
    // which the backend fixes).
    void allreduceMean(const std::vector<at::Tensor>& tensors);
    // In place on every rank: the element-wise sum over ranks (float64 buffer as above).
    void allreduceSum(const std::vector<at::Tensor>& tensors);
    // In place on every rank: the element-wise maximum over ranks (exact).
    void allreduceMax(const std::vector<at::Tensor>& tensors);
    // In place: every rank gets root's values.
    void broadcast(const std::vector<at::Tensor>& tensors, int root = 0);
    void barrier();
    // Leaves "rank R stopped: what" in the store, so the other ranks' errors name the cause; returns
    // once the store holds it. Never throws.
    void reportFailure(const std::string& what) noexcept;
    // Bytes this rank has sent into all-reduces and broadcasts so far (payload, not protocol).
    std::uint64_t bytesCommunicated() const;

private:
    struct Impl;
    explicit Group(std::unique_ptr<Impl> impl);
    enum class Reduce { Sum, Mean, Max };
    void allreduce(const std::vector<at::Tensor>& tensors, Reduce op);
    std::unique_ptr<Impl> m;
};

} // namespace latmix::dist
