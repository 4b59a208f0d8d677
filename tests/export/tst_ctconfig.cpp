// The compressed-tensors export as compressed-tensors and vLLM read it (docs/developer/
// compressed-tensors.md has the rules and the sources they come from): the config parsed with
// their schema's fields (every model there forbids extra keys), T3 declared as a transform they
// build themselves, and the function they then compute equal to the run's. A brownpy-13M run
// (RTN-packed MXFP4, T3 of block 32 with seed 1234: tests/ExportTestRun.h).
//  - transform_config: config_groups of {type, apply, randomize, requires_grad, head_dim,
//    precision}, apply of {targets, location, inverse, ignore}; type one of hadamard,
//    random-hadamard, random-matrix; T3 as "hadamard" (Sylvester, ±1, divided by √head_dim at
//    run time; vLLM's hadacore kernel computes the same), its matrix stored as
//    <down_proj>.latmix_t3_input.weight.
//  - the weights: weight_packed with the even element in the low nibble, E2M1 codes;
//    weight_scale bytes 127 + log2(scale).
// The MLP a runtime builds from those rules alone (decoded here, Sylvester built here) equals the
// run's (its weights and H = t3Transform) to float64 rounding on random inputs.
#include "ExportTestRun.h"
#include "MoeModels.h"
#include "run/QuantizeRun.h"
#include "TestSupport.h"
#include "export/Export.h"
#include "export/ExportTargets.h"
#include "io/SafeTensors.h"
#include "model/Capture.h"
#include "model/Checkpoint.h"
#include "model/TensorNames.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <algorithm>
#include <functional>
#include <limits>
#include <regex>
#include <set>
#include <tuple>

#include "TestData.h" // after ATen: Qt's slots macro breaks ATen headers
#include <QTemporaryDir>
#include <QtTest>

using namespace latmix;
using json = nlohmann::json;

namespace {

// Keys of a compressed-tensors pydantic model (extra="forbid"): anything else fails its parse.
void onlyKeys(const json& j, const std::set<std::string>& allowed, const std::string& what) {
    for (const auto& [k, v] : j.items())
        QVERIFY2(allowed.count(k), qPrintable(QString::fromStdString(what + " has the key '" + k + "', which its model forbids")));
}

// Sylvester's ±1 matrix, built here.
at::Tensor sylvester(std::int64_t n) {
    at::Tensor h = at::ones({1, 1}, at::kDouble);
    while (h.size(0) < n) h = at::cat({at::cat({h, h}, 1), at::cat({h, -h}, 1)}, 0);
    return h;
}

// compressed-tensors' FP4 weight: E2M1 codes (sign in bit 3), element 2i in the low nibble, one
// scale byte per `block` columns, its value given by scaleOf.
at::Tensor decodeFp4(const at::Tensor& packed, const at::Tensor& scales, std::int64_t cols, std::int64_t block,
                     const std::function<double(std::uint8_t)>& scaleOf) {
    static const double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    const auto p = packed.contiguous(), s = scales.contiguous();
    const std::int64_t rows = p.size(0);
    at::Tensor w = at::empty({rows, cols}, at::kDouble);
    auto* out = w.data_ptr<double>();
    const auto* code = p.data_ptr<std::uint8_t>();
    const auto* scale = s.data_ptr<std::uint8_t>();
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c) {
            const int q = (code[r * p.size(1) + c / 2] >> (c % 2 ? 4 : 0)) & 15;
            out[r * cols + c] = (q & 8 ? -1 : 1) * mag[q & 7] * scaleOf(scale[r * s.size(1) + c / block]);
        }
    return w;
}

// MXFP4: E8M0 bytes per 32 (127 + the exponent).
at::Tensor decodeMxfp4(const at::Tensor& packed, const at::Tensor& scales, std::int64_t cols) {
    return decodeFp4(packed, scales, cols, 32, [](std::uint8_t b) { return std::ldexp(1.0, int(b) - 127); });
}

// NVFP4: E4M3 bytes per 16 (bias 7, subnormal below exponent 1, 0x7F/0xFF NaN), divided by the
// stored global scale (448·6/amax).
at::Tensor decodeNvfp4(const at::Tensor& packed, const at::Tensor& scales, float global, std::int64_t cols) {
    return decodeFp4(packed, scales, cols, 16, [global](std::uint8_t b) {
        const int e = (b >> 3) & 15, m = b & 7;
        if ((b & 127) == 127) return std::nan("");
        const double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1 + m / 8.0, e - 7);
        return (b & 128 ? -v : v) / double(global);
    });
}

// MXFP8 (compressed-tensors' mxfp8-quantized): float8_e4m3fn bytes as the weight (sign bit 7,
// exponent bias 7, subnormal below exponent 1), times 2^(scale byte − 127) per 32 columns.
at::Tensor decodeMxfp8(const at::Tensor& bytes, const at::Tensor& scales) {
    const auto b = bytes.contiguous(), s = scales.contiguous();
    const std::int64_t rows = b.size(0), cols = b.size(1);
    at::Tensor w = at::empty({rows, cols}, at::kDouble);
    auto* out = w.data_ptr<double>();
    const auto* code = b.data_ptr<std::uint8_t>();
    const auto* scale = s.data_ptr<std::uint8_t>();
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c) {
            const std::uint8_t q = code[r * cols + c];
            const int e = (q >> 3) & 15, m = q & 7;
            const double v = (q & 127) == 127 ? std::nan("") : e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1 + m / 8.0, e - 7);
            out[r * cols + c] = (q & 128 ? -v : v) * std::ldexp(1.0, int(scale[r * s.size(1) + c / 32]) - 127);
        }
    return w;
}

// A target as vLLM and compressed-tensors compare a name with it: "re:" by Python's re.match (a
// match that starts at the name's start), anything else by equality.
bool nameMatches(const std::string& name, const std::string& target) {
    if (target.rfind("re:", 0) == 0)
        return std::regex_search(name, std::regex(target.substr(3)), std::regex_constants::match_continuous);
    return name == target;
}

} // namespace

