#pragma once
// `--nproc N` for users without torchrun: N copies of a program on this machine, each one rank
// of a world (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1, MASTER_PORT a free port),
// exactly as torchrun's environment would make them.
#include <chrono>
#include <string>
#include <vector>

namespace latmix::dist {

// Starts `program` with `args` (args[0] is the program's name) nproc times and waits for all.
// When a rank fails (non-zero exit or killed), the others get `grace` to stop by themselves
// (their collectives fail as soon as the peer is gone), then SIGTERM, then SIGKILL 5 s later:
// no rank outlives the run. Returns 0 when every rank succeeded, else the first failure's exit
// code (128 + signal for a killed rank), after printing to stderr which rank failed and how.
// Ctrl-C goes to the ranks (rank 0 cancels cleanly); the launcher waits for them.
int launchLocalRanks(const std::string& program, const std::vector<std::string>& args, int nproc,
                     std::chrono::milliseconds grace);

// A TCP port free on 127.0.0.1 now (the kernel's pick; whoever binds it next may race for it, as
// with torchrun's standalone rendezvous).
int freeLoopbackPort();

// The path of the running executable (/proc/self/exe).
std::string currentExecutable();

} // namespace latmix::dist
