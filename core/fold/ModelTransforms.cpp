#include "fold/ModelTransforms.h"

#include "io/TensorFile.h"
#include "transforms/FixedTransforms.h"
#include "transforms/LearnedTransforms.h"
#include "util/Runtime.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <stdexcept>

namespace latmix::fold {
namespace {

std::unique_ptr<transforms::AffineTransform> build(const std::string& kind, std::int64_t dim, const TransformSpec& s,
                                                   std::uint64_t seed, bool bias) {
    if (kind == "none" || kind.empty()) return nullptr;
    transforms::TransformOptions o;
    o.blockSize = std::min<std::int64_t>(s.blockSize, dim);
    o.seed = seed;
    o.init = s.init;
    o.noiseStd = s.noiseStd;
    o.dtype = s.float64 ? at::kDouble : at::kFloat;
    o.bias = bias;
    o.blockDiagonal = s.blockDiagonal && transforms::isLearnedKind(kind);
    return transforms::makeTransform(kind, dim, o);
}

fold::AffineMatrices matricesOf(const transforms::AffineTransform* t) {
    if (!t) return {};
    return {t->matrix(), t->inverseMatrix(), t->bias(), t->hadamardDiagonal()};
}

} // namespace

ModelTransforms::ModelTransforms(const model::ModelConfig& c, TransformSpec spec) : m_spec(std::move(spec)) {
    m_t1 = build(m_spec.t1Kind, c.hiddenSize, m_spec, m_spec.seed, m_spec.t1Bias);
    for (int l = 0; l < c.numLayers; ++l)
        m_t2.push_back(build(m_spec.t2Kind, c.headDim, m_spec, m_spec.seed + 1 + l, m_spec.t2Bias));
    if (m_spec.t3Block > 0) {
        m_t3 = transforms::blockHadamard(c.downProjWidth(), m_spec.t3Block, m_spec.t3Seed);
    }
}

ModelTransforms::~ModelTransforms() = default;
ModelTransforms::ModelTransforms(ModelTransforms&&) noexcept = default;
ModelTransforms& ModelTransforms::operator=(ModelTransforms&&) noexcept = default;

transforms::AffineTransform* ModelTransforms::t2(int layer) const { return m_t2.at(static_cast<size_t>(layer)).get(); }

std::vector<at::Tensor> ModelTransforms::parameters() const {
    std::vector<at::Tensor> p;
    if (m_t1)
        for (auto& t : m_t1->parameters()) p.push_back(t);
    for (const auto& t2 : m_t2)
        if (t2)
            for (auto& t : t2->parameters()) p.push_back(t);
    return p;
}

at::Tensor ModelTransforms::volume() const {
    at::Tensor v;
    auto add = [&](const transforms::AffineTransform* t) {
        if (!t) return;
        const at::Tensor s = t->logAbsScales();
        if (!s.defined()) return;
        const at::Tensor term = s.sum().pow(2);
        v = v.defined() ? v + term : term;
    };
    add(m_t1.get());
    for (const auto& t : m_t2) add(t.get());
    return v.defined() ? v : at::zeros({}, at::kFloat);
}

void ModelTransforms::to(const at::Device& device) {
    if (m_t1) m_t1->to(device);
    for (auto& t : m_t2)
        if (t) t->to(device);
}

model::LlamaWeights ModelTransforms::fold(const model::ModelConfig& c, const model::LlamaWeights& base) const {
    model::LlamaWeights w = base;
    if (m_t1) w = fold::applyT1(c, w, matricesOf(m_t1.get()));
    if (!m_t2.empty() && m_t2.front()) {
        std::vector<fold::AffineMatrices> m;
        for (const auto& t : m_t2) m.push_back(matricesOf(t.get()));
        w = fold::applyT2(c, w, m);
    }
    return w;
}

fold::AffineMatrices ModelTransforms::t1Matrices() const { return matricesOf(m_t1.get()); }
fold::AffineMatrices ModelTransforms::t2Matrices(int layer) const {
    return m_t2.empty() ? fold::AffineMatrices{} : matricesOf(t2(layer));
}

void ModelTransforms::foldTopLevel(const model::ModelConfig& c, model::LlamaWeights& base) const {
    if (m_t1) fold::applyT1ToTopLevel(c, base, matricesOf(m_t1.get()));
}

void ModelTransforms::save(const std::string& path, const std::map<std::string, std::string>& extra) const {
    std::vector<std::pair<std::string, at::Tensor>> t;
    at::NoGradGuard noGrad;
    auto put = [&](const std::string& prefix, const transforms::AffineTransform* x) {
        if (!x) return;
        t.emplace_back(prefix + "/A", x->matrix().detach().to(at::kDouble).cpu());
        if (x->bias().defined()) t.emplace_back(prefix + "/v", x->bias().detach().to(at::kDouble).cpu());
    };
    put("T1", m_t1.get());
    for (size_t l = 0; l < m_t2.size(); ++l) put("layers/" + std::to_string(l) + "/T2", m_t2[l].get());
    const auto params = parameters();
    for (size_t i = 0; i < params.size(); ++i) t.emplace_back("params/" + std::to_string(i), params[i].detach().cpu());
    std::map<std::string, std::string> a = extra;
    a["t1_kind"] = m_spec.t1Kind;
    a["t2_kind"] = m_spec.t2Kind;
    a["init"] = m_spec.init;
    a["noise_std"] = std::to_string(m_spec.noiseStd);
    a["block_size"] = std::to_string(m_spec.blockSize);
    a["granularity"] = m_spec.blockDiagonal ? "block" : "full";
    a["seed"] = std::to_string(m_spec.seed);
    a["t3_block"] = std::to_string(m_spec.t3Block);
    a["t3_seed"] = std::to_string(m_spec.t3Seed);
    a["t3_point"] = "mlp.down_proj.input";
    a["t1_bias"] = m_spec.t1Bias ? "1" : "0";
    a["t2_bias"] = m_spec.t2Bias ? "1" : "0";
    io::writeTensorFile(path, t, a);
}

TransformSpec ModelTransforms::readSpec(const std::string& path) {
    const auto f = io::readTensorFile(path);
    auto get = [&](const char* k) {
        auto it = f.attributes.find(k);
        if (it == f.attributes.end()) throw std::runtime_error("'" + path + "' has no attribute '" + k + "'; not a transforms.h5");
        return it->second;
    };
    TransformSpec s;
    s.t1Kind = get("t1_kind");
    s.t2Kind = get("t2_kind");
    s.init = get("init");
    s.noiseStd = std::stod(get("noise_std"));
    s.blockSize = std::stoi(get("block_size"));
    s.seed = std::stoull(get("seed"));
    s.t3Block = std::stoi(get("t3_block"));
    // Files written before block granularity existed hold full matrices.
    s.blockDiagonal = f.attributes.count("granularity") != 0 && f.attributes.at("granularity") == "block";
    s.t3Seed = std::stoull(get("t3_seed"));
    // Files written before the bias switch existed have their kinds' default (with bias).
    s.t1Bias = f.attributes.count("t1_bias") == 0 || f.attributes.at("t1_bias") != "0";
    s.t2Bias = f.attributes.count("t2_bias") == 0 || f.attributes.at("t2_bias") != "0";
    return s;
}

ModelTransforms ModelTransforms::load(const model::ModelConfig& c, const std::string& path) {
    ModelTransforms t(c, readSpec(path));
    const auto f = io::readTensorFile(path);
    std::vector<at::Tensor> values;
    for (size_t i = 0; i < t.parameters().size(); ++i) {
        auto it = f.tensors.find("params/" + std::to_string(i));
        if (it == f.tensors.end()) throw std::runtime_error("'" + path + "' lacks params/" + std::to_string(i));
        values.push_back(it->second);
    }
    t.setParameters(values);
    return t;
}

void ModelTransforms::setParameters(const std::vector<at::Tensor>& values) {
    auto params = parameters();
    if (values.size() != params.size())
        throw std::invalid_argument(std::to_string(values.size()) + " saved parameters for " + std::to_string(params.size()) +
                                    " learned tensors");
    at::NoGradGuard noGrad;
    for (size_t i = 0; i < params.size(); ++i) {
        if (!values[i].sizes().equals(params[i].sizes()))
            throw std::invalid_argument("saved parameter " + std::to_string(i) + " has the wrong shape");
        params[i].copy_(values[i]);
    }
}

model::LlamaModel foldedModel(const model::ModelConfig& config, const model::LlamaWeights& original, const ModelTransforms& t,
                              const at::TensorOptions& options) {
    at::NoGradGuard g;
    auto base = fold::foldNorms(config, model::convertWeights(original, options));
    if (t.t3().defined()) base = fold::applyT3(base, t.t3());
    auto folded = t.fold(config, base);
    const auto c = fold::foldedConfig(config, folded);
    model::ForwardOptions fo;
    fo.dtype = options.dtype().toScalarType();
    if (t.t3().defined()) fo.t3 = t.t3().to(options);
    return model::LlamaModel(c, std::move(folded), fo);
}

model::LayerWeights foldedLayer(const model::ModelConfig& config, const model::LayerWeights& original,
                                const ModelTransforms& t, int layer, const at::TensorOptions& options,
                                const at::TensorOptions& out) {
    // The same steps in the same order as foldedModel, on one layer; the experts apart.
    at::NoGradGuard g;
    model::LayerWeights shell = original;
    shell.experts.clear();
    model::LayerWeights y = model::convertLayer(shell, options);
    const AffineMatrices t1 = t.t1Matrices();
    fold::foldLayer(config, y, layer, t.t3(), t1, t.t2Matrices(layer));
    y = model::convertLayer(y, out);
    // Each expert in options' precision only while it is folded. Its folded tensors are new ones,
    // and the holes their predecessors leave in glibc's heaps are not reused: a Qwen3-MoE-shaped
    // layer grew by 3.1 GiB through the norms alone until the heaps' free pages went back every
    // kTrimEvery experts (trimHeaps, util/Runtime.h).
    const at::Tensor postNorm = original.postNorm.to(options);
    for (std::size_t e = 0; e < original.experts.size(); ++e) {
        model::ExpertWeights x = model::convertExpert(original.experts[e], options);
        fold::foldExpert(x, postNorm, t.t3(), t1);
        y.experts.push_back(model::convertExpert(x, out));
        if ((e + 1) % kTrimEvery == 0) trimHeaps();
    }
    return y;
}

} // namespace latmix::fold
