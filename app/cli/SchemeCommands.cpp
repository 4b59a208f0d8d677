// latmix sensitivity / plan: which fusion groups deserve the bits, and the scheme a bit budget buys
// (docs/spec.md, "Mixed precision").
#include "cli/CliProgress.h"
#include "cli/Commands.h"
#include "util/AtomicFile.h"
#include "util/DataPath.h"

#include "model/Checkpoint.h"
#include "quant/BitBudget.h"
#include "run/FormatScheme.h"
#include "run/Sensitivity.h"
#include "tokenizer/Tokenizer.h"

#include <cstdio>
#include <memory>
#include <sstream>

namespace latmix::cli {
namespace {

struct SensitivityCliOptions {
    run::SensitivityRequest r;
    std::string formats = "mxfp4,mxfp8", calib, out;
};

std::vector<std::string> splitCommas(const std::string& s) {
    std::vector<std::string> r;
    std::stringstream in(s);
    for (std::string part; std::getline(in, part, ',');)
        if (!part.empty()) r.push_back(part);
    return r;
}

int runSensitivity(SensitivityCliOptions o) {
    o.r.formats = splitCommas(o.formats);
    for (const auto& f : o.r.formats) run::parseSchemeFormat(f); // refused before the model loads
    {
        const auto ck = model::Checkpoint::load(o.r.modelDir);
        CliProgress check("check");
        model::checkWeightsFinite(ck, check);
    }
    const auto tok = tokenizer::Tokenizer::loadFromDir(o.r.modelDir);
    // Calibration text, never the test text (SPEC §5).
    o.r.calibrationSource = util::calibrationTextFile(o.calib);
    o.r.calibrationIds = tok->encode(util::readTextFile(o.r.calibrationSource, "calibration text"), false);
    CliProgress progress("sensitivity");
    const auto t = run::measureSensitivity(o.r, progress);
    std::printf("model        %s: %zu fusion groups, %d windows of %d tokens of %s (%lld tokens a measurement), %.1f s\n",
                t.model.c_str(), t.groups.size(), t.windows, t.seqLen, t.calibration.c_str(), static_cast<long long>(t.tokens),
                t.seconds);
    if (!t.kl.empty()) {
        std::printf("KL to the full-precision model with one group quantized, nats per token\n%-28s %12s", "group", "weights");
        for (const auto& f : t.formats) std::printf(" %12s", f.c_str());
        std::printf("\n");
        for (std::size_t g = 0; g < t.groups.size(); ++g) {
            std::printf("%-28s %12lld", t.groups[g].name.c_str(), static_cast<long long>(t.groups[g].weights));
            for (double kl : t.kl[g]) std::printf(" %12.6f", kl);
            std::printf("\n");
        }
    }
    if (!t.estimate.empty()) {
        std::printf("estimate, sum |gradient of the calibration cross-entropy x quantization error| (%.1f s, one forward "
                    "and backward pass)\n%-28s", t.estimateSeconds, "group");
        for (std::size_t k = 0; k + 1 < t.formats.size(); ++k) std::printf(" %12s", t.formats[k].c_str());
        std::printf("\n");
        for (std::size_t g = 0; g < t.groups.size(); ++g) {
            std::printf("%-28s", t.groups[g].name.c_str());
            for (std::size_t k = 0; k + 1 < t.formats.size(); ++k) std::printf(" %12.6g", t.estimate[g][k]);
            std::printf("\n");
        }
        for (std::size_t k = 0; k < t.rankCorrelation.size(); ++k)
            std::printf("rank correlation of the estimate with the measured KL over the groups, %s: %.3f\n", t.formats[k].c_str(),
                        t.rankCorrelation[k]);
    }
    util::writeFileAtomically(o.out, run::sensitivityJson(t));
    std::printf("wrote %s\n", o.out.c_str());
    return 0;
}

struct PlanCliOptions {
    std::string sensitivity, scheme, out, by = "measured";
    double budget = 0;
};

int runPlan(const PlanCliOptions& o) {
    const auto table = run::readSensitivity(o.sensitivity);
    const auto ck = model::Checkpoint::load(table.model);
    const auto rules = o.scheme.empty() ? std::vector<run::SchemeRule>{} : run::readSchemeRules(o.scheme);
    // The groups no rule names are the solver's; the runs' format there does not matter.
    const auto resolved = run::resolveScheme(ck.config(), rules, std::nullopt);
    const bool byEstimate = o.by == "estimate";
    const auto problem = run::budgetProblem(table, resolved, o.budget, byEstimate);
    const char* unit = byEstimate ? "score (estimate)" : "KL";
    const auto solution = quant::solveBudget(problem);
    const auto chosen = run::chosenScheme(table, resolved, solution);
    std::printf("model        %s, sensitivity %s (%d windows of %d tokens)\n", table.model.c_str(), o.sensitivity.c_str(),
                table.windows, table.seqLen);
    const auto range = quant::reachableBits(problem);
    std::printf("budget       %.4g bits per weight (reachable %.4g to %.4g); %zu groups, %zu fixed by the scheme's rules\n",
                o.budget, range.least, range.most, chosen.size(),
                static_cast<std::size_t>(std::count_if(resolved.begin(), resolved.end(), [](const auto& g) { return g.rule >= 0; })));
    std::printf("%-28s %12s %8s %12s\n", "group", "weights", "format", byEstimate ? "estimate" : "KL");
    for (std::size_t g = 0; g < chosen.size(); ++g)
        std::printf("%-28s %12lld %8s %12.6f%s\n", chosen[g].group.name.c_str(), static_cast<long long>(chosen[g].group.weights),
                    run::schemeFormatName(chosen[g].format).c_str(),
                    problem.candidates[g][static_cast<std::size_t>(solution.choice[g])].predictedKl,
                    chosen[g].rule >= 0 ? "  (rule)" : "");
    std::printf("scheme       %.4f bits per weight, predicted %s %.6g (the groups' values summed)\n", solution.bits, unit,
                solution.predictedKl);
    // The uniform schemes beside it, from the same table.
    for (std::size_t k = 0; k < table.formats.size(); ++k) {
        double kl = 0;
        for (std::size_t g = 0; g < table.groups.size(); ++g) kl += (byEstimate ? table.estimate : table.kl)[g][k];
        std::printf("uniform      %-8s %.4f bits per weight, predicted %s %.6g\n", table.formats[k].c_str(),
                    quant::bitsPerWeight(run::parseSchemeFormat(table.formats[k])), unit, kl);
    }
    if (!o.out.empty()) {
        std::ostringstream head;
        head << "# latmix plan --sensitivity " << o.sensitivity << " --budget " << o.budget << " --by " << o.by << "\n# "
             << solution.bits << " bits per weight, predicted " << unit << " " << solution.predictedKl << " (model "
             << table.model << ")\n";
        util::writeFileAtomically(o.out, head.str() + run::schemeRulesText(run::rulesNamingEachGroup(chosen)));
        std::printf("wrote %s\n", o.out.c_str());
    }
    return 0;
}

} // namespace

Runner addSensitivityCommand(CLI::App& app) {
    auto o = std::make_shared<SensitivityCliOptions>();
    auto* cmd = app.add_subcommand("sensitivity", "KL to the full-precision model of each fusion group quantized alone, "
                                                  "per candidate format, on calibration windows");
    cmd->add_option("--model", o->r.modelDir, "Hugging Face model folder (full precision)")->required();
    cmd->add_option("--formats", o->formats, "candidate formats, comma-separated (" + run::schemeFormatNames() +
                                                 "; bf16 is always one)")
        ->capture_default_str();
    cmd->add_option("--samples", o->r.windows, "calibration windows")->capture_default_str()->check(CLI::PositiveNumber);
    cmd->add_option("--seqlen", o->r.seqLen, "tokens per window")->capture_default_str()->check(CLI::Range(2, 1 << 20));
    cmd->add_option("--calib", o->calib, "calibration text (default LATMIX_DATA_DIR/wikitext-2/wiki.valid.tokens)");
    cmd->add_option("--dtype", o->r.dtype, "float32 or bfloat16")->capture_default_str();
    cmd->add_option("--device", o->r.device, "cpu, cuda, cuda:N")->capture_default_str();
    cmd->add_flag("!--no-estimate", o->r.estimate, "measure only: no first-order estimate (its one forward and backward "
                                                   "pass) beside the measured KL");
    cmd->add_flag("!--estimate-only", o->r.measure, "the first-order estimate alone (one forward and backward pass; for "
                                                    "models where groups x formats passes take too long): plan --by estimate");
    cmd->add_option("--out", o->out, "the table, JSON (latmix plan reads it)")->required();
    return [o] { return runSensitivity(*o); };
}

Runner addPlanCommand(CLI::App& app) {
    auto o = std::make_shared<PlanCliOptions>();
    auto* cmd = app.add_subcommand("plan", "the scheme of least predicted KL under a bit budget, from a sensitivity table");
    cmd->add_option("--sensitivity", o->sensitivity, "table written by latmix sensitivity")->required();
    cmd->add_option("--budget", o->budget, "average bits per weight of the quantized linears, scales counted "
                                           "(mxfp4 4.25, nvfp4 4.5, mxfp8 8.25, bf16 16)")
        ->required();
    cmd->add_option("--scheme", o->scheme, "rules the plan keeps (file or 'REGEX = FORMAT; ...'): the groups they name are "
                                           "not the solver's");
    cmd->add_option("--by", o->by, "what predicts a group's cost: the measured KL, or the first-order estimate")
        ->capture_default_str()
        ->check(CLI::IsMember({"measured", "estimate"}));
    cmd->add_option("--out", o->out, "write the scheme (one rule a group) to this file");
    return [o] { return runPlan(*o); };
}

} // namespace latmix::cli
