// dist::Group on c10d: TCPStore rendezvous, ProcessGroupGloo or ProcessGroupNCCL collectives
// (ProcessGroup.h).
#include "dist/ProcessGroup.h"

#include "util/TorchCompat.h"

#include <ATen/ATen.h>

#ifdef LATMIX_WITH_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef LATMIX_WITH_C10D
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#endif
#ifdef LATMIX_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <atomic>
#include <functional>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

namespace latmix::dist {
namespace {

int intVariable(const char* name, int fallback, bool required) {
    const char* v = std::getenv(name);
    if (!v || !*v) {
        if (required)
            throw std::runtime_error(std::string("environment variable ") + name +
                                     " is not set; a multi-process run (WORLD_SIZE > 1) needs RANK, WORLD_SIZE, "
                                     "MASTER_ADDR and MASTER_PORT, as torchrun sets them (or use `latmix quantize --nproc N`)");
        return fallback;
    }
    char* end = nullptr;
    const long x = std::strtol(v, &end, 10);
    if (*end || x < 0 || x > 1000000)
        throw std::runtime_error(std::string("environment variable ") + name + "='" + v +
                                 "' is not a non-negative integer");
    return static_cast<int>(x);
}

// The first line where two run keys differ, for the mismatch message.
[[maybe_unused]] std::string firstDifference(const std::string& a, const std::string& b) {
    std::istringstream sa(a), sb(b);
    std::string la, lb;
    while (true) {
        const bool ga = static_cast<bool>(std::getline(sa, la)), gb = static_cast<bool>(std::getline(sb, lb));
        if (!ga && !gb) return "";
        if (!ga) la = "(nothing)";
        if (!gb) lb = "(nothing)";
        if (la != lb || !ga || !gb) return "'" + la + "' vs '" + lb + "'";
    }
}

[[maybe_unused]] // An exception's first line: c10d appends a backtrace to its messages.
[[maybe_unused]] std::string firstLine(const std::exception& e) {
    std::string what = e.what();
    if (const auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
    return what;
}

} // namespace

World worldFromEnvironment() {
    World w;
    w.size = intVariable("WORLD_SIZE", 1, false);
    if (w.size < 1) throw std::runtime_error("environment variable WORLD_SIZE=0: a world has at least one rank");
    if (w.size == 1) return w;
    w.rank = intVariable("RANK", 0, true);
    if (w.rank >= w.size)
        throw std::runtime_error("environment variable RANK=" + std::to_string(w.rank) + " is outside [0, WORLD_SIZE=" +
                                 std::to_string(w.size) + ")");
    w.localRank = intVariable("LOCAL_RANK", w.rank, false);
    const char* addr = std::getenv("MASTER_ADDR");
    if (!addr || !*addr)
        throw std::runtime_error("environment variable MASTER_ADDR is not set; give the address of rank 0's host "
                                 "(torchrun sets it; `latmix quantize --nproc N` runs on this machine)");
    w.masterAddr = addr;
    w.masterPort = intVariable("MASTER_PORT", 0, true);
    if (w.masterPort < 1 || w.masterPort > 65535)
        throw std::runtime_error("environment variable MASTER_PORT=" + std::to_string(w.masterPort) +
                                 " is not a TCP port (1..65535)");
    return w;
}

bool ncclAvailable() {
#ifdef LATMIX_WITH_NCCL
    return true;
#else
    return false;
#endif
}

// Why ranks on CPUs cannot run in this build.
[[maybe_unused]] std::string noGlooMessage() {
    return "this build of latmix has no Gloo, so ranks on CPUs cannot talk (PyTorch's wheel ships no Gloo headers; "
           "docs/developer/gpu.md): run the ranks on GPUs with --dist-backend nccl, or build against Debian's libtorch with "
           "libgloo-dev, or pass -DLATMIX_GLOO_INCLUDE_DIR; or run with one process";
}

const char* backendName(Backend b) { return b == Backend::Nccl ? "nccl" : "gloo"; }

Backend chooseBackend(const std::string& name, bool ranksOnCuda) {
    if (name == "gloo") return Backend::Gloo;
    if (name == "auto") return ranksOnCuda && ncclAvailable() ? Backend::Nccl : Backend::Gloo;
    if (name != "nccl")
        throw std::invalid_argument("--dist-backend '" + name + "' is not one of gloo, nccl, auto");
    if (!ranksOnCuda)
        throw std::invalid_argument("--dist-backend nccl needs the ranks on CUDA devices (NCCL runs on GPUs only) "
                                    "and these run on the CPU: use --dist-backend gloo");
    if (!ncclAvailable())
        throw std::invalid_argument("--dist-backend nccl: this build of latmix has no NCCL (it was built against a "
                                    "libtorch without CUDA, or without NCCL's nccl.h; see docs/developer/gpu.md): use "
                                    "--dist-backend gloo");
    return Backend::Nccl;
}

#ifdef LATMIX_WITH_C10D

bool available() {
#ifdef LATMIX_WITH_GLOO
    return true;
#else
    return false; // NCCL only: ranks on GPUs
#endif
}

struct Group::Impl {
    World world;
    Backend backend = Backend::Gloo;
    int cudaDevice = 0;
    std::chrono::milliseconds timeout{0};
    c10::intrusive_ptr<c10d::TCPStore> store;
#ifdef LATMIX_WITH_GLOO
    c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
#endif
#ifdef LATMIX_WITH_NCCL
    c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl;
#endif
    std::atomic<std::uint64_t> bytes{0};

