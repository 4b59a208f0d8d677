#include "run/Sweep.h"

#include "run/RunColumns.h"

#include "eval/ZeroShotTasks.h"
#include "run/PrepareRun.h"
#include "run/RunCatalog.h"
#include "run/quantize/OptionTable.h"
#include "mx/MxFormat.h"
#include "util/AtomicFile.h"
#include "util/Stats.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>

namespace latmix::run {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

[[noreturn]] void bad(const std::string& grid, const std::string& what) {
    throw std::invalid_argument("sweep grid " + grid + ": " + what);
}

std::string relativeTo(const std::string& grid, const std::string& path) {
    if (path.empty() || fs::path(path).is_absolute()) return path;
    return (fs::path(grid).parent_path() / path).lexically_normal().string();
}

// One option of the grid's "options" or of a variant applied to a cell: a key of the option table
// (run/quantize/OptionTable.h), or "calib", a text file relative to the grid.
void applyOption(SweepCell& c, const std::string& key, const json& v, const std::string& grid) {
    if (key == "calib") {
        if (!v.is_string()) bad(grid, "option 'calib' must be a text, not " + v.dump());
        c.calib = relativeTo(grid, v.get<std::string>());
        return;
    }
    if (key == "method" || key == "format")
        bad(grid, "'" + key + "' is an axis of the grid (its \"" + key + "s\" list), not an option");
    try {
        setOption(c.options, key, nlohmann::ordered_json::parse(v.dump()));
    } catch (const std::invalid_argument& e) {
        bad(grid, e.what());
    }
}

std::vector<std::string> stringList(const json& j, const char* key, const std::string& grid,
                                    std::vector<std::string> fallback) {
    if (!j.contains(key)) return fallback;
    if (!j[key].is_array() || j[key].empty()) bad(grid, std::string("'") + key + "' must be a non-empty list");
    std::vector<std::string> out;
    for (const auto& v : j[key]) {
        if (!v.is_string()) bad(grid, std::string("'") + key + "' holds " + v.dump() + ", not a name");
        out.push_back(v.get<std::string>());
    }
    return out;
}

// The spread of a row's seeds: the sample standard deviation, 0 for one seed.
double stdOf(const std::vector<double>& x) { return x.size() < 2 ? 0.0 : util::sampleStd(x); }

std::string fixed(double v, int digits) {
    char b[64];
    std::snprintf(b, sizeof b, "%.*f", digits, v);
    return b;
}
std::string meanStd(const std::vector<double>& x, int digits) {
    if (x.empty()) return "–";
    return x.size() > 1 ? fixed(util::mean(x), digits) + " ± " + fixed(stdOf(x), digits) : fixed(x.front(), digits);
}

} // namespace

