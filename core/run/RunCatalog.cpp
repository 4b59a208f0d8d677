#include "run/RunCatalog.h"

#include "mx/MxFormat.h"
#include "quant/BitBudget.h"
#include "run/UnfinishedRun.h"
#include "run/quantize/OptionTable.h"
#include "util/AtomicFile.h"
#include "util/Text.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>
#include <stdexcept>
#include <system_error>

namespace latmix::run {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json; // keeps latmix.json's order (zero-shot tasks)

// Typed access to latmix.json's fields; a field of the wrong type throws naming the file, the
// field and what was expected. Absent fields and null (a NaN written by nlohmann) read as absent.
class Fields {
public:
    explicit Fields(std::string file) : m_file(std::move(file)) {}

    [[noreturn]] void wrong(const std::string& key, const json& v, const char* expected) const {
        throw std::runtime_error(m_file + ": \"" + key + "\" is " + v.type_name() + " " + v.dump().substr(0, 60) +
                                 ", not " + expected +
                                 "; the file was not written by `latmix quantize` or was edited: run the run again");
    }
    static const json* find(const json& obj, const char* key) {
        if (!obj.is_object()) return nullptr;
        auto it = obj.find(key);
        return it == obj.end() || it->is_null() ? nullptr : &*it;
    }
    const json* object(const json& obj, const char* key) const {
        const json* v = find(obj, key);
        if (v && !v->is_object()) wrong(key, *v, "an object");
        return v;
    }
    std::string text(const json& obj, const char* key, const std::string& where = {}) const {
        const json* v = find(obj, key);
        if (!v) return {};
        if (!v->is_string()) wrong(where + key, *v, "a string");
        return v->get<std::string>();
    }
    double number(const json* obj, const char* key, double absent, const std::string& where = {}) const {
        const json* v = obj ? find(*obj, key) : nullptr;
        if (!v) return absent;
        if (!v->is_number()) wrong(where + key, *v, "a number");
        return v->get<double>();
    }
    std::int64_t integer(const json* obj, const char* key, std::int64_t absent, const std::string& where = {}) const {
        const json* v = obj ? find(*obj, key) : nullptr;
        if (!v) return absent;
        if (!v->is_number_integer() ||
            (v->is_number_unsigned() && v->get<std::uint64_t>() > std::uint64_t(std::numeric_limits<std::int64_t>::max())))
            wrong(where + key, *v, "an integer");
        return v->get<std::int64_t>();
    }
    // A count or size held as int: an integer from 0 to 2^31 - 1 (a larger one would wrap).
    int count(const json* obj, const char* key, const std::string& where = {}) const {
        const std::int64_t n = integer(obj, key, 0, where);
        if (n < 0 || n > std::numeric_limits<int>::max())
            wrong(where + key, *find(*obj, key), "an integer from 0 to 2147483647");
        return static_cast<int>(n);
    }

private:
    std::string m_file;
};

// A perplexity as the summary holds it: 0 when absent, not finite or not positive (latmix.json
// writes folded_fp 0 for methods without transforms).
double perplexityOf(double v) { return std::isfinite(v) && v > 0 ? v : 0.0; }

bool hidden(const std::string& name) {
    return name.empty() || name[0] == '.' ||
           (name.size() > 8 && name.compare(name.size() - 8, 8, ".partial") == 0);
}

void scanFolder(const fs::path& dir, int depth, int maxDepth, std::set<fs::path>& visited,
                std::vector<RunSummary>& runs, std::vector<std::string>* problems) {
    std::error_code ec;
    const fs::path real = fs::canonical(dir, ec);
    if (ec || !visited.insert(real).second) return; // a symbolic link back to a folder seen already
    if (fs::is_regular_file(dir / "latmix.json", ec)) {
        try {
            runs.push_back(readRunSummary(dir.string()));
        } catch (const std::exception& e) {
            if (problems) problems->push_back(e.what());
        }
    } else if (problems && hasUnfinishedMarker(dir.string())) {
        // Listed, not summarised: it has no results until it finishes (run/UnfinishedRun.h).
        problems->push_back(describeUnfinishedRun(dir.string()) + "; no results until it finishes (--resume)");
    }
    if (depth >= maxDepth) return;
    std::vector<fs::path> children;
    fs::directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec);
    if (ec) {
        if (problems) problems->push_back(dir.string() + ": cannot list the folder (" + ec.message() + ")");
        return;
    }
    for (const fs::directory_iterator end; it != end; it.increment(ec)) {
        if (ec) break;
        const std::string name = it->path().filename().string();
        if (name == "model" || hidden(name)) continue; // a run's model folder, temporary folders
        std::error_code e2;
        if (it->is_directory(e2)) children.push_back(it->path()); // follows links; loops stop at `visited`
    }
    if (ec && problems) problems->push_back(dir.string() + ": cannot list the folder (" + ec.message() + ")");
    std::sort(children.begin(), children.end());
    for (const auto& c : children) scanFolder(c, depth + 1, maxDepth, visited, runs, problems);
}

