// Routing and expert mixing of the mixture-of-experts MLP. The order of operations follows
// transformers' Qwen3MoeSparseMoeBlock and MixtralSparseMoeBlock (4.5x): logits in the model dtype,
// float32 softmax, top-k, optional renormalisation in float32, weights cast to the hidden dtype,
// each expert on the tokens routed to it, its output times the weight added into a zero buffer.
#include "model/MixtureOfExperts.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace latmix::model {

Routing routeTokens(const MoeConfig& moe, const at::Tensor& router, const at::Tensor& x) {
    if (router.dim() != 2 || router.size(0) != moe.numExperts || router.size(1) != x.size(-1))
        throw std::invalid_argument("routeTokens: router must be [" + std::to_string(moe.numExperts) + ", " +
                                    std::to_string(x.size(-1)) + "]");
    Routing r;
    const auto probs = at::softmax(at::linear(x, router), -1, at::kFloat);
    auto [top, experts] = at::topk(probs, moe.expertsPerToken, -1);
    if (moe.normTopK) top = top / top.sum(-1, true);
    r.experts = experts;
    r.weights = top.to(x.scalar_type());
    return r;
}

at::Tensor sparseMlp(const MoeConfig& moe, const at::Tensor& router, const std::vector<ExpertWeights>& experts,
                     const at::Tensor& routerInput, const at::Tensor& x, const ExpertPoint& point) {
    if (static_cast<int>(experts.size()) != moe.numExperts)
        throw std::invalid_argument("sparseMlp: " + std::to_string(experts.size()) + " experts for a config of " +
                                    std::to_string(moe.numExperts));
    const Routing r = routeTokens(moe, router, routerInput);
    const int64_t k = moe.expertsPerToken;
    // Every (token, slot) assignment, grouped by expert: one sort instead of a mask per expert,
    // and the counts from one host copy of the choices (tokens x k indices; at::bincount would
    // read its maximum back from a GPU first, a second wait). The sort is stable, so that each
    // expert sees its tokens in order (what the activation views show as "token"); the sum is
    // the same either way, as a token meets an expert at most once.
    const auto flat = r.experts.reshape({-1});
    const auto order = std::get<1>(at::sort(flat, c10::optional<bool>(true), /*dim=*/0));
    const auto tokenOf = order.div(k, "floor");
    const auto weightOf = r.weights.reshape({-1}).index_select(0, order).unsqueeze(1);
    const auto chosen = flat.to(at::kCPU, at::kLong).contiguous();
    std::vector<int64_t> n(static_cast<size_t>(moe.numExperts), 0);
    const int64_t* c = chosen.data_ptr<int64_t>();
    for (int64_t i = 0; i < chosen.numel(); ++i) ++n[static_cast<size_t>(c[i])];
    auto y = at::zeros_like(x);
    int64_t start = 0;
    for (int e = 0; e < moe.numExperts; ++e) {
        if (n[e] == 0) continue;
        const auto rows = tokenOf.narrow(0, start, n[e]);
        const ExpertWeights& w = experts[static_cast<size_t>(e)];
        auto in = x.index_select(0, rows);
        if (point) in = point(e, PointKind::GateUpInput, in);
        auto a = at::silu(at::linear(in, w.wGate)) * at::linear(in, w.wUp);
        if (point) a = point(e, PointKind::DownProjInput, a);
        y.index_add_(0, rows, at::linear(a, w.wDown) * weightOf.narrow(0, start, n[e]));
        start += n[e];
    }
    return y;
}

} // namespace latmix::model