    ~Impl() {
#ifdef LATMIX_WITH_NCCL
        if (nccl) compat::shutdownProcessGroup(*nccl);
#endif
    }
    // Whether collectives have anything to do: a process group was formed (not a one-rank Gloo world).
    bool formed() const {
#ifdef LATMIX_WITH_NCCL
        if (nccl) return true;
#endif
#ifdef LATMIX_WITH_GLOO
        return static_cast<bool>(pg);
#else
        return false;
#endif
    }
    // Starts a collective on whichever process group this is: f(group) for a generic lambda.
    template <class F>
    c10::intrusive_ptr<c10d::Work> start(F&& f) {
#ifdef LATMIX_WITH_NCCL
        if (nccl) return f(*nccl);
#endif
#ifdef LATMIX_WITH_GLOO
        return f(*pg);
#else
        throw std::logic_error("a collective without a process group"); // formed() is checked first
#endif
    }
    // Where the collectives' buffers live: the CPU for Gloo, this rank's GPU for NCCL.
    c10::Device bufferDevice() const {
        return backend == Backend::Nccl ? c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(cudaDevice))
                                        : c10::Device(c10::DeviceType::CPU);
    }

    std::string where() const {
        return "rank " + std::to_string(world.rank) + " of " + std::to_string(world.size);
    }
    // What a failed collective throws: this rank, the operation, the failed rank's own report if
    // it left one, and c10d's message.
    [[noreturn]] void fail(const std::string& op, const std::exception& e) {
        std::string cause;
        try {
            if (store && store->check({"latmix/failed"})) {
                const auto v = store->get("latmix/failed");
                cause = std::string(v.begin(), v.end());
            }
        } catch (...) {
            // the store lives in rank 0's process: gone when rank 0 is
        }
        throw std::runtime_error(where() + ": " + op + " failed" +
                                 (cause.empty() ? std::string(": another rank stopped or cannot be reached")
                                                : " because " + cause) +
                                 " (" + firstLine(e) + "); the run folder is resumable with --resume once every rank can run");
    }
    void run(const std::string& op, const std::function<c10::intrusive_ptr<c10d::Work>()>& start) {
        try {
            auto work = start();
            work->wait(timeout);
        } catch (const std::exception& e) {
            fail(op, e);
        }
    }
};

namespace {

// The rendezvous: rank 0 hosts a TCPStore at MASTER_ADDR:MASTER_PORT and waits for every rank.
c10::intrusive_ptr<c10d::TCPStore> openStore(const World& world, std::chrono::milliseconds timeout,
                                             const std::string& at, const std::string& secs) {
    try {
        c10d::TCPStoreOptions so;
        so.port = static_cast<std::uint16_t>(world.masterPort);
        so.isServer = world.rank == 0;
        so.numWorkers = static_cast<std::size_t>(world.size);
        so.waitWorkers = true;
        so.timeout = timeout;
        compat::preferPlainTcpStore(so);
        return c10::make_intrusive<c10d::TCPStore>(world.masterAddr, so);
    } catch (const std::exception& e) {
        if (world.rank == 0)
            throw std::runtime_error("rank 0 could not host the rendezvous at " + at + " or not every rank of " +
                                     std::to_string(world.size) + " joined within " + secs + " (" + firstLine(e) +
                                     "); if the port is taken choose another MASTER_PORT, otherwise check that all "
                                     "ranks were started (--dist-timeout sets the wait)");
        throw std::runtime_error("rank " + std::to_string(world.rank) + " could not reach the rendezvous at " + at +
                                 " within " + secs + " (" + firstLine(e) +
                                 "); check MASTER_ADDR / MASTER_PORT and that rank 0 is running (--dist-timeout sets "
                                 "the wait)");
    }
}

// Run key check before any collective: every rank compares every other rank's key with its
// own, then says it has compared; nobody leaves (rank 0's exit takes the store with it)
// before every rank has read every key, so each rank reports the difference itself.
void compareRunKeys(c10d::TCPStore& store, const World& world, const std::string& runKey, const std::string& at,
                    const std::string& secs) {
    const std::string r = std::to_string(world.rank);
    store.set("latmix/run_key/" + r, std::vector<std::uint8_t>(runKey.begin(), runKey.end()));
    std::string mismatch;
    for (int o = 0; o < world.size && mismatch.empty(); ++o) {
        if (o == world.rank) continue;
        std::vector<std::uint8_t> v;
        try {
            v = store.get("latmix/run_key/" + std::to_string(o));
        } catch (const std::exception&) {
            throw std::runtime_error("rank " + r + ": rank " + std::to_string(o) + " did not publish its run within " +
                                     secs + " or stopped; check that it started");
        }
        const std::string other(v.begin(), v.end());
        if (other != runKey)
            mismatch = "rank " + r + " and rank " + std::to_string(o) + " were started for different runs: " +
                       firstDifference(runKey, other) + "; start every rank with the same model, method, options and seed";
    }
    std::vector<std::string> compared;
    for (int o = 0; o < world.size; ++o) compared.push_back("latmix/run_key_compared/" + std::to_string(o));
    try {
        store.set(compared[static_cast<size_t>(world.rank)], std::vector<std::uint8_t>{1});
        store.wait(compared);
    } catch (const std::exception&) {
        if (mismatch.empty())
            throw std::runtime_error("rank " + r + ": the rendezvous at " + at + " broke off (another rank stopped?)");
    }
    if (!mismatch.empty()) throw std::runtime_error(mismatch);
}

#ifdef LATMIX_WITH_NCCL
c10::intrusive_ptr<c10d::ProcessGroupNCCL> formNccl(const c10::intrusive_ptr<c10d::TCPStore>& store, const World& world,
                                                    std::chrono::milliseconds timeout, int cudaDevice) {
    try {
        auto opts = c10d::ProcessGroupNCCL::Options::create();
        opts->timeout = timeout;
        return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, world.rank, world.size, opts);
    } catch (const std::exception& e) {
        throw std::runtime_error("rank " + std::to_string(world.rank) + ": the NCCL process group on cuda:" +
                                 std::to_string(cudaDevice) + " did not form (" + firstLine(e) +
                                 "); NCCL_DEBUG=INFO says why, --dist-backend gloo avoids NCCL");
    }
}
#endif

#ifdef LATMIX_WITH_GLOO
c10::intrusive_ptr<c10d::ProcessGroupGloo> formGloo(const c10::intrusive_ptr<c10d::TCPStore>& store, const World& world,
                                                    std::chrono::milliseconds timeout, const std::string& secs) {
    try {
        auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
        // Gloo's socket: GLOO_SOCKET_IFNAME as PyTorch reads it; on one machine the loopback;
        // else the address this host's name resolves to (c10d falls back to the loopback).
        const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
        const bool local = world.masterAddr == "127.0.0.1" || world.masterAddr == "localhost";
        opts->devices.push_back(ifname && *ifname ? c10d::ProcessGroupGloo::createDeviceForInterface(ifname)
                                : local           ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                                  : c10d::ProcessGroupGloo::createDefaultDevice());
        return c10::make_intrusive<c10d::ProcessGroupGloo>(store, world.rank, world.size, opts);
    } catch (const std::exception& e) {
        throw std::runtime_error("rank " + std::to_string(world.rank) + ": the Gloo process group did not form within " +
                                 secs + " (" + firstLine(e) +
                                 "); on several machines set GLOO_SOCKET_IFNAME to the network interface to use");
    }
}
#endif
} // namespace