class TestCtConfig : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;

    static void addMoeFamilies() {
        QTest::addColumn<QString>("family");
        QTest::newRow("qwen3-moe") << "qwen3moe";
        QTest::newRow("mixtral") << "mixtral";
    }
    // A run of a small random model of the family (its folder: the run's + "-model"); "llama": a
    // dense Llama of 2 layers.
    std::string moeRun(const QString& family, const std::string& method, mx::Format format, const std::string& keep,
                       const std::string& scheme = "") {
        const std::string runDir = (m_tmp.path() + "/moe-" + family + "-" + QString::fromStdString(method) + "-" +
                                    QString::fromStdString(mx::formatName(format)) + (scheme.empty() ? "" : "-scheme"))
                                       .toStdString();
        const std::string config =
            family == QLatin1String("llama")
                ? R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
                     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300,
                     "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu",
                     "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": false})"
                : test::moeRunConfigText(family);
        const QString model = test::moeModel(QString::fromStdString(runDir + "-model"), config, family.toStdString());
        run::QuantizeOptions o;
        o.method = method;
        o.format = mx::makeConfig(format);
        o.calibSamples = 8;
        o.seqLen = 32;
        o.device = "cpu";
        o.keep = keep;
        o.scheme = scheme;
        run::runQuantize(model.toStdString(), test::randomIds(2000, 300, 4), {}, runDir, o);
        return runDir;
    }