SweepGrid readSweepGrid(const std::string& gridPath, const std::string& modelOverride) {
    json j;
    try {
        j = json::parse(util::readTextFile(gridPath, "sweep grid"));
    } catch (const json::exception& e) {
        bad(gridPath, std::string("not JSON (") + e.what() + ")");
    }
    if (!j.is_object()) bad(gridPath, "not a JSON object");
    static const std::set<std::string> known = {"model", "methods", "formats", "seeds", "options", "variants", "comment"};
    for (const auto& [k, v] : j.items())
        if (!known.count(k)) bad(gridPath, "unknown key '" + k + "' (model, methods, formats, seeds, options, variants)");
    SweepGrid g;
    g.source = gridPath;
    g.model = !modelOverride.empty() ? modelOverride
              : j.contains("model") && j["model"].is_string() ? relativeTo(gridPath, j["model"].get<std::string>())
                                                               : "";
    if (g.model.empty()) bad(gridPath, "no model: give \"model\" in the grid or --model");
    if (!j.contains("methods")) bad(gridPath, "'methods' is missing (e.g. [\"rtn\", \"mr-gptq\", \"latmix-lu\"])");
    const auto methods = stringList(j, "methods", gridPath, {});
    const auto formats = stringList(j, "formats", gridPath, {"mxfp4"});
    std::vector<std::uint64_t> seeds = {0};
    if (j.contains("seeds")) {
        if (!j["seeds"].is_array() || j["seeds"].empty()) bad(gridPath, "'seeds' must be a non-empty list");
        seeds.clear();
        for (const auto& s : j["seeds"]) {
            if (!s.is_number_unsigned()) bad(gridPath, "'seeds' holds " + s.dump() + ", not a non-negative integer");
            seeds.push_back(s.get<std::uint64_t>());
        }
    }
    const json options = j.contains("options") ? j["options"] : json::object();
    if (!options.is_object()) bad(gridPath, "'options' must be an object");
    std::vector<json> variants = {json::object()};
    if (j.contains("variants")) {
        if (!j["variants"].is_array() || j["variants"].empty()) bad(gridPath, "'variants' must be a non-empty list");
        variants.assign(j["variants"].begin(), j["variants"].end());
    }
    std::set<std::string> names;
    for (const auto& method : methods)
        for (const auto& format : formats)
            for (const auto& variant : variants)
                for (const auto seed : seeds) {
                    SweepCell c;
                    c.method = method;
                    c.format = format;
                    c.seed = seed;
                    c.options.method = method;
                    try {
                        methodSpec(method);
                        c.options.format = mx::makeConfig(mx::parseFormat(format));
                    } catch (const std::exception& e) {
                        bad(gridPath, e.what());
                    }
                    c.options.seed = seed;
                    c.options.device = "auto";
                    for (const auto& [k, v] : options.items()) applyOption(c, k, v, gridPath);
                    if (!variant.is_object()) bad(gridPath, "a variant must be an object with a \"name\"");
                    for (const auto& [k, v] : variant.items()) {
                        if (k == "name") {
                            if (!v.is_string() || v.get<std::string>().empty()) bad(gridPath, "a variant's \"name\" must be a text");
                            c.variant = v.get<std::string>();
                        } else {
                            applyOption(c, k, v, gridPath);
                        }
                    }
                    if (variants.size() > 1 && c.variant.empty()) bad(gridPath, "every variant needs a \"name\"");
                    try {
                        c.options.format.validate();
                        runMethod(c.options); // unknown kinds and inits, named
                        if (!c.options.evalTaskNames.empty()) eval::parseTaskList(c.options.evalTaskNames);
                    } catch (const std::exception& e) {
                        bad(gridPath, e.what());
                    }
                    // The variant's name in the folder: letters and digits, lower case, each run of
                    // anything else one '-' ("Learned orth. + bias, block" -> learned-orth-bias-block).
                    std::string variantTag;
                    for (char ch : c.variant) {
                        if (std::isalnum(static_cast<unsigned char>(ch)))
                            variantTag += char(std::tolower(static_cast<unsigned char>(ch)));
                        else if (!variantTag.empty() && variantTag.back() != '-')
                            variantTag += '-';
                    }
                    while (!variantTag.empty() && variantTag.back() == '-') variantTag.pop_back();
                    c.name = method + "-" + format + (variantTag.empty() ? "" : "-" + variantTag) + "-s" + std::to_string(seed);
                    if (!names.insert(c.name).second) bad(gridPath, "two cells would share the folder " + c.name);
                    g.cells.push_back(std::move(c));
                }
    return g;
}

SweepRecord readSweepRecord(const SweepCell& cell, const std::string& latmixJson) {
    RunSummary s;
    try {
        s = readRunSummary(fs::path(latmixJson).parent_path().string());
    } catch (const std::runtime_error& e) {
        throw std::runtime_error(std::string(e.what()) + " (or remove the cell's folder to run it again)");
    }
    SweepRecord r;
    r.name = cell.name;
    r.method = cell.method;
    r.format = cell.format;
    r.variant = cell.variant;
    r.seed = cell.seed;
    r.run = std::move(s);
    return r;
}

