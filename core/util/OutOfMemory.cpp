#include "util/OutOfMemory.h"

#include <c10/util/Exception.h>

#include <new>

namespace latmix {

namespace {
// libtorch's CUDA message runs over several lines ("Tried to allocate 2.00 GiB. GPU 0 has a
// total capacity of ... Of the allocated memory ..."); its first line names the device and sizes.
std::string firstLine(const std::string& s) {
    const auto end = s.find('\n');
    return end == std::string::npos ? s : s.substr(0, end);
}
} // namespace

void rethrowAsOutOfMemory(const std::string& stage, const std::vector<util::Remedy>& remedies, const std::string& after) {
    try {
        throw;
    } catch (const OutOfMemory&) {
        throw; // an inner stage said it already
    } catch (const c10::OutOfMemoryError& e) {
        throw OutOfMemory("out of memory in " + stage + ": " + firstLine(e.what_without_backtrace()), remedies, after);
    } catch (const std::bad_alloc&) {
        throw OutOfMemory("out of host memory in " + stage, remedies, after);
    }
}

void rethrowAsOutOfMemory(const std::string& stage, const std::string& advice) {
    rethrowAsOutOfMemory(stage, {}, advice);
}

} // namespace latmix