std::shared_ptr<Group> Group::connect(const World& world, const std::string& runKey, std::chrono::milliseconds timeout,
                                      Backend backend, int cudaDevice) {
    if (backend == Backend::Nccl) chooseBackend("nccl", true); // a build without NCCL says so here
    auto impl = std::make_unique<Impl>();
    impl->world = world;
    impl->timeout = timeout;
    impl->backend = backend;
    impl->cudaDevice = cudaDevice;
    if (world.size == 1 && backend == Backend::Gloo) return std::shared_ptr<Group>(new Group(std::move(impl)));
#ifndef LATMIX_WITH_GLOO
    if (backend == Backend::Gloo) throw std::runtime_error(noGlooMessage());
#endif
    const std::string at = world.masterAddr + ":" + std::to_string(world.masterPort);
    const std::string secs = std::to_string(timeout.count() / 1000) + " s";
    impl->store = openStore(world, timeout, at, secs);
    compareRunKeys(*impl->store, world, runKey, at, secs);
#ifdef LATMIX_WITH_NCCL
    if (backend == Backend::Nccl) {
        impl->nccl = formNccl(impl->store, world, timeout, cudaDevice);
        return std::shared_ptr<Group>(new Group(std::move(impl)));
    }
#endif
#ifdef LATMIX_WITH_GLOO
    impl->pg = formGloo(impl->store, world, timeout, secs);
#endif
    return std::shared_ptr<Group>(new Group(std::move(impl)));
}

