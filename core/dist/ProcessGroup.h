#pragma once
// Several processes working on one run (data-parallel calibration): a thin layer over libtorch's
// own c10d, never a protocol of ours. Ranks meet at a c10d::TCPStore that rank 0 hosts at
// MASTER_ADDR:MASTER_PORT (torchrun's rendezvous variables), then talk through
// c10d::ProcessGroupGloo. The c10d and Gloo headers stay in ProcessGroup.cpp.
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

class Group {
public:
    // Rendezvous: rank 0 hosts the store, every rank connects within `timeout`, then each rank
    // publishes runKey (a text naming what the run computes: model, method, options, seed) and
    // compares it with every other rank's; a difference throws on every rank, naming the ranks
    // and the first differing line. A master that cannot be reached or a port already taken
    // throws naming MASTER_ADDR:MASTER_PORT and the way out.
    static std::shared_ptr<Group> connect(const World& world, const std::string& runKey,
                                          std::chrono::milliseconds timeout);
    ~Group();
    Group(const Group&) = delete;
    Group& operator=(const Group&) = delete;

    int rank() const;
    int size() const;
    bool isRoot() const { return rank() == 0; }

    // In place on every rank: the element-wise mean over ranks. Floating tensors of any device
    // and shape; they travel as one float64 CPU buffer (exact for the float32 values summed here
    // up to the order of the ranks' additions, which Gloo fixes).
    void allreduceMean(const std::vector<at::Tensor>& tensors);
    // In place on every rank: the element-wise sum over ranks (float64 buffer as above).
    void allreduceSum(const std::vector<at::Tensor>& tensors);
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
    void allreduce(const std::vector<at::Tensor>& tensors, bool mean);
    std::unique_ptr<Impl> m;
};

} // namespace latmix::dist
