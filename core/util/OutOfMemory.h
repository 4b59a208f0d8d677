#pragma once
// Out of memory inside a long job, said in the job's words: which stage ran out (a training
// step, a GPTQ layer, an evaluation window), what libtorch said, and the way out. Core jobs run
// each such stage through guardMemory(); the CLI prints the message, the GUI shows it in its
// banner. Only the message is ours: the memory is freed by unwinding, as the tensors go.
#include "util/Remedy.h"

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace latmix {

class OutOfMemory : public util::RemediedError {
public:
    explicit OutOfMemory(const std::string& message) : util::RemediedError(message, {}) {}
    OutOfMemory(std::string cause, std::vector<util::Remedy> remedies, std::string after)
        : util::RemediedError(std::move(cause), std::move(remedies), std::move(after)) {}
};

// Called inside a catch block: an out-of-memory error of libtorch (c10::OutOfMemoryError, CUDA's
// caching allocator) or of the host (std::bad_alloc) becomes OutOfMemory
// "out of memory in <stage>: <libtorch's first line>; <advice>"; any other exception is
// rethrown unchanged.
[[noreturn]] void rethrowAsOutOfMemory(const std::string& stage, const std::string& advice);
// The same with the way out as option settings (util/Remedy.h), which each face words itself.
[[noreturn]] void rethrowAsOutOfMemory(const std::string& stage, const std::vector<util::Remedy>& remedies,
                                       const std::string& after);

// f() run as `stage`, its out-of-memory errors reported as above.
template <class F>
decltype(auto) guardMemory(const std::string& stage, const std::string& advice, F&& f) {
    try {
        return std::forward<F>(f)();
    } catch (...) {
        rethrowAsOutOfMemory(stage, advice);
    }
}
template <class F>
decltype(auto) guardMemory(const std::string& stage, const std::vector<util::Remedy>& remedies, const std::string& after,
                           F&& f) {
    try {
        return std::forward<F>(f)();
    } catch (...) {
        rethrowAsOutOfMemory(stage, remedies, after);
    }
}

} // namespace latmix
