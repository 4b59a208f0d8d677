#include "run/Sensitivity.h"

#include "run/quantize/MemoryEstimate.h"
#include "util/OutOfMemory.h"

#include "eval/KlDivergence.h"
#include "eval/Perplexity.h"
#include "model/Checkpoint.h"
#include "model/Device.h"
#include "model/LlamaModel.h"
#include "mx/MxQuantizer.h"
#include "quant/WeightQuantizer.h"
#include "util/AtomicFile.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
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

// The group's weights in w, as sets a runtime fuses (each set shares NVFP4's tensor scale): q/k/v,
// o_proj, gate/up, down_proj; in a sparse layer each expert's gate/up (vLLM's w13) and its down.
std::vector<std::vector<at::Tensor*>> fusedSets(model::LlamaWeights& w, const model::FusionGroup& g) {
    auto& y = w.layers[static_cast<std::size_t>(g.layer)];
    if (endsWith(g.name, ".qkv")) return {{&y.wq, &y.wk, &y.wv}};
    if (endsWith(g.name, ".o_proj")) return {{&y.wo}};
    if (endsWith(g.name, ".gate_up")) return {{&y.wGate, &y.wUp}};
    if (endsWith(g.name, ".down_proj")) return {{&y.wDown}};
    if (!endsWith(g.name, ".experts")) throw std::logic_error("sensitivity: no weights for fusion group " + g.name);
    std::vector<std::vector<at::Tensor*>> r;
    for (auto& e : y.experts) {
        r.push_back({&e.wGate, &e.wUp});
        r.push_back({&e.wDown});
    }
    return r;
}

// The group's weights quantized in a copy of w that shares every other tensor.
model::LlamaWeights withGroupQuantized(const model::LlamaWeights& w, const model::FusionGroup& g, const mx::MxConfig& f) {
    model::LlamaWeights q = w;
    for (const auto& set : fusedSets(q, g)) quantizeTogether(set, f);
    return q;
}

// The first-order estimate (SensitivityTable::estimate) of every group in every quantized format:
// one forward and backward pass of the cross-entropy per window, the weights as float32 leaves.
std::vector<std::vector<double>> estimateScores(const model::ModelConfig& c, const model::LlamaWeights& weights,
                                                const std::vector<model::FusionGroup>& groups,
                                                const std::vector<mx::MxConfig>& formats, const std::vector<int>& ids,
                                                int seqLen, int windows, JobContext& job) {
    at::AutoGradMode grad(true);
    model::LlamaWeights w = weights;
    std::vector<std::vector<std::vector<at::Tensor*>>> sets;
    for (const auto& g : groups) {
        sets.push_back(fusedSets(w, g));
        for (auto& set : sets.back())
            for (at::Tensor* t : set) *t = t->detach().to(at::kFloat).clone().requires_grad_(true);
    }
    std::map<std::string, std::size_t> groupOfPoint;
    for (std::size_t g = 0; g < groups.size(); ++g)
        for (const auto& p : groups[g].points) groupOfPoint[p] = g;
    std::vector<std::vector<double>> score(groups.size(), std::vector<double>(formats.size() + 1, 0.0));
    const auto win = eval::evaluationWindows(c.maxPositions, ids.size(), {seqLen, windows});
    for (int i = 0; i < win.count; ++i) {
        job.checkCancelled();
        // The windows' passes take most of the estimate's time; the weights' part the rest.
        job.progress(0.7 * i / win.count, "estimate: window " + std::to_string(i + 1) + "/" + std::to_string(win.count));
        const auto begin = ids.begin() + static_cast<std::ptrdiff_t>(i) * win.seqLen;
        const auto tokens = at::tensor(std::vector<std::int64_t>(begin, begin + win.seqLen), at::kLong).view({1, win.seqLen});
        std::map<std::string, at::Tensor> inputs;
        const model::ActivationHook keep = [&](const std::string& point, const at::Tensor& x) {
            if (!groupOfPoint.count(point)) return x;
            // The first layer's input depends on no weight: a leaf of its own, for its gradient.
            at::Tensor y = x.requires_grad() ? x : x.detach().requires_grad_(true);
            if (x.requires_grad()) y.retain_grad();
            inputs[point] = y;
            return y;
        };
        const auto logits = model::forwardWith(c, w, {}, tokens, keep).squeeze(0);
        const auto loss = at::nll_loss(at::log_softmax(logits.narrow(0, 0, win.seqLen - 1), -1), tokens[0].narrow(0, 1, win.seqLen - 1));
        loss.backward();
        at::NoGradGuard noGrad;
        for (const auto& [point, x] : inputs) {
            if (!x.grad().defined()) continue;
            for (std::size_t k = 0; k < formats.size(); ++k)
                score[groupOfPoint.at(point)][k] +=
                    (x.grad() * (mx::fakeQuantize(x.detach(), formats[k]) - x.detach())).abs().sum().item<double>();
        }
    }
    at::NoGradGuard noGrad;
    for (std::size_t g = 0; g < groups.size(); ++g) {
        job.checkCancelled();
        job.progress(0.7 + 0.3 * double(g) / double(groups.size()), "estimate: weights of " + groups[g].name);
        for (std::size_t k = 0; k < formats.size(); ++k)
            for (const auto& set : sets[g]) {
                std::vector<at::Tensor> q;
                for (at::Tensor* t : set) q.push_back(t->detach().clone());
                std::vector<at::Tensor*> ptrs;
                for (auto& t : q) ptrs.push_back(&t);
                quantizeTogether(ptrs, formats[k]);
                for (std::size_t m = 0; m < set.size(); ++m)
                    if (set[m]->grad().defined())
                        score[g][k] += (set[m]->grad() * (q[m] - set[m]->detach())).abs().sum().item<double>();
            }
    }
    return score;
}

