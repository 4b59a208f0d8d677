#pragma once
// A run's results as one table (issue 72): each column says once where its value comes from (a
// RunSummary field, read from latmix.json by run/RunCatalog), its CSV name, its header and what it
// means. `latmix runs --csv` writes every column in this order; `latmix runs` prints and the
// workbench's Runs view draws the displayed ones, in their display order. A new result is one
// row here (and its field in RunSummary).
#include "run/RunCatalog.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace latmix::run {

struct RunColumn {
    std::string key;         // the CSV header: "w4a4_ppl"
    std::string label;       // a printed or drawn table's header: "Quantized"
    std::string description; // what it holds (the Runs view's tool tip, `latmix runs --help`)
    // A number column's value, nullopt where the run has none (RunSummary::hasValue); null for
    // text columns.
    std::function<std::optional<double>(const RunSummary&)> number;
    std::function<std::string(const RunSummary&)> text; // a text column's value; null for numbers
    int digits = 0;     // digits after the point where a table shows the number
    double scale = 1;   // the number shown × scale (100: a fraction as a percentage)
    int display = 0;    // position in printed and drawn tables (1, 2, ...); 0: the CSV only
};

// Every column, in the CSV's order.
const std::vector<RunColumn>& runColumns();
// The displayed columns, in their display order.
std::vector<const RunColumn*> displayedRunColumns();
// The column with this key; throws std::logic_error for a key no column has.
const RunColumn& runColumn(const std::string& key);
// A displayed cell: the number scaled with the column's digits, the text as it is, "" when absent.
std::string cellText(const RunColumn& column, const RunSummary& run);

// The runs as CSV (RFC 4180): a header line (the columns' keys), one row a run; fields holding a
// comma, a quote or a line break are quoted (quotes doubled); absent numbers are empty fields;
// numbers are written unscaled, with as many digits as they need to read back exactly.
std::string runsCsv(const std::vector<RunSummary>& runs);
// The CSV's columns, in order (the header line's names).
std::vector<std::string> runsCsvColumns();

} // namespace latmix::run
