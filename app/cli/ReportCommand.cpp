// latmix report: one run folder as a self-contained HTML page (report/Report.h).
// latmix runs: the run folders under a folder, as a table and optionally CSV (run/RunCatalog.h).
#include "cli/Commands.h"

#include "report/Report.h"
#include "run/RunCatalog.h"
#include "run/RunColumns.h"
#include "util/AtomicFile.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

namespace latmix::cli {
namespace {

// The table `latmix runs` prints (run/RunColumns.h's displayed columns, the folder last: paths are
// long): columns padded to their widest cell, numbers right-aligned, "-" where a run has no value.
std::string runsTable(const std::vector<run::RunSummary>& runs) {
    std::vector<const run::RunColumn*> columns = run::displayedRunColumns();
    std::stable_partition(columns.begin(), columns.end(), [](const run::RunColumn* c) { return c->key != "dir"; });
    std::vector<std::string> head;
    std::vector<bool> right;
    for (const auto* c : columns) {
        head.push_back(c->key == "w4a4_ppl" ? run::precisionLabel(runs) + " ppl" : c->label);
        right.push_back(c->number != nullptr);
    }
    std::vector<std::vector<std::string>> rows = {head};
    for (const auto& r : runs) {
        std::vector<std::string> row;
        for (const auto* c : columns) {
            std::string cell = run::cellText(*c, r);
            if (c->key == "created") { // "2026-11-25 01:12"
                cell = cell.substr(0, std::min<std::size_t>(cell.size(), 16));
                std::replace(cell.begin(), cell.end(), 'T', ' ');
            }
            row.push_back(cell.empty() ? "-" : cell);
        }
        rows.push_back(row);
    }
    std::vector<std::size_t> width(head.size(), 0);
    for (const auto& row : rows)
        for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
    std::string out;
    for (const auto& row : rows) {
        std::string line;
        for (std::size_t c = 0; c < row.size(); ++c) {
            const std::string pad(width[c] - row[c].size(), ' ');
            const bool last = c + 1 == row.size();
            line += right[c] ? pad + row[c] : row[c] + (last ? "" : pad);
            if (!last) line += "  ";
        }
        out += line + "\n";
    }
    return out;
}

} // namespace

Runner addReportCommand(CLI::App& app) {
    struct ReportCli {
        std::string runDir, out;
    };
    auto o = std::make_shared<ReportCli>();
    auto* cmd = app.add_subcommand("report", "write a run folder's report: one self-contained HTML page with its "
                                             "configuration, results, training curves and per-layer weight errors");
    cmd->add_option("RUN_DIR", o->runDir, "run folder written by `latmix quantize` or `latmix sweep` (latmix.json)")
        ->required();
    cmd->add_option("--out", o->out, "the HTML file to write (default: RUN_DIR/report.html)");
    return [o] {
        const std::string out = o->out.empty() ? (std::filesystem::path(o->runDir) / "report.html").string() : o->out;
        report::writeRunReport(o->runDir, out);
        std::error_code ec;
        const auto bytes = std::filesystem::file_size(out, ec);
        std::printf("report      %s -> %s (%.1f KiB)\n", o->runDir.c_str(), out.c_str(), ec ? 0.0 : bytes / 1024.0);
        return 0;
    };
}

Runner addRunsCommand(CLI::App& app) {
    struct RunsCli {
        std::string root, csv;
    };
    auto o = std::make_shared<RunsCli>();
    auto* cmd = app.add_subcommand("runs", "list the run folders under a folder (method, format, bits per weight, "
                                           "perplexities, recovery, KL, zero-shot average, time) and optionally write them as CSV");
    cmd->add_option("ROOT", o->root, "folder searched for run folders (those holding latmix.json), e.g. runs/")
        ->required();
    cmd->add_option("--csv", o->csv, "also write the runs as CSV to this file");
    return [o] {
        std::vector<std::string> problems;
        const auto runs = run::scanRuns(o->root, &problems);
        for (const auto& p : problems) std::fprintf(stderr, "latmix: warning: skipped %s\n", p.c_str());
        if (runs.empty()) {
            std::printf("no run folders (with latmix.json) under %s\n", o->root.c_str());
        } else {
            std::printf("%s", runsTable(runs).c_str());
            std::printf("%zu run%s under %s%s\n", runs.size(), runs.size() == 1 ? "" : "s", o->root.c_str(),
                        problems.empty() ? "" : (", " + std::to_string(problems.size()) + " skipped").c_str());
        }
        if (!o->csv.empty()) {
            util::writeFileAtomically(o->csv, run::runsCsv(runs));
            std::printf("csv         %s\n", o->csv.c_str());
        }
        return 0;
    };
}

} // namespace latmix::cli