std::vector<double> ranks(const std::vector<double>& v) {
    std::vector<std::size_t> order(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return v[a] < v[b]; });
    std::vector<double> r(v.size());
    for (std::size_t i = 0; i < order.size();) {
        std::size_t j = i;
        while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]]) ++j;
        for (std::size_t m = i; m <= j; ++m) r[order[m]] = 0.5 * double(i + j); // ties: their mean rank
        i = j + 1;
    }
    return r;
}

} // namespace

double rankCorrelation(const std::vector<double>& a, const std::vector<double>& b) {
    if (a.size() != b.size() || a.size() < 2) return std::nan("");
    const auto ra = ranks(a), rb = ranks(b);
    const double n = double(a.size()), mean = (n - 1) / 2;
    double sab = 0, saa = 0, sbb = 0;
    for (std::size_t i = 0; i < ra.size(); ++i) {
        sab += (ra[i] - mean) * (rb[i] - mean);
        saa += (ra[i] - mean) * (ra[i] - mean);
        sbb += (rb[i] - mean) * (rb[i] - mean);
    }
    return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : std::nan("");
}

namespace {

// The measured KL of every group in every format (SensitivityTable::kl), passes 1.. of `passes`.
void measureGroups(const model::ModelConfig& c, const model::LlamaWeights& weights,
                   const std::vector<std::optional<mx::MxConfig>>& formats, const SensitivityRequest& r, double passes,
                   SensitivityTable& t, JobContext& job) {
    const fs::path spill = fs::temp_directory_path() / ("latmix-sensitivity-" + std::to_string(::getpid()));
    SubJob refJob(job, 0, 1 / passes, "reference: ");
    const auto reference = eval::ReferenceStates::record(model::LlamaModel(c, weights), r.calibrationIds,
                                                         {r.seqLen, r.windows}, spill.string(), refJob);
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
        }
        kl.push_back(0); // bf16: the group as the reference has it
        se.push_back(0);
        t.kl.push_back(kl);
        t.klStdErr.push_back(se);
    }
}

} // namespace

