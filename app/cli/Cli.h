#pragma once
// The `latmix` command line as a function: parses argv, runs the subcommand, prints errors as
// one line on stderr and returns the exit status (0, 1 for an error, 2 for a usage error, 130
// when cancelled). main() calls it; the CLI tests call it in process (tests/CliRunner.h).
namespace latmix::cli {

// mayReexec: whether a long job may re-execute the process for passive OpenMP waiting
// (util/Runtime.h); never in process.
int run(int argc, char** argv, bool mayReexec);

} // namespace latmix::cli
