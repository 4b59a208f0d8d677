// latmix: the headless CLI. Everything the workbench does is reachable from here.
#include "cli/Cli.h"
#include "dist/ProcessGroup.h"
#include "cli/Commands.h"

#include "mx/MxKernelCpu.h"
#include "run/quantize/OptionTable.h"
#include "util/Job.h"
#include "util/Runtime.h"

#include <cstdio>
#include <exception>
#include <map>
#include <string>
#include <algorithm>
#include <cctype>
#include <cstring>
#include <vector>

namespace latmix::cli {
namespace {
// argv of the running command, and whether it may start copies of itself (not in process).
struct Invocation {
    std::vector<std::string> argv;
    bool mayReexec = false;
};
Invocation& current() {
    static Invocation i;
    return i;
}

std::string shellQuoted(const std::string& a) {
    const bool plain = !a.empty() && std::all_of(a.begin(), a.end(), [](unsigned char c) {
        return std::isalnum(c) || std::strchr("_@%+=:,./-", c) != nullptr;
    });
    if (plain) return a;
    std::string q = "'";
    for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}
} // namespace

const std::vector<std::string>& invocation() {
    static const std::vector<std::string> none;
    return current().mayReexec ? current().argv : none;
}

std::string typedCommandLine() {
    std::string line = "latmix";
    const auto& argv = current().argv;
    for (std::size_t i = 1; i < argv.size(); ++i) line += " " + shellQuoted(argv[i]);
    return line;
}

int run(int argc, char** argv, bool mayReexec) {
    current() = {std::vector<std::string>(argv, argv + argc), mayReexec};
    CLI::App app{"latmix: LATMiX quantization workbench, command line"};
    app.require_subcommand(1);
    int threads = 0;
    app.add_option("--threads", threads,
                   "libtorch threads (default: LATMIX_THREADS, else the number of cores)");
    // Built when asked for: the BLAS is looked up in /proc/self/maps. The CPU paths are what
    // latmix.json records as "runtime" (docs/reproducibility.md).
    app.set_version_flag("--version", [] {
        const std::string blas = latmix::blasLibrary(), core = latmix::blasCoreName();
        std::string mxPath;
        try {
            mxPath = latmix::mx::cpu::kernelPathName(latmix::mx::cpu::kernelPath());
        } catch (const std::exception& e) {
            mxPath = e.what();
        }
        return latmix::latmixVersion() + " (libtorch " + latmix::libtorchVersion() + ", BLAS " +
               (blas.empty() ? "none" : blas) + (core.empty() ? "" : " [" + core + "]") + ")\nbuild " +
               latmix::buildDescription() + "; CPU paths: ATen " + latmix::atenCpuCapability() + ", MX kernel " +
               mxPath + "\ndevices: " + latmix::deviceDescription() + " (" +
               std::to_string(latmix::availableDevices().size() - 1) + " CUDA); multi-process: " +
               (latmix::dist::available() ? (latmix::dist::ncclAvailable() ? "gloo, nccl" : "gloo")
                                          : (latmix::dist::ncclAvailable() ? "nccl (GPUs only)" : "none"));
    });

    std::map<CLI::App*, latmix::cli::Runner> runners;
    auto add = [&](latmix::cli::Runner (*registerFn)(CLI::App&)) {
        auto runner = registerFn(app);
        runners[app.get_subcommands({}).back()] = runner;
    };
    add(latmix::cli::addMxQuantizeCommand);
    add(latmix::cli::addBenchCommand);
    add(latmix::cli::addEvalCommand);
    add(latmix::cli::addCaptureCommand);
    add(latmix::cli::addExpertsCommand);
    add(latmix::cli::addDemoModelCommand);
    add(latmix::cli::addImportLlama2cCommand);
    add(latmix::cli::addAnalyzeCommand);
    add(latmix::cli::addQuantizeCommand);
    add(latmix::cli::addExportCommand);
    add(latmix::cli::addSweepCommand);
    add(latmix::cli::addReportCommand);
    add(latmix::cli::addRunsCommand);
    add(latmix::cli::addSensitivityCommand);
    add(latmix::cli::addPlanCommand);

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    // Long numeric jobs want OpenMP threads that sleep between parallel regions (see Runtime.h);
    // quick commands are not worth the second start-up.
    if (mayReexec)
        for (auto* sub : app.get_subcommands())
            if (sub->get_name() != "mx-quantize") latmix::preferPassiveOpenMpWait(argv);
    try {
        latmix::configureThreads(threads);
        for (auto* sub : app.get_subcommands()) return runners.at(sub)();
    } catch (const latmix::JobCancelled&) {
        std::fprintf(stderr, "latmix: cancelled\n");
        return 130;
    } catch (const std::exception& e) {
        // Ways out said with the flags of the option table (an error raised below run/ carries keys).
        std::fprintf(stderr, "latmix: error: %s\n", latmix::run::messageFor(e, latmix::run::Face::Cli).c_str());
        return 1;
    }
    return 1;
}

} // namespace latmix::cli
