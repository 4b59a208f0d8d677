#pragma once
// The one table of a quantize run's options (RunConfig's fields): for each, the key it has in
// latmix.json's "options", a sweep grid, the workbench's settings and the run key; the CLI flag;
// the label of the workbench's control; its type and help. The CLI's flags, the sweep's keys,
// latmix.json, the unfinished-run marker (what `latmix quantize --resume RUN_DIR` reads), the run
// key and the messages that name an option for the CLI or for the workbench all come from here.
#include "run/quantize/QuantizeOptions.h"
#include "util/Remedy.h"

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <vector>

namespace latmix::run {

enum class OptionType {
    Text,    // JSON string
    Integer, // JSON integer
    Number,  // JSON number
    Flag,    // JSON true/false; a CLI flag without value
    OnOff,   // JSON true/false; on the CLI "on" / "off"
    OnOffAuto, // JSON true/false or "auto"; on the CLI "on" / "off" / "auto"
    List,    // JSON array of strings; on the CLI comma-separated
};

struct OptionField {
    const char* key;   // "t1_bias"
    const char* flag;  // "--t1-bias"
    const char* label; // "Learned T1 bias": the workbench's name for it
    OptionType type;
    const char* help;
    bool changesResult; // two runs that differ in it compute different things (the run key)
};

// Every option, in the order they are applied (format before block).
const std::vector<OptionField>& optionFields();
// Throws std::invalid_argument listing the keys.
const OptionField& optionField(const std::string& key);

nlohmann::ordered_json optionValue(const RunConfig& config, const std::string& key);
// Checks the value's type and range and sets it; throws std::invalid_argument naming the key
// (or `where` + the key) and what it must be.
void setOption(RunConfig& config, const std::string& key, const nlohmann::ordered_json& value, const std::string& where = "");
// A value typed on the CLI ("on", "32", "cuda:0,cuda:1") as the option's JSON value.
nlohmann::ordered_json optionFromText(const OptionField& field, const std::string& text);
// The value as the CLI reads it back ("off", "0.001"); "" for an empty text or list.
std::string optionText(const OptionField& field, const nlohmann::ordered_json& value);

// Every option of config, as latmix.json's "options" records it.
nlohmann::ordered_json configJson(const RunConfig& config);
// config with the options of j applied in the table's order; a key the table lacks throws.
RunConfig configFromJson(const nlohmann::ordered_json& j, RunConfig config = {}, const std::string& where = "");

// How an option and its value read in a message: "--t1-bias off" for the CLI, "Learned T1 bias:
// off" for the workbench.
enum class Face { Cli, Workbench };
std::string optionSetting(const std::string& key, const std::string& value, Face face);
std::string optionName(const std::string& key, Face face); // "--t1-bias" / "Learned T1 bias"
// The options of config that differ from RunConfig's defaults, in the table's order, each as
// optionSetting says it ("--steps 250" / "Steps: 250"): a run's settings in a line.
std::vector<std::string> changedSettings(const RunConfig& config, Face face);

// A way out of a refusal or a failure (util/Remedy.h): the CLI names the flag, the workbench the control.
using Remedy = util::Remedy;
std::string remedyText(const Remedy& remedy, Face face);
// An error as a face says it: a RunRefused or a util::RemediedError (out of memory, a diverging
// run) with its remedies in that face's words; any other exception's what().
std::string messageFor(const std::exception& error, Face face);

// A run refused before any work: what is wrong and the ways out as data, so that each face says
// them in its own words. what() is the CLI's message.
class RunRefused : public std::invalid_argument {
public:
    RunRefused(std::string cause, std::vector<Remedy> remedies, std::string afterRemedies = {},
               util::RemedyJoin join = util::RemedyJoin::AnyOf);
    // "<cause>; <remedy>, or <remedy>[; <afterRemedies>]"
    std::string message(Face face) const;
    const std::string& cause() const { return m_cause; }
    const std::vector<Remedy>& remedies() const { return m_remedies; }

private:
    std::string m_cause, m_after;
    std::vector<Remedy> m_remedies;
    util::RemedyJoin m_join;
};

// An option whose value a run asks for differs from the one a run folder recorded.
struct OptionChange {
    std::string key;
    std::string recorded, asked; // as optionText says them ("mxfp4", "0.001")
};
// The options that change the result (OptionField::changesResult) whose value in `asked` differs
// from `recorded` (the "options" a run recorded: latmix.json, the unfinished-run marker), in the
// table's order. Both are read through configFromJson, so one value written two ways is one value;
// a key the record lacks (a version that had no such option) is not compared. "steps" is not
// compared: a resumed run trains on to the steps asked for (its schedule then that length's).
std::vector<OptionChange> changedResultOptions(const nlohmann::ordered_json& recorded, const nlohmann::ordered_json& asked);
// Throws a RunRefused naming each changed option with the recorded value as the way out (all of
// them, AllOf) and `asked`'s value beside it, when changedResultOptions finds any: `what` is the
// run the folder holds ("'RUN' is an unfinished run of latmix-lu ..."). A resumed run never
// continues saved work under other options (its record would name only the new ones).
void refuseChangedOptions(const std::string& what, const nlohmann::ordered_json& recorded,
                          const nlohmann::ordered_json& asked);

} // namespace latmix::run
