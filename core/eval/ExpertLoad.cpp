#include "eval/ExpertLoad.h"

#include "model/LlamaModel.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <map>
#include <stdexcept>
#include <string>
#include <utility>

namespace latmix::eval {

ExpertLoad measureExpertLoad(const model::LlamaModel& m, const std::vector<std::vector<int>>& windows, JobContext& job) {
    const model::ModelConfig& c = m.config();
    if (!c.moe)
        throw std::invalid_argument(c.architectureName + " has no experts: the expert load is a mixture-of-experts "
                                                         "model's (Qwen3-MoE, Mixtral)");
    ExpertLoad r;
    r.expertsPerToken = c.moe->expertsPerToken;
    // Each expert's down_proj input point, its hook seeing exactly the rows routed there.
    std::map<std::string, std::pair<std::size_t, int>> cell;
    for (int l = 0; l < c.numLayers; ++l) {
        if (!c.isSparseLayer(l)) continue;
        for (int e = 0; e < c.moe->numExperts; ++e)
            cell[model::expertPointName(l, e, model::PointKind::DownProjInput)] = {r.layers.size(), e};
        r.layers.push_back(l);
        r.tokens.emplace_back(static_cast<std::size_t>(c.moe->numExperts), 0);
    }
    at::NoGradGuard noGrad;
    for (std::size_t w = 0; w < windows.size(); ++w) {
        job.checkCancelled();
        const std::vector<std::int64_t> ids(windows[w].begin(), windows[w].end());
        model::forwardHidden(c, m.weights(), m.options(), at::tensor(ids, at::kLong).unsqueeze(0),
                             [&](const std::string& point, const at::Tensor& x) {
                                 const auto it = cell.find(point);
                                 if (it != cell.end()) r.tokens[it->second.first][std::size_t(it->second.second)] += x.size(1);
                                 return x;
                             });
        r.tokensPerLayer += std::int64_t(ids.size());
        job.progress(double(w + 1) / windows.size(), "window " + std::to_string(w + 1) + "/" + std::to_string(windows.size()));
    }
    return r;
}

} // namespace latmix::eval
