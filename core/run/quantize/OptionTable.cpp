#include "run/quantize/OptionTable.h"

#include "run/quantize/Method.h"
#include "transforms/LearnedTransforms.h"
#include "util/Text.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>

namespace latmix::run {
namespace {

using json = nlohmann::ordered_json;

// A row of the table with how it reads and writes its RunConfig field.
struct Option {
    OptionField field;
    std::function<json(const RunConfig&)> get;
    std::function<void(RunConfig&, const json&)> set; // the value already of the field's type
};

template <class T>
Option member(OptionField f, T RunConfig::*m) {
    return {f, [m](const RunConfig& c) { return json(c.*m); }, [m](RunConfig& c, const json& v) { c.*m = v.get<T>(); }};
}

// An on/off option whose unset value is "auto".
Option member(OptionField f, std::optional<bool> RunConfig::*m) {
    return {f, [m](const RunConfig& c) { return c.*m ? json(*(c.*m)) : json("auto"); },
            [m](RunConfig& c, const json& v) { c.*m = v.is_boolean() ? std::optional<bool>(v.get<bool>()) : std::nullopt; }};
}

void nonNegative(const json& v, const char* key) {
    if (v.get<double>() < 0) throw std::invalid_argument(std::string("option '") + key + "' must be 0 or more, not " + v.dump());
}

// The methods by name: methods() lives beside libtorch code that the parser-only builds (the
// fuzzers) leave out, so the list is written here; tst_options holds it to methods().
const char* kMethodHelp = "the paper's method (rtn, quarot-rtn, gptq, quarot, mr-gptq, spinquant, latmix-lu, latmix-qr) or WUSH's (wush-rtn, wush-gptq)";

// The formats from their table, so a new one shows up here; static because OptionField holds a
// const char*.
const char* formatHelp() {
    static const std::string help = mx::formatNameList() + " (weights and activations: W4A4 for the 4-bit ones)";
    return help.c_str();
}

const char* scaleModeHelp() {
    static const std::string help = mx::scaleModeNameList() + " (four-over-six: nvfp4 only)";
    return help.c_str();
}

// --t3's value as the block of the online Hadamard (0: none).
int t3BlockOf(const std::string& t3) {
    if (t3 == "none") return 0;
    if (t3 == "block-hadamard") return 32; // SPEC §4
    throw std::invalid_argument("unknown --t3 '" + t3 + "'; use none or block-hadamard");
}

// What is computed: the method, the format and the ablations that replace its transforms.
void addMethodOptions(std::vector<Option>& t) {
    using T = OptionType;
    t.push_back(member({"method", "--method", "Method", T::Text, kMethodHelp, true}, &RunConfig::method));
    t.push_back({{"format", "--format", "Format", T::Text, formatHelp(), true},
                 [](const RunConfig& c) { return json(mx::formatName(c.format.format)); },
                 [](RunConfig& c, const json& v) { c.format = mx::makeConfig(mx::parseFormat(v.get<std::string>()), c.format.scaleMode); }});
    t.push_back({{"block", "--block", "Block size", T::Integer, "block size (0: the format's)", true},
                 [](const RunConfig& c) { return json(c.format.blockSize); },
                 [](RunConfig& c, const json& v) {
                     nonNegative(v, "block");
                     if (v.get<int>() > 0) c.format.blockSize = v.get<int>();
                 }});
    t.push_back({{"scale_mode", "--scale-mode", "Scale mode", T::Text, scaleModeHelp(), true},
                 [](const RunConfig& c) { return json(mx::scaleModeName(c.format.scaleMode)); },
                 [](RunConfig& c, const json& v) { c.format.scaleMode = mx::parseScaleMode(v.get<std::string>()); }});
    t.push_back(member({"keep", "--keep", "Keep in bf16", T::Text,
                        "regex over module names (e.g. 'layers\\.0\\.|down_proj'): those block linears keep their weights "
                        "and inputs in bf16 through every method, the fold and the exports",
                        true},
                       &RunConfig::keep));
    t.push_back(member({"scheme", "--scheme", "Mixed precision", T::Text,
                        "mixed precision: rules 'REGEX = FORMAT' (';'-separated, or a file of them, e.g. from "
                        "latmix plan) over fusion groups (q/k/v, o_proj, gate/up, down_proj, experts); formats mxfp4, "
                        "nvfp4, mxint4, mxfp8, mxint8, bf16; the rest take --format (every method but wush-*)",
                        true},
                       &RunConfig::scheme));
    t.push_back(member({"t1", "--t1", "T1 (ablation)", T::Text,
                        "ablation: T1 (residual stream) of this kind instead of the method's", true},
                       &RunConfig::t1Kind));
    t.push_back(member({"t2", "--t2", "T2 (ablation)", T::Text,
                        "ablation: T2 (value/o_proj head space) of this kind instead of the method's", true},
                       &RunConfig::t2Kind));
    t.push_back({{"t3", "--t3", "T3 (ablation)", T::Text,
                  "ablation: the online T3 on the down_proj input: none or block-hadamard (the default of the "
                  "transformed methods)",
                  true},
                 [](const RunConfig& c) { return json(c.t3Block < 0 ? "" : c.t3Block == 0 ? "none" : "block-hadamard"); },
                 [](RunConfig& c, const json& v) {
                     const std::string s = v.get<std::string>();
                     c.t3Block = s.empty() ? -1 : t3BlockOf(s);
                 }});
    t.push_back(member({"init", "--init", "Initialisation (ablation)", T::Text,
                        "ablation: initialisation of the learned transforms", true},
                       &RunConfig::init));
    t.push_back({{"init_noise", "--init-noise", "Initial noise (ablation)", T::Number,
                  "ablation: standard deviation of the +noise initialisations (1e-3; -1: the method's)", true},
                 [](const RunConfig& c) { return json(c.initNoise); },
                 [](RunConfig& c, const json& v) {
                     if (v.get<double>() != -1) nonNegative(v, "init_noise");
                     c.initNoise = v.get<double>();
                 }});
    t.push_back(member({"granularity", "--granularity", "Granularity (ablation)", T::Text,
                        "ablation: the learned T1/T2 as full matrices (full, the method's) or block-diagonal with the "
                        "MX block (block; paper Table 1)",
                        true},
                       &RunConfig::granularity));
    t.push_back(member({"loss", "--loss", "Loss", T::Text,
                        "what the learned methods minimise: kl (to the original model, SPEC §5), ce (cross-entropy "
                        "against the calibration text, SpinQuant's loss) or block-mse (every decoder block's output "
                        "against the original's, FlatQuant's loss)",
                        true},
                       &RunConfig::loss));
}

// The training recipe of the learned methods (SPEC §5).
void addTrainingOptions(std::vector<Option>& t) {
    using T = OptionType;
    t.push_back(member({"steps", "--steps", "Steps", T::Integer, "training steps (learned methods)", true}, &RunConfig::steps));
    t.push_back(member({"batch", "--batch", "Batch", T::Integer, "sequences per training step", true}, &RunConfig::batch));
    t.push_back(member({"lr", "--lr", "Learning rate", T::Number, "peak learning rate", true}, &RunConfig::lr));
    t.push_back(member({"warmup_steps", "--warmup", "Warmup steps", T::Integer, "warmup steps (at most steps/10)", true},
                       &RunConfig::warmupSteps));
    t.push_back(member({"temperature", "--temperature", "Temperature", T::Number, "distillation temperature tau", true},
                       &RunConfig::temperature));
    t.push_back(member({"volume_weight", "--volume-weight", "Volume weight", T::Number, "lambda of the volume regulariser",
                        true},
                       &RunConfig::volumeWeight));
    t.push_back({{"weight_decay", "--weight-decay", "Weight decay", T::Number,
                  "AdamW weight decay of the transforms (the paper uses some, unstated; PyTorch's default is 0.01)", true},
                 [](const RunConfig& c) { return json(c.weightDecay); },
                 [](RunConfig& c, const json& v) {
                     nonNegative(v, "weight_decay");
                     c.weightDecay = v.get<double>();
                 }});
}

// Calibration, GPTQ and the training's bookkeeping.
void addCalibrationOptions(std::vector<Option>& t) {
    using T = OptionType;
    t.push_back(member({"calib", "--calib", "Calibration text", T::Text,
                        "calibration text (default LATMIX_DATA_DIR/wikitext-2/wiki.valid.tokens)", false},
                       &RunConfig::calibSource));
    t.push_back(member({"calib_samples", "--calib-samples", "Windows", T::Integer, "calibration windows", true},
                       &RunConfig::calibSamples));
    t.push_back(member({"seqlen", "--seqlen", "Window length", T::Integer, "calibration window length", true},
                       &RunConfig::seqLen));
    t.push_back(member({"seed", "--seed", "Seed", T::Integer, "seed of windows, initialisations, batches and T3", true},
                       &RunConfig::seed));
    t.push_back(member({"device", "--device", "Device", T::Text, "cpu, cuda, cuda:N or auto", false}, &RunConfig::device));
    t.push_back({{"act_order", "--act-order", "GPTQ act order", T::Flag, "GPTQ: inputs by decreasing Hessian diagonal", true},
                 [](const RunConfig& c) { return json(c.gptq.actOrder); },
                 [](RunConfig& c, const json& v) { c.gptq.actOrder = v.get<bool>(); }});
    t.push_back({{"damping", "--damping", "GPTQ damping", T::Number, "GPTQ damping (fraction of mean diag H)", true},
                 [](const RunConfig& c) { return json(c.gptq.damping); },
                 [](RunConfig& c, const json& v) { c.gptq.damping = v.get<double>(); }});
    t.push_back({{"rtn_error_windows", "--rtn-error-windows", "RTN error windows", T::Integer,
                  "rtn, quarot-rtn: pass the first N calibration windows through the layers for each linear's "
                  "output-space error (0: none, the error is in weight space and RTN costs no calibration)",
                  true},
                 [](const RunConfig& c) { return json(c.rtnErrorWindows); },
                 [](RunConfig& c, const json& v) {
                     nonNegative(v, "rtn_error_windows");
                     c.rtnErrorWindows = v.get<int>();
                 }});
    t.push_back(member({"metrics_every", "--metrics-every", "Metrics every", T::Integer,
                        "matrix metrics every k steps (0: never)", false},
                       &RunConfig::metricsEvery));
    t.push_back(member({"checkpoint_every", "--checkpoint-every", "Checkpoint every", T::Integer,
                        "training state saved every k steps", false},
                       &RunConfig::checkpointEvery));
    t.push_back(member({"tracked_layer", "--track-layer", "A2 of layer", T::Integer,
                        "layer whose A2 metrics the training reports", false},
                       &RunConfig::trackedLayer));
}

// Where the run computes, what it checks first and what it evaluates.
void addPlacementAndEvaluationOptions(std::vector<Option>& t) {
    using T = OptionType;
    t.push_back(member({"tf32", "--tf32", "TF32 on CUDA", T::Flag,
                        "on CUDA: float32 matrix products in TF32 on the tensor cores (faster; 10-bit mantissa, so "
                        "results differ from the CPU's more than in float32; recorded in latmix.json)",
                        true},
                       &RunConfig::tf32));
    t.push_back(member({"precision", "--precision", "Training precision", T::Text,
                        "the learned methods' training arithmetic: auto (bf16 on CUDA, fp32 on the CPU), bf16 (frozen "
                        "weights, activations and their products in bfloat16; transforms, the fold, the loss and AdamW in "
                        "float32), tf32 (float32, products in TF32 on CUDA) or fp32",
                        true},
                       &RunConfig::precision));
    t.push_back(member({"offload", "--offload", "Offload layers", T::Flag,
                        "keep the decoder layers in host memory, one at a time on the device (models larger than its "
                        "memory)",
                        false},
                       &RunConfig::offload));
    t.push_back(member({"devices", "--devices", "Devices", T::List,
                        "split the training's decoder layers over these devices, e.g. cuda:0,cuda:1 (several ranks: "
                        "local rank r shifts the CUDA indices by r x the list's length, or give one ';'-separated list "
                        "per rank; printed with each device's memory first; --dry-run: only that)",
                        false},
                       &RunConfig::devices));
    t.push_back(member({"t1_bias", "--t1-bias", "Learned T1 bias", T::OnOffAuto,
                        "learned T1 bias v1: auto (on where the family's exports load the q/k/v and gate/up biases it "
                        "folds into, as Llama's and Mistral's do; off for Qwen2, Qwen3 and mixtures of experts; said "
                        "when the run starts), on (the paper) or off (v1 = 0)",
                        true},
                       &RunConfig::t1Bias));
    t.push_back(member({"t2_bias", "--t2-bias", "Learned T2 bias", T::OnOff, "learned T2 bias v2: on or off", true},
                       &RunConfig::t2Bias));
    t.push_back({{"skip_export_check", "--skip-export-check", "Skip export check", T::Flag,
                  "run even when no Hugging Face / vLLM runtime could load the folded biases", false},
                 [](const RunConfig& c) { return json(!c.exportCheck); },
                 [](RunConfig& c, const json& v) { c.exportCheck = !v.get<bool>(); }});
    t.push_back({{"force", "--force", "Run over the memory estimate", T::Flag,
                  "run even when the estimated peak memory exceeds the memory available", false},
                 [](const RunConfig& c) { return json(!c.memoryCheck); },
                 [](RunConfig& c, const json& v) { c.memoryCheck = !v.get<bool>(); }});
    t.push_back(member({"eval_seqlen", "--eval-seqlen", "Eval window length", T::Integer,
                        "WikiText-2 test perplexity window (0: no evaluation)", true},
                       &RunConfig::evalSeqLen));
    t.push_back(member({"eval_windows", "--eval-windows", "Eval windows", T::Integer, "evaluation windows, each as long as the evaluation window length (0: all)", true},
                       &RunConfig::evalWindows));
    t.push_back({{"folded_eval_every", "--folded-eval-every", "Folded check every", T::Integer,
                  "learned methods: perplexity of the folded, unquantized model (the evaluation windows) before "
                  "training, after step 1, every K steps and after the last (paper Table 2); 0: never",
                  false},
                 [](const RunConfig& c) { return json(c.foldedEvalEvery); },
                 [](RunConfig& c, const json& v) {
                     nonNegative(v, "folded_eval_every");
                     c.foldedEvalEvery = v.get<int>();
                 }});
    t.push_back(member({"eval_tasks", "--eval-tasks", "Zero-shot tasks", T::Text,
                        "zero-shot tasks of the quantized model, e.g. arc_easy,piqa (as latmix eval --tasks; into "
                        "latmix.json)",
                        false},
                       &RunConfig::evalTaskNames));
    t.push_back(member({"eval_limit", "--eval-limit", "Zero-shot documents per task", T::Integer,
                        "the first N documents of each --eval-tasks task (0: all)", false},
                       &RunConfig::evalLimit));
}

// In the order the options are applied: format before block.
std::vector<Option> makeTable() {
    std::vector<Option> t;
    addMethodOptions(t);
    addTrainingOptions(t);
    addCalibrationOptions(t);
    addPlacementAndEvaluationOptions(t);
    return t;
}

const std::vector<Option>& table() {
    static const std::vector<Option> t = makeTable();
    return t;
}

const Option& option(const std::string& key) {
    for (const auto& o : table())
        if (o.field.key == key) return o;
    std::string keys;
    for (const auto& o : table()) keys += (keys.empty() ? "" : ", ") + std::string(o.field.key);
    throw std::invalid_argument("unknown option '" + key + "'; the options are " + keys);
}

const char* typeText(OptionType t) {
    switch (t) {
    case OptionType::Text: return "a text";
    case OptionType::Integer: return "an integer";
    case OptionType::Number: return "a number";
    case OptionType::Flag:
    case OptionType::OnOff: return "true or false";
    case OptionType::OnOffAuto: return "true, false or \"auto\"";
    case OptionType::List: return "a list of texts";
    }
    return "a value";
}

bool hasType(OptionType t, const json& v) {
    switch (t) {
    case OptionType::Text: return v.is_string();
    case OptionType::Integer: return v.is_number_integer();
    case OptionType::Number: return v.is_number();
    case OptionType::Flag:
    case OptionType::OnOff: return v.is_boolean();
    case OptionType::OnOffAuto: return v.is_boolean() || v == "auto";
    case OptionType::List:
        if (!v.is_array()) return false;
        for (const auto& e : v)
            if (!e.is_string()) return false;
        return true;
    }
    return false;
}

} // namespace

const std::vector<OptionField>& optionFields() {
    static const std::vector<OptionField> f = [] {
        std::vector<OptionField> v;
        for (const auto& o : table()) v.push_back(o.field);
        return v;
    }();
    return f;
}

const OptionField& optionField(const std::string& key) { return option(key).field; }

json optionValue(const RunConfig& c, const std::string& key) { return option(key).get(c); }

void setOption(RunConfig& c, const std::string& key, const json& value, const std::string& where) {
    const Option& o = option(key);
    json v = value;
    if ((o.field.type == OptionType::OnOff || o.field.type == OptionType::OnOffAuto) && v.is_string() && (v == "on" || v == "off"))
        v = v == "on";
    if (o.field.type == OptionType::List && v.is_string()) v = optionFromText(o.field, v.get<std::string>());
    const std::string name = where + (where.empty() ? "" : ": ") + "option '" + key + "'";
    if (!hasType(o.field.type, v)) throw std::invalid_argument(name + " must be " + typeText(o.field.type) + ", not " + v.dump());
    try {
        o.set(c, v);
    } catch (const std::invalid_argument& e) {
        const std::string what = e.what();
        throw std::invalid_argument(what.rfind("option '", 0) == 0 && !where.empty() ? where + ": " + what : what);
    } catch (const json::exception&) {
        throw std::invalid_argument(name + " is out of range: " + v.dump());
    }
}

json optionFromText(const OptionField& f, const std::string& text) {
    const std::string name = std::string(f.flag[0] ? f.flag : f.key);
    auto number = [&](bool integer) -> json {
        std::size_t end = 0;
        try {
            if (integer) {
                const long long n = std::stoll(text, &end);
                if (end == text.size()) return json(n);
            } else {
                const double x = std::stod(text, &end);
                if (end == text.size()) return json(x);
            }
        } catch (const std::exception&) {
        }
        throw std::invalid_argument(name + ": '" + text + "' is not " + typeText(f.type));
    };
    switch (f.type) {
    case OptionType::Text: return json(text);
    case OptionType::Integer: return number(true);
    case OptionType::Number: return number(false);
    case OptionType::Flag:
        if (text == "true" || text == "1" || text.empty()) return json(true);
        if (text == "false" || text == "0") return json(false);
        break;
    case OptionType::OnOff:
        if (text == "on" || text == "off") return json(text == "on");
        throw std::invalid_argument(name + ": '" + text + "' is neither on nor off");
    case OptionType::OnOffAuto:
        if (text == "on" || text == "off") return json(text == "on");
        if (text == "auto") return json("auto");
        throw std::invalid_argument(name + ": '" + text + "' is not on, off or auto");
    case OptionType::List: {
        json a = json::array();
        std::stringstream s(text);
        for (std::string item; std::getline(s, item, ',');)
            if (!item.empty()) a.push_back(item);
        return a;
    }
    }
    throw std::invalid_argument(name + ": '" + text + "' is not " + typeText(f.type));
}

std::string optionText(const OptionField& f, const json& v) {
    switch (f.type) {
    case OptionType::Text: return v.get<std::string>();
    case OptionType::OnOff: return v.get<bool>() ? "on" : "off";
    case OptionType::OnOffAuto: return v.is_boolean() ? (v.get<bool>() ? "on" : "off") : "auto";
    case OptionType::Flag: return v.get<bool>() ? "true" : "false";
    case OptionType::List: {
        std::string s;
        for (const auto& e : v) s += (s.empty() ? "" : ",") + e.get<std::string>();
        return s;
    }
    case OptionType::Integer: return v.dump();
    case OptionType::Number: return util::exactNumber(v.get<double>());
    }
    return v.dump();
}

json configJson(const RunConfig& c) {
    json j = json::object();
    for (const auto& o : table()) j[o.field.key] = o.get(c);
    return j;
}

RunConfig configFromJson(const json& j, RunConfig c, const std::string& where) {
    if (!j.is_object()) throw std::invalid_argument(where + ": the options must be a JSON object, not " + j.dump());
    for (const auto& [key, value] : j.items()) option(key); // an unknown key throws, listing the keys
    for (const auto& o : table())
        if (j.contains(o.field.key)) setOption(c, o.field.key, j.at(o.field.key), where);
    return c;
}

std::vector<std::string> changedSettings(const RunConfig& c, Face face) {
    const RunConfig defaults;
    std::vector<std::string> out;
    for (const auto& o : table()) {
        const json v = o.get(c);
        if (v == o.get(defaults) || (o.field.type == OptionType::Flag && v == false)) continue;
        out.push_back(optionSetting(o.field.key, optionText(o.field, v), face));
    }
    return out;
}

std::string optionName(const std::string& key, Face face) {
    const OptionField& f = optionField(key);
    return face == Face::Cli ? std::string(f.flag) : std::string(f.label);
}

std::string optionSetting(const std::string& key, const std::string& value, Face face) {
    const OptionField& f = optionField(key);
    // A flag is set by naming it; "false" (a setting to keep off) is its absence.
    const bool off = f.type == OptionType::Flag && value == "false";
    if (face == Face::Cli) return off ? "without " + std::string(f.flag) : f.type == OptionType::Flag ? std::string(f.flag) : std::string(f.flag) + " " + value;
    if (f.type == OptionType::Flag) return std::string(f.label) + (off ? ": off" : ": on");
    return std::string(f.label) + ": " + value;
}

std::string remedyText(const Remedy& r, Face face) {
    std::string s = r.before.empty() ? "" : r.before + " ";
    if (!r.key.empty()) {
        const bool flag = optionField(r.key).type == OptionType::Flag;
        s += r.value.empty() && !flag ? optionName(r.key, face) : optionSetting(r.key, r.value, face);
    }
    if (!r.after.empty()) s += (r.key.empty() && r.before.empty() ? "" : " ") + r.after;
    return s;
}

namespace {
std::string refusalText(const std::string& cause, const std::vector<Remedy>& remedies, const std::string& after,
                        Face face, util::RemedyJoin join = util::RemedyJoin::AnyOf) {
    return util::remediedMessage(
        cause, remedies, after, [face](const Remedy& r) { return remedyText(r, face); }, join);
}
} // namespace

RunRefused::RunRefused(std::string cause, std::vector<Remedy> remedies, std::string afterRemedies, util::RemedyJoin join)
    : std::invalid_argument(refusalText(cause, remedies, afterRemedies, Face::Cli, join)), m_cause(std::move(cause)),
      m_after(std::move(afterRemedies)), m_remedies(std::move(remedies)), m_join(join) {}

std::string RunRefused::message(Face face) const { return refusalText(m_cause, m_remedies, m_after, face, m_join); }

std::vector<OptionChange> changedResultOptions(const json& recorded, const json& asked) {
    const RunConfig was = configFromJson(recorded, {}, "the recorded options");
    const RunConfig now = configFromJson(asked, {}, "the options asked for");
    std::vector<OptionChange> out;
    for (const auto& o : table()) {
        const std::string key = o.field.key;
        if (!o.field.changesResult || key == "steps" || !recorded.contains(key)) continue;
        const json a = o.get(was), b = o.get(now);
        if (a != b) out.push_back({key, optionText(o.field, a), optionText(o.field, b)});
    }
    return out;
}

void refuseChangedOptions(const std::string& what, const json& recorded, const json& asked) {
    const auto changes = changedResultOptions(recorded, asked);
    if (changes.empty()) return;
    std::vector<Remedy> remedies;
    const auto said = [](const std::string& v) { return v.empty() ? std::string("\"\"") : v; }; // an empty text or list
    for (const auto& c : changes) remedies.push_back({c.key, said(c.recorded), "", "(asked: " + said(c.asked) + ")"});
    throw RunRefused(what + ", with other settings than this run's: continuing its saved work under these would mix "
                         "both in one result",
                     std::move(remedies), "to continue it as it was started, or choose another run folder",
                     util::RemedyJoin::AllOf);
}

std::string messageFor(const std::exception& error, Face face) {
    if (const auto* r = dynamic_cast<const RunRefused*>(&error)) return r->message(face);
    if (const auto* r = dynamic_cast<const util::RemediedError*>(&error))
        return refusalText(r->cause(), r->remedies(), r->after(), face);
    return error.what();
}

} // namespace latmix::run
