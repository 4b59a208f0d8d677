#pragma once
// The marker of a run folder whose writing has not finished: RUN_DIR/unfinished.json.
//
// `latmix quantize` (and the workbench's Calibration, which runs the same code) writes it as soon
// as it owns the folder, rewrites it at each stage and removes it only after latmix.json, which
// is written last and atomically. So a folder is in one of three states, whatever moment a
// process was killed at (kill -9, power loss, an error):
//   - finished: latmix.json, no marker (a marker beside latmix.json is a leftover of a kill
//     between the two and means nothing);
//   - unfinished: the marker and no latmix.json: a run in progress or one that stopped; its
//     train.h5 holds every finished checkpoint, and `--resume` continues it;
//   - neither: not a run.
// Nothing without latmix.json looks finished to a reader (the runs catalog, export, the
// workbench); nothing with the marker is started over by mistake: a new run without --resume
// refuses the folder (its training would be lost); --resume refuses an unfinished run of another
// method or model, and a folder with nothing to resume.
#include <string>

namespace latmix::run {

struct UnfinishedRun {
    std::string command;      // the command line that writes the run
    std::string method;       // --method
    std::string model;        // the source model folder
    std::string host, started; // who started it: host name, ISO 8601 UTC time
    long long pid = 0;
    std::string stage;        // what it was doing when last seen: "training", "folding", ...
    // The run's options as latmix.json's "options" records them (run/quantize/OptionTable.h),
    // JSON text: what `latmix quantize --resume RUN_DIR` continues with. Empty in markers
    // written before 2026-11-27.
    std::string options;
};

// RUN_DIR/unfinished.json
std::string unfinishedMarkerPath(const std::string& runDir);
bool hasUnfinishedMarker(const std::string& runDir);
// Throws std::runtime_error naming the file when it cannot be read or parsed.
UnfinishedRun readUnfinishedRun(const std::string& runDir);
// Written atomically (util::writeFileAtomically).
void writeUnfinishedMarker(const std::string& runDir, const UnfinishedRun& run);
void removeUnfinishedMarker(const std::string& runDir);

// One line for messages: "'RUN' is an unfinished run of latmix-lu on MODEL (`command`, pid P on
// host H, started T), last seen at: training (500 steps); its train.h5 keeps the last
// checkpoint". The marker must exist; a damaged one is said, not thrown.
std::string describeUnfinishedRun(const std::string& runDir);

// What a run folder recorded of its run, which a resumed run continues: the unfinished-run
// marker's options and model, or latmix.json's for a finished run (whose training may go on).
struct RecordedRun {
    std::string file;    // the file read; empty when the folder has neither
    bool finished = false; // latmix.json
    std::string method, model;
    std::string options; // JSON text; empty where the file predates recorded options (2026-11-27)
};
// Throws std::runtime_error naming the file when it cannot be read or parsed.
RecordedRun recordedRun(const std::string& runDir);

// Refuses continuing the run recorded in runDir (recordedRun) with a run of `method` and `asked`
// (JSON text of latmix.json's "options" form, run::configJson; empty: method and model alone) on
// `model`: std::invalid_argument naming the run and its own
// method and model when either differs, then run::RunRefused naming every option that changes the
// result and differs from the record, with both values (refuseChangedOptions). Nothing recorded:
// nothing refused. Throws like recordedRun.
void checkResumable(const std::string& runDir, const std::string& method, const std::string& asked,
                    const std::string& model);

// What a run about to write runDir does with what it finds there (the root rank, holding the
// folder's lock): refuses, as std::invalid_argument naming the folder, the state and the way out,
//   - a folder with the marker (and no latmix.json), unless resuming it (checkResumable: the same
//     method, model and options that change the result);
//   - resuming a folder without train.h5 that has no marker (a finished learned run may be
//     resumed: its training goes on with more steps);
// then removes a finished run's latmix.json that the new run replaces (the folder is unfinished
// from here on) and writes the marker at stage "starting".
void claimRunFolder(const std::string& runDir, const UnfinishedRun& run, bool resume);

} // namespace latmix::run