std::int64_t sensitivityPeakBytes(const model::ModelConfig& c, std::int64_t storedParameters, const SensitivityRequest& r) {
    const std::int64_t dtypeBytes = static_cast<std::int64_t>(c10::elementSize(model::parseDtype(r.dtype)));
    const std::int64_t T = r.seqLen, linear = c.layerLinearWeights() * c.numLayers;
    const std::int64_t logits = 3 * T * c.vocabSize * 4; // logits, log-probabilities, their gradient
    std::int64_t peak = storedParameters * dtypeBytes + logits;
    if (r.estimate) {
        // Per layer, what autograd keeps for the backward pass: the stream and its norms, q/k/v and
        // the attention output, the MLP's three intermediates, the attention probabilities.
        const std::int64_t heads = c.numHeads, q = heads * c.headDim, kv = c.numKvHeads * c.headDim;
        const std::int64_t width = c.moe ? std::max<std::int64_t>(c.intermediateSize, c.moe->expertsPerToken * c.moe->expertWidth)
                                         : c.intermediateSize;
        const std::int64_t perLayer = T * (4 * c.hiddenSize + 2 * q + 2 * kv + 3 * width) + heads * T * T;
        peak += 8 * linear + 4 * perLayer * c.numLayers;
    }
    return peak;
}

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
    if (!r.measure && !r.estimate) throw std::invalid_argument("sensitivity: neither measured nor estimated: ask for one");
    const auto ck = model::Checkpoint::load(r.modelDir);
    const auto& c = ck.config();
    if (c.latmix)
        throw std::invalid_argument(r.modelDir + " is a quantized run's model: measure the sensitivity of the full-precision "
                                                 "model it came from");
    t.model = r.modelDir, t.calibration = r.calibrationSource, t.seqLen = r.seqLen, t.groups = model::fusionGroups(c);
    const auto dtype = model::parseDtype(r.dtype);
    const auto device = model::parseDevice(r.device);
    const std::string remedies = std::string(r.estimate ? "--no-estimate (the estimate keeps float32 copies of the linears "
                                                          "and their gradients, 8 bytes a weight), " : "") +
                                 (r.dtype == "float32" ? "--dtype bfloat16, " : "") + "a shorter --seqlen, or a GPU (--device cuda)";
    if (device.is_cpu()) {
        const std::int64_t available = r.availableBytes > 0 ? r.availableBytes : availableHostMemory();
        const std::int64_t peak = sensitivityPeakBytes(c, ck.parameterCount(), r);
        if (available > 0 && peak > available)
            throw std::runtime_error("the sensitivity of " + r.modelDir + " needs about " + gibText(peak) + " at peak and " +
                                     gibText(available) + " is available; try " + remedies);
    }
    const auto weights = model::loadWeights(ck, dtype, device);
    // Progress: the reference, each group and format, and the estimate's pass (about one forward
    // and backward: counted as three forward passes).
    const double passes = (r.measure ? 1.0 + static_cast<double>(t.groups.size() * formats.size()) : 0.0) + (r.estimate ? 3.0 : 0.0);
    const auto windows = eval::evaluationWindows(c.maxPositions, r.calibrationIds.size(), {r.seqLen, r.windows});
    t.windows = windows.count, t.seqLen = windows.seqLen;
    t.tokens = static_cast<std::int64_t>(windows.count) * (windows.seqLen - 1);
    if (r.measure)
        guardMemory("the measured KL of each group", "try " + remedies, [&] { measureGroups(c, weights, formats, r, passes, t, job); });
    t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (r.estimate) {
        const auto estimateStarted = std::chrono::steady_clock::now();
        std::vector<mx::MxConfig> quantized;
        for (const auto& f : formats) quantized.push_back(*f);
        SubJob sub(job, 1 - 3 / passes, 1, "");
        t.estimate = guardMemory("the sensitivity estimate (one backward pass a window)", "try " + remedies, [&] {
            return estimateScores(c, weights, t.groups, quantized, r.calibrationIds, r.seqLen, r.windows, sub);
        });
        t.estimateSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - estimateStarted).count();
        for (std::size_t k = 0; k < quantized.size() && r.measure; ++k) {
            std::vector<double> measured, estimated;
            for (std::size_t g = 0; g < t.groups.size(); ++g) measured.push_back(t.kl[g][k]), estimated.push_back(t.estimate[g][k]);
            t.rankCorrelation.push_back(rankCorrelation(measured, estimated));
        }
    }
    return t;
}

