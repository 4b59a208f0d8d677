#pragma once
// One way to get a quantize run ready, for the three front ends that start one: `latmix quantize`
// (with --resume, --dry-run and each --nproc rank), the workbench's Calibration tab and every cell
// of `latmix sweep`. In order:
//   options    the RunConfig the front end built (flags, form controls, grid keys) and its rule
//              for a folder that holds a run;
//   preflight  every check of the options against the model (run/quantize/Preflight.h);
//   resume     what the run does with what its folder holds (resumeDecision);
//   inputs     the calibration and WikiText-2 test files found; loadRunInputs then reads and
//              tokenizes them and loads the zero-shot tasks (the workbench does that part on its
//              worker thread, a sweep once per distinct set);
// then runQuantize(prepared, inputs) runs the stages (run/QuantizeRun.h).
#include "run/QuantizeRun.h"

#include <memory>
#include <string>
#include <vector>

namespace latmix::run {

// What a run does with a run already in its folder (run/UnfinishedRun.h: finished, unfinished).
enum class ResumeRule {
    // `latmix quantize` without --resume: the run starts; an unfinished run there is refused
    // (claimRunFolder, naming --resume), a finished one is replaced.
    Never,
    // `latmix quantize --resume`: the run continues the unfinished run there, or the training of
    // a finished learned run; a folder with nothing to continue is refused (claimRunFolder).
    Asked,
    // The workbench and each cell of a sweep: an unfinished run of the same method and model
    // continues, an empty or absent folder starts; a finished run or an unfinished one of another
    // method or model is refused (a sweep never prepares its finished cells).
    IfUnfinished,
};

// Whether a run of `asked` on `modelDir` continues what runDir holds, by `rule`. Throws
// std::invalid_argument naming the folder, what it holds and the way out when Asked or
// IfUnfinished finds an unfinished run of another method or model, or IfUnfinished a finished
// run; RunRefused naming each option that changes the result (run/quantize/OptionTable.h) when the
// run it would continue recorded another value (run/UnfinishedRun.h, checkResumable): one rule for
// the CLI's --resume, the workbench and a sweep's cells. Never's refusal of an unfinished folder and Asked's of a folder with nothing to continue
// are claimRunFolder's, which the run calls holding the folder's lock (and which checks again).
bool resumeDecision(const std::string& runDir, const RunConfig& asked, const std::string& modelDir, ResumeRule rule);

// The calibSource of a run calibrated on the workbench's built-in text (resources/text/calibration.txt,
// compiled into the workbench), as latmix.json and the unfinished-run marker record it.
inline constexpr const char* kBuiltInCalibrationText = "built-in calibration text";

struct RunRequest {
    std::string modelDir;
    std::string runDir;
    // What the run is asked to do. calibSource: the calibration text file (empty: WikiText-2's
    // validation split in the data folder), or the label of calibText below.
    RunConfig config;
    ResumeRule resume = ResumeRule::Never;
    // The calibration text itself when it is no file (the workbench's built-in text).
    std::string calibText;
    std::string commandLine; // recorded in latmix.json and the unfinished-run marker
    // Estimate: preflight for `--dry-run` alone (no folder, no data files looked at).
    PreflightFor purpose = PreflightFor::Run;
};

struct PreparedRun {
    std::string runDir;
    ResolvedRun resolved;
    // The request's config with the resume decision, the files found (calibSource, evalSource) and
    // the command line; evalTasks stay empty until loadRunInputs.
    QuantizeOptions options;
    std::string calibText; // the request's calibration text, or empty: options.calibSource is read
};

// Throws what preflight and resumeDecision throw, or std::runtime_error naming a data file that
// is missing; writes nothing. `opened`: the model's checkpoint already open (a sweep's cells).
PreparedRun prepareRun(const RunRequest& request, std::shared_ptr<const model::Checkpoint> opened = nullptr);

// The run's data: the calibration text (SPEC §5: a training-side split, never the text perplexity
// is measured on) and, with evaluation windows, the WikiText-2 test text as SPEC §7 builds it,
// tokenized with the model folder's tokenizer, and the zero-shot tasks loaded from the data
// folder. Throws std::runtime_error naming the file that cannot be read, or when the calibration
// text is shorter than one window.
struct RunInputs {
    std::vector<int> calibIds, evalIds;
    std::vector<eval::ZeroShotTask> tasks;
};
RunInputs loadRunInputs(const PreparedRun& run);

// The stages of a prepared run (runQuantize above, with the inputs' tasks).
QuantizeResult runQuantize(const PreparedRun& run, const RunInputs& inputs, JobContext& job = silentJob(),
                           const RunHooks& hooks = {});

} // namespace latmix::run
