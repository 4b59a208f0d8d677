#pragma once
// Subcommands of the `latmix` CLI. Each registers its options on the parser and runs after a
// successful parse; errors are thrown as std::exception and printed by main as one line.
#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace latmix::cli {

using Runner = std::function<int()>;

// The command line `latmix` was started with (argv), for commands that start copies of
// themselves (quantize --nproc); empty when the CLI runs in process (tests), where they can't.
const std::vector<std::string>& invocation();
// The command as typed, program named "latmix", each argument shell-quoted where it needs it
// ('…', a ' inside as '\''): what latmix.json records, so a run repeats from its own record.
// Set in process too.
std::string typedCommandLine();

Runner addMxQuantizeCommand(CLI::App& app);
Runner addBenchCommand(CLI::App& app);
Runner addEvalCommand(CLI::App& app);
Runner addCaptureCommand(CLI::App& app);
Runner addExpertsCommand(CLI::App& app);
Runner addDemoModelCommand(CLI::App& app);
Runner addImportLlama2cCommand(CLI::App& app);
Runner addAnalyzeCommand(CLI::App& app);
Runner addQuantizeCommand(CLI::App& app);
Runner addExportCommand(CLI::App& app);
Runner addSweepCommand(CLI::App& app);
Runner addReportCommand(CLI::App& app);
Runner addRunsCommand(CLI::App& app);
Runner addSensitivityCommand(CLI::App& app);
Runner addPlanCommand(CLI::App& app);

} // namespace latmix::cli
