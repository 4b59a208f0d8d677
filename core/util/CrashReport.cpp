#include "util/CrashReport.h"

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <dlfcn.h>
#include <execinfo.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <sys/uio.h>
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

void putDec(long v) {
    char buf[24];
    int i = sizeof buf - 1;
    buf[i] = '\0';
    const bool negative = v < 0;
    unsigned long u = negative ? 0UL - static_cast<unsigned long>(v) : static_cast<unsigned long>(v);
    do {
        buf[--i] = static_cast<char>('0' + u % 10);
        u /= 10;
    } while (u && i > 1);
    if (negative) buf[--i] = '-';
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
        if (info.dli_sname) { // the nearest exported symbol: names frames of stripped libraries (c++filt demangles)
            put(" ");
            put(info.dli_sname);
            put("+");
            putHex(a - reinterpret_cast<std::uintptr_t>(info.dli_saddr));
        }
    } else {
        put(" (not in any loaded file)");
    }
    put("\n");
}

// Copies n bytes at `from` without touching them directly: false where they are not readable (an
// unmapped page, a file mapping past its end), where a plain read would fault inside the handler.
bool safeRead(std::uintptr_t from, void* to, std::size_t n) {
    iovec local{to, n}, remote{reinterpret_cast<void*>(from), n};
    return ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0) == static_cast<ssize_t>(n);
}

// Whether the bytes before `a` end in a call instruction (x86-64: E8 rel32, or FF /2 with a
// register or memory operand of 2, 3, 6 or 7 bytes): then `a` is a return address, not a stray
// pointer into code.
bool followsCall(std::uintptr_t a) {
#if defined(__x86_64__)
    unsigned char b[7];
    if (a < sizeof b || !safeRead(a - sizeof b, b, sizeof b)) return false;
    auto before = [&](int n) { return b[sizeof b - static_cast<std::size_t>(n)]; }; // the byte at a - n
    if (before(5) == 0xE8) return true;
    for (int n : {2, 3, 6, 7})
        if (before(n) == 0xFF && ((before(n - 1) >> 3) & 7) == 2) return true;
#else
    (void)a;
#endif
    return false;
}

// When the unwinder cannot pass the interrupted frame (code without unwind tables, a jump
// through a bad pointer), the return addresses still lie on the stack: a scan of the crashed
// thread's stack above sp lists those that follow a call (stale ones from returned calls
// among them, as any stack scan shows).
void scanStack(std::uintptr_t sp) {
    std::uintptr_t end = sp + 64 * 1024;
    pthread_attr_t attr;
    if (::pthread_getattr_np(::pthread_self(), &attr) == 0) { // reads the loader's records: a dying process may
        void* base = nullptr;
        std::size_t size = 0;
        if (::pthread_attr_getstack(&attr, &base, &size) == 0 && base)
            end = std::min(end, reinterpret_cast<std::uintptr_t>(base) + size);
        ::pthread_attr_destroy(&attr);
    }
    put("return addresses found on the stack (a scan from sp; some may be stale):\n");
    int shown = 0;
    for (std::uintptr_t p = sp; p + sizeof(std::uintptr_t) <= end && shown < 24; p += sizeof(std::uintptr_t)) {
        std::uintptr_t v = 0;
        if (!safeRead(p, &v, sizeof v)) break;
        Dl_info info{};
        if (v < 4096 || !::dladdr(reinterpret_cast<void*>(v), &info) || !info.dli_fname || !followsCall(v)) continue;
        putWhere("frame", v);
        ++shown;
    }
}

// Only async-signal-safe calls but backtrace() (its first call, made by installCrashReport, loads
// libgcc_s) and dladdr. When the faulting instruction is a jump through a bad pointer, the
// unwinder stops at the signal frame; the interrupted instruction and the return address on top
// of the stack then still name the caller.
void onCrash(int sig, siginfo_t* info, void* context) {
    struct sigaction dfl {}; // one report: a fault inside it ends the process
    dfl.sa_handler = SIG_DFL;
    for (int s : {SIGSEGV, SIGBUS, SIGFPE, SIGILL}) ::sigaction(s, &dfl, nullptr);
    put(g_program);
    put(": crashed (signal ");
    put(sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : sig == SIGFPE ? "SIGFPE" : "SIGILL");
    put(") in thread ");
    const long tid = ::syscall(SYS_gettid);
    putDec(tid);
    put(tid == ::getpid() ? " (the main thread)\n" : " (not the main thread: a worker, e.g. OpenMP's)\n");
    putWhere("faulting address", reinterpret_cast<std::uintptr_t>(info ? info->si_addr : nullptr));
#if defined(__x86_64__)
    if (context) {
        const auto* uc = static_cast<const ucontext_t*>(context);
        const auto ip = static_cast<std::uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
        const auto sp = static_cast<std::uintptr_t>(uc->uc_mcontext.gregs[REG_RSP]);
        putWhere("instruction", ip);
        std::uintptr_t top = 0;
        if (sp && safeRead(sp, &top, sizeof top)) putWhere("return address on the stack", top);
    }
#else
    (void)context;
#endif
    put("the call stack (addr2line -f -C -e BINARY OFFSET names a frame):\n");
    void* frames[64];
    const int n = ::backtrace(frames, 64);
    ::backtrace_symbols_fd(frames, n, STDERR_FILENO);
#if defined(__x86_64__)
    if (context) scanStack(static_cast<std::uintptr_t>(static_cast<const ucontext_t*>(context)->uc_mcontext.gregs[REG_RSP]));
#endif
    ::raise(sig); // the default action now: exit status 128 + sig, a core where enabled
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
