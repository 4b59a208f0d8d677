#pragma once
// `latmix sweep`: a grid of quantize runs (methods x formats x variants x seeds) into one folder,
// resumable (a cell whose latmix.json exists is done and skipped; an interrupted learned cell
// resumes its training from train.h5), and one table of the cells, Markdown and CSV, rewritten
// after every cell so that an interrupted sweep still shows what it has.
//
// Grid file (JSON):
//   {"model": "DIR",                              (optional; --model overrides)
//    "methods": ["rtn", "mr-gptq", "latmix-lu"],
//    "formats": ["mxfp4", "mxint4"],              (default ["mxfp4"])
//    "seeds": [0, 1, 2],                          (default [0])
//    "options": {"steps": 1000, "batch": 2, ...}, (every cell; keys below)
//    "variants": [{"name": "T1 only", "t2": "none"}, ...]}  (optional: option sets, one row each)
// Option keys: steps, batch, lr, temperature, volume_weight, weight_decay, loss, warmup_steps,
// calib_samples, seqlen, eval_seqlen, eval_windows, folded_eval_every, block, scale_mode, act_order, t1, t2, t3,
// init, init_noise, granularity, t1_bias, t2_bias, eval_tasks, eval_limit, device, checkpoint_every, calib.
// A path in the grid (model, calib) is relative to the grid file's folder.
#include "run/QuantizeRun.h"
#include "run/RunCatalog.h"
#include "util/Job.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace latmix::run {

struct SweepCell {
    std::string name; // folder name under OUT/cells: method-format[-variant]-s<seed>
    std::string method, format, variant;
    std::uint64_t seed = 0;
    RunConfig options;
    std::string calib; // calibration text file (relative to the grid)
};

struct SweepGrid {
    std::string source; // the grid file
    std::string model;
    std::vector<SweepCell> cells;
};

// Reads and checks a grid (unknown keys, methods, formats, kinds: std::invalid_argument naming
// the grid file and the key). modelOverride: --model, else the grid's "model".
SweepGrid readSweepGrid(const std::string& gridPath, const std::string& modelOverride = {});

// What the table shows of a finished cell, read back from its latmix.json (run::readRunSummary,
// run/RunCatalog.h); errors name the file.
struct SweepRecord {
    std::string name, method, format, variant; // the cell
    std::uint64_t seed = 0;
    RunSummary run; // its results: the tables take their columns from run/RunColumns.h
};
SweepRecord readSweepRecord(const SweepCell& cell, const std::string& latmixJson);

struct SweepResult {
    std::vector<SweepRecord> records; // the finished cells, in grid order
    int ran = 0, skipped = 0;
};

// Runs the cells not yet finished under outDir/cells, rewriting outDir/results.md and
// outDir/results.csv after each. onCell(i, cell, skipped) before each cell. Cancel stops between
// or inside cells (the interrupted cell resumes next time).
SweepResult runSweep(const SweepGrid& grid, const std::string& outDir, JobContext& job = silentJob(),
                     const std::function<void(int, const SweepCell&, bool)>& onCell = nullptr);

// The tables: CSV one row a cell; Markdown one row per method x format x variant, the seeds'
// mean ± sample standard deviation, and per format and variant which rows are the best quantized
// (W4A4 for 4-bit formats) perplexity or within noise of it (|difference| <= the sum of the two standard deviations).
std::string sweepCsv(const std::vector<SweepRecord>& records);
std::string sweepMarkdown(const std::vector<SweepRecord>& records, int cellsInGrid);

} // namespace latmix::run
