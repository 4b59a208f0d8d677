// Local multi-process launch (LocalLaunch.h): fork/exec with torchrun's variables.
#include "dist/LocalLaunch.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace latmix::dist {

int freeLoopbackPort() {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw std::runtime_error(std::string("--nproc: cannot open a socket: ") + std::strerror(errno));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
        const int e = errno;
        ::close(fd);
        throw std::runtime_error(std::string("--nproc: cannot find a free port on 127.0.0.1: ") + std::strerror(e));
    }
    ::close(fd);
    return ntohs(a.sin_port);
}

namespace {

std::string describe(int status) {
    if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
                                    strsignal(WTERMSIG(status)) + ")";
    return "stopped";
}

int exitCode(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 1;
}

} // namespace

std::string currentExecutable() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

int launchLocalRanks(const std::string& program, const std::vector<std::string>& args, int nproc,
                     std::chrono::milliseconds grace) {
    if (nproc < 1) throw std::invalid_argument("--nproc must be at least 1");
    const int port = freeLoopbackPort();
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::fflush(stdout);
    std::fflush(stderr);
    std::vector<pid_t> pids;
    for (int r = 0; r < nproc; ++r) {
        const pid_t pid = ::fork();
        if (pid < 0) {
            for (pid_t p : pids) ::kill(p, SIGTERM);
            throw std::runtime_error(std::string("--nproc: cannot start rank ") + std::to_string(r) + ": " +
                                     std::strerror(errno));
        }
        if (pid == 0) {
            ::setenv("RANK", std::to_string(r).c_str(), 1);
            ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
            ::setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
            ::setenv("LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
            ::setenv("MASTER_ADDR", "127.0.0.1", 1);
            ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
            ::execv(program.c_str(), argv.data());
            std::fprintf(stderr, "--nproc: cannot run '%s': %s\n", program.c_str(), std::strerror(errno));
            ::_exit(127);
        }
        pids.push_back(pid);
    }
    // Ctrl-C reaches every rank (one process group): rank 0 cancels at its next step and leaves a
    // resumable run folder. The launcher itself waits for them instead of returning to the shell
    // while they still run. (Set after the forks: an ignored signal would stay ignored in them.)
    struct sigaction ignore {}, previous {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGINT, &ignore, &previous);
    using Clock = std::chrono::steady_clock;
    int result = 0, running = nproc;
    bool termSent = false;
    Clock::time_point deadline = Clock::time_point::max();
    std::vector<bool> done(static_cast<size_t>(nproc), false);
    while (running > 0) {
        int status = 0;
        const pid_t pid = ::waitpid(-1, &status, WNOHANG);
        if (pid > 0) {
            for (int r = 0; r < nproc; ++r)
                if (pids[static_cast<size_t>(r)] == pid && !done[static_cast<size_t>(r)]) {
                    done[static_cast<size_t>(r)] = true;
                    --running;
                    const int code = exitCode(status);
                    if (code != 0 && result == 0) {
                        result = code;
                        if (code == 130) // the ranks agree on a cancel and stop together
                            std::fprintf(stderr, "--nproc: rank %d was cancelled\n", r);
                        else
                            std::fprintf(stderr, "--nproc: rank %d %s; stopping the other ranks (they get %lld s)\n",
                                         r, describe(status).c_str(), static_cast<long long>(grace.count() / 1000));
                        deadline = Clock::now() + grace;
                    }
                }
            continue;
        }
        if (pid < 0 && errno != EINTR) break; // no children left
        const auto now = Clock::now();
        if (now >= deadline) {
            for (int r = 0; r < nproc; ++r)
                if (!done[static_cast<size_t>(r)]) ::kill(pids[static_cast<size_t>(r)], termSent ? SIGKILL : SIGTERM);
            if (!termSent)
                std::fprintf(stderr, "--nproc: %d rank(s) still running after a rank failed: terminating them\n", running);
            deadline = now + std::chrono::seconds(5);
            termSent = true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ::sigaction(SIGINT, &previous, nullptr);
    return result;
}

} // namespace latmix::dist
