#include "run/UnfinishedRun.h"

#include "run/quantize/OptionTable.h"
#include "util/AtomicFile.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <stdexcept>

namespace latmix::run {
namespace fs = std::filesystem;
using json = nlohmann::json;

std::string unfinishedMarkerPath(const std::string& runDir) { return (fs::path(runDir) / "unfinished.json").string(); }

bool hasUnfinishedMarker(const std::string& runDir) {
    std::error_code ec;
    return fs::is_regular_file(unfinishedMarkerPath(runDir), ec);
}

UnfinishedRun readUnfinishedRun(const std::string& runDir) {
    const std::string path = unfinishedMarkerPath(runDir);
    const std::string text = util::readTextFile(path, "unfinished-run marker");
    try {
        const json j = json::parse(text);
        UnfinishedRun r;
        auto str = [&](const char* key) { return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : ""; };
        r.command = str("command");
        r.method = str("method");
        r.model = str("model");
        r.host = str("host");
        r.started = str("started");
        r.stage = str("stage");
        if (j.contains("options") && j["options"].is_object()) r.options = j["options"].dump();
        if (j.contains("pid") && j["pid"].is_number_integer()) r.pid = j["pid"].get<long long>();
        if (r.method.empty()) throw std::runtime_error("no \"method\"");
        return r;
    } catch (const std::exception& e) {
        throw std::runtime_error(path + ": not an unfinished-run marker (" + e.what() + ")");
    }
}

void writeUnfinishedMarker(const std::string& runDir, const UnfinishedRun& r) {
    nlohmann::ordered_json j = {
        {"what", "latmix run in progress or stopped before the end; latmix.json appears when it finishes"},
        {"command", r.command}, {"method", r.method},   {"model", r.model}, {"host", r.host},
        {"pid", r.pid},         {"started", r.started}, {"stage", r.stage}};
    if (!r.options.empty()) j["options"] = nlohmann::ordered_json::parse(r.options);
    util::writeFileAtomically(unfinishedMarkerPath(runDir), j.dump(2) + "\n");
}

void removeUnfinishedMarker(const std::string& runDir) {
    std::error_code ec;
    fs::remove(unfinishedMarkerPath(runDir), ec);
}

std::string describeUnfinishedRun(const std::string& runDir) {
    UnfinishedRun r;
    try {
        r = readUnfinishedRun(runDir);
    } catch (const std::exception& e) {
        return "'" + runDir + "' is an unfinished run (" + e.what() + ")";
    }
    std::string s = "'" + runDir + "' is an unfinished run of " + r.method + (r.model.empty() ? "" : " on " + r.model) +
                    " (`" + r.command + "`, pid " + std::to_string(r.pid) + " on host " + r.host + ", started " +
                    r.started + "), last seen at: " + r.stage;
    // train.h5 is not read here (a catalog scan describes every unfinished folder, and a large
    // model's training state is gigabytes): its presence says there is a checkpoint.
    std::error_code ec;
    if (fs::is_regular_file(fs::path(runDir) / "train.h5", ec)) s += "; its train.h5 keeps the last checkpoint";
    return s;
}

RecordedRun recordedRun(const std::string& runDir) {
    RecordedRun r;
    std::error_code ec;
    const fs::path record = fs::path(runDir) / "latmix.json";
    // A marker beside latmix.json is a leftover of a kill between writing the one and removing the
    // other: the run finished.
    if (fs::is_regular_file(record, ec)) {
        r.file = record.string();
        r.finished = true;
        try {
            const json j = json::parse(util::readTextFile(r.file, "run record"));
            auto str = [&](const char* key) { return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : ""; };
            r.method = str("method");
            r.model = str("model");
            if (j.contains("options") && j["options"].is_object()) r.options = j["options"].dump();
        } catch (const json::exception& e) {
            throw std::runtime_error(r.file + ": not a run record (" + e.what() + ")");
        }
    } else if (hasUnfinishedMarker(runDir)) {
        const UnfinishedRun u = readUnfinishedRun(runDir);
        r.file = unfinishedMarkerPath(runDir);
        r.method = u.method;
        r.model = u.model;
        r.options = u.options;
    }
    return r;
}

void checkResumable(const std::string& runDir, const std::string& method, const std::string& asked,
                    const std::string& model) {
    const RecordedRun old = recordedRun(runDir);
    if (old.file.empty()) return;
    const std::string what = old.finished ? "'" + runDir + "' holds a finished run of " + old.method +
                                                (old.model.empty() ? "" : " on " + old.model)
                                          : describeUnfinishedRun(runDir);
    const auto same = [&](const std::string& a, const std::string& b) {
        std::error_code e1, e2;
        return a.empty() || b.empty() || fs::weakly_canonical(a, e1) == fs::weakly_canonical(b, e2);
    };
    if (old.method != method || !same(old.model, model))
        throw std::invalid_argument(what + "; it continues only with its own method (" + old.method + ") and model (" +
                                    old.model + "), not " + method + " on " + model +
                                    ": choose its method to continue it, or another run folder");
    if (!old.options.empty() && !asked.empty())
        refuseChangedOptions(what, nlohmann::ordered_json::parse(old.options), nlohmann::ordered_json::parse(asked));
}

void claimRunFolder(const std::string& runDir, const UnfinishedRun& run, bool resume) {
    std::error_code ec;
    const std::string latmixJson = (fs::path(runDir) / "latmix.json").string();
    const bool finished = fs::is_regular_file(latmixJson, ec);
    const bool trained = fs::is_regular_file(fs::path(runDir) / "train.h5", ec);
    // A marker beside latmix.json is what a kill between writing the one and removing the other
    // leaves: the run finished.
    if (!finished && hasUnfinishedMarker(runDir)) {
        if (!resume)
            throw std::invalid_argument(describeUnfinishedRun(runDir) +
                                        ": continue it with --resume (and its options), or remove the folder to "
                                        "start over, or choose another run folder");
        checkResumable(runDir, run.method, run.options, run.model);
    } else if (resume && !trained) {
        // A finished learned run may be resumed with more steps (its train.h5 continues).
        throw std::invalid_argument("'" + runDir + "' " +
                                    (finished ? std::string("holds a finished run of a method that trains nothing")
                                              : std::string("holds no run (no unfinished.json, no train.h5)")) +
                                    ": there is nothing to resume; run without --resume");
    }
    if (finished) fs::remove(latmixJson, ec); // replaced by this run's; until then the folder is unfinished
    UnfinishedRun mine = run;
    mine.stage = "starting";
    writeUnfinishedMarker(runDir, mine);
}

} // namespace latmix::run
