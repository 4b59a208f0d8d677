#pragma once
// Ranks of a c10d group as threads of one test process, on localhost (tst_distributed,
// tst_processgroup). No Qt here.
#include "dist/ProcessGroup.h"

#include <chrono>
#include <exception>
#include <functional>
#include <future>
#include <string>
#include <vector>

namespace latmix::test {

inline constexpr std::chrono::milliseconds kTimeout{20000};

// fn(rank) on `world` threads at once; the exceptions' messages (empty: none) by rank.
inline std::vector<std::string> onThreads(int world, const std::function<void(int)>& fn) {
    std::vector<std::future<std::string>> f;
    for (int r = 0; r < world; ++r)
        f.push_back(std::async(std::launch::async, [&fn, r]() -> std::string {
            try {
                fn(r);
                return "";
            } catch (const std::exception& e) {
                return std::string("error: ") + e.what();
            }
        }));
    std::vector<std::string> out;
    for (auto& x : f) out.push_back(x.get());
    return out;
}

inline dist::World worldOf(int rank, int size, int port) {
    dist::World w;
    w.rank = rank;
    w.size = size;
    w.localRank = rank;
    w.masterAddr = "127.0.0.1";
    w.masterPort = port;
    return w;
}

} // namespace latmix::test
