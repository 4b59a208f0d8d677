#include "quant/BitBudget.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace latmix::quant {

double bitsPerWeight(const std::optional<mx::MxConfig>& format) {
    if (!format) return 16.0;
    return mx::elementSpec(format->element()).bits + 8.0 / format->blockSize;
}

namespace {

constexpr double kUnitsPerBit = 256.0;

// Bits per weight as an exact count of 1/256 bits; refuses what that cannot hold.
std::int64_t bitUnits(double bits) {
    const double u = bits * kUnitsPerBit;
    if (!(u >= 0) || std::abs(u - std::round(u)) > 1e-6)
        throw std::invalid_argument("bit budget: " + std::to_string(bits) + " bits per weight is not a multiple of 1/256");
    return static_cast<std::int64_t>(std::llround(u));
}

void check(const BudgetProblem& p) {
    if (p.weights.size() != p.candidates.size() || p.weights.empty())
        throw std::invalid_argument("bit budget: one weight count and one candidate list per group, at least one group");
    for (std::size_t g = 0; g < p.weights.size(); ++g)
        if (p.weights[g] <= 0 || p.candidates[g].empty())
            throw std::invalid_argument("bit budget: group " + std::to_string(g) + " has no weights or no candidate format");
}

std::int64_t totalWeights(const BudgetProblem& p) {
    std::int64_t n = 0;
    for (auto w : p.weights) n += w;
    return n;
}

// One point of a stage's front: total cost so far, KL so far, and how it was reached.
struct State {
    std::int64_t cost;
    double kl;
    int parent; // index in the previous stage's front
    int choice; // candidate of this stage's group
};

// The fronts of every stage (stage g: groups 0..g chosen), each pruned to the pairs no other
// beats, and to cost <= cap.
std::vector<std::vector<State>> fronts(const BudgetProblem& p, std::int64_t cap) {
    std::vector<std::vector<State>> stages;
    std::vector<State> prev{{0, 0.0, -1, -1}};
    for (std::size_t g = 0; g < p.candidates.size(); ++g) {
        std::vector<State> next;
        next.reserve(prev.size() * p.candidates[g].size());
        for (std::size_t s = 0; s < prev.size(); ++s)
            for (std::size_t c = 0; c < p.candidates[g].size(); ++c) {
                const auto& cand = p.candidates[g][c];
                const std::int64_t cost = prev[s].cost + p.weights[g] * bitUnits(cand.bits);
                if (cost <= cap) next.push_back({cost, prev[s].kl + cand.predictedKl, static_cast<int>(s), static_cast<int>(c)});
            }
        std::sort(next.begin(), next.end(), [](const State& a, const State& b) {
            return a.cost != b.cost ? a.cost < b.cost : a.kl < b.kl;
        });
        std::vector<State> kept;
        double best = std::numeric_limits<double>::infinity();
        for (const auto& s : next)
            if (s.kl < best) { // cheaper states came first: one that does not lower the KL is beaten
                kept.push_back(s);
                best = s.kl;
            }
        stages.push_back(kept);
        prev = std::move(kept);
    }
    return stages;
}

BudgetSolution trace(const BudgetProblem& p, const std::vector<std::vector<State>>& stages, int last) {
    BudgetSolution r;
    r.choice.assign(p.candidates.size(), 0);
    const State& end = stages.back()[static_cast<std::size_t>(last)];
    r.bits = static_cast<double>(end.cost) / kUnitsPerBit / static_cast<double>(totalWeights(p));
    int at = last;
    for (std::size_t g = stages.size(); g-- > 0;) {
        const State& s = stages[g][static_cast<std::size_t>(at)];
        r.choice[g] = s.choice;
        at = s.parent;
    }
    // The KL summed again in group order, so that equal choices give bit-equal sums.
    for (std::size_t g = 0; g < r.choice.size(); ++g) r.predictedKl += p.candidates[g][static_cast<std::size_t>(r.choice[g])].predictedKl;
    return r;
}

} // namespace

BitRange reachableBits(const BudgetProblem& p) {
    check(p);
    double least = 0, most = 0;
    for (std::size_t g = 0; g < p.weights.size(); ++g) {
        double lo = std::numeric_limits<double>::infinity(), hi = 0;
        for (const auto& c : p.candidates[g]) lo = std::min(lo, c.bits), hi = std::max(hi, c.bits);
        least += lo * static_cast<double>(p.weights[g]);
        most += hi * static_cast<double>(p.weights[g]);
    }
    const double n = static_cast<double>(totalWeights(p));
    return {least / n, most / n};
}

BudgetSolution solveBudget(const BudgetProblem& p) {
    const BitRange range = reachableBits(p);
    const double n = static_cast<double>(totalWeights(p));
    auto refuse = [&](const char* where) {
        std::ostringstream s;
        s << "a budget of " << p.budget << " bits per weight is " << where << " what the candidate formats reach: "
          << range.least << " to " << range.most << " bits per weight";
        throw std::invalid_argument(s.str());
    };
    if (!(p.budget <= range.most + 1e-9)) refuse("above");
    // The cap in exact units; a budget a hair under the least (decimal input) still reaches it.
    const auto cap = static_cast<std::int64_t>(std::floor(p.budget * kUnitsPerBit * n + 1e-6 * n));
    const auto stages = fronts(p, cap);
    if (stages.back().empty()) refuse("below");
    // The last stage's front is sorted by cost with falling KL: its last point has the least KL.
    return trace(p, stages, static_cast<int>(stages.back().size()) - 1);
}

std::vector<BudgetSolution> paretoFront(const BudgetProblem& p) {
    check(p);
    const auto stages = fronts(p, std::numeric_limits<std::int64_t>::max());
    std::vector<BudgetSolution> r;
    for (std::size_t i = 0; i < stages.back().size(); ++i) r.push_back(trace(p, stages, static_cast<int>(i)));
    return r;
}

} // namespace latmix::quant
