#pragma once
// What every libFuzzer harness here shares: the contract a parser of untrusted input keeps, and
// a scratch folder for parsers that read files.
//
// The contract (issue 17): on any input a parser returns a result or throws std::runtime_error /
// std::invalid_argument whose message names the file it read. Any other exception (a raw
// nlohmann::json error, std::out_of_range from .at(), std::bad_alloc), a crash, a sanitizer
// report, a leak or a message that does not name the file is a finding: the harness aborts, and
// libFuzzer saves the input.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <unistd.h>

// Sanitizer settings every harness runs with, also when started by hand (one TU a harness).
// allocator_may_return_null: Debian's libhdf5 (not instrumented) asks malloc for sizes read from
// the file and reports NULL as a clean error, as it does outside the sanitizer; a huge allocation
// of our own code still shows, as std::bad_alloc, which expectResultOrClearError reports.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }
// libhdf5 1.10 leaks a 56-byte block on some of its error paths (a Debian library, not ours); our
// own leaks are still reported.
extern "C" const char* __lsan_default_suppressions() { return "leak:libhdf5_serial.so\nleak:libhdf5.so\n"; }

namespace latmix::fuzz {

[[noreturn]] inline void finding(const std::string& what) {
    std::fprintf(stderr, "FINDING: %s\n", what.c_str());
    std::fflush(stderr);
    std::abort();
}

// LATMIX_FUZZ_VERBOSE=1 prints each input's outcome (to see what the seeds reach).
inline void outcome(const std::string& what) {
    static const bool verbose = std::getenv("LATMIX_FUZZ_VERBOSE") != nullptr;
    if (verbose) std::fprintf(stderr, "outcome: %s\n", what.c_str());
}

// Runs parse(); accepts a result or a clear error naming `name`.
template <class F>
void expectResultOrClearError(const std::string& name, F&& parse) {
    try {
        parse();
        outcome("accepted");
    } catch (const std::runtime_error& e) {
        outcome(e.what());
        if (std::string(e.what()).find(name) == std::string::npos)
            finding(std::string("error does not name '") + name + "': " + e.what());
    } catch (const std::invalid_argument& e) {
        outcome(e.what());
        if (std::string(e.what()).find(name) == std::string::npos)
            finding(std::string("error does not name '") + name + "': " + e.what());
    } catch (const std::exception& e) {
        finding(std::string("unexpected exception type: ") + e.what());
    }
}

// A folder of this process's own (under $TMPDIR, else /tmp), removed at exit.
inline const std::filesystem::path& scratchDir() {
    static const std::filesystem::path dir = [] {
        const char* t = std::getenv("TMPDIR");
        std::string pattern = std::string(t && *t ? t : "/tmp") + "/latmix-fuzz.XXXXXX";
        if (!::mkdtemp(pattern.data())) finding("cannot create a scratch folder");
        std::atexit([] {
            std::error_code ec;
            std::filesystem::remove_all(scratchDir(), ec);
        });
        return std::filesystem::path(pattern);
    }();
    return dir;
}

// Writes the input to scratchDir()/name and returns its path.
inline std::string writeInput(const std::string& name, const std::uint8_t* data, std::size_t size) {
    const std::filesystem::path p = scratchDir() / name;
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out) finding("cannot write " + p.string());
    return p.string();
}

} // namespace latmix::fuzz
