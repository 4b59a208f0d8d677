#pragma once
// Progress of a core job on the terminal: percentage, message and ETA on one rewritten line
// when stderr is a terminal; otherwise a line per 10%, and at least one a minute while a long
// stage moves less than that (logs stay short, a 10-minute sweep cell still shows it is alive:
// a full-test-set evaluation inside one cell of an 8-cell sweep is under 1%). Ctrl-C asks the job
// to cancel at its next safe point (it cleans up and main exits with 130); a second Ctrl-C
// kills the process as usual.
#include "util/Job.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

namespace latmix::cli {

class CliProgress : public JobContext {
public:
    // quiet: only Ctrl-C, no output (the other ranks of a data-parallel run).
    explicit CliProgress(std::string what, bool quiet = false)
        : m_what(std::move(what)), m_tty(isatty(fileno(stderr))), m_quiet(quiet) {
        interrupted() = false;
        std::signal(SIGINT, [](int) {
            interrupted() = true;
            std::signal(SIGINT, SIG_DFL);
        });
    }
    bool cancelRequested() const override { return interrupted(); }
    ~CliProgress() override {
        if (m_tty && m_printed) std::fprintf(stderr, "\n");
    }
    void progress(double fraction, const std::string& message) override {
        killIfAsked();
        if (m_quiet) return;
        const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - m_start).count();
        const double eta = fraction > 0 ? elapsed * (1 - fraction) / fraction : 0;
        const int pct = static_cast<int>(fraction * 100 + 0.5);
        if (!m_tty && pct / 10 == m_lastDecile && elapsed - m_lastLine < 60) return;
        m_lastDecile = pct / 10;
        m_lastLine = elapsed;
        std::fprintf(stderr, "%s%s: %3d%% %s, %.0f s elapsed, ETA %.0f s%s", m_tty ? "\r" : "", m_what.c_str(), pct,
                     message.c_str(), elapsed, eta, m_tty ? "   " : "\n");
        std::fflush(stderr);
        m_printed = true;
    }

private:
    // Fault injection, counted over the whole process's progress reports:
    // LATMIX_KILL_AFTER_PROGRESS=N (the kill-safety tests, issue 17.4, tests/run/tst_killsafety.cpp)
    // makes the process SIGKILL itself at its N-th report, as `kill -9` from outside would at that
    // moment: no destructor, no handler, no flush runs. LATMIX_CRASH_AFTER_PROGRESS=N calls
    // through a null function pointer there (tests/util/tst_crashreport.cpp): a SIGSEGV whose
    // interrupted frame the unwinder cannot pass, the case util/CrashReport's stack scan is for.
    static void killIfAsked() {
        static const long long killAt = envCount("LATMIX_KILL_AFTER_PROGRESS"), crashAt = envCount("LATMIX_CRASH_AFTER_PROGRESS");
        static std::atomic<long long> calls{0};
        const long long n = ++calls;
        if (killAt > 0 && n >= killAt) std::raise(SIGKILL);
        if (crashAt > 0 && n >= crashAt) {
            void (*volatile nowhere)() = nullptr;
            nowhere();
        }
    }
    static long long envCount(const char* name) {
        const char* v = std::getenv(name);
        return v && *v ? std::atoll(v) : 0LL;
    }
    static std::atomic<bool>& interrupted() {
        static std::atomic<bool> flag{false};
        return flag;
    }
    std::string m_what;
    bool m_tty;
    bool m_quiet = false;
    bool m_printed = false;
    int m_lastDecile = -1;
    double m_lastLine = 0; // elapsed seconds at the last line written
    std::chrono::steady_clock::time_point m_start = std::chrono::steady_clock::now();
};

} // namespace latmix::cli
