#pragma once
// A crash (SIGSEGV, SIGBUS, SIGFPE, SIGILL) says where it happened before the process dies: a
// line naming the signal, then the call stack as the C library reads it (execinfo's backtrace),
// one frame per line, `binary(+OFFSET)` for frames of a position-independent executable, and before
// it the faulting address, the interrupted instruction and the return address on top of the stack
// (which name the caller when a jump through a bad pointer stops the unwinder), and after it a
// scan of the crashed thread's stack for return addresses (values that point just past a call
// instruction in a loaded file: the callers the unwinder could not reach, with some stale ones);
// each address as FILE(+OFFSET) and the nearest exported symbol where there is one; then the
// signal's default action (a core dump where enabled, exit status 128 + signal). Symbol names
// come from `addr2line -f -C -e BINARY OFFSET` (packaging/device-runs.sh does this for a crashed
// run). tests/util/tst_crashreport.cpp crashes the real executable on purpose. No libtorch, no Qt.

namespace latmix::util {

// Installs the handlers once for the whole process; `program` names it in the first line.
void installCrashReport(const char* program);

} // namespace latmix::util