SweepResult runSweep(const SweepGrid& grid, const std::string& outDir, JobContext& job,
                     const std::function<void(int, const SweepCell&, bool)>& onCell) {
    fs::create_directories(fs::path(outDir) / "cells");
    SweepResult result;
    const int n = static_cast<int>(grid.cells.size());
    const auto runDirOf = [&](const SweepCell& cell) { return (fs::path(outDir) / "cells" / cell.name).string(); };
    const auto recordOf = [&](const SweepCell& cell) { return (fs::path(runDirOf(cell)) / "latmix.json").string(); };
    // Every cell still to run is prepared before the first one starts (run/PrepareRun.h: its
    // checks, and an interrupted cell continued where its train.h5 stopped), the model opened once:
    // a cell that cannot run stops the sweep before any work, named. A finished cell (latmix.json,
    // written last and atomically) is read, not run.
    std::vector<std::optional<PreparedRun>> prepared(grid.cells.size());
    std::shared_ptr<const model::Checkpoint> checkpoint;
    for (std::size_t i = 0; i < grid.cells.size(); ++i) {
        const SweepCell& cell = grid.cells[i];
        if (fs::exists(recordOf(cell))) continue;
        if (!checkpoint) checkpoint = std::make_shared<const model::Checkpoint>(model::Checkpoint::load(grid.model));
        RunRequest request;
        request.runDir = runDirOf(cell);
        request.config = cell.options;
        request.config.calibSource = cell.calib;
        request.resume = ResumeRule::IfUnfinished;
        request.commandLine = "latmix sweep " + grid.source + " (cell " + cell.name + ")";
        try {
            prepared[i] = prepareRun(request, checkpoint);
        } catch (const std::invalid_argument& e) {
            throw std::invalid_argument("sweep cell " + cell.name + ": " + e.what());
        }
    }
    // Progress (and so the ETA the listener derives from it) covers the cells this call runs:
    // the cells a resumed sweep skips take no time, and counting them as done work made the ETA
    // of a sweep resumed at cell 6 of 8 about a third of the real one.
    const int toRun = static_cast<int>(std::count_if(prepared.begin(), prepared.end(), [](const auto& p) { return bool(p); }));
    // The inputs of the cells with the same calibration text, window length, evaluation and tasks,
    // read once.
    std::map<std::string, RunInputs> inputs;
    // The FP model's evaluation pass, recorded by the first cell that evaluates on these windows and
    // device and reused by the others (RunHooks::FpReference); its folder is removed with the map.
    std::map<std::tuple<int, int, std::string>, std::shared_ptr<RunHooks::FpReference>> fpReferences;
    int started = 0;
    auto writeTables = [&] {
        util::writeFileAtomically((fs::path(outDir) / "results.csv").string(), sweepCsv(result.records));
        util::writeFileAtomically((fs::path(outDir) / "results.md").string(), sweepMarkdown(result.records, n));
    };
    for (int i = 0; i < n; ++i) {
        const SweepCell& cell = grid.cells[static_cast<std::size_t>(i)];
        const auto& run = prepared[static_cast<std::size_t>(i)];
        if (onCell) onCell(i, cell, !run);
        if (run) {
            job.checkCancelled();
            const QuantizeOptions& o = run->options;
            RunHooks hooks;
            if (o.evalSeqLen > 0) {
                auto& ref = fpReferences[std::make_tuple(o.evalSeqLen, o.evalWindows, o.device)];
                if (!ref) {
                    ref = std::make_shared<RunHooks::FpReference>();
                    ref->spillDir = (fs::path(outDir) / ("fp-reference-" + std::to_string(fpReferences.size()) + ".partial")).string();
                }
                hooks.fpReference = ref;
            }
            const std::string key = o.calibSource + "\n" + o.evalSource + "\n" + std::to_string(o.seqLen) + "\n" +
                                    o.evalTaskNames + "\n" + std::to_string(o.evalLimit);
            if (!inputs.count(key)) inputs[key] = loadRunInputs(*run);
            const double begin = double(started) / std::max(toRun, 1), end = double(started + 1) / std::max(toRun, 1);
            SubJob sub(job, std::min(begin, 1.0), std::min(end, 1.0), cell.name + ": ");
            runQuantize(*run, inputs[key], sub, hooks);
            ++started;
            ++result.ran;
        } else {
            ++result.skipped;
        }
        result.records.push_back(readSweepRecord(cell, recordOf(cell)));
        writeTables();
        job.progress(toRun > 0 ? std::min(double(started) / toRun, 1.0) : double(i + 1) / n, "cell " + std::to_string(i + 1) + "/" + std::to_string(n) + " " + cell.name);
    }
    writeTables();
    return result;
}

namespace {

// The results a sweep's tables give per cell, as the runs table names them (run/RunColumns.h).
const std::vector<std::string>& sweepColumns() {
    static const std::vector<std::string> keys = {"w4a4_ppl",      "kl_mean",          "kl_p99",          "top1_agreement",
                                                  "weights_only_ppl", "fp_ppl",        "folded_fp_ppl",   "final_objective",
                                                  "zeroshot_average", "bits_per_weight", "train_seconds", "total_seconds"};
    return keys;
}

} // namespace

