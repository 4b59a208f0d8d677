// RUN_DIR/train.h5 (docs/run-folder.md): the distillation's series, its resume state and the
// latest matrices, written at every checkpoint and read back by --resume, the report and the
// runs view.
#include "train/TrainFile.h"

#include "io/TensorFile.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <iterator>
#include <map>
#include <sstream>
#include <stdexcept>

namespace latmix::train {
namespace {

const char* kSeries[] = {"loss", "objective", "vol", "lr", "seconds", "teacher_seconds", "student_seconds", "backward_seconds",
                         "metrics_seconds", "a1_condition", "a1_orthogonality", "a1_off_block", "a2_condition",
                         "a2_orthogonality", "a2_off_block", "folded_ppl"};
// Series added after the first run files were written: absent ones read as NaN.
bool optionalSeries(const std::string& name) { return name == "folded_ppl"; }
// The folded FP perplexity before training a run file records (NaN: none).
double foldedStartOf(const io::TensorFileContents& f) {
    const auto it = f.attributes.find("folded_ppl_start");
    return it == f.attributes.end() ? DistillStep::nan : std::stod(it->second);
}

std::vector<double> fieldsOf(const DistillStep& s) {
    return {s.loss, s.objective, s.vol, s.lr, s.seconds, s.teacherSeconds, s.studentSeconds, s.backwardSeconds, s.metricsSeconds,
            s.a1Condition, s.a1Orthogonality, s.a1OffBlock, s.a2Condition, s.a2Orthogonality, s.a2OffBlock,
            s.foldedPerplexity};
}

} // namespace

void writeTrainFile(const std::string& path, const std::vector<DistillStep>& history, double foldedStart,
                  const fold::ModelTransforms& transforms, const AdamW& opt, const DistillOptions& o, int stepsDone,
                  const std::string& status) {
    std::vector<std::pair<std::string, at::Tensor>> t;
    const size_t n = history.size();
    auto steps = at::empty({static_cast<int64_t>(n)}, at::kLong);
    for (size_t i = 0; i < n; ++i) steps[static_cast<int64_t>(i)] = history[i].step;
    t.emplace_back("series/step", steps);
    for (size_t f = 0; f < std::size(kSeries); ++f) {
        auto col = at::empty({static_cast<int64_t>(n)}, at::kDouble);
        auto* p = col.data_ptr<double>();
        for (size_t i = 0; i < n; ++i) p[i] = fieldsOf(history[i])[f];
        t.emplace_back(std::string("series/") + kSeries[f], col);
    }
    for (size_t i = 0; i < opt.params.size(); ++i) {
        t.emplace_back("state/param/" + std::to_string(i), opt.params[i].detach().cpu());
        t.emplace_back("state/m/" + std::to_string(i), opt.m[i].cpu());
        t.emplace_back("state/v/" + std::to_string(i), opt.v[i].cpu());
    }
    t.emplace_back("state/adam_t", at::full({1}, opt.t, at::kLong));
    t.emplace_back("state/steps_done", at::full({1}, stepsDone, at::kLong));
    {
        at::NoGradGuard g;
        if (transforms.t1()) t.emplace_back("T1/A", transforms.t1()->matrix().detach().to(at::kDouble).cpu());
        if (transforms.layers() > 0 && transforms.t2(o.trackedLayer))
            t.emplace_back("T2/A", transforms.t2(o.trackedLayer)->matrix().detach().to(at::kDouble).cpu());
    }
    std::ostringstream cfg;
    cfg << "steps=" << o.steps << " batch=" << o.batch << " lr=" << o.lr << " temperature=" << o.temperature
        << " volume_weight=" << o.volumeWeight << " seed=" << o.seed << " activation=" << (o.activation ? o.activation->describe() : std::string("none"));
    std::map<std::string, std::string> attributes{
        {"status", status}, {"options", cfg.str()}, {"tracked_layer", std::to_string(o.trackedLayer)}};
    if (std::isfinite(foldedStart)) {
        std::ostringstream v;
        v.precision(17);
        v << foldedStart;
        attributes["folded_ppl_start"] = v.str();
    }
    io::writeTensorFile(path, t, attributes);
}

void restoreTrainFile(const std::string& runFile, const std::vector<at::Tensor>& params, AdamW& opt, DistillResult& result) {
    const auto f = io::readTensorFile(runFile);
    auto get = [&](const std::string& k) {
        auto it = f.tensors.find(k);
        if (it == f.tensors.end())
            throw std::runtime_error("'" + runFile + "' has no '" + k + "': not a training run file, or of other transforms");
        return it->second;
    };
    at::NoGradGuard g;
    for (size_t i = 0; i < params.size(); ++i) {
        const auto p = get("state/param/" + std::to_string(i));
        if (!p.sizes().equals(params[i].sizes()))
            throw std::runtime_error("'" + runFile + "': saved parameter " + std::to_string(i) +
                                     " does not fit these transforms (other method or model?)");
        params[i].copy_(p);
        opt.m[i].copy_(get("state/m/" + std::to_string(i)));
        opt.v[i].copy_(get("state/v/" + std::to_string(i)));
    }
    opt.t = get("state/adam_t").item<int64_t>();
    result.startStep = static_cast<int>(get("state/steps_done").item<int64_t>());
    result.history = readDistillSeries(runFile);
    result.foldedPerplexityStart = foldedStartOf(f);
    if (static_cast<int>(result.history.size()) > result.startStep) result.history.resize(static_cast<size_t>(result.startStep));
}

std::vector<DistillStep> readDistillSeries(const std::string& runFile) {
    const auto f = io::readTensorFile(runFile);
    auto it = f.tensors.find("series/step");
    if (it == f.tensors.end()) throw std::runtime_error("'" + runFile + "' holds no training series");
    const auto steps = it->second;
    std::vector<DistillStep> out(static_cast<size_t>(steps.numel()));
    std::vector<const double*> cols;
    for (const char* name : kSeries) {
        auto c = f.tensors.find(std::string("series/") + name);
        if (c == f.tensors.end() && std::string(name) == "objective") c = f.tensors.find("series/kl"); // before the rename
        if (c == f.tensors.end() && optionalSeries(name)) {
            cols.push_back(nullptr);
            continue;
        }
        if (c == f.tensors.end()) throw std::runtime_error("'" + runFile + "' lacks series/" + name);
        cols.push_back(c->second.data_ptr<double>());
    }
    for (size_t i = 0; i < out.size(); ++i) {
        DistillStep& s = out[i];
        s.step = static_cast<int>(steps[static_cast<int64_t>(i)].item<int64_t>());
        double* dst[] = {&s.loss, &s.objective, &s.vol, &s.lr, &s.seconds, &s.teacherSeconds, &s.studentSeconds, &s.backwardSeconds,
                         &s.metricsSeconds, &s.a1Condition, &s.a1Orthogonality, &s.a1OffBlock, &s.a2Condition,
                         &s.a2Orthogonality, &s.a2OffBlock, &s.foldedPerplexity};
        for (size_t f2 = 0; f2 < cols.size(); ++f2) *dst[f2] = cols[f2] ? cols[f2][i] : DistillStep::nan;
    }
    return out;
}

double readFoldedPerplexityStart(const std::string& runFile) { return foldedStartOf(io::readTensorFile(runFile)); }

} // namespace latmix::train
