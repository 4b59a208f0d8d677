// latmix report: one run folder as a self-contained HTML page (report/Report.h).
// latmix runs: the run folders under a folder, as a table and optionally CSV (run/RunCatalog.h).
#include "cli/Commands.h"

#include "report/Report.h"
#include "run/RunCatalog.h"
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

std::string num(double v, bool present, const char* f) {
    if (!present) return "-";
    char b[64];
    std::snprintf(b, sizeof b, f, v);
    return b;
}

// The table `latmix runs` prints: columns padded to their widest cell, numbers right-aligned.
std::string runsTable(const std::vector<run::RunSummary>& runs) {
    using RS = run::RunSummary;
    const std::vector<std::string> head = {"method", "format", "block", "steps", "FP ppl", run::precisionLabel(runs) + " ppl",
                                           "folded FP", "recovery %", "0-shot avg", "train s", "date", "dir"};
    const std::vector<bool> right = {false, false, true, true, true, true, true, true, true, true, false, false};
    std::vector<std::vector<std::string>> rows = {head};
    for (const auto& r : runs) {
        std::string date = r.created.substr(0, std::min<std::size_t>(r.created.size(), 16));
        std::replace(date.begin(), date.end(), 'T', ' ');
        rows.push_back({r.method, r.format, r.block > 0 ? std::to_string(r.block) : "-", std::to_string(r.steps),
                        num(r.fpPerplexity, RS::hasValue(r.fpPerplexity), "%.3f"),
                        num(r.w4a4Perplexity, RS::hasValue(r.w4a4Perplexity), "%.3f"),
                        num(r.foldedFpPerplexity, RS::hasValue(r.foldedFpPerplexity), "%.3f"),
                        num(100 * r.recovery, RS::hasValue(r.recovery), "%.2f"),
                        num(r.zeroShotAverage, RS::hasValue(r.zeroShotAverage, true), "%.4f"),
                        num(r.trainSeconds, true, "%.1f"), date.empty() ? "-" : date, r.dir});
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
    auto* cmd = app.add_subcommand("runs", "list the run folders under a folder (method, format, perplexities, "
                                           "recovery, zero-shot average, time) and optionally write them as CSV");
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
