#include "util/CrashReport.h"

#include <csignal>
#include <cstdint>
#include <cstring>
#include <dlfcn.h>
#include <execinfo.h>
#include <ucontext.h>
#include <unistd.h>

namespace latmix::util {
namespace {

const char* g_program = "latmix";

void put(const char* s) {
    if (::write(STDERR_FILENO, s, std::strlen(s)) < 0) return; // nothing more to do in a dying process
}

void putHex(std::uintptr_t v) {
    char buf[2 + 16 + 1];
    int i = sizeof buf - 1;
    buf[i] = '\0';
    do {
        buf[--i] = "0123456789abcdef"[v & 0xf];
        v >>= 4;
    } while (v && i > 2);
    buf[--i] = 'x';
    buf[--i] = '0';
    put(buf + i);
}

// "ADDRESS in FILE(+OFFSET)" for an address of the program or a library: the same form as
// backtrace_symbols_fd, so that addr2line can be given the offset. dladdr is not async-signal-safe
// but only reads the loader's tables; this runs once, in a dying process.
void putWhere(const char* what, std::uintptr_t a) {
    put("  ");
    put(what);
    put(" ");
    putHex(a);
    Dl_info info{};
    if (a && ::dladdr(reinterpret_cast<void*>(a), &info) && info.dli_fname) {
        put(" in ");
        put(info.dli_fname);
        put("(+");
        putHex(a - reinterpret_cast<std::uintptr_t>(info.dli_fbase));
        put(")");
    } else {
        put(" (not in any loaded file)");
    }
    put("\n");
}

// Only async-signal-safe calls but backtrace() (its first call, made by installCrashReport, loads
// libgcc_s) and dladdr. When the faulting instruction is a jump through a bad pointer, the
// unwinder stops at the signal frame; the interrupted instruction and the return address on top
// of the stack then still name the caller.
void onCrash(int sig, siginfo_t* info, void* context) {
    put(g_program);
    put(": crashed (signal ");
    put(sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : sig == SIGFPE ? "SIGFPE" : "SIGILL");
    put(")\n");
    putWhere("faulting address", reinterpret_cast<std::uintptr_t>(info ? info->si_addr : nullptr));
#if defined(__x86_64__)
    if (context) {
        const auto* uc = static_cast<const ucontext_t*>(context);
        const auto ip = static_cast<std::uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
        const auto sp = static_cast<std::uintptr_t>(uc->uc_mcontext.gregs[REG_RSP]);
        putWhere("instruction", ip);
        if (sp) putWhere("return address on the stack", *reinterpret_cast<const std::uintptr_t*>(sp));
    }
#else
    (void)context;
#endif
    put("the call stack (addr2line -f -C -e BINARY OFFSET names a frame):\n");
    void* frames[64];
    const int n = ::backtrace(frames, 64);
    ::backtrace_symbols_fd(frames, n, STDERR_FILENO);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(sig, &dfl, nullptr);
    ::raise(sig);
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
    struct sigaction sa {};
    sa.sa_sigaction = onCrash;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL}) ::sigaction(sig, &sa, nullptr);
}

} // namespace latmix::util
