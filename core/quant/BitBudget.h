#pragma once
// Mixed precision under a bit budget (docs/spec.md, "Mixed precision"): the storage cost of a
// format in bits per weight, and the exact choice of one format per fusion group that minimises
// the predicted KL (the groups' sensitivities summed, as AutoScheme and ModelOpt's AutoQuantize
// add theirs) with the average bits per weight at most the budget. Plain C++, no libtorch.
#include "mx/MxFormat.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace latmix::quant {

// Bits one weight costs in a format, its block's shared scale spread over the block: element
// bits + 8 / block (an E8M0 or E4M3 scale byte per block). MXFP4 4.25, NVFP4 4.5 (its per-tensor
// FP32 scale, 32 bits a tensor, is not counted), MXFP8 / MXINT8 8.25; a kept linear (nullopt,
// stored in bf16) 16.
double bitsPerWeight(const std::optional<mx::MxConfig>& format);

// One candidate of a group: its bits per weight and the KL it is predicted to add.
struct BudgetCandidate {
    double bits = 0;
    double predictedKl = 0;
};

// groups[g]: the candidates of group g (one only: the user's rule fixed it); weights[g]: its
// weight count. budget: average bits per weight over all groups' weights.
struct BudgetProblem {
    std::vector<std::int64_t> weights;
    std::vector<std::vector<BudgetCandidate>> candidates;
    double budget = 0;
};

struct BudgetSolution {
    std::vector<int> choice;  // index into candidates[g], per group
    double bits = 0;          // average bits per weight of the choice
    double predictedKl = 0;   // sum of the chosen candidates' predictedKl
};

// The least and the most average bits the candidates can reach.
struct BitRange {
    double least = 0, most = 0;
};
BitRange reachableBits(const BudgetProblem& p);

// The choice of least predicted KL whose average bits are at most the budget; among equal KL the
// fewer bits. Exact: a dynamic programme over the groups keeping every (bits, KL) pair no other
// pair beats in both (the Pareto front); bits are counted exactly in 1/256 of a bit per weight
// (every block size up to 2048 divides it). Throws std::invalid_argument naming the reachable
// range when the budget is outside it, and when the problem is malformed.
BudgetSolution solveBudget(const BudgetProblem& p);

// The Pareto front of the whole problem: every (bits, KL) point no other choice beats in both,
// by increasing bits (the curve the workbench draws; solveBudget picks one point of it).
std::vector<BudgetSolution> paretoFront(const BudgetProblem& p);

} // namespace latmix::quant