// latmix.json's "zeroshot": the average and each task's scores, in the file's order.
void readZeroShot(const Fields& f, const json& z, RunSummary& s) {
    s.zeroShotAverage = f.number(&z, "average", -1.0, "zeroshot.");
    const json* tasks = f.object(z, "tasks");
    if (!tasks) return;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    for (const auto& [name, t] : tasks->items()) {
        const std::string where = "zeroshot.tasks." + name + ".";
        if (!t.is_object()) f.wrong(where.substr(0, where.size() - 1), t, "an object");
        ZeroShotScore score;
        score.task = name;
        score.n = f.count(&t, "n", where);
        score.acc = f.number(&t, "acc", nan, where);
        score.accNorm = f.number(&t, "acc_norm", nan, where);
        score.perplexity = f.number(&t, "perplexity", nan, where);
        s.zeroShot.push_back(std::move(score));
    }
}

// latmix.json's "linears": each quantized linear's relative error, layer by layer.
void readLinears(const Fields& f, const json& linears, RunSummary& s) {
    if (!linears.is_array()) f.wrong("linears", linears, "a list");
    for (std::size_t i = 0; i < linears.size(); ++i) {
        const json& L = linears[i];
        const std::string where = "linears[" + std::to_string(i) + "].";
        if (!L.is_object()) f.wrong(where.substr(0, where.size() - 1), L, "an object");
        LinearError e;
        e.layer = f.count(&L, "layer", where);
        e.linear = f.text(L, "linear", where);
        e.relativeError = f.number(&L, "relative_error", std::numeric_limits<double>::quiet_NaN(), where);
        e.kept = L.contains("algorithm") && L["algorithm"].is_string() && L["algorithm"].get<std::string>() == "kept in bf16";
        s.linears.push_back(std::move(e));
    }
}

} // namespace

std::string RunSummary::latmixJson() const { return (fs::path(dir) / "latmix.json").string(); }
std::string RunSummary::trainFile() const { return (fs::path(dir) / "train.h5").string(); }

bool RunSummary::hasValue(double v, bool nonNegative) { return std::isfinite(v) && (nonNegative ? v >= 0 : v > 0); }

