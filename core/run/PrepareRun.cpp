#include "run/PrepareRun.h"

#include "eval/Perplexity.h"
#include "eval/ZeroShotTasks.h"
#include "run/UnfinishedRun.h"
#include "run/quantize/OptionTable.h"
#include "tokenizer/Tokenizer.h"
#include "util/AtomicFile.h"
#include "util/DataPath.h"
#include "util/Text.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <stdexcept>

namespace latmix::run {

namespace fs = std::filesystem;

bool resumeDecision(const std::string& runDir, const RunConfig& asked, const std::string& modelDir, ResumeRule rule) {
    if (rule == ResumeRule::Never) return false;
    std::error_code ec;
    const bool finished = fs::is_regular_file(fs::path(runDir) / "latmix.json", ec);
    const bool unfinished = !finished && hasUnfinishedMarker(runDir);
    if (finished && rule == ResumeRule::IfUnfinished)
        throw std::invalid_argument("'" + runDir + "' already holds a finished run (latmix.json): choose another run folder");
    // An unfinished run continues with its own method, model and options only, whoever asks; a
    // finished one's training goes on (--resume) under the same rule.
    if (unfinished || finished) checkResumable(runDir, asked.method, configJson(asked).dump(), modelDir);
    if (unfinished || rule == ResumeRule::Asked) return true;
    // A train.h5 without the marker and latmix.json: a run whose marker was removed by hand, or a
    // sweep cell of a version that wrote none; its checkpoints are kept.
    return fs::is_regular_file(fs::path(runDir) / "train.h5", ec);
}

PreparedRun prepareRun(const RunRequest& request, std::shared_ptr<const model::Checkpoint> opened) {
    PreparedRun p;
    p.runDir = request.runDir;
    static_cast<RunConfig&>(p.options) = request.config;
    p.options.commandLine = request.commandLine;
    p.resolved = opened ? preflight(std::move(opened), p.options, request.purpose)
                        : preflight(request.modelDir, p.options, request.purpose);
    if (request.purpose == PreflightFor::Estimate) return p;
    if (request.runDir.empty()) throw std::invalid_argument("no run folder to write the run into");
    p.options.resume = resumeDecision(request.runDir, p.options, p.resolved.modelDir, request.resume);
    // SPEC §5: calibrate on a training-side split, never on the test text perplexity uses.
    p.calibText = request.calibText;
    if (p.calibText.empty() && request.config.calibSource == kBuiltInCalibrationText)
        throw std::invalid_argument("the run in '" + request.runDir + "' is calibrated on the workbench's " +
                                    kBuiltInCalibrationText + ", which only the workbench holds: continue it there, or "
                                    "give the same text as a file (--calib resources/text/calibration.txt of the sources)");
    if (p.calibText.empty()) p.options.calibSource = util::calibrationTextFile(request.config.calibSource);
    // The evaluation text given (the workbench's chooser), else WikiText-2's test split in the data folder.
    if (p.options.evalSeqLen > 0 && p.options.evalSource.empty()) p.options.evalSource = util::wikiText2TestFile();
    if (p.options.evalSeqLen > 0 && !fs::is_regular_file(p.options.evalSource))
        throw std::runtime_error("evaluation text '" + p.options.evalSource + "' is missing or not a file");
    if (!p.options.evalTaskNames.empty()) eval::parseTaskList(p.options.evalTaskNames); // unknown names, before any work
    return p;
}

RunInputs loadRunInputs(const PreparedRun& run) {
    const QuantizeOptions& o = run.options;
    const std::string text = !run.calibText.empty() ? run.calibText : util::readTextFile(o.calibSource, "calibration text");
    const auto tok = tokenizer::Tokenizer::loadFromDir(run.resolved.modelDir);
    RunInputs in;
    in.calibIds = tok->encode(text, false);
    if (in.calibIds.size() < static_cast<std::size_t>(o.seqLen) + 1)
        throw std::runtime_error("the calibration text has " + std::to_string(in.calibIds.size()) +
                                 " tokens, fewer than one window of " + std::to_string(o.seqLen) +
                                 "; choose a longer text or a shorter window length");
    // SPEC §7's evaluation text, as `latmix eval` builds it.
    if (!o.evalSource.empty()) in.evalIds = eval::tokenizeForEvaluation(*tok, eval::wikiText2TestText(o.evalSource));
    if (!o.evalTaskNames.empty()) in.tasks = eval::loadZeroShotTasks(o.evalTaskNames, util::dataDir(), o.evalLimit);
    return in;
}

QuantizeResult runQuantize(const PreparedRun& run, const RunInputs& inputs, JobContext& job, const RunHooks& hooks) {
    QuantizeOptions o = run.options;
    o.evalTasks = inputs.tasks;
    return runQuantize(run.resolved, inputs.calibIds, inputs.evalIds, run.runDir, o, job, hooks);
}

} // namespace latmix::run
