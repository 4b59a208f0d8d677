#include "report/Report.h"

#include "model/TensorNames.h"
#include "mx/MxFormat.h"

#include "report/SvgPlot.h"
#include "run/RunCatalog.h"
#include "run/RunColumns.h"
#include "train/Distillation.h"
#include "util/AtomicFile.h"
#include "util/Runtime.h"
#include "util/Text.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <utility>
#include <vector>

namespace latmix::report {
namespace {

using util::exactNumber;

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

std::string fmt(const char* f, double v) {
    char b[64];
    std::snprintf(b, sizeof b, f, v);
    return b;
}

// A number cell: shown rounded, exact in data-value; "–" when absent.
std::string numCell(double v, bool present, const char* f, const std::string& attrs = {}) {
    if (!present) return "<td class=\"num absent\"" + attrs + ">–</td>";
    return "<td class=\"num\"" + attrs + " data-value=\"" + exactNumber(v) + "\">" + fmt(f, v) + "</td>";
}

std::string esc(const std::string& s) { return escapeXml(s); }

// The paper's name for the run's quantized model: "W4A4", "W8A8", ... ("quantized" for an unknown format).
std::string precisionOf(const run::RunSummary& s) { return mx::precisionLabel(std::vector<std::string>{s.format}); }

// A latmix.json value as text for the configuration tables.
std::string valueText(const json& v) {
    if (v.is_null()) return "–";
    if (v.is_string()) return v.get<std::string>();
    if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
    return v.dump();
}

// The rows of one latmix.json object.
std::string keyValueTable(const json& obj, const std::string& cls, const std::string& section) {
    std::ostringstream s;
    s << "<table class=\"" << cls << "\" data-section=\"" << esc(section) << "\">\n";
    for (const auto& [k, v] : obj.items())
        s << "<tr data-key=\"" << esc(k) << "\"><th>" << esc(k) << "</th><td>" << esc(valueText(v)) << "</td></tr>\n";
    s << "</table>\n";
    return s.str();
}

const char* const kCss = R"(
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;margin:2em auto;max-width:1000px;padding:0 1em;color:#222;line-height:1.4}
h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.2em;border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.8em}
h3{font-size:1em;margin:1.2em 0 .3em}
p.lead{color:#555;margin-top:0}p.note{color:#555;font-style:italic}
table{border-collapse:collapse;margin:.4em 0 1em}th,td{border:1px solid #ddd;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#f5f5f5;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums;font-family:ui-monospace,Menlo,Consolas,monospace}
td.absent{color:#999}tr.mean td,tr.mean th{border-top:2px solid #999}
table.config td,table.provenance td{font-family:ui-monospace,Menlo,Consolas,monospace;word-break:break-all}
.plots{display:flex;flex-wrap:wrap;gap:1em}figure.plot{margin:0}
svg.plot{font-family:system-ui,sans-serif;font-size:11px;background:#fff}
svg.plot .plot-title{font-size:13px;font-weight:600}svg.plot .grid line{stroke:#eee}
svg.plot .axis rect,svg.plot .axis line{stroke:#555;fill:none}svg.plot .no-data{fill:#999}
.errors-wrap{overflow-x:auto}footer{margin-top:2em;color:#777;font-size:.9em}
)";

// The training plots of a run's series.
std::string trainingPlots(const run::RunSummary& s, const std::string& objective) {
    std::vector<train::DistillStep> steps;
    double foldedStart = std::nan("");
    try {
        steps = train::readDistillSeries(s.trainFile());
        foldedStart = train::readFoldedPerplexityStart(s.trainFile());
    } catch (const std::exception& e) {
        return "<p class=\"note\" id=\"no-training\">training series could not be read: " + esc(e.what()) + "</p>\n";
    }
    if (steps.empty()) return "<p class=\"note\" id=\"no-training\">" + esc(s.trainFile()) + " holds no training steps</p>\n";
    std::vector<double> x;
    for (const auto& st : steps) x.push_back(st.step);
    auto column = [&](double train::DistillStep::*field) {
        std::vector<double> y;
        for (const auto& st : steps) y.push_back(st.*field);
        return y;
    };
    auto finiteCount = [](const std::vector<double>& y) {
        return static_cast<std::size_t>(std::count_if(y.begin(), y.end(), [](double v) { return std::isfinite(v); }));
    };
    std::ostringstream out;
    out << "<div class=\"plots\">\n";
    auto figure = [&](const std::string& id, std::vector<PlotSeries> series, const std::string& title,
                      const std::string& yLabel) {
        bool any = false;
        for (auto& ser : series) {
            const std::size_t n = finiteCount(ser.y);
            any = any || n > 0;
            // A series recorded every k steps (the matrices' metrics, the folded perplexity) is
            // drawn through the steps without a value.
            if (ser.connectGaps) ser.markers = n < ser.y.size() || ser.markers;
        }
        if (!any) return;
        PlotOptions o;
        o.title = title;
        o.xLabel = "step";
        o.yLabel = yLabel;
        o.integerX = true;
        out << "<figure class=\"plot\" id=\"plot-" << id << "\">\n" << svgLinePlot(series, o) << "</figure>\n";
    };
    const std::string objName = objective == "ce" ? "cross-entropy" : objective == "block-mse" ? "block MSE" : "KL";
    figure("loss", {{"loss (" + objName + " + λ·volume)", "loss", x, column(&train::DistillStep::loss)},
                    {objName, "objective", x, column(&train::DistillStep::objective), false, false, true}},
           "Distillation loss and " + objName + " per step", objName == "KL" ? "loss, KL" : "loss, " + objName);
    figure("vol", {{"volume term", "vol", x, column(&train::DistillStep::vol)}}, "Volume term (Σ log|s|)² per step",
           "volume term");
    figure("lr", {{"learning rate", "lr", x, column(&train::DistillStep::lr)}}, "Learning rate per step", "lr");
    {
        std::vector<double> fx = x, fy = column(&train::DistillStep::foldedPerplexity);
        if (std::isfinite(foldedStart)) { // before the first step
            fx.insert(fx.begin(), steps.front().step - 1);
            fy.insert(fy.begin(), foldedStart);
        }
        PlotSeries f{"folded FP perplexity", "folded_ppl", fx, fy, true, true};
        figure("folded_ppl", {f}, "Folded FP perplexity (transforms folded, nothing quantized)", "perplexity");
    }
    for (const char* m : {"a1", "a2"}) {
        const bool a1 = std::string(m) == "a1";
        const std::string A = a1 ? "A1" : "A2 (tracked layer)";
        PlotSeries cond{"κ(" + std::string(a1 ? "A1" : "A2") + ")", std::string(m) + "_cond", x,
                        column(a1 ? &train::DistillStep::a1Condition : &train::DistillStep::a2Condition), true, false};
        PlotSeries orth{"‖AᵀA − I‖", std::string(m) + "_orth", x,
                        column(a1 ? &train::DistillStep::a1Orthogonality : &train::DistillStep::a2Orthogonality), true,
                        false};
        PlotSeries off{"off-block norm", std::string(m) + "_offblock", x,
                       column(a1 ? &train::DistillStep::a1OffBlock : &train::DistillStep::a2OffBlock), true, false, true};
        figure(std::string(m) + "_cond", {cond}, "Condition number of " + A, "κ");
        figure(std::string(m) + "_orth", {orth, off}, "Orthogonality deviation and off-block norm of " + A, "spectral norm");
    }
    out << "</div>\n";
    return out.str();
}

std::string weightErrors(const run::RunSummary& s) {
    if (s.linears.empty()) return "<p class=\"note\" id=\"no-weight-errors\">latmix.json lists no per-linear errors</p>\n";
    std::vector<std::string> names;
    // Experts: one column per kind, the mean over a layer's experts (model::names::linearKind).
    std::map<int, std::map<std::string, std::pair<double, int>>> sumsByLayer;
    for (const auto& L : s.linears) {
        const std::string kind = model::names::linearKind(L.linear);
        if (std::find(names.begin(), names.end(), kind) == names.end()) names.push_back(kind);
        auto& cell = sumsByLayer[L.layer][kind];
        cell.first += L.relativeError;
        cell.second += 1;
    }
    std::map<int, std::map<std::string, double>> byLayer;
    for (const auto& [layer, row] : sumsByLayer)
        for (const auto& [kind, sum] : row) byLayer[layer][kind] = sum.first / sum.second;
    std::ostringstream out;
    out << "<div class=\"errors-wrap\"><table class=\"errors\" id=\"weight-errors\">\n<tr><th>layer</th>";
    for (const auto& n : names) out << "<th>" << esc(n) << "</th>";
    out << "</tr>\n";
    std::map<std::string, std::pair<double, int>> sums;
    for (const auto& [layer, row] : byLayer) {
        out << "<tr data-layer=\"" << layer << "\"><th>" << layer << "</th>";
        for (const auto& n : names) {
            auto it = row.find(n);
            const bool present = it != row.end() && std::isfinite(it->second);
            out << numCell(present ? it->second : 0, present, "%.4g", " data-linear=\"" + esc(n) + "\"");
            if (present) sums[n].first += it->second, sums[n].second += 1;
        }
        out << "</tr>\n";
    }
    out << "<tr class=\"mean\"><th>mean</th>";
    for (const auto& n : names) {
        const auto& [sum, count] = sums[n];
        out << numCell(count ? sum / count : 0, count > 0, "%.4g", " data-linear=\"" + esc(n) + "\"");
    }
    out << "</tr>\n</table></div>\n";
    std::vector<PlotSeries> series;
    for (const auto& n : names) {
        PlotSeries ser;
        ser.name = ser.key = n;
        ser.markers = true;
        for (const auto& [layer, row] : byLayer) {
            auto it = row.find(n);
            ser.x.push_back(layer);
            ser.y.push_back(it != row.end() ? it->second : std::nan(""));
        }
        series.push_back(std::move(ser));
    }
    PlotOptions o;
    o.title = "Relative weight error per layer";
    o.xLabel = "layer";
    o.yLabel = "relative error";
    o.integerX = true;
    o.width = 720;
    o.height = 340;
    out << "<figure class=\"plot\" id=\"plot-weight-errors\">\n" << svgLinePlot(series, o) << "</figure>\n";
    return out.str();
}

const json* sectionOf(const json& j, const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_object() ? &*it : nullptr;
}

// Perplexities, recovery and the objective's first and last values.
void writeResults(std::ostringstream& h, const run::RunSummary& s, const std::string& objective) {
    const bool evaluated = s.fpPerplexity > 0 || s.w4a4Perplexity > 0;
    if (evaluated) {
        h << "<p>WikiText-2 test perplexity, sequence length " << s.evalSeqLen << ", "
          << (s.evalWindows > 0 ? std::to_string(s.evalWindows) + " windows" : std::string("all windows")) << ".</p>\n";
    } else {
        h << "<p class=\"note\">Perplexity not evaluated (the run was made without --eval-seqlen).</p>\n";
    }
    h << "<table class=\"results\" id=\"results-table\">\n<tr><th>quantity</th><th>value</th></tr>\n";
    auto row = [&](const std::string& key, const std::string& label, double v, bool present, const char* f) {
        h << "<tr data-key=\"" << esc(key) << "\"><th>" << esc(label) << "</th>" << numCell(v, present, f) << "</tr>\n";
    };
    using RS = run::RunSummary;
    // The run's bits per weight: the runs table's column (run/RunColumns.h), its words and digits.
    const run::RunColumn& bits = run::runColumn("bits_per_weight");
    if (const auto v = bits.number(s)) row(bits.key, "bits per weight (the block scales counted)", *v, true, "%.2f");
    row("fp", "FP perplexity (original model)", s.fpPerplexity, RS::hasValue(s.fpPerplexity), "%.3f");
    if (RS::hasValue(s.foldedFpPerplexity))
        row("folded_fp", "folded FP perplexity (transforms folded, nothing quantized)", s.foldedFpPerplexity, true, "%.3f");
    row("weights_only", "weights-only perplexity (quantized weights, FP activations)", s.weightsOnlyPerplexity,
        RS::hasValue(s.weightsOnlyPerplexity), "%.3f");
    const std::string precision = precisionOf(s);
    row("w4a4", precision + " perplexity (quantized weights and activations)", s.w4a4Perplexity,
        RS::hasValue(s.w4a4Perplexity), "%.3f");
    h << "<tr data-key=\"recovery\"><th>recovery (FP / " << precision << " perplexity)</th>"
      << (RS::hasValue(s.recovery) ? "<td class=\"num\" data-value=\"" + exactNumber(s.recovery) + "\">" +
                                         fmt("%.2f %%", 100 * s.recovery) + "</td>"
                                   : std::string("<td class=\"num absent\">–</td>"))
      << "</tr>\n";
    if (s.kl.present()) { // SPEC §7, as llama.cpp's KL mode reports them
        auto withError = [&](const std::string& key, const std::string& label, double v, double se, const char* f) {
            h << "<tr data-key=\"" << esc(key) << "\"><th>" << esc(label) << "</th><td class=\"num\" data-value=\""
              << exactNumber(v) << "\" data-stderr=\"" << exactNumber(se) << "\">" << fmt(f, v) << " ± " << fmt(f, se)
              << "</td></tr>\n";
        };
        withError("kl_mean", "mean KL(FP ‖ " + precision + ") per token (nats)", s.kl.mean, s.kl.stdErr, "%.5f");
        row("kl_p99", "99th percentile of the per-token KL", s.kl.p99, true, "%.5f");
        withError("top1_agreement", "top-1 agreement (same most likely next token as FP)", s.kl.top1, s.kl.top1StdErr, "%.4f");
        withError("delta_ppl", "Δ perplexity (" + precision + " − FP)", s.kl.deltaPpl, s.kl.deltaPplStdErr, "%.3f");
    }
    if (RS::hasValue(s.firstObjective, true)) row("first_objective", "first step's " + std::string(objective == "kl" ? "KL" : objective), s.firstObjective, true, "%.6g");
    if (RS::hasValue(s.finalObjective, true)) row("final_objective", "last step's " + std::string(objective == "kl" ? "KL" : objective), s.finalObjective, true, "%.6g");
    if (RS::hasValue(s.zeroShotAverage, true)) row("zeroshot_average", "zero-shot average accuracy", s.zeroShotAverage, true, "%.4f");
    h << "</table>\n<p class=\"note\">Recovery is FP perplexity over " << precision
      << " perplexity: the inverse of the quantized/FP accuracy ratio that quantized-model cards report, since lower "
         "perplexity is better (100 % = nothing lost).";
    if (s.kl.present())
        h << " The KL rows compare both models token by token on the same " << s.kl.tokens
          << " predicted tokens; ± is one standard error (Δ perplexity: delta method with the two models' covariance).";
    h << "</p>\n";
}

// Zero-shot accuracies of the quantized model, when evaluated.
void writeZeroShot(std::ostringstream& h, const run::RunSummary& s) {
    using RS = run::RunSummary;
    if (!s.zeroShot.empty()) {
        h << "<h3>Zero-shot tasks (" << precisionOf(s) << " model)</h3>\n<table class=\"zeroshot\" id=\"zeroshot-table\">\n"
          << "<tr><th>task</th><th>n</th><th>acc</th><th>acc_norm</th><th>perplexity</th></tr>\n";
        for (const auto& t : s.zeroShot) {
            const std::string k = " data-key=\"zeroshot:" + esc(t.task) + ":";
            h << "<tr data-task=\"" << esc(t.task) << "\"><th>" << esc(t.task) << "</th><td class=\"num\">" << t.n << "</td>"
              << numCell(t.acc, std::isfinite(t.acc), "%.4f", k + "acc\"")
              << numCell(t.accNorm, std::isfinite(t.accNorm), "%.4f", k + "acc_norm\"")
              << numCell(t.perplexity, std::isfinite(t.perplexity), "%.3f", k + "perplexity\"") << "</tr>\n";
        }
        h << "<tr class=\"mean\"><th>average</th><td></td>"
          << numCell(s.zeroShotAverage, RS::hasValue(s.zeroShotAverage, true), "%.4f", " data-key=\"zeroshot:average\"")
          << "<td colspan=\"2\">acc_norm where reported, else acc</td></tr>\n</table>\n";
    }
}

// The stages' seconds and the peaks of memory.
void writeTimes(std::ostringstream& h, const json& j) {
    if (const json* sec = sectionOf(j, "seconds")) {
        h << "<h3>Time</h3>\n<table class=\"seconds\" id=\"seconds-table\">\n";
        for (const auto& [k, v] : sec->items())
            h << "<tr data-key=\"seconds:" << esc(k) << "\"><th>" << esc(k) << "</th>"
              << numCell(v.is_number() ? v.get<double>() : 0, v.is_number(), "%.1f s") << "</tr>\n";
        if (j.contains("peak_rss_mb") && j["peak_rss_mb"].is_number())
            h << "<tr data-key=\"peak_rss_mb\"><th>peak resident memory</th>" << numCell(j["peak_rss_mb"].get<double>(), true, "%.0f MiB") << "</tr>\n";
        if (j.contains("peak_gpu_mb") && j["peak_gpu_mb"].is_number())
            h << "<tr data-key=\"peak_gpu_mb\"><th>peak GPU memory</th>" << numCell(j["peak_gpu_mb"].get<double>(), true, "%.0f MiB") << "</tr>\n";
        for (const auto& [key, what] : {std::pair{"peak_rss_mb", "peak resident memory"}, std::pair{"peak_gpu_mb", "peak GPU memory"}}) {
            const auto byStage = j.find(std::string(key) + "_by_stage");
            if (byStage == j.end() || !byStage->is_object()) continue;
            for (const auto& [stage, v] : byStage->items())
                h << "<tr data-key=\"" << key << ":" << esc(stage) << "\"><th>" << what << ", " << esc(stage) << "</th>"
                  << numCell(v.is_number() ? v.get<double>() : 0, v.is_number(), "%.0f MiB") << "</tr>\n";
        }
        h << "</table>\n";
    }
}

void writeTraining(std::ostringstream& h, const run::RunSummary& s, const json* training, const std::string& objective) {
    h << "<section id=\"training\">\n<h2>Training</h2>\n";
    if (s.hasTrainSeries) {
        h << "<p>" << s.steps << " steps; the series of <code>" << esc(s.trainFile()) << "</code>.</p>\n" << trainingPlots(s, objective);
    } else if (s.steps > 0 || training) {
        h << "<p class=\"note\" id=\"no-training\">no training series: " << esc(s.trainFile()) << " is missing</p>\n";
    } else {
        h << "<p class=\"note\" id=\"no-training\">no training series (method " << esc(s.method) << " learns nothing)</p>\n";
    }
    h << "</section>\n";
}

// The recorded configuration, section by section.
void writeConfiguration(std::ostringstream& h, const json& j) {
    h << "<section id=\"configuration\">\n<h2>Configuration</h2>\n";
    for (const char* key : {"format", "transforms", "training", "weight_quantization", "calibration"}) {
        h << "<h3>" << key << "</h3>\n";
        if (const json* sec = sectionOf(j, key)) h << keyValueTable(*sec, "config", key);
        else if (std::string(key) == "transforms") h << "<p class=\"note\">none: the method folds no transform</p>\n";
        else if (std::string(key) == "training") h << "<p class=\"note\">none: the method learns nothing</p>\n";
        else h << "<p class=\"note\">not recorded</p>\n";
    }
    h << "</section>\n";
}

void writeProvenance(std::ostringstream& h, const json& j, const std::string& runDir) {
    h << "<section id=\"provenance\">\n<h2>Provenance</h2>\n";
    json p = json::object();
    p["run folder"] = runDir;
    for (const char* key : {"latmix_version", "libtorch_version", "created", "command", "model", "method", "device",
                            "devices", "world_size", "offload", "seed"})
        if (j.contains(key)) p[key] = j[key];
    h << keyValueTable(p, "provenance", "provenance") << "</section>\n";
}

} // namespace

std::string runReportHtml(const std::string& runDir) {
    const run::RunSummary s = run::readRunSummary(runDir); // throws naming RUN_DIR/latmix.json
    json j;
    try {
        j = json::parse(util::readTextFile(s.latmixJson(), "run record"));
    } catch (const json::exception& e) {
        throw std::runtime_error(s.latmixJson() + ": not JSON (" + e.what() + "); run the run again");
    }
    const json* training = sectionOf(j, "training");
    const std::string objective =
        training && training->contains("loss") && (*training)["loss"].is_string() ? (*training)["loss"].get<std::string>() : "kl";

    std::string title = "LATMiX run: " + s.method + (s.format.empty() ? "" : ", " + s.format);
    std::ostringstream h;
    h << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      << "<meta name=\"generator\" content=\"latmix " << esc(latmixVersion()) << "\">\n"
      << "<title>" << esc(title) << "</title>\n<style>" << kCss << "</style>\n</head>\n<body>\n";
    h << "<header>\n<h1>" << esc(title);
    if (s.block > 0) h << " <small>(block " << s.block << (s.scaleMode.empty() ? "" : ", scale " + esc(s.scaleMode)) << ")</small>";
    h << "</h1>\n<p class=\"lead\">" << esc(s.methodDescription.empty() ? s.method : s.methodDescription) << " — run folder <code>"
      << esc(runDir) << "</code>" << (s.created.empty() ? "" : ", " + esc(s.created)) << "</p>\n</header>\n";

    h << "<section id=\"results\">\n<h2>Results</h2>\n";
    writeResults(h, s, objective);
    writeZeroShot(h, s);
    writeTimes(h, j);
    h << "</section>\n";
    writeTraining(h, s, training, objective);
    h << "<section id=\"weights\">\n<h2>Weight quantization errors</h2>\n"
      << "<p>Relative error of each quantized linear, tr((W−Q) H (W−Q)ᵀ) / tr(W H Wᵀ) with H the layer's "
         "calibration Hessian.</p>\n"
      << weightErrors(s) << "</section>\n";

    writeConfiguration(h, j);
    writeProvenance(h, j, runDir);
    h << "<footer>Written by <code>latmix report</code> (latmix " << esc(latmixVersion()) << ", libtorch "
      << esc(libtorchVersion()) << ") from <code>" << esc(s.latmixJson()) << "</code>"
      << (s.hasTrainSeries ? " and <code>" + esc(s.trainFile()) + "</code>" : std::string()) << ".</footer>\n";
    h << "</body>\n</html>\n";
    return h.str();
}

void writeRunReport(const std::string& runDir, const std::string& outHtml, JobContext& job) {
    job.progress(0, "reading " + runDir);
    const std::string html = runReportHtml(runDir); // before anything is written: a bad run leaves no file
    job.checkCancelled();
    job.progress(0.8, "writing " + outHtml);
    const fs::path parent = fs::path(outHtml).parent_path();
    std::error_code ec;
    if (!parent.empty() && !fs::is_directory(parent, ec)) {
        fs::create_directories(parent, ec);
        if (ec) throw std::runtime_error("cannot create the folder '" + parent.string() + "' for " + outHtml + ": " + ec.message());
    }
    util::writeFileAtomically(outHtml, html);
    job.progress(1, "wrote " + outHtml);
}

} // namespace latmix::report