private slots:
    void configAndFunctionAsVllmReadsThem() {
        const QString source = test::modelFolder("brownpy-13M");
        if (!QFileInfo::exists(source + "/model.safetensors")) LATMIX_DATA_SKIP(qPrintable("no " + source));
        const std::string runDir = (m_tmp.path() + "/run").toStdString(), out = (m_tmp.path() + "/ct").toStdString();
        test::RunVariant v;
        v.weights = mx::MxConfig{mx::Format::MxFp4, 32};
        const run::RunModel run = test::buildRun(source.toStdString(), runDir, v, source.toStdString());
        JobContext job;
        exporting::exportRun(runDir, exporting::ExportFormat::CompressedTensors, out, job);

        // The size the export dialog announces, from the config alone, against model.safetensors.
        const double file = double(QFileInfo(QString::fromStdString(out + "/model.safetensors")).size()),
                     announced = double(exporting::describeExportTarget(runDir, "compressed-tensors").bytes);
        QVERIFY2(std::abs(announced - file) <= 0.01 * file, qPrintable(QString("%1 vs %2").arg(announced).arg(file)));

        std::ifstream in(out + "/config.json");
        const json config = json::parse(in);
        const json& qc = config.at("quantization_config");
        QCOMPARE(qc.at("format").get<std::string>(), std::string("mxfp4-pack-quantized"));
        for (const auto& [name, g] : qc.at("config_groups").items()) {
            onlyKeys(g, {"targets", "weights", "input_activations", "output_activations", "format"}, "scheme " + name);
            for (const char* a : {"weights", "input_activations"}) {
                if (g.at(a).is_null()) continue;
                onlyKeys(g.at(a), {"num_bits", "type", "symmetric", "group_size", "strategy", "block_structure", "dynamic",
                                   "actorder", "scale_dtype", "zp_dtype", "observer", "observer_kwargs"},
                         std::string(a));
                QCOMPARE(g.at(a).at("group_size").get<int>(), 32);
                QCOMPARE(g.at(a).at("scale_dtype").get<std::string>(), std::string("torch.uint8"));
            }
        }
        const json& tc = qc.at("transform_config");
        onlyKeys(tc, {"config_groups"}, "transform_config");
        QCOMPARE(int(tc.at("config_groups").size()), 1);
        const auto& [schemeName, scheme] = *tc.at("config_groups").items().begin();
        onlyKeys(scheme, {"type", "apply", "randomize", "requires_grad", "head_dim", "precision"}, "TransformScheme");
        QCOMPARE(scheme.at("type").get<std::string>(), std::string("hadamard")); // built by the runtime, not drawn
        QCOMPARE(scheme.at("randomize").get<bool>(), false);
        const std::int64_t b = scheme.at("head_dim").get<std::int64_t>();
        const model::ModelConfig c = model::Checkpoint::load(runDir + "/model").config();
        QVERIFY(b == 32 && c.intermediateSize % b == 0);
        QCOMPARE(int(scheme.at("apply").size()), 1);
        const json& args = scheme.at("apply").at(0);
        onlyKeys(args, {"targets", "location", "inverse", "ignore"}, "TransformArgs");
        QCOMPARE(args.at("location").get<std::string>(), std::string("input"));
        QCOMPARE(args.at("inverse").get<bool>(), false);

        const auto st = io::SafeTensorsFile::open(out + "/model.safetensors");
        const at::Tensor s = sylvester(b), h = run::t3Transform(run.quant, c.intermediateSize).dense();
        at::manual_seed(5);
        for (int l = 0; l < c.numLayers; ++l) {
            const std::string p = model::names::layerPrefix(l), down = p + model::names::kDownProj;
            const std::string matrix = down + "." + schemeName + "_input.weight"; // compressed-tensors' name
            QVERIFY2(st->contains(matrix), matrix.c_str());
            QVERIFY(at::equal(st->tensor(matrix).to(at::kDouble), s));
            auto weight = [&](const std::string& prefix, std::int64_t cols) {
                return decodeMxfp4(st->tensor(prefix + ".weight_packed"), st->tensor(prefix + ".weight_scale"), cols);
            };
            const std::string gate = p + model::names::kGateProj, up = p + model::names::kUpProj;
            // The MLP from the export: x ↦ down((SiLU(gate x) ⊙ up x) · blockdiag(S)/√b).
            const at::Tensor x = at::randn({4, c.hiddenSize}, at::kDouble);
            auto silu = [](const at::Tensor& t) { return t / (1 + at::exp(-t)); };
            const at::Tensor a = silu(x.mm(weight(gate, c.hiddenSize).t())) * x.mm(weight(up, c.hiddenSize).t());
            const at::Tensor rotated = a.view({4, -1, b}).matmul(s).view({4, -1}) / std::sqrt(double(b));
            const at::Tensor yCt = rotated.mm(weight(down, c.intermediateSize).t());
            // The run's: the same with its own weights and x ↦ x·Hᵀ.
            auto w = [&](const std::string& prefix) { return run.tensors.at(prefix + ".weight").to(at::kDouble); };
            const at::Tensor aRun = silu(x.mm(w(gate).t())) * x.mm(w(up).t());
            const at::Tensor yRun = aRun.mm(h.t()).mm(w(down).t());
            const double err = (yCt - yRun).abs().max().item<double>(), scale = yRun.abs().max().item<double>();
            // two float64 evaluations of sums of c.intermediateSize = 768 products: n·ε ≈ 1.7e-13, with margin
            QVERIFY2(err <= 1e-12 * scale, qPrintable(QString("layer %1: %2 of %3").arg(l).arg(err).arg(scale)));
        }
    }

    // Linears kept in full precision (--keep): in quantization_config.ignore and stored bf16; a
    // kept down_proj in the transform's ignore, T3 folded into its weight without the signs that
    // up_proj's rows carry; a kept up_proj's rows carry them as its codes would. A runtime that
    // reads those rules (decoded here) computes the run's MLP up to the bf16 rounding of the
    // folded weights: |Δy| ≤ 2^-8 · Σ|a_j||w_ij|, worked out per output from the data.
    void keptLinearsAsVllmReadsThem() {
        const QString source = test::modelFolder("brownpy-13M");
        if (!QFileInfo::exists(source + "/model.safetensors")) LATMIX_DATA_SKIP(qPrintable("no " + source));
        const std::string runDir = (m_tmp.path() + "/kept").toStdString(), out = (m_tmp.path() + "/kept-ct").toStdString();
        test::RunVariant v;
        v.weights = mx::MxConfig{mx::Format::MxFp4, 32};
        const std::string l0 = model::names::layerPrefix(0), l1 = model::names::layerPrefix(1);
        // Whole fused groups (vLLM loads q/k/v and gate/up as one layer with one scheme).
        v.keep = {l0 + model::names::kQProj,   l0 + model::names::kKProj, l0 + model::names::kVProj,
                  l0 + model::names::kDownProj, l1 + model::names::kGateProj, l1 + model::names::kUpProj};
        const run::RunModel run = test::buildRun(source.toStdString(), runDir, v, source.toStdString());
        JobContext job;
        exporting::exportRun(runDir, exporting::ExportFormat::CompressedTensors, out, job);
        // The export dialog's size counts the kept linears as bf16.
        const double file = double(QFileInfo(QString::fromStdString(out + "/model.safetensors")).size()),
                     announced = double(exporting::describeExportTarget(runDir, "compressed-tensors").bytes);
        QVERIFY2(std::abs(announced - file) <= 0.01 * file, qPrintable(QString("%1 vs %2").arg(announced).arg(file)));
        std::ifstream in(out + "/config.json");
        const json qc = json::parse(in).at("quantization_config");
        std::set<std::string> ignore;
        for (const auto& n : qc.at("ignore")) ignore.insert(n.get<std::string>());
        for (const auto& k : v.keep) QVERIFY2(ignore.count(k), k.c_str());
        const json& args = qc.at("transform_config").at("config_groups").begin()->at("apply").at(0);
        QCOMPARE(args.at("ignore"), json::array({l0 + model::names::kDownProj}));
        const auto st = io::SafeTensorsFile::open(out + "/model.safetensors");
        for (const auto& k : v.keep) {
            QVERIFY2(!st->contains(k + ".weight_packed") && st->entry(k + ".weight").dtype == "BF16", k.c_str());
        }
        QVERIFY(!st->contains(l0 + model::names::kDownProj + ".latmix_t3_input.weight")); // no transform there
        const model::ModelConfig c = model::Checkpoint::load(runDir + "/model").config();
        const std::int64_t b = 32;
        const at::Tensor s = sylvester(b), h = run::t3Transform(run.quant, c.intermediateSize).dense();
        at::manual_seed(6);
        auto silu = [](const at::Tensor& t) { return t / (1 + at::exp(-t)); };
        for (int l = 0; l < 2; ++l) {
            const std::string p = model::names::layerPrefix(l), gate = p + model::names::kGateProj, up = p + model::names::kUpProj,
                              down = p + model::names::kDownProj;
            auto weight = [&](const std::string& prefix, std::int64_t cols) {
                if (ignore.count(prefix)) return st->tensor(prefix + ".weight").to(at::kDouble); // bf16 as stored
                return decodeMxfp4(st->tensor(prefix + ".weight_packed"), st->tensor(prefix + ".weight_scale"), cols);
            };
            const at::Tensor x = at::randn({4, c.hiddenSize}, at::kDouble);
            const at::Tensor a = silu(x.mm(weight(gate, c.hiddenSize).t())) * x.mm(weight(up, c.hiddenSize).t());
            // The runtime applies the declared Hadamard to the down_proj inputs it does not ignore.
            const bool transformed = !ignore.count(down);
            const at::Tensor in2 = transformed ? a.view({4, -1, b}).matmul(s).view({4, -1}) / std::sqrt(double(b)) : a;
            const at::Tensor wDown = weight(down, c.intermediateSize);
            const at::Tensor yCt = in2.mm(wDown.t());
            auto w = [&](const std::string& prefix) { return run.tensors.at(prefix + ".weight").to(at::kDouble); };
            const at::Tensor aRun = silu(x.mm(w(gate).t())) * x.mm(w(up).t());
            const at::Tensor yRun = aRun.mm(h.t()).mm(w(down).t());
            // bf16 keeps 8 significant bits: each stored weight within 2^-9 of the value folded;
            // the up_proj's rounding enters a too (at most 2^-9 of |a| there), so 2^-8 overall.
            const at::Tensor bound = in2.abs().mm(wDown.abs().t()) * std::ldexp(1.0, -8) + 1e-12;
            const double worst = ((yCt - yRun).abs() / bound).max().item<double>();
            QVERIFY2(worst <= 1.0, qPrintable(QString("layer %1: error %2 of its bound").arg(l).arg(worst)));
        }
    }

    // A mixture of experts as vLLM's compressed-tensors MoE method reads it (docs/developer/
    // compressed-tensors.md): the "Linear" target reaches the fused experts, the scheme is looked
    // up on ...experts.0.{gate,up,down}_proj, each expert's tensors are <expert>.<name>.weight_packed /
    // weight_scale (uint8) under the family's names (Mixtral's w1/w3/w2) and nothing else per
    // expert (an unknown one fails vLLM's load), the router stays bf16 and ignored by an entry
    // that Python's re.match finds (anchored at the start) and that no expert linear matches. The
    // MoE layer rebuilt from those files alone (routing as transformers computes it, here in
    // float64) equals the run's layer computed from its own dequantized weights.
    void mixtureOfExpertsAsVllmReadsThem_data() { addMoeFamilies(); }
    void mixtureOfExpertsAsVllmReadsThem() {
        QFETCH(QString, family);
        // Kept attention linears join the router in ignore.
        const std::string runDir = moeRun(family, "gptq", mx::Format::MxFp4, "layers\\.1\\.self_attn\\.[qkv]_proj"),
                          out = runDir + "-ct";
        JobContext job;
        exporting::exportRun(runDir, exporting::ExportFormat::CompressedTensors, out, job);
        std::ifstream in(out + "/config.json");
        const json qc = json::parse(in).at("quantization_config");
        QCOMPARE(qc.at("config_groups").at("group_0").at("targets"), json::array({"Linear"}));
        std::vector<std::string> ignore;
        for (const auto& n : qc.at("ignore")) ignore.push_back(n.get<std::string>());
        // vLLM's rule: "re:" entries by Python's re.match (a match that starts at the name's start), others by equality.
        auto ignored = [&](const std::string& name) {
            for (const auto& e : ignore) {
                if (e.rfind("re:", 0) == 0) {
                    if (std::regex_search(name, std::regex(e.substr(3)), std::regex_constants::match_continuous)) return true;
                } else if (e == name) {
                    return true;
                }
            }
            return false;
        };
        const run::RunModel runModel = run::readRunModel(runDir + "/model");
        const model::ModelConfig c = run::runModelConfig(runModel);
        const bool mixtral = family == "mixtral";
        const auto st = io::SafeTensorsFile::open(out + "/model.safetensors");
        using E = model::names::ExpertLinear;
        at::manual_seed(8);
        for (int l = 0; l < c.numLayers; ++l) {
            const std::string p = model::names::layerPrefix(l), router = p + model::names::routerModule(c);
            QVERIFY2(ignored(router), router.c_str());
            QVERIFY2(st->entry(router + ".weight").dtype == "BF16", router.c_str());
            QVERIFY(!ignored(p + "mlp.experts.0.gate_proj") && !ignored(p + "mlp.experts.0.up_proj") &&
                    !ignored(p + "mlp.experts.0.down_proj")); // vLLM's synthetic names for the scheme lookup
            for (const char* m : {model::names::kQProj, model::names::kKProj, model::names::kVProj})
                QCOMPARE(ignored(p + m), l == 1);
            std::vector<at::Tensor> gate, up, down, gateRun, upRun, downRun;
            for (int e = 0; e < c.moe->numExperts; ++e) {
                auto read = [&](E which, std::int64_t cols, std::vector<at::Tensor>& ours, std::vector<at::Tensor>& theirs) {
                    const std::string m = p + model::names::expertModule(c, e, which);
                    QVERIFY2(m.find(mixtral ? ".w" : "_proj") != std::string::npos, m.c_str());
                    QCOMPARE(st->entry(m + ".weight_scale").dtype, std::string("U8"));
                    ours.push_back(decodeMxfp4(st->tensor(m + ".weight_packed"), st->tensor(m + ".weight_scale"), cols));
                    theirs.push_back(runModel.tensors.at(m + ".weight").to(at::kDouble));
                };
                read(E::Gate, c.hiddenSize, gate, gateRun);
                read(E::Up, c.hiddenSize, up, upRun);
                read(E::Down, c.moe->expertWidth, down, downRun);
            }
            // Nothing per expert beyond what vLLM maps (weight_packed, weight_scale).
            for (const auto& e : st->entries())
                if (e.name.find(p + (mixtral ? "block_sparse_moe.experts." : "mlp.experts.")) == 0) {
                    const bool known = e.name.size() > 14 && (e.name.compare(e.name.size() - 14, 14, ".weight_packed") == 0 ||
                                                              e.name.compare(e.name.size() - 13, 13, ".weight_scale") == 0);
                    QVERIFY2(known, e.name.c_str());
                }
            // The layer's MLP on random inputs: softmax over the router's logits, top-k, renormalised.
            const at::Tensor x = at::randn({6, c.hiddenSize}, at::kDouble);
            const at::Tensor logits = x.mm(st->tensor(router + ".weight").to(at::kDouble).t());
            auto moe = [&](const std::vector<at::Tensor>& g, const std::vector<at::Tensor>& u, const std::vector<at::Tensor>& d) {
                const auto probs = at::softmax(logits, 1);
                const auto top = at::topk(probs, c.moe->expertsPerToken, 1);
                const auto w = std::get<0>(top) / std::get<0>(top).sum(1, true);
                at::Tensor y = at::zeros({x.size(0), c.hiddenSize}, at::kDouble);
                for (std::int64_t t = 0; t < x.size(0); ++t)
                    for (std::int64_t k = 0; k < c.moe->expertsPerToken; ++k) {
                        const auto e = std::get<1>(top)[t][k].item<std::int64_t>();
                        const auto xt = x[t].unsqueeze(0);
                        const auto a = (xt.mm(g[e].t()) / (1 + at::exp(-xt.mm(g[e].t())))) * xt.mm(u[e].t());
                        y[t] += w[t][k] * a.mm(d[e].t()).squeeze(0);
                    }
                return y;
            };
            const at::Tensor yCt = moe(gate, up, down), yRun = moe(gateRun, upRun, downRun);
            const double err = (yCt - yRun).abs().max().item<double>(), scale = yRun.abs().max().item<double>();
            // both float64 over sums of at most 64 products, the same codes: rounding only
            QVERIFY2(err <= 1e-12 * scale, qPrintable(QString("layer %1: %2 of %3").arg(l).arg(err).arg(scale)));
        }
    }

    // NVFP4 experts as vLLM's NVFP4 MoE method reads them: per expert weight_packed, weight_scale
    // (E4M3 bytes) and weight_global_scale (448·6/amax); gate and up go into one w13 weight scaled
    // by the gate's global scale alone, so the run gives them one (SPEC §6), from the larger of the
    // two originals' maxima (RTN: no transform, the checkpoint's weights). Decoded that way, every
    // weight is the run's up to float32's rounding of the scales: the run multiplies the E4M3 scale
    // by g and then by the element (two roundings), the file holds 1/g rounded (a third), so
    // |Δw| ≤ 3·2⁻²⁴·|w| < 2⁻²²·|w|. The MoE layer rebuilt from the files is then bounded against the
    // run's by first-order propagation of that δ, worked out per output.
    void nvfp4ExpertsAsVllmReadsThem_data() { addMoeFamilies(); }
    void nvfp4ExpertsAsVllmReadsThem() {
        QFETCH(QString, family);
        const std::string runDir = moeRun(family, "rtn", mx::Format::NvFp4, ""), out = runDir + "-ct";
        const std::string model = runDir + "-model";
        JobContext job;
        exporting::exportRun(runDir, exporting::ExportFormat::CompressedTensors, out, job);
        const run::RunModel runModel = run::readRunModel(runDir + "/model");
        const model::ModelConfig c = run::runModelConfig(runModel);
        const auto source = model::Checkpoint::load(model);
        const auto st = io::SafeTensorsFile::open(out + "/model.safetensors");
        const double delta = std::ldexp(1.0, -22);
        using E = model::names::ExpertLinear;
        at::manual_seed(9);
        for (int l = 0; l < c.numLayers; ++l) {
            const std::string p = model::names::layerPrefix(l), router = p + model::names::routerModule(c);
            std::vector<at::Tensor> gate, up, down;
            for (int e = 0; e < c.moe->numExperts; ++e) {
                const std::string g = p + model::names::expertModule(c, e, E::Gate), u = p + model::names::expertModule(c, e, E::Up),
                                  d = p + model::names::expertModule(c, e, E::Down);
                auto amax = [&](const std::string& m) { return source.weight(m + ".weight").to(at::kFloat).abs().max().item<float>(); };
                const float stored = st->tensor(g + ".weight_global_scale").item<float>();
                QCOMPARE(test::bitsOf(st->tensor(u + ".weight_global_scale").item<float>()), test::bitsOf(stored));
                QCOMPARE(test::bitsOf(stored), test::bitsOf(1.0f / (std::max(amax(g), amax(u)) / (448.0f * 6.0f))));
                // w13 takes the gate's global scale for both halves; w2 its own.
                using Part = std::tuple<std::string, float, std::int64_t>;
                const float downGlobal = st->tensor(d + ".weight_global_scale").item<float>();
                for (const auto& [m, global, cols] : std::vector<Part>{{g, stored, c.hiddenSize}, {u, stored, c.hiddenSize},
                                                                       {d, downGlobal, c.moe->expertWidth}}) {
                    QCOMPARE(st->entry(m + ".weight_scale").dtype, std::string("F8_E4M3"));
                    const at::Tensor ours = decodeNvfp4(st->tensor(m + ".weight_packed"), st->tensor(m + ".weight_scale"), global, cols);
                    const at::Tensor theirs = runModel.tensors.at(m + ".weight").to(at::kDouble);
                    QVERIFY2(((ours - theirs).abs() <= delta * theirs.abs()).all().item<bool>(), m.c_str());
                    (m == g ? gate : m == u ? up : down).push_back(ours);
                }
            }
            // The layer from the files against the run's own weights: softmax, top-k, renormalised.
            const at::Tensor x = at::randn({6, c.hiddenSize}, at::kDouble);
            const at::Tensor logits = x.mm(st->tensor(router + ".weight").to(at::kDouble).t());
            const auto top = at::topk(at::softmax(logits, 1), c.moe->expertsPerToken, 1);
            const auto weights = std::get<0>(top) / std::get<0>(top).sum(1, true);
            auto silu = [](const at::Tensor& t) { return t / (1 + at::exp(-t)); };
            auto w = [&](E which, int e) { return runModel.tensors.at(p + model::names::expertModule(c, e, which) + ".weight").to(at::kDouble); };
            for (std::int64_t t = 0; t < x.size(0); ++t) {
                const auto xt = x[t].unsqueeze(0), xa = xt.abs();
                at::Tensor yCt = at::zeros({1, c.hiddenSize}, at::kDouble), yRun = yCt.clone(), bound = yCt.clone();
                for (std::int64_t k = 0; k < c.moe->expertsPerToken; ++k) {
                    const auto e = std::get<1>(top)[t][k].item<std::int64_t>();
                    const double r = weights[t][k].item<double>();
                    yCt += r * (silu(xt.mm(gate[e].t())) * xt.mm(up[e].t())).mm(down[e].t());
                    const auto a = silu(xt.mm(w(E::Gate, int(e)).t())), b = xt.mm(w(E::Up, int(e)).t());
                    yRun += r * (a * b).mm(w(E::Down, int(e)).t());
                    // |Δy| ≤ δ·|D|(|a||b| + 1.1·(|G||x|)|b| + |a|(|U||x|)) to first order (SiLU is 1.1-Lipschitz)
                    const auto gx = xa.mm(w(E::Gate, int(e)).abs().t()), ux = xa.mm(w(E::Up, int(e)).abs().t());
                    bound += r * (a.abs() * b.abs() + 1.1 * gx * b.abs() + a.abs() * ux).mm(w(E::Down, int(e)).abs().t());
                }
                // 2δ: the first-order bound doubled for the second-order terms and the float64 sums.
                const double worst = ((yCt - yRun).abs() / (2 * delta * bound + 1e-300)).max().item<double>();
                QVERIFY2(worst <= 1.0, qPrintable(QString("layer %1 token %2: %3 of the bound").arg(l).arg(t).arg(worst)));
            }
        }
    }

    // NVFP4 inputs as compressed-tensors' NVFP4 preset and llm-compressor write them: dynamic
    // "local" block scales under a static input_global_scale = 448·6/amax per linear, amax its
    // input's largest magnitude over the calibration windows (generate_gparam). The run measures
    // amax (RTN too: the windows then pass its layers) for its NVFP4 linears only; q/k/v and
    // gate/up read one input and share it. Layer 0's q/k/v input is the RMSNorm of the windows'
    // embeddings, worked out here in float64 from the source checkpoint: the run's float32 amax is
    // within a few float32 roundings of it (RMSNorm's sum of d squares: d·ε32 relative, ×4
    // margin). A run without input_amax.safetensors (before issue 72) exports dynamic scales and
    // says why vLLM's W4A4 path wants more.
    void nvfp4InputScaleFromCalibration() {
        const QString model = test::moeModel(m_tmp.filePath("nvfp4-input-model"), test::moeRunConfigText("qwen3moe"), "qwen3moe");
        const std::string runDir = m_tmp.filePath("nvfp4-input").toStdString(), out = runDir + "-ct";
        run::QuantizeOptions o;
        o.method = "rtn";
        o.format = mx::makeConfig(mx::Format::NvFp4);
        o.calibSamples = 20; // three chunks of windows through each layer (8, 8, 4)
        o.seqLen = 32;
        o.device = "cpu";
        o.scheme = "layers\\.1\\.self_attn\\.o_proj = mxfp4";
        const std::vector<int> ids = test::randomIds(2000, 300, 4);
        run::runQuantize(model.toStdString(), ids, {}, runDir, o);
        const run::RunModel rm = run::readRunModel(runDir + "/model");
        const model::ModelConfig c = run::runModelConfig(rm);
        namespace n = model::names;
        for (const auto& linear : n::blockLinearPrefixes(c)) {
            const bool nv = rm.packed.at(linear).config.isNvfp4();
            QVERIFY2(rm.inputAmax.count(linear) == (nv ? 1u : 0u), linear.c_str());
            if (nv) QVERIFY2(std::isfinite(rm.inputAmax.at(linear)) && rm.inputAmax.at(linear) > 0, linear.c_str());
        }
        for (int l = 0; l < c.numLayers; ++l) {
            const std::string p = n::layerPrefix(l);
            QCOMPARE(rm.inputAmax.at(p + n::kKProj), rm.inputAmax.at(p + n::kQProj));
            QCOMPARE(rm.inputAmax.at(p + n::kVProj), rm.inputAmax.at(p + n::kQProj));
        }
        // Layer 0's q/k/v input in float64.
        const auto source = model::Checkpoint::load(model.toStdString());
        const auto windows = model::sampleCalibrationWindows(ids, o.calibSamples, o.seqLen, o.seed);
        std::vector<std::int64_t> flat;
        for (const auto& w : windows) flat.insert(flat.end(), w.begin(), w.end());
        const at::Tensor x = source.weight("model.embed_tokens.weight").to(at::kDouble).index_select(0, at::tensor(flat, at::kLong));
        const at::Tensor norm = x * at::rsqrt(x.pow(2).mean(1, true) + c.rmsNormEps) *
                                source.weight(n::layerPrefix(0) + n::kInputNorm + ".weight").to(at::kDouble);
        const double want = norm.abs().max().item<double>(), got = rm.inputAmax.at(n::layerPrefix(0) + n::kQProj);
        const double bound = 4.0 * c.hiddenSize * std::numeric_limits<float>::epsilon() * want;
        QVERIFY2(std::abs(got - want) <= bound, qPrintable(QString("layer 0 q/k/v input amax %1, float64 %2").arg(got).arg(want)));

        JobContext job;
        exporting::exportRun(runDir, exporting::ExportFormat::CompressedTensors, out, job);
        auto configOf = [](const std::string& dir) {
            std::ifstream in(dir + "/config.json");
            return json::parse(in).at("quantization_config");
        };
        auto nvfp4Group = [](const json& qc) {
            for (const auto& [name, g] : qc.at("config_groups").items())
                if (g.at("format") == "nvfp4-pack-quantized") return g;
            return json();
        };
        const json g = nvfp4Group(configOf(out));
        QCOMPARE(g.at("input_activations").at("dynamic"), json("local"));
        QCOMPARE(g.at("input_activations").at("observer"), json("static_minmax"));
        const auto st = io::SafeTensorsFile::open(out + "/model.safetensors");
        for (const auto& [linear, amax] : rm.inputAmax) {
            const float stored = st->tensor(linear + ".input_global_scale").item<float>();
            QCOMPARE(test::bitsOf(stored), test::bitsOf(448.0f * 6.0f / amax)); // FP8 max · FP4 max / amax
        }
        QVERIFY(!st->contains(n::layerPrefix(1) + n::kOProj + ".input_global_scale")); // MXFP4 there

        // The same run as versions before issue 72 wrote it.
        QVERIFY(QFile::remove(QString::fromStdString(runDir + "/model/" + run::kRunInputAmaxFile)));
        const exporting::ExportReport old =
            exporting::exportRun(runDir, exporting::ExportFormat::CompressedTensors, out + "-old", job);
        QCOMPARE(nvfp4Group(configOf(out + "-old")).at("input_activations").at("dynamic"), json(true));
        const auto oldSt = io::SafeTensorsFile::open(out + "-old/model.safetensors");
        for (const auto& e : oldSt->entries()) QVERIFY2(e.name.find("input_global_scale") == std::string::npos, e.name.c_str());
        QVERIFY(std::any_of(old.notes.begin(), old.notes.end(), [](const std::string& note) {
            return note.find("predates the calibrated input scale") != std::string::npos;
        }));
    }

    // A mixed-precision scheme (docs/spec.md, "Mixed precision") as vLLM and compressed-tensors read
    // it (docs/developer/compressed-tensors.md, "Mixed precision"): each layer's scheme looked up by
    // their matching rules, implemented here (vLLM: ignore, then names and regexes in config order,
    // then fused shards, then the class; compressed-tensors: exact names, regexes sorted, class),
    // is a config group whose weights are the run's format of that linear, and the tensors decoded
    // by that group's format alone are the run's weights: MXFP4 and MXFP8 exactly, NVFP4 within
    // float32's rounding of its scales (2⁻²² relative, nvfp4ExpertsAsVllmReadsThem), MXINT8 groups
    // (no compressed-tensors name) and bf16 groups exactly as bf16 weights in ignore. The quarot
    // row has T3 with its signs in up_proj: an MXFP8 up_proj's bytes carry them in bit 7.
    void mixedSchemeAsVllmReadsIt_data() {
        QTest::addColumn<QString>("family");
        QTest::addColumn<QString>("method");
        QTest::addColumn<QString>("scheme");
        QTest::newRow("llama") << "llama" << "rtn"
                               << "layers\\.0\\.mlp\\.gate_up = mxfp8; layers\\.0\\.self_attn\\.qkv = nvfp4; "
                                  "layers\\.1\\.mlp\\.down_proj = mxint8; layers\\.1\\.self_attn\\.o_proj = bf16";
        QTest::newRow("llama quarot") << "llama" << "quarot" << "layers\\.0\\.mlp\\.gate_up = mxfp8; layers\\.1\\.mlp\\.down_proj = nvfp4";
        QTest::newRow("qwen3-moe") << "qwen3moe" << "rtn"
                                   << "layers\\.0\\.mlp\\.experts = mxfp8; layers\\.1\\.self_attn\\.qkv = nvfp4; "
                                      "layers\\.0\\.self_attn\\.o_proj = mxint8";
        QTest::newRow("mixtral") << "mixtral" << "rtn" << "layers\\.1\\.mlp\\.experts = nvfp4; layers\\.0\\.self_attn\\.qkv = mxfp8";
    }
    void mixedSchemeAsVllmReadsIt() {
        QFETCH(QString, family);
        QFETCH(QString, method);
        QFETCH(QString, scheme);
        const std::string runDir = moeRun(family, method.toStdString(), mx::Format::MxFp4, "", scheme.toStdString()),
                          out = runDir + "-ct";
        JobContext job;
        exporting::exportRun(runDir, exporting::ExportFormat::CompressedTensors, out, job);
        // The size the export dialog announces, against the tensors' bytes (the header, a few kB of
        // names, weighs in a model this small).
        std::uint64_t header = 0;
        std::ifstream(out + "/model.safetensors", std::ios::binary).read(reinterpret_cast<char*>(&header), 8);
        const double data = double(QFileInfo(QString::fromStdString(out + "/model.safetensors")).size()) - 8 - double(header),
                     announced = double(exporting::describeExportTarget(runDir, "compressed-tensors").bytes);
        QVERIFY2(std::abs(announced - data) <= 0.01 * data, qPrintable(QString("%1 vs %2").arg(announced).arg(data)));
        std::ifstream in(out + "/config.json");
        const auto qc = nlohmann::ordered_json::parse(in).at("quantization_config"); // the file's order
        QCOMPARE(qc.at("format").get<std::string>(), std::string("mixed-precision"));
        std::vector<std::pair<json, std::vector<std::string>>> groups; // (group, targets) in config order
        for (const auto& [name, g] : qc.at("config_groups").items()) {
            onlyKeys(json::parse(g.dump()), {"targets", "weights", "input_activations", "output_activations", "format"}, name);
            groups.push_back({json::parse(g.dump()), g.at("targets").get<std::vector<std::string>>()});
        }
        const auto ignore = qc.at("ignore").get<std::vector<std::string>>();
        auto ignored = [&](const std::string& n) {
            return std::any_of(ignore.begin(), ignore.end(), [&](const std::string& e) { return nameMatches(n, e); });
        };
        const int kIgnored = -1;
        // vLLM (compressed_tensors/utils.py find_matched_target, should_ignore_layer); before July
        // 2026 (vLLM PR #49483) it tried the class before the fused shards.
        auto vllmGroupBy = [&](const std::string& layer, const std::vector<std::string>& shards, bool classFirst) {
            if (ignored(layer)) return kIgnored;
            const auto n = std::count_if(shards.begin(), shards.end(), ignored);
            if (n > 0 && std::size_t(n) == shards.size()) return kIgnored;
            if (n > 0) return -2; // vLLM: "Found different quantization schemes for the shards"
            for (std::size_t g = 0; g < groups.size(); ++g)
                for (const auto& t : groups[g].second)
                    if (nameMatches(layer, t)) return int(g);
            auto firstMatch = [&](const std::string& shard) {
                for (std::size_t g = 0; g < groups.size(); ++g)
                    for (const auto& t : groups[g].second)
                        if (nameMatches(shard, t)) return int(g);
                return -3;
            };
            auto byClass = [&] {
                for (std::size_t g = 0; g < groups.size(); ++g)
                    for (const auto& t : groups[g].second)
                        if (t == "Linear") return int(g); // a class name: every vLLM linear's class ends in Linear
                return -3;
            };
            if (classFirst && byClass() >= 0) return byClass();
            if (!shards.empty() && std::all_of(shards.begin(), shards.end(), [&](const auto& sh) { return firstMatch(sh) >= 0; }))
                return firstMatch(shards.front());
            return byClass();
        };
        // compressed-tensors (utils/match.py match_targets): exact names, then regexes sorted, then classes.
        auto ctGroup = [&](const std::string& module) {
            if (ignored(module)) return kIgnored;
            std::vector<std::pair<std::string, int>> regexes;
            for (std::size_t g = 0; g < groups.size(); ++g)
                for (const auto& t : groups[g].second) {
                    if (t == module) return int(g);
                    if (t.rfind("re:", 0) == 0) regexes.push_back({t, int(g)});
                }
            std::sort(regexes.begin(), regexes.end());
            for (const auto& [t, g] : regexes)
                if (nameMatches(module, t)) return g;
            for (std::size_t g = 0; g < groups.size(); ++g)
                for (const auto& t : groups[g].second)
                    if (t == "Linear") return int(g);
            return -3;
        };
        const run::RunModel runModel = run::readRunModel(runDir + "/model");
        const model::ModelConfig c = run::runModelConfig(runModel);
        // What the run did with a linear: its packed format, or none (kept, or MXINT8: bf16 in the file).
        auto runFormat = [&](const std::string& linear) -> std::optional<mx::MxConfig> {
            const auto p = runModel.packed.find(linear);
            if (p == runModel.packed.end() || p->second.config.format == mx::Format::MxInt8) return std::nullopt;
            return p->second.config;
        };
        auto groupIs = [&](int g, const std::optional<mx::MxConfig>& f, const std::string& where) {
            if (!f) {
                QVERIFY2(g == kIgnored, qPrintable(QString::fromStdString(where + ": not ignored, group ") + QString::number(g)));
                return;
            }
            QVERIFY2(g >= 0, qPrintable(QString::fromStdString(where + ": no scheme, ") + QString::number(g)));
            const json& w = groups[std::size_t(g)].first.at("weights");
            const std::string what = where + " (" + f->describe() + ") in " + w.dump();
            QVERIFY2(w.at("num_bits").get<int>() == mx::elementSpec(f->element()).bits &&
                         w.at("group_size").get<int>() == f->blockSize &&
                         w.at("strategy").get<std::string>() == (f->isNvfp4() ? "tensor_group" : "group") &&
                         w.at("type").get<std::string>() == "float",
                     what.c_str());
            const json& a = groups[std::size_t(g)].first.at("input_activations"); // the linear's format too
            QVERIFY2(a.at("num_bits") == w.at("num_bits") && a.at("group_size") == w.at("group_size"), what.c_str());
        };
        // vLLM's layers: fused q/k/v and gate/up, a sparse layer's experts by expert 0's names.
        using E = model::names::ExpertLinear;
        namespace n = model::names;
        for (const bool older : {false, true}) {
            auto vllmGroup = [&](const std::string& layer, const std::vector<std::string>& shards) {
                return vllmGroupBy(layer, shards, older);
            };
            for (int l = 0; l < c.numLayers; ++l) {
                const std::string p = n::layerPrefix(l);
                groupIs(vllmGroup(p + "self_attn.qkv_proj", {p + n::kQProj, p + n::kKProj, p + n::kVProj}),
                        runFormat(p + n::kQProj), p + "self_attn.qkv_proj");
                groupIs(vllmGroup(p + n::kOProj, {}), runFormat(p + n::kOProj), p + n::kOProj);
                if (!c.isSparseLayer(l)) {
                    groupIs(vllmGroup(p + "mlp.gate_up_proj", {p + n::kGateProj, p + n::kUpProj}), runFormat(p + n::kGateProj),
                            p + "mlp.gate_up_proj");
                    groupIs(vllmGroup(p + n::kDownProj, {}), runFormat(p + n::kDownProj), p + n::kDownProj);
                    continue;
                }
                const std::string experts = p + (family == "mixtral" ? "block_sparse_moe.experts" : "mlp.experts");
                for (const char* m : {".0.gate_proj", ".0.up_proj", ".0.down_proj"})
                    groupIs(vllmGroup(experts + m, {}), runFormat(p + n::expertModule(c, 0, E::Gate)), experts + m);
            }
        }
        // compressed-tensors' modules, each decoded by its group's format.
        const auto st = io::SafeTensorsFile::open(out + "/model.safetensors");
        at::Tensor signs; // T3's signs, in up_proj's rows where the transform is declared "hadamard"
        if (runModel.quant.t3Block > 0 && st->contains(model::names::layerPrefix(0) + n::kDownProj + ".latmix_t3_input.weight"))
            signs = run::t3Transform(runModel.quant, c.intermediateSize).hadamardSigns().to(at::kDouble).unsqueeze(1);
        std::set<std::string> formatsSeen;
        for (const auto& linear : n::blockLinearPrefixes(c)) {
            const int g = ctGroup(linear);
            const auto f = runFormat(linear);
            groupIs(g, f, linear);
            at::Tensor want = runModel.tensors.at(linear + ".weight").to(at::kDouble);
            if (signs.defined() && linear.find("mlp.up_proj") != std::string::npos) want = want * signs;
            if (g == kIgnored) {
                QVERIFY2(st->entry(linear + ".weight").dtype == "BF16", linear.c_str());
                // kept linears hold bf16 values, MXINT8's have 7 significant bits: exact either way
                QVERIFY2(at::equal(st->tensor(linear + ".weight").to(at::kDouble), want), linear.c_str());
                continue;
            }
            const std::string format = groups[std::size_t(g)].first.at("format").get<std::string>();
            formatsSeen.insert(format);
            at::Tensor got;
            if (format == "mxfp8-quantized") {
                QCOMPARE(st->entry(linear + ".weight").dtype, std::string("F8_E4M3"));
                got = decodeMxfp8(st->tensor(linear + ".weight"), st->tensor(linear + ".weight_scale"));
            } else if (format == "mxfp4-pack-quantized") {
                got = decodeMxfp4(st->tensor(linear + ".weight_packed"), st->tensor(linear + ".weight_scale"), want.size(1));
            } else {
                QCOMPARE(format, std::string("nvfp4-pack-quantized"));
                got = decodeNvfp4(st->tensor(linear + ".weight_packed"), st->tensor(linear + ".weight_scale"),
                                  st->tensor(linear + ".weight_global_scale").item<float>(), want.size(1));
            }
            const double tolerance = format == "nvfp4-pack-quantized" ? std::ldexp(1.0, -22) : 0.0;
            QVERIFY2(((got - want).abs() <= tolerance * want.abs()).all().item<bool>(), linear.c_str());
        }
        QVERIFY(formatsSeen.size() >= 2); // mixed, as the top-level format says
    }

    // vLLM loads q/k/v (and gate/up) as one layer with one scheme: --keep that keeps part of such a
    // group is refused by the compressed-tensors export, naming the group and the way out, and
    // nothing is written; hf takes the same run.
    void partlyKeptFusedLinearsAreRefused() {
        const QString source = test::modelFolder("brownpy-13M");
        if (!QFileInfo::exists(source + "/model.safetensors")) LATMIX_DATA_SKIP(qPrintable("no " + source));
        const std::string runDir = (m_tmp.path() + "/kept-q").toStdString(), out = runDir + "-ct";
        test::RunVariant v;
        v.weights = mx::MxConfig{mx::Format::MxFp4, 32};
        v.keep = {model::names::layerPrefix(0) + model::names::kQProj};
        test::buildRun(source.toStdString(), runDir, v, source.toStdString());
        JobContext job;
        const QString error = test::errorOf([&] { exporting::exportRun(runDir, exporting::ExportFormat::CompressedTensors, out, job); });
        QVERIFY2(error.contains("model.layers.0.self_attn.q_proj, model.layers.0.self_attn.k_proj, model.layers.0.self_attn.v_proj") &&
                     error.contains("keep all of them or none") && error.contains("hf"),
                 qPrintable(error));
        QVERIFY(!QFileInfo::exists(QString::fromStdString(out)));
        exporting::exportRun(runDir, exporting::ExportFormat::Hf, out + "-hf", job);
        QVERIFY(QFileInfo::exists(QString::fromStdString(out + "-hf/config.json")));
    }
};

QTEST_GUILESS_MAIN(TestCtConfig)
#include "tst_ctconfig.moc"
