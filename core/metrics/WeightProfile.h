#pragma once
// What the MX weight quantizer sees in one linear layer, before and after a run's transforms are
// folded into it (the workbench's weights view): the weight's magnitude per input channel, and
// the MX round-to-nearest error of every group (SPEC §6: per output row, groups of B along the
// input dimension) as a heat map. One call on the weight matrices; the view only draws it.
#include "mx/MxFormat.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace latmix::metrics {

struct WeightProfileOptions {
    mx::MxConfig format;
    // The heat map has one row per band of output rows (at most this many bands, each the mean of
    // its rows' group errors) and one column per group: a 14336-row down_proj stays drawable.
    int heatmapRows = 128;
    int topChannels = 8; // how many of the largest input-channel magnitudes to name
};

// One weight W [out, in]; float64 CPU tensors.
struct WeightSide {
    at::Tensor inputChannelNorm;           // [in] ‖W[:, j]‖₂: the magnitude each input channel is multiplied with
    at::Tensor inputChannelAbsMax;         // [in] max_i |W_ij|
    std::vector<std::int64_t> topChannels; // largest inputChannelNorm, descending (ties: lower index first)
    // Group error: for row i and group g (columns gB .. gB+B-1, the last one may be shorter),
    // (1/|g|) Σ_j (W_ij − Q(W)_ij)² with Q the MX fake-quantization of each row's groups (RTN).
    at::Tensor groupError;                 // [bands, groups] mean of the group error over each band's rows
    std::vector<std::int64_t> bandStart;   // first output row of each band (bands + 1 entries, last = out)
    at::Tensor columnGroupError;           // [groups] mean over all rows
    double mse = 0;                        // ‖W − Q(W)‖²_F / (out·in)
    double relativeError = 0;              // ‖W − Q(W)‖²_F / ‖W‖²_F (NaN for W = 0)
};

struct WeightProfile {
    std::string name;                      // e.g. "layers.3.mlp.down_proj"
    std::int64_t rows = 0, cols = 0, groups = 0;
    mx::MxConfig format;
    WeightSide before;
    bool hasAfter = false;
    WeightSide after;                      // the folded weight (hasAfter)
};

// before: the weight as the checkpoint stores it; after (undefined: none): the same linear with a
// run's transforms folded in, of the same shape. Throws std::invalid_argument naming `name` for
// a weight that is not a finite 2-D matrix, shapes that differ, or options out of range.
WeightProfile profileWeights(const at::Tensor& before, const at::Tensor& after, const WeightProfileOptions& options,
                             const std::string& name = "weight");

} // namespace latmix::metrics
