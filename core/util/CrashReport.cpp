#include "util/CrashReport.h"

#include <csignal>
#include <cstring>
#include <execinfo.h>
#include <unistd.h>

namespace latmix::util {
namespace {

const char* g_program = "latmix";

void put(const char* s) {
    if (::write(STDERR_FILENO, s, std::strlen(s)) < 0) return; // nothing more to do in a dying process
}

// Only async-signal-safe calls, but for backtrace(), whose first call may allocate (it loads
// libgcc_s); installCrashReport calls it once beforehand so that it does not here.
void onCrash(int sig) {
    put(g_program);
    put(": crashed (signal ");
    put(sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : sig == SIGFPE ? "SIGFPE" : "SIGILL");
    put("); the call stack (addr2line -f -C -e BINARY OFFSET names a frame):\n");
    void* frames[64];
    const int n = ::backtrace(frames, 64);
    ::backtrace_symbols_fd(frames, n, STDERR_FILENO);
    std::signal(sig, SIG_DFL);
    std::raise(sig);
}

} // namespace

void installCrashReport(const char* program) {
#ifdef __SANITIZE_ADDRESS__
    (void)program; // AddressSanitizer reports crashes itself, with more
    return;
#endif
    g_program = program;
    void* warm[1];
    ::backtrace(warm, 1);
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL}) std::signal(sig, onCrash);
}

} // namespace latmix::util