std::string sweepCsv(const std::vector<SweepRecord>& records) {
    std::ostringstream s;
    s << "cell,method,format,variant,seed";
    for (const auto& key : sweepColumns()) s << "," << key;
    s << "\n";
    for (const auto& r : records) {
        s << r.name << "," << r.method << "," << r.format << ",\"" << r.variant << "\"," << r.seed;
        for (const auto& key : sweepColumns()) {
            const auto v = runColumn(key).number(r.run);
            s << "," << (v ? util::exactNumber(*v) : std::string());
        }
        s << "\n";
    }
    return s.str();
}

std::string sweepMarkdown(const std::vector<SweepRecord>& records, int cellsInGrid) {
    // Rows: method x format x variant in the order first seen; each column's values over the seeds
    // (absent ones left out), shown as the runs table shows them (scale, digits).
    const auto& keys = sweepColumns();
    struct Row {
        std::string method, format, variant;
        int seeds = 0;
        std::vector<std::vector<double>> values; // per sweep column
    };
    std::vector<Row> rows;
    for (const auto& r : records) {
        auto it = std::find_if(rows.begin(), rows.end(), [&](const Row& x) {
            return x.method == r.method && x.format == r.format && x.variant == r.variant;
        });
        if (it == rows.end()) {
            rows.push_back({r.method, r.format, r.variant, 0, std::vector<std::vector<double>>(keys.size())});
            it = rows.end() - 1;
        }
        ++it->seeds;
        for (std::size_t k = 0; k < keys.size(); ++k) {
            const RunColumn& c = runColumn(keys[k]);
            if (const auto v = c.number(r.run)) it->values[k].push_back(*v * c.scale);
        }
    }
    const std::size_t quantized = std::size_t(std::find(keys.begin(), keys.end(), "w4a4_ppl") - keys.begin());
    bool variants = false;
    for (const auto& r : rows) variants = variants || !r.variant.empty();
    std::vector<std::string> formats;
    for (const auto& r : rows) formats.push_back(r.format);
    std::ostringstream s;
    s << "| method | format |" << (variants ? " variant |" : "") << " seeds |";
    std::string rule = "|---|---|" + std::string(variants ? "---|" : "") + "---:|";
    for (std::size_t k = 0; k < keys.size(); ++k) {
        const RunColumn& c = runColumn(keys[k]);
        s << " " << (k == quantized ? mx::precisionLabel(formats) + " ppl" : c.label) << " |" << (k == quantized ? " vs best |" : "");
        rule += k == quantized ? "---:|---|" : "---:|";
    }
    s << "\n" << rule << "\n";
    for (const auto& r : rows) {
        // The best quantized perplexity among the rows of this format (and variant set), and whether
        // this row is it or within noise of it.
        const auto& mine = r.values[quantized];
        const Row* best = nullptr;
        for (const auto& x : rows)
            if (x.format == r.format && !x.values[quantized].empty() &&
                (!best || util::mean(x.values[quantized]) < util::mean(best->values[quantized])))
                best = &x;
        std::string vs;
        if (best && !mine.empty()) {
            const auto& theirs = best->values[quantized];
            if (best == &r) vs = "best";
            else if (std::abs(util::mean(mine) - util::mean(theirs)) <= stdOf(mine) + stdOf(theirs)) vs = "within noise";
        }
        s << "| " << r.method << " | " << r.format << " |" << (variants ? " " + r.variant + " |" : "") << " " << r.seeds << " |";
        for (std::size_t k = 0; k < keys.size(); ++k)
            s << " " << meanStd(r.values[k], runColumn(keys[k]).digits) << " |" << (k == quantized ? " " + vs + " |" : "");
        s << "\n";
    }
    s << "\n" << records.size() << " of " << cellsInGrid << " cells finished";
    s << (static_cast<int>(records.size()) < cellsInGrid ? " (the sweep was interrupted or is running: run it again to go on)" : "")
      << ". Mean ± sample standard deviation over seeds; \"within noise\": |difference to the best| <= the sum of "
         "their standard deviations. KL: mean KL(FP ‖ quantized) per token on the perplexity windows (nats); Top-1: the "
         "percentage of those tokens whose most likely next token is the FP model's; Bits: per weight, scales counted.\n";
    return s.str();
}

} // namespace latmix::run