namespace {
// The tensors as one float64 buffer on `device` (the CPU for Gloo, the rank's GPU for NCCL), and
// back. One contiguous float64 tensor already there travels as it is (a GPTQ Hessian: 0.5 GiB at
// 1B, no copy).
at::Tensor flatten(const std::vector<at::Tensor>& ts, c10::Device device) {
    if (ts.size() == 1 && ts[0].device() == device && ts[0].scalar_type() == at::kDouble && ts[0].is_contiguous())
        return ts[0].detach().view({-1});
    std::vector<at::Tensor> parts;
    parts.reserve(ts.size());
    for (const auto& t : ts) parts.push_back(t.detach().reshape({-1}).to(device, at::kDouble));
    return parts.empty() ? at::zeros({0}, at::TensorOptions().dtype(at::kDouble).device(device)) : at::cat(parts);
}
void unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& ts) {
    std::int64_t o = 0;
    for (const auto& t : ts) {
        const std::int64_t n = t.numel();
        at::Tensor dst = t.detach();
        if (n > 0 && dst.data_ptr() == flat.data_ptr()) return; // flatten gave the tensor itself
        dst.copy_(flat.narrow(0, o, n).view(t.sizes()));
        o += n;
    }
}
} // namespace

void Group::allreduce(const std::vector<at::Tensor>& ts, Reduce op) {
    if (!m->formed() || ts.empty()) return;
    std::vector<at::Tensor> v{flatten(ts, m->bufferDevice())};
    m->bytes += static_cast<std::uint64_t>(v[0].numel()) * 8;
    c10d::AllreduceOptions o;
    if (op == Reduce::Max) o.reduceOp = c10d::ReduceOp::MAX;
    m->run("all-reduce of " + std::to_string(v[0].numel()) + " values",
           [&] { return m->start([&](auto& g) { return g.allreduce(v, o); }); });
    if (op == Reduce::Mean) v[0].div_(size());
    unflatten(v[0], ts);
}

