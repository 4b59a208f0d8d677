#include "run/Sensitivity.h"

#include "eval/KlDivergence.h"
#include "model/Checkpoint.h"
#include "model/Device.h"
#include "model/LlamaModel.h"
#include "quant/WeightQuantizer.h"
#include "util/AtomicFile.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <unistd.h>

namespace latmix::run {

namespace {

namespace fs = std::filesystem;

bool endsWith(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Round to nearest with static scales (SPEC §6), as a run's RTN does: the weights a runtime fuses
// share NVFP4's tensor scale (quant::sharedGlobalScale).
void quantizeTogether(const std::vector<at::Tensor*>& weights, const mx::MxConfig& f) {
    std::vector<at::Tensor> w32;
    for (auto* w : weights) w32.push_back(w->to(at::kFloat));
    const float global = f.isNvfp4() ? quant::sharedGlobalScale(w32) : 0.0f;
    for (std::size_t i = 0; i < weights.size(); ++i) {
        const auto scales = quant::staticScales(w32[i], f, global).scales;
        *weights[i] = quant::quantizeWithScales(w32[i], scales, f).to(weights[i]->options());
    }
}

// The group's weights quantized in a copy of w that shares every other tensor.
model::LlamaWeights withGroupQuantized(const model::LlamaWeights& w, const model::FusionGroup& g, const mx::MxConfig& f) {
    model::LlamaWeights q = w;
    auto& y = q.layers[static_cast<std::size_t>(g.layer)];
    if (endsWith(g.name, ".qkv")) quantizeTogether({&y.wq, &y.wk, &y.wv}, f);
    else if (endsWith(g.name, ".o_proj")) quantizeTogether({&y.wo}, f);
    else if (endsWith(g.name, ".gate_up")) quantizeTogether({&y.wGate, &y.wUp}, f);
    else if (endsWith(g.name, ".down_proj")) quantizeTogether({&y.wDown}, f);
    else if (endsWith(g.name, ".experts"))
        for (auto& e : y.experts) {
            quantizeTogether({&e.wGate, &e.wUp}, f); // vLLM fuses an expert's gate and up (w13)
            quantizeTogether({&e.wDown}, f);
        }
    else throw std::logic_error("sensitivity: no weights for fusion group " + g.name);
    return q;
}

} // namespace

SensitivityTable measureSensitivity(const SensitivityRequest& r, JobContext& job) {
    const auto started = std::chrono::steady_clock::now();
    std::vector<std::optional<mx::MxConfig>> formats;
    SensitivityTable t;
    for (const auto& name : r.formats) {
        const auto f = parseSchemeFormat(name);
        if (!f) continue; // bf16 is added last
        formats.push_back(f);
        t.formats.push_back(schemeFormatName(f));
    }
    if (formats.empty()) throw std::invalid_argument("sensitivity: name at least one quantized format (" + schemeFormatNames() + ")");
    t.formats.push_back(schemeFormatName(std::nullopt));
    const auto ck = model::Checkpoint::load(r.modelDir);
    const auto& c = ck.config();
    if (c.latmix)
        throw std::invalid_argument(r.modelDir + " is a quantized run's model: measure the sensitivity of the full-precision "
                                                 "model it came from");
    t.model = r.modelDir, t.calibration = r.calibrationSource, t.seqLen = r.seqLen, t.groups = model::fusionGroups(c);
    const auto dtype = model::parseDtype(r.dtype);
    const auto device = model::parseDevice(r.device);
    const auto weights = model::loadWeights(ck, dtype, device);
    const double passes = 1.0 + static_cast<double>(t.groups.size() * formats.size());
    const fs::path spill = fs::temp_directory_path() / ("latmix-sensitivity-" + std::to_string(::getpid()));
    SubJob refJob(job, 0, 1 / passes, "reference: ");
    const auto reference = eval::ReferenceStates::record(model::LlamaModel(c, weights), r.calibrationIds,
                                                         {r.seqLen, r.windows}, spill.string(), refJob);
    t.windows = reference.windows();
    int pass = 1;
    for (const auto& g : t.groups) {
        std::vector<double> kl, se;
        for (std::size_t k = 0; k < formats.size(); ++k, ++pass) {
            SubJob sub(job, pass / passes, (pass + 1) / passes, g.name + " in " + t.formats[k] + ": ");
            model::ForwardOptions o;
            for (const auto& p : g.points) o.pointQuant[p] = formats[k];
            const auto m = model::LlamaModel(c, withGroupQuantized(weights, g, *formats[k]), o);
            const auto res = eval::evaluateAgainstReference(m, r.calibrationIds, reference, sub);
            kl.push_back(res.meanKl);
            se.push_back(res.klStdErr);
            t.tokens = res.tokens;
        }
        kl.push_back(0); // bf16: the group as the reference has it
        se.push_back(0);
        t.kl.push_back(kl);
        t.klStdErr.push_back(se);
    }
    t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return t;
}

std::string sensitivityJson(const SensitivityTable& t) {
    nlohmann::ordered_json groups = nlohmann::ordered_json::array();
    for (std::size_t g = 0; g < t.groups.size(); ++g)
        groups.push_back({{"name", t.groups[g].name}, {"weights", t.groups[g].weights}, {"kl", t.kl[g]}, {"kl_stderr", t.klStdErr[g]}});
    nlohmann::ordered_json j = {{"model", t.model},       {"calibration", t.calibration}, {"seqlen", t.seqLen},
                                {"windows", t.windows},   {"tokens", t.tokens},           {"formats", t.formats},
                                {"seconds", t.seconds},   {"measure", "kl to the full-precision model, one group quantized"},
                                {"groups", groups}};
    return j.dump(2) + "\n";
}

SensitivityTable readSensitivity(const std::string& path) {
    SensitivityTable t;
    try {
        const auto j = nlohmann::json::parse(util::readTextFile(path, "sensitivity table"));
        t.model = j.at("model").get<std::string>();
        t.calibration = j.value("calibration", "");
        t.seqLen = j.at("seqlen").get<int>(), t.windows = j.at("windows").get<int>(), t.tokens = j.value("tokens", 0LL);
        t.formats = j.at("formats").get<std::vector<std::string>>();
        t.seconds = j.value("seconds", 0.0);
        for (const auto& f : t.formats) parseSchemeFormat(f);
        const auto groups = model::fusionGroups(model::Checkpoint::load(t.model).config());
        const auto& stored = j.at("groups");
        if (stored.size() != groups.size())
            throw std::invalid_argument("it has " + std::to_string(stored.size()) + " groups, the model " + t.model + " " +
                                        std::to_string(groups.size()));
        for (std::size_t g = 0; g < groups.size(); ++g) {
            if (stored[g].at("name").get<std::string>() != groups[g].name)
                throw std::invalid_argument("group " + std::to_string(g) + " is " + stored[g].at("name").get<std::string>() +
                                            ", the model's " + groups[g].name);
            t.kl.push_back(stored[g].at("kl").get<std::vector<double>>());
            t.klStdErr.push_back(stored[g].at("kl_stderr").get<std::vector<double>>());
            if (t.kl.back().size() != t.formats.size() || t.klStdErr.back().size() != t.formats.size())
                throw std::invalid_argument(groups[g].name + " has not one value per format");
        }
        t.groups = groups;
    } catch (const nlohmann::json::exception& e) {
        throw std::runtime_error(path + ": not a sensitivity table of `latmix sensitivity` (" + e.what() + ")");
    } catch (const std::invalid_argument& e) {
        throw std::runtime_error(path + ": " + e.what() + "; measure it again with `latmix sensitivity`");
    }
    return t;
}

quant::BudgetProblem budgetProblem(const SensitivityTable& t, const std::vector<GroupFormat>& resolved, double budget) {
    if (resolved.size() != t.groups.size()) throw std::logic_error("budgetProblem: the scheme is of another model");
    quant::BudgetProblem p;
    p.budget = budget;
    for (std::size_t g = 0; g < t.groups.size(); ++g) {
        p.weights.push_back(t.groups[g].weights);
        std::vector<quant::BudgetCandidate> c;
        for (std::size_t k = 0; k < t.formats.size(); ++k) {
            const auto f = parseSchemeFormat(t.formats[k]);
            if (resolved[g].rule >= 0 && schemeFormatName(f) != schemeFormatName(resolved[g].format)) continue;
            c.push_back({quant::bitsPerWeight(f), t.kl[g][k]});
        }
        if (c.empty())
            throw std::invalid_argument("the scheme's rule " + std::to_string(resolved[g].rule + 1) + " gives " + t.groups[g].name +
                                        " the format " + schemeFormatName(resolved[g].format) +
                                        ", which the sensitivity table did not measure; measure it too (--formats)");
        p.candidates.push_back(c);
    }
    return p;
}

std::vector<GroupFormat> chosenScheme(const SensitivityTable& t, const std::vector<GroupFormat>& resolved,
                                      const quant::BudgetSolution& s) {
    std::vector<GroupFormat> r = resolved;
    for (std::size_t g = 0; g < r.size(); ++g) {
        if (r[g].rule >= 0) continue;
        // The candidates of a free group are the table's formats in order.
        r[g].format = parseSchemeFormat(t.formats[static_cast<std::size_t>(s.choice[g])]);
    }
    return r;
}

} // namespace latmix::run
