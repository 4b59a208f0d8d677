// latmix sweep: a grid of quantize runs and one table of them (run/Sweep.h).
#include "cli/CliProgress.h"
#include "cli/Commands.h"

#include "run/Sweep.h"

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

namespace latmix::cli {

Runner addSweepCommand(CLI::App& app) {
    struct SweepCli {
        std::string model, grid, out;
        bool list = false;
    };
    auto o = std::make_shared<SweepCli>();
    auto* cmd = app.add_subcommand(
        "sweep", "run a grid of quantize runs (methods x formats x variants x seeds) into one folder, resumable, and "
                 "tabulate them (OUT/results.md, OUT/results.csv)");
    cmd->add_option("--grid", o->grid,
                    "grid file (JSON: model, methods, formats, seeds, options, variants; see docs/research/results.md)")
        ->required();
    cmd->add_option("--model", o->model, "model folder (overrides the grid's \"model\")");
    cmd->add_option("--out", o->out, "sweep folder: OUT/cells/<cell>/ (each a quantize run folder), OUT/results.md/.csv")
        ->required();
    cmd->add_flag("--list", o->list, "print the cells and which are done, run nothing");
    return [o] {
        const auto grid = run::readSweepGrid(o->grid, o->model);
        const int n = static_cast<int>(grid.cells.size());
        if (o->list) {
            for (const auto& c : grid.cells)
                std::printf("%-40s %s\n", c.name.c_str(),
                            std::filesystem::exists(std::filesystem::path(o->out) / "cells" / c.name / "latmix.json")
                                ? "done"
                                : "to run");
            return 0;
        }
        CliProgress progress("sweep");
        const auto r = run::runSweep(grid, o->out, progress, [&](int i, const run::SweepCell& c, bool done) {
            std::printf("cell %d/%d  %-36s %s\n", i + 1, n, c.name.c_str(), done ? "done before: skipped" : "running");
            std::fflush(stdout);
        });
        std::printf("\n%s\n%d cells run, %d skipped (finished before); tables in %s/results.md and results.csv\n",
                    run::sweepMarkdown(r.records, n).c_str(), r.ran, r.skipped, o->out.c_str());
        return 0;
    };
}

} // namespace latmix::cli