std::string sensitivityJson(const SensitivityTable& t) {
    nlohmann::ordered_json groups = nlohmann::ordered_json::array();
    for (std::size_t g = 0; g < t.groups.size(); ++g) {
        groups.push_back({{"name", t.groups[g].name}, {"weights", t.groups[g].weights}});
        if (!t.kl.empty()) groups.back()["kl"] = t.kl[g], groups.back()["kl_stderr"] = t.klStdErr[g];
        if (!t.estimate.empty()) groups.back()["estimate"] = t.estimate[g];
    }
    nlohmann::ordered_json j = {{"model", t.model},       {"calibration", t.calibration}, {"seqlen", t.seqLen},
                                {"windows", t.windows},   {"tokens", t.tokens},           {"formats", t.formats},
                                {"seconds", t.seconds},   {"measure", "kl to the full-precision model, one group quantized"},
                                {"groups", groups}};
    if (!t.estimate.empty()) {
        nlohmann::ordered_json rho = nlohmann::ordered_json::object();
        for (std::size_t k = 0; k < t.rankCorrelation.size(); ++k)
            rho[t.formats[k]] = std::isnan(t.rankCorrelation[k]) ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(t.rankCorrelation[k]);
        j["estimate"] = {{"measure", "sum |gradient of the calibration cross-entropy x quantization error|, weights and inputs"},
                         {"seconds", t.estimateSeconds}, {"rank_correlation", rho}};
    }
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
            if (stored[g].contains("kl")) {
                t.kl.push_back(stored[g].at("kl").get<std::vector<double>>());
                t.klStdErr.push_back(stored[g].at("kl_stderr").get<std::vector<double>>());
                if (t.kl.back().size() != t.formats.size() || t.klStdErr.back().size() != t.formats.size())
                    throw std::invalid_argument(groups[g].name + " has not one measured KL per format");
            }
            if (stored[g].contains("estimate")) {
                t.estimate.push_back(stored[g].at("estimate").get<std::vector<double>>());
                if (t.estimate.back().size() != t.formats.size())
                    throw std::invalid_argument(groups[g].name + " has not one estimate per format");
            }
        }
        const auto whole = [&](std::size_t n) { return n == 0 || n == groups.size(); };
        if (!whole(t.kl.size()) || !whole(t.estimate.size()) || (t.kl.empty() && t.estimate.empty()))
            throw std::invalid_argument("every group needs the same values: a measured KL, an estimate or both");
        t.groups = groups;
    } catch (const nlohmann::json::exception& e) {
        throw std::runtime_error(path + ": not a sensitivity table of `latmix sensitivity` (" + e.what() + ")");
    } catch (const std::invalid_argument& e) {
        throw std::runtime_error(path + ": " + e.what() + "; measure it again with `latmix sensitivity`");
    }
    return t;
}

quant::BudgetProblem budgetProblem(const SensitivityTable& t, const std::vector<GroupFormat>& resolved, double budget,
                                   bool byEstimate) {
    if (resolved.size() != t.groups.size()) throw std::logic_error("budgetProblem: the scheme is of another model");
    const auto& score = byEstimate ? t.estimate : t.kl;
    if (score.size() != t.groups.size())
        throw std::invalid_argument(byEstimate ? "the sensitivity table has no estimate (it was made with --no-estimate); plan by "
                                                 "the measured KL, or run latmix sensitivity again"
                                               : "the sensitivity table has no measured KL (it was made with --estimate-only); plan "
                                                 "--by estimate, or run latmix sensitivity without --estimate-only");
    quant::BudgetProblem p;
    p.budget = budget;
    for (std::size_t g = 0; g < t.groups.size(); ++g) {
        p.weights.push_back(t.groups[g].weights);
        std::vector<quant::BudgetCandidate> c;
        for (std::size_t k = 0; k < t.formats.size(); ++k) {
            const auto f = parseSchemeFormat(t.formats[k]);
            if (resolved[g].rule >= 0 && schemeFormatName(f) != schemeFormatName(resolved[g].format)) continue;
            c.push_back({quant::bitsPerWeight(f), score[g][k]});
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