void Group::broadcast(const std::vector<at::Tensor>& ts, int root) {
    if (!m->formed() || ts.empty()) return;
    std::vector<at::Tensor> v{flatten(ts, m->bufferDevice())};
    if (rank() == root) m->bytes += static_cast<std::uint64_t>(v[0].numel()) * 8;
    c10d::BroadcastOptions o;
    o.rootRank = root;
    m->run("broadcast from rank " + std::to_string(root),
           [&] { return m->start([&](auto& g) { return g.broadcast(v, o); }); });
    unflatten(v[0], ts);
}

void Group::barrier() {
    if (!m->formed()) return;
    m->run("barrier", [&] { return m->start([&](auto& g) { return g.barrier(c10d::BarrierOptions{}); }); });
}

void Group::reportFailure(const std::string& what) noexcept {
    try {
        const std::string s = "rank " + std::to_string(rank()) + " stopped: " + what;
        if (!m->store) return;
        m->store->set("latmix/failed", std::vector<std::uint8_t>(s.begin(), s.end()));
        // TCPStore's set is not acknowledged; a check on the same connection is answered after the
        // set is applied, so once this returns every rank's next look finds the report.
        m->store->check({"latmix/failed"});
    } catch (...) {
    }
}

#else // no c10d in this libtorch

bool available() { return false; }

struct Group::Impl {
    World world;
    Backend backend = Backend::Gloo;
    std::atomic<std::uint64_t> bytes{0};
};

std::shared_ptr<Group> Group::connect(const World& world, const std::string&, std::chrono::milliseconds, Backend backend,
                                      int) {
    if (backend == Backend::Nccl) chooseBackend("nccl", true); // throws: no c10d, so no NCCL either
    if (world.size == 1) {
        auto impl = std::make_unique<Impl>();
        impl->world = world;
        return std::shared_ptr<Group>(new Group(std::move(impl)));
    }
    throw std::runtime_error("this build of latmix has no multi-process support: its libtorch lacks c10d's Gloo "
                             "headers (Debian: install libgloo-dev and rebuild); run with one process");
}
void Group::allreduce(const std::vector<at::Tensor>&, Reduce) {}
void Group::broadcast(const std::vector<at::Tensor>&, int) {}
void Group::barrier() {}
void Group::reportFailure(const std::string&) noexcept {}

#endif

Group::Group(std::unique_ptr<Impl> impl) : m(std::move(impl)) {}
void Group::allreduceSum(const std::vector<at::Tensor>& ts) { allreduce(ts, Reduce::Sum); }
void Group::allreduceMean(const std::vector<at::Tensor>& ts) { allreduce(ts, Reduce::Mean); }
void Group::allreduceMax(const std::vector<at::Tensor>& ts) { allreduce(ts, Reduce::Max); }
Group::~Group() = default;
int Group::rank() const { return m->world.rank; }
int Group::size() const { return m->world.size; }
Backend Group::backend() const { return m->backend; }
std::uint64_t Group::bytesCommunicated() const { return m->bytes; }

} // namespace latmix::dist
