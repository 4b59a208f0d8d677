#pragma once
// A crash (SIGSEGV, SIGBUS, SIGFPE, SIGILL) says where it happened before the process dies: a
// line naming the signal, then the call stack as the C library reads it (execinfo's backtrace),
// one frame per line, `binary(+OFFSET)` for frames of a position-independent executable, and before
// it the faulting address, the interrupted instruction and the return address on top of the stack
// (which name the caller when a jump through a bad pointer stops the unwinder); then the
// signal's default action (a core dump where enabled, exit status 128 + signal). Symbol names
// come from `addr2line -f -C -e BINARY OFFSET` (packaging/device-runs.sh does this for a crashed
// run). No libtorch, no Qt.

namespace latmix::util {

// Installs the handlers once for the whole process; `program` names it in the first line.
void installCrashReport(const char* program);

} // namespace latmix::util