RunSummary readRunSummary(const std::string& runDir) {
    const std::string file = (fs::path(runDir) / "latmix.json").string();
    std::error_code ec;
    if (!fs::is_regular_file(file, ec))
        throw std::runtime_error(file + ": missing; " +
                                 (fs::is_directory(runDir, ec) ? "'" + runDir + "' is not a run folder"
                                                               : "the folder '" + runDir + "' does not exist") +
                                 " (give a folder written by `latmix quantize --out` or a sweep's OUT/cells/<cell>)");
    json j;
    try {
        j = json::parse(util::readTextFile(file, "run record"));
    } catch (const json::exception& e) {
        throw std::runtime_error(file + ": not JSON (" + e.what() + "); the run was interrupted or the file edited: "
                                 "run it again");
    }
    const Fields f(file);
    if (!j.is_object()) f.wrong("(the file)", j, "an object");

    RunSummary s;
    s.dir = runDir;
    s.method = f.text(j, "method");
    if (s.method.empty())
        throw std::runtime_error(file + ": no \"method\"; not a run record of `latmix quantize`: run the run again");
    s.methodDescription = f.text(j, "method_description");
    s.created = f.text(j, "created");
    s.command = f.text(j, "command");
    s.model = f.text(j, "model");
    s.device = f.text(j, "device");
    s.latmixVersion = f.text(j, "latmix_version");
    s.libtorchVersion = f.text(j, "libtorch_version");
    const std::int64_t seed = f.integer(&j, "seed", 0);
    if (seed < 0) f.wrong("seed", j["seed"], "a non-negative integer");
    s.seed = static_cast<std::uint64_t>(seed);

    if (const json* opts = f.object(j, "options")) {
        try {
            s.options = configFromJson(*opts, RunConfig{}, "\"options\"");
        } catch (const std::invalid_argument& e) {
            throw std::runtime_error(file + ": " + e.what() + "; written by another version of latmix? run it again");
        }
    }
    if (const json* fmt = f.object(j, "format")) {
        s.format = f.text(*fmt, "format", "format.");
        s.block = f.count(fmt, "block", "format.");
        s.scaleMode = f.text(*fmt, "scale_mode", "format.");
    }
    if (const json* wq = f.object(j, "weight_quantization"))
        if (const json* scheme = f.object(*wq, "scheme")) {
            s.scheme = f.text(*scheme, "rules", "weight_quantization.scheme.");
            s.bitsPerWeight = f.number(scheme, "bits_per_weight", 0.0, "weight_quantization.scheme.");
        }
    if (s.bitsPerWeight == 0 && !s.format.empty()) {
        try {
            mx::MxConfig c = mx::makeConfig(mx::parseFormat(s.format));
            if (s.block > 0) c.blockSize = s.block;
            s.bitsPerWeight = quant::bitsPerWeight(c);
        } catch (const std::exception&) {
            // a format this version does not know: no bits, the rest of the record still reads
        }
    }
    if (const json* t = f.object(j, "training")) {
        s.steps = f.count(t, "steps", "training.");
        // "first_kl" / "final_kl" in runs recorded before the objective got its own name.
        const bool renamed = t->contains("final_objective");
        s.firstObjective = f.number(t, renamed ? "first_objective" : "first_kl", -1.0, "training.");
        s.finalObjective = f.number(t, renamed ? "final_objective" : "final_kl", -1.0, "training.");
    }
    if (const json* p = f.object(j, "perplexity")) {
        s.fpPerplexity = perplexityOf(f.number(p, "fp", 0.0, "perplexity."));
        s.w4a4Perplexity = perplexityOf(f.number(p, "w4a4", 0.0, "perplexity."));
        s.foldedFpPerplexity = perplexityOf(f.number(p, "folded_fp", 0.0, "perplexity."));
        s.weightsOnlyPerplexity = perplexityOf(f.number(p, "weights_only", 0.0, "perplexity."));
        s.evalSeqLen = f.count(p, "seqlen", "perplexity.");
        s.evalWindows = f.count(p, "windows", "perplexity.");
        if (const json* k = f.object(*p, "kl")) {
            s.kl.tokens = f.count(k, "tokens", "perplexity.kl.");
            s.kl.mean = f.number(k, "mean", 0.0, "perplexity.kl.");
            s.kl.stdErr = f.number(k, "stderr", 0.0, "perplexity.kl.");
            s.kl.p99 = f.number(k, "p99", 0.0, "perplexity.kl.");
            s.kl.top1 = f.number(k, "top1_agreement", 0.0, "perplexity.kl.");
            s.kl.top1StdErr = f.number(k, "top1_stderr", 0.0, "perplexity.kl.");
            s.kl.deltaPpl = f.number(k, "delta_ppl", 0.0, "perplexity.kl.");
            s.kl.deltaPplStdErr = f.number(k, "delta_ppl_stderr", 0.0, "perplexity.kl.");
        }
    }
    if (s.fpPerplexity > 0 && s.w4a4Perplexity > 0) s.recovery = s.fpPerplexity / s.w4a4Perplexity;
    if (const json* z = f.object(j, "zeroshot")) readZeroShot(f, *z, s);
    if (const json* sec = f.object(j, "seconds")) {
        s.trainSeconds = f.number(sec, "train", 0.0, "seconds.");
        s.totalSeconds = f.number(sec, "total", 0.0, "seconds.");
    }
    if (const json* linears = Fields::find(j, "linears")) readLinears(f, *linears, s);
    s.hasTrainSeries = fs::is_regular_file(fs::path(runDir) / "train.h5", ec);
    return s;
}

std::string modelFolderOf(const std::string& runOrModel) {
    std::error_code ec;
    const fs::path run(runOrModel);
    if (fs::is_regular_file(run / "latmix.json", ec) && fs::is_regular_file(run / "model" / "config.json", ec))
        return (run / "model").string();
    return runOrModel;
}

std::vector<RunSummary> scanRuns(const std::string& root, std::vector<std::string>* problems, int maxDepth) {
    std::error_code ec;
    if (!fs::is_directory(root, ec))
        throw std::invalid_argument("'" + root + "' is not a folder; give the folder that holds the run folders "
                                    "(e.g. runs/ or a sweep's OUT)");
    std::vector<RunSummary> runs;
    std::set<fs::path> visited;
    scanFolder(fs::path(root), 0, maxDepth, visited, runs, problems);
    std::sort(runs.begin(), runs.end(), [](const RunSummary& a, const RunSummary& b) { return a.dir < b.dir; });
    return runs;
}

std::string precisionLabel(const std::vector<RunSummary>& runs) {
    std::vector<std::string> formats;
    for (const auto& r : runs) formats.push_back(r.format);
    return mx::precisionLabel(formats);
}

} // namespace latmix::run
