// The results table (RunColumns.h).
#include "run/RunColumns.h"

#include "util/Text.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace latmix::run {
namespace {

using RS = RunSummary;
using Number = std::optional<double>;

// A number that is there when present(), as the RunSummary conventions say.
RunColumn number(std::string key, std::string label, std::string description, int digits, int display,
                 std::function<Number(const RS&)> value, double scale = 1) {
    RunColumn c{std::move(key), std::move(label), std::move(description), std::move(value), nullptr, digits, scale, display};
    return c;
}

RunColumn text(std::string key, std::string label, std::string description, int display,
               std::function<std::string(const RS&)> value) {
    RunColumn c{std::move(key), std::move(label), std::move(description), nullptr, std::move(value), 0, 1, display};
    return c;
}

std::string csvField(const std::string& s) {
    if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
    std::string q = "\"";
    for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
}

Number when(bool present, double v) { return present ? Number(v) : std::nullopt; }
Number perplexity(double v) { return when(RS::hasValue(v), v); }

std::vector<RunColumn> makeColumns() {
    return {
        text("dir", "Run", "The run's folder (sweep/cell for a sweep's cells)", 1, [](const RS& r) { return r.dir; }),
        text("method", "Method", "Quantization method", 2, [](const RS& r) { return r.method; }),
        text("format", "Format", "MX format of weights and activations (a scheme's: the format of what no rule names)", 3,
             [](const RS& r) { return r.format; }),
        number("block", "Block", "MX block size", 0, 4, [](const RS& r) { return when(r.block > 0, r.block); }),
        text("scale_mode", "Scale", "How a block's shared scale is chosen (floor, ceil, even)", 0,
             [](const RS& r) { return r.scaleMode; }),
        number("bits_per_weight", "Bits",
               "Average bits per weight of the quantized linears, the block scales counted (MXFP4 4.25, NVFP4 4.5, MXFP8 "
               "8.25, bf16 16): the format's, or a mixed-precision scheme's average",
               2, 5, [](const RS& r) { return when(r.bitsPerWeight > 0, r.bitsPerWeight); }),
        number("steps", "Steps", "Training steps (0: the method learns nothing)", 0, 6,
               [](const RS& r) { return Number(r.steps); }),
        number("seed", "Seed", "The run's seed (windows, initialisation, T3)", 0, 0,
               [](const RS& r) { return Number(double(r.seed)); }),
        text("created", "Date", "When the run was made (UTC)", 15, [](const RS& r) { return r.created; }),
        number("fp_ppl", "FP", "Perplexity of the original model in the same windows", 2, 8,
               [](const RS& r) { return perplexity(r.fpPerplexity); }),
        number("w4a4_ppl", "Quantized",
               "WikiText-2 test perplexity of the quantized model (weights and activations in the run's format: W4A4 "
               "for 4-bit formats, W8A8 for 8-bit ones)",
               2, 7, [](const RS& r) { return perplexity(r.w4a4Perplexity); }),
        number("folded_fp_ppl", "Folded", "Perplexity of the folded, unquantized model (transform-based methods)", 2, 9,
               [](const RS& r) { return perplexity(r.foldedFpPerplexity); }),
        number("weights_only_ppl", "Weights only", "Perplexity with the weights quantized and the activations not", 2, 0,
               [](const RS& r) { return perplexity(r.weightsOnlyPerplexity); }),
        number("kl_mean", "KL",
               "Mean KL(FP ‖ quantized) per token, nats, on the perplexity windows (llama.cpp's KL mode); the run's "
               "report has its 99th percentile and standard error",
               4, 11, [](const RS& r) { return when(r.kl.present(), r.kl.mean); }),
        number("kl_p99", "KL p99", "99th percentile of the per-token KL", 4, 0,
               [](const RS& r) { return when(r.kl.present(), r.kl.p99); }),
        number("top1_agreement", "Top-1", "Tokens whose most likely next token is the FP model's, × 100", 1, 12,
               [](const RS& r) { return when(r.kl.present(), r.kl.top1); }, 100.0),
        number("delta_ppl", "Δppl", "Quantized minus FP perplexity on the KL windows", 4, 0,
               [](const RS& r) { return when(r.kl.present(), r.kl.deltaPpl); }),
        number("delta_ppl_stderr", "Δppl se", "Standard error of Δppl", 4, 0,
               [](const RS& r) { return when(r.kl.present(), r.kl.deltaPplStdErr); }),
        number("recovery", "Recov. %", "FP perplexity / quantized perplexity × 100: 100 = nothing lost", 2, 10,
               [](const RS& r) { return when(RS::hasValue(r.recovery), r.recovery); }, 100.0),
        number("zeroshot_average", "0-shot", "Zero-shot accuracy, average over the tasks evaluated", 3, 13,
               [](const RS& r) { return when(RS::hasValue(r.zeroShotAverage, true), r.zeroShotAverage); }),
        number("final_objective", "Objective", "The training objective at the last step (KL, CE or block MSE)", 4, 0,
               [](const RS& r) { return when(RS::hasValue(r.finalObjective, true), r.finalObjective); }),
        number("train_seconds", "Train s", "Seconds of transform training", 0, 14,
               [](const RS& r) { return when(r.trainSeconds > 0, r.trainSeconds); }),
        number("total_seconds", "Total s", "Seconds of the whole run", 0, 0, [](const RS& r) { return Number(r.totalSeconds); }),
        text("train_series", "Series", "Whether train.h5 holds the training series", 0,
             [](const RS& r) { return std::string(r.hasTrainSeries ? "yes" : "no"); }),
        text("command", "Command", "The command line that made the run", 0, [](const RS& r) { return r.command; }),
        text("model", "Model", "The source model folder", 0, [](const RS& r) { return r.model; }),
    };
}

} // namespace

const std::vector<RunColumn>& runColumns() {
    static const std::vector<RunColumn> columns = makeColumns();
    return columns;
}

std::vector<const RunColumn*> displayedRunColumns() {
    std::vector<const RunColumn*> shown;
    for (const auto& c : runColumns())
        if (c.display > 0) shown.push_back(&c);
    std::sort(shown.begin(), shown.end(), [](const RunColumn* a, const RunColumn* b) { return a->display < b->display; });
    return shown;
}

const RunColumn& runColumn(const std::string& key) {
    for (const auto& c : runColumns())
        if (c.key == key) return c;
    throw std::logic_error("no run column '" + key + "'");
}

std::string cellText(const RunColumn& column, const RunSummary& run) {
    if (column.text) return column.text(run);
    const Number v = column.number(run);
    if (!v) return "";
    char b[64];
    std::snprintf(b, sizeof b, "%.*f", column.digits, *v * column.scale);
    return b;
}

std::vector<std::string> runsCsvColumns() {
    std::vector<std::string> keys;
    for (const auto& c : runColumns()) keys.push_back(c.key);
    return keys;
}

std::string runsCsv(const std::vector<RunSummary>& runs) {
    std::string s = util::joinList(runsCsvColumns(), ",") + "\n";
    for (const auto& r : runs) {
        std::vector<std::string> row;
        for (const auto& c : runColumns()) {
            if (c.text) {
                row.push_back(csvField(c.text(r)));
                continue;
            }
            const Number v = c.number(r);
            row.push_back(v ? util::exactNumber(*v) : std::string());
        }
        s += util::joinList(row, ",") + "\n";
    }
    return s;
}

} // namespace latmix::run
