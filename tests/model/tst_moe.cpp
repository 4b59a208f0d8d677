// Mixture-of-experts models (Qwen3-MoE, Mixtral): the config keys and their refusals, the tensors
// a checkpoint must hold, and the forward pass against the float64 reference (ReferenceLlama's
// own routing, written from transformers' modeling files) on small random checkpoints of both
// families; the real Qwen3-30B-A3B and Mixtral-8x7B configs give their published parameter counts.
#include "ReferenceLlama.h"
#include "SmallRuns.h"
#include "TestSupport.h"

#include "eval/ExpertLoad.h"
#include "eval/Perplexity.h"
#include "export/Export.h"
#include "import/RandomModel.h"
#include "io/SafeTensors.h"
#include "model/Capture.h"
#include "model/Checkpoint.h"
#include "model/LlamaModel.h"
#include "model/MixtureOfExperts.h"
#include "model/TensorNames.h"
#include "run/MemoryEstimate.h"
#include "run/QuantizeRun.h"
#include "run/RunModel.h"
#include "run/quantize/LayerQuantizer.h"
#include "run/quantize/OptionTable.h"
#include "run/quantize/Preflight.h"
#include "train/TransformAnalysis.h"

#include <ATen/ATen.h>

#include <cmath>
#include <map>
#include <numeric>
#include <random>

#include "TestData.h" // after ATen: Qt's slots macro breaks ATen headers
#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

using namespace latmix;

namespace {

// A small MoE config: hidden and head_dim multiples of the MX block, GQA, `extra` the family's keys.
std::string moeConfigText(const std::string& arch, const std::string& extra, int layers = 3) {
    const bool mixtral = arch == "MixtralForCausalLM";
    return R"({"architectures": [")" + arch + R"("], "model_type": ")" + (mixtral ? "mixtral" : "qwen3_moe") +
           R"(", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": )" + std::to_string(layers) +
           R"(, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 300,
        "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu",
        "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": false)" +
           (extra.empty() ? "" : ", " + extra) + "}";
}

// dst: src's config and tokenizer files, its tensors passed through edit (an undefined result
// drops the tensor).
void rewriteModel(const QString& src, const QString& dst,
                  const std::function<at::Tensor(const std::string&, const at::Tensor&)>& edit) {
    QDir().mkpath(dst);
    for (const QString& f : QDir(src).entryList(QDir::Files))
        if (f != QLatin1String("model.safetensors")) QFile::copy(src + "/" + f, dst + "/" + f);
    const auto file = io::SafeTensorsFile::open((src + "/model.safetensors").toStdString());
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (const auto& e : file->entries()) {
        const at::Tensor t = edit(e.name, file->tensor(e.name).clone());
        if (t.defined()) tensors.emplace_back(e.name, t);
    }
    io::writeSafeTensors((dst + "/model.safetensors").toStdString(), tensors, {{"format", "pt"}});
}

bool isRouter(const std::string& name) {
    const auto ends = [&](const std::string& s) {
        return name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
    };
    return ends(".mlp.gate.weight") || ends(".block_sparse_moe.gate.weight");
}

std::int64_t parameters(const model::ModelConfig& c) {
    std::int64_t n = 0;
    for (const auto& [name, shape] : model::requiredTensors(c)) {
        std::int64_t e = 1;
        for (auto d : shape) e *= d;
        n += e;
    }
    return n;
}

} // namespace

class TestMoe : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;

    // A random checkpoint of the config, its routers scaled so that the top-k choice is decisive
    // (random routers of std 0.02 give near-uniform probabilities; float32 and float64 would
    // then disagree on near-ties, which says nothing about the code).
    QString modelOf(const QString& name, const std::string& configText) {
        const QString dir = m_tmp.filePath("models/" + name);
        if (QFile::exists(dir + "/config.json")) return dir;
        const QString raw = dir + "-raw";
        importing::RandomModelOptions r;
        r.dtype = "float32";
        r.seed = 5;
        importing::writeRandomModel(model::ModelConfig::fromJsonText(configText, name.toStdString()), raw.toStdString(), r);
        rewriteModel(raw, dir, [](const std::string& n, const at::Tensor& t) { return isRouter(n) ? t * 10 : t; });
        return dir;
    }

private slots:
    void initTestCase() { QVERIFY(m_tmp.isValid()); }

    // The forward pass routes each token as the reference does (the same experts, counted through
    // the expert points' hooks) and gives its logits to float32 rounding; the perplexity path
    // (nextTokenNll over the routed hidden states) gives the reference's.
    void forwardMatchesFloat64Reference_data() {
        QTest::addColumn<QString>("config");
        QTest::addColumn<QString>("name");
        QTest::addColumn<QList<int>>("sparseLayers");
        const auto row = [](const char* name, const std::string& arch, const std::string& extra, QList<int> sparse,
                            int layers = 3) {
            QTest::newRow(name) << QString::fromStdString(moeConfigText(arch, extra, layers)) << QString(name) << sparse;
        };
        row("qwen3-moe top-2 of 8 renormalised", "Qwen3MoeForCausalLM",
            R"("num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64, "norm_topk_prob": true)",
            {0, 1, 2});
        row("qwen3-moe top-3 of 6 raw probabilities", "Qwen3MoeForCausalLM",
            R"("num_experts": 6, "num_experts_per_tok": 3, "moe_intermediate_size": 32, "norm_topk_prob": false)",
            {0, 1, 2});
        // Dense MLPs among sparse ones: layer 2 by mlp_only_layers; with decoder_sparse_step 2
        // only the odd layers are sparse.
        row("qwen3-moe mlp_only_layers", "Qwen3MoeForCausalLM",
            R"("num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "norm_topk_prob": true,
               "mlp_only_layers": [2])",
            {0, 1, 3}, 4);
        row("qwen3-moe decoder_sparse_step 2", "Qwen3MoeForCausalLM",
            R"("num_experts": 4, "num_experts_per_tok": 1, "moe_intermediate_size": 32, "decoder_sparse_step": 2)", {1, 3},
            4);
        // transformers 5 saves Qwen3-MoE's expert count as num_local_experts.
        row("qwen3-moe num_local_experts", "Qwen3MoeForCausalLM",
            R"("num_local_experts": 5, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "norm_topk_prob": true)",
            {0, 1, 2});
        row("mixtral top-2 of 8", "MixtralForCausalLM", R"("num_local_experts": 8, "num_experts_per_tok": 2)", {0, 1, 2});
    }
    void forwardMatchesFloat64Reference() {
        QFETCH(QString, config);
        QFETCH(QString, name);
        QFETCH(QList<int>, sparseLayers);
        const auto ck = model::Checkpoint::load(modelOf(name, config.toStdString()).toStdString());
        const auto& c = ck.config();
        QVERIFY(c.moe.has_value());
        for (int l = 0; l < c.numLayers; ++l) QCOMPARE(c.isSparseLayer(l), sparseLayers.contains(l));

        std::mt19937_64 rng(3);
        std::vector<int64_t> ids(48);
        for (auto& t : ids) t = static_cast<int64_t>(rng() % c.vocabSize);
        test::ReferenceLlama ref(ck);
        const auto want = ref.logits(ids);
        // The data's own margin: the k-th and (k+1)-th router logits of every token lie further
        // apart than float32 rounding can move them (logits of size ~2 computed to ~1e-6 relative),
        // so both computations must choose the same experts.
        if (c.moe->expertsPerToken < c.moe->numExperts)
            QVERIFY2(ref.smallestGap > 1e-4, qPrintable(QString("near-tie in the test data: %1").arg(ref.smallestGap)));

        const model::LlamaModel m(ck);
        // Tokens each expert got, summed over the sparse layers, at its gate/up and down_proj inputs.
        std::map<int, std::int64_t> perExpert, perExpertIn;
        std::int64_t routedRows = 0;
        bool widthsRight = true;
        const auto hook = [&](const std::string& point, const at::Tensor& x) {
            const auto at = point.find(".mlp.experts.");
            if (at != std::string::npos) {
                const bool down = point.find(".down_proj.input") != std::string::npos;
                (down ? perExpert : perExpertIn)[std::stoi(point.substr(at + 13))] += x.size(1);
                if (down) routedRows += x.size(1);
                widthsRight = widthsRight && x.size(2) == (down ? c.moe->expertWidth : c.hiddenSize);
            }
            return x;
        };
        const auto got = m.forward(at::tensor(ids, at::kLong).unsqueeze(0), hook).squeeze(0);
        QVERIFY(widthsRight);
        QCOMPARE(routedRows, std::int64_t(ids.size()) * c.moe->expertsPerToken * sparseLayers.size());
        QCOMPARE(perExpertIn, perExpert);
        for (int e = 0; e < c.moe->numExperts; ++e)
            QCOMPARE(perExpert[e], ref.routed[static_cast<size_t>(e)]);
        QVERIFY(perExpert.size() >= 2); // the routing really chooses among experts

        // The expert load of the same window (eval::measureExpertLoad): per layer, every token
        // k times; per expert, summed over the layers, the reference's counts.
        const auto load = eval::measureExpertLoad(m, {std::vector<int>(ids.begin(), ids.end())});
        QCOMPARE(int(load.layers.size()), int(sparseLayers.size()));
        std::vector<std::int64_t> loadSum(static_cast<size_t>(c.moe->numExperts), 0);
        for (const auto& row : load.tokens) {
            QCOMPARE(std::accumulate(row.begin(), row.end(), std::int64_t(0)), std::int64_t(ids.size()) * c.moe->expertsPerToken);
            for (size_t e = 0; e < row.size(); ++e) loadSum[e] += row[e];
        }
        QCOMPARE(loadSum, ref.routed);

        const double err = (got.to(at::kDouble) - want).abs().max().item<double>() / want.abs().max().item<double>();
        qInfo("%s: max |logit error| / max |logit| = %.3g, smallest top-k gap %.3g", qPrintable(name), err,
              ref.smallestGap);
        // As tst_llamamodel's dense rows: float32 rounding over the layers, ~1e-6; 1e-5 leaves 10x.
        QVERIFY2(err < 1e-5, qPrintable(QString("relative error %1").arg(err)));

        // Perplexity through the chunked next-token path equals the reference's log-softmax.
        const auto tokens = at::tensor(ids, at::kLong).unsqueeze(0);
        const double nll = m.sequenceNll(tokens);
        const auto logp = want.log_softmax(-1);
        double refNll = 0;
        for (size_t t = 0; t + 1 < ids.size(); ++t) refNll -= logp[int64_t(t)][ids[t + 1]].item<double>();
        QVERIFY2(std::abs(nll / refNll - 1) < 1e-5, qPrintable(QString("nll %1 vs %2").arg(nll).arg(refNll)));
    }

    // Each expert's own down_proj input captured in memory (model::pointNamesWithExperts), three
    // windows run as one batch: the rows of exactly the tokens the reference routes to the expert,
    // in window and token order, its float64 SiLU(g) * u to float32 rounding. Without expertPoints
    // the same regex finds nothing and the error says where experts' points are reached; a run
    // file's capture (capturePoints) refuses them the same way.
    void expertPointsCaptureTheirOwnTokens_data() {
        QTest::addColumn<QString>("config");
        QTest::addColumn<QString>("name");
        QTest::newRow("qwen3-moe") << QString::fromStdString(moeConfigText("Qwen3MoeForCausalLM",
                                          R"("num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64, "norm_topk_prob": true)"))
                                   << "qwen3-moe top-2 of 8 renormalised";
        QTest::newRow("mixtral") << QString::fromStdString(moeConfigText("MixtralForCausalLM",
                                        R"("num_local_experts": 8, "num_experts_per_tok": 2)"))
                                 << "mixtral top-2 of 8";
    }
    void expertPointsCaptureTheirOwnTokens() {
        QFETCH(QString, config);
        QFETCH(QString, name);
        const auto ck = model::Checkpoint::load(modelOf(name, config.toStdString()).toStdString());
        const auto& c = ck.config();
        std::mt19937_64 rng(11);
        std::vector<int> ids(200);
        for (auto& t : ids) t = static_cast<int>(rng() % c.vocabSize);
        test::ReferenceLlama ref(ck);
        for (const auto& w : model::sampleCalibrationWindows(ids, 3, 16, 0)) ref.logits({w.begin(), w.end()});
        QVERIFY2(ref.smallestGap > 1e-4, qPrintable(QString("near-tie in the test data: %1").arg(ref.smallestGap)));
        // The points of the experts the reference routed tokens to (an idle one: idleExpertIsRefused).
        QStringList routed;
        for (const auto& p : model::pointNamesWithExperts(c))
            if (model::isExpertPoint(p) && ref.expertInputs.count(p)) routed << QString::fromStdString(p);
        QVERIFY(routed.size() >= c.moe->numExperts);
        const std::string regex = ("^(" + routed.join('|').replace(".", "\\.") + ")$").toStdString();

        const model::LlamaModel m(ck);
        const auto acts = train::captureActivationsInMemory(m, ids, regex, 3, 16, 0, 0, true);
        QCOMPARE(int(acts.size()), int(routed.size()));
        std::map<int, std::int64_t> rowsPerLayer;
        for (size_t i = 0; i < acts.size(); ++i) {
            const auto& [point, x] = acts[i];
            QCOMPARE(QString::fromStdString(point), routed[int(i)]);
            const auto want = at::cat(ref.expertInputs.at(point), 0);
            QCOMPARE(x.size(0), want.size(0));
            QCOMPARE(x.size(1), std::int64_t(c.moe->expertWidth));
            const double err = (x.to(at::kDouble) - want).abs().max().item<double>() / want.abs().max().item<double>();
            // As the logits above: float32 rounding through the layers, ~1e-6; 1e-5 leaves 10x.
            QVERIFY2(err < 1e-5, qPrintable(QString("%1: relative error %2").arg(routed[int(i)]).arg(err)));
            rowsPerLayer[std::stoi(point.substr(7))] += x.size(0);
        }
        for (const auto& [layer, rows] : rowsPerLayer) QCOMPARE(rows, std::int64_t(3 * 16 * c.moe->expertsPerToken));

        const auto refusal = [&](const std::function<void()>& f) {
            try {
                f();
            } catch (const std::invalid_argument& e) {
                return QString::fromStdString(e.what());
            }
            return QString();
        };
        QVERIFY(refusal([&] { train::captureActivationsInMemory(m, ids, regex, 3, 16, 0); }).contains("--expert-points"));
        QVERIFY(refusal([&] { model::capturePoints(c, "experts", false, ""); }).contains("never stored in a run file"));
        QVERIFY(refusal([&] { model::capturePoints(c, "no-such-point", false, ""); }).startsWith("no quantization point"));
    }

    // An expert no calibration token chose (16 experts, top 1, 8 tokens: at least 8 idle in each
    // layer) is refused naming its point: never empty rows, never a NaN.
    void idleExpertIsRefused() {
        const auto ck = model::Checkpoint::load(
            modelOf("idle", moeConfigText("Qwen3MoeForCausalLM",
                                          R"("num_experts": 16, "num_experts_per_tok": 1, "moe_intermediate_size": 32)", 1))
                .toStdString());
        std::mt19937_64 rng(2);
        std::vector<int> ids(8);
        for (auto& t : ids) t = static_cast<int>(rng() % ck.config().vocabSize);
        test::ReferenceLlama ref(ck);
        ref.logits({ids.begin(), ids.end()});
        std::string idle;
        for (int e = 0; e < 16 && idle.empty(); ++e)
            if (!ref.expertInputs.count(model::expertPointName(0, e, model::PointKind::DownProjInput)))
                idle = model::expertPointName(0, e, model::PointKind::DownProjInput);
        QVERIFY(!idle.empty());
        const model::LlamaModel m(ck);
        try {
            train::captureActivationsInMemory(m, ids, "experts", 1, 8, 0, 0, true);
            QFAIL("an idle expert's point was captured");
        } catch (const std::runtime_error& e) {
            QVERIFY2(QString(e.what()).startsWith(QString::fromStdString("no calibration token was routed to the expert of " + idle)),
                     e.what());
        }
    }

    // The same model through a config rewritten by toJsonText: every MoE key survives.
    void configRoundTrip_data() {
        QTest::addColumn<QString>("config");
        QTest::newRow("qwen3-moe") << QString::fromStdString(moeConfigText(
            "Qwen3MoeForCausalLM", R"("num_experts": 6, "num_experts_per_tok": 3, "moe_intermediate_size": 32,
               "norm_topk_prob": false, "decoder_sparse_step": 2, "mlp_only_layers": [0])"));
        QTest::newRow("mixtral") << QString::fromStdString(
            moeConfigText("MixtralForCausalLM", R"("num_local_experts": 4, "num_experts_per_tok": 2)"));
    }
    void configRoundTrip() {
        QFETCH(QString, config);
        const auto a = model::ModelConfig::fromJsonText(config.toStdString());
        const auto b = model::ModelConfig::fromJsonText(a.toJsonText());
        QCOMPARE(b.architecture, a.architecture);
        QCOMPARE(b.moe->numExperts, a.moe->numExperts);
        QCOMPARE(b.moe->expertsPerToken, a.moe->expertsPerToken);
        QCOMPARE(b.moe->expertWidth, a.moe->expertWidth);
        QCOMPARE(b.moe->normTopK, a.moe->normTopK);
        QCOMPARE(b.moe->sparseStep, a.moe->sparseStep);
        QCOMPARE(b.moe->denseLayers, a.moe->denseLayers);
        QCOMPARE(b.qkNorm, a.qkNorm);
        QCOMPARE(model::requiredTensors(b), model::requiredTensors(a));
    }

    // Refused while reading config.json, naming the key.
    void badConfigIsRefused_data() {
        QTest::addColumn<QString>("config");
        QTest::addColumn<QString>("named");
        const auto qwen = [](const std::string& extra) {
            return QString::fromStdString(moeConfigText("Qwen3MoeForCausalLM", extra));
        };
        QTest::newRow("top-k above the expert count")
            << qwen(R"("num_experts": 4, "num_experts_per_tok": 6)") << "'num_experts_per_tok' 6 must be between 1 and 'num_experts' 4";
        QTest::newRow("top-k zero") << qwen(R"("num_experts": 4, "num_experts_per_tok": 0)") << "'num_experts_per_tok' 0";
        QTest::newRow("no experts") << qwen(R"("num_experts": 0)") << "'num_experts' must be at least 1";
        QTest::newRow("mixtral top-k above the expert count")
            << QString::fromStdString(moeConfigText("MixtralForCausalLM", R"("num_local_experts": 2, "num_experts_per_tok": 3)"))
            << "'num_local_experts' 2";
        QTest::newRow("dense layer outside the model") << qwen(R"("num_experts": 4, "num_experts_per_tok": 2, "mlp_only_layers": [3])")
                                                       << "'mlp_only_layers' entry 3 is not a layer index 0..2";
        QTest::newRow("zero sparse step") << qwen(R"("num_experts": 4, "num_experts_per_tok": 2, "decoder_sparse_step": 0)")
                                          << "'decoder_sparse_step' must be at least 1";
        QTest::newRow("expert width zero") << qwen(R"("num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 0)")
                                           << "'moe_intermediate_size' must be positive";
    }
    void badConfigIsRefused() {
        QFETCH(QString, config);
        QFETCH(QString, named);
        try {
            model::ModelConfig::fromJsonText(config.toStdString(), "bad/config.json");
            QFAIL("accepted");
        } catch (const std::runtime_error& e) {
            const QString what = e.what();
            QVERIFY2(what.startsWith("bad/config.json: ") && what.contains(named), qPrintable(what));
        }
    }

    // A checkpoint whose tensors do not match its config is refused when it is opened, naming the
    // tensor: a router of the wrong shape, an expert missing.
    void badCheckpointIsRefused_data() {
        QTest::addColumn<QString>("family");
        QTest::addColumn<QString>("damage");
        QTest::addColumn<QString>("named");
        QTest::newRow("qwen3-moe router of the wrong shape") << "qwen3" << "router" << "'model.layers.1.mlp.gate.weight' has shape";
        QTest::newRow("qwen3-moe expert missing") << "qwen3" << "expert" << "'model.layers.1.mlp.experts.2.up_proj.weight'";
        QTest::newRow("mixtral router of the wrong shape") << "mixtral" << "router"
                                                           << "'model.layers.1.block_sparse_moe.gate.weight' has shape";
        QTest::newRow("mixtral expert missing") << "mixtral" << "expert"
                                                << "'model.layers.1.block_sparse_moe.experts.2.w3.weight'";
    }
    void badCheckpointIsRefused() {
        QFETCH(QString, family);
        QFETCH(QString, damage);
        QFETCH(QString, named);
        const bool mixtral = family == "mixtral";
        const QString src = modelOf(family + "-small", mixtral ? moeConfigText("MixtralForCausalLM", R"("num_local_experts": 4)")
                                                               : moeConfigText("Qwen3MoeForCausalLM", R"("num_experts": 4, "num_experts_per_tok": 2)"));
        const QString dst = m_tmp.filePath("damaged/" + family + "-" + damage);
        const std::string router = mixtral ? "model.layers.1.block_sparse_moe.gate.weight" : "model.layers.1.mlp.gate.weight";
        const std::string expert = mixtral ? "model.layers.1.block_sparse_moe.experts.2.w3.weight"
                                           : "model.layers.1.mlp.experts.2.up_proj.weight";
        rewriteModel(src, dst, [&](const std::string& n, const at::Tensor& t) {
            if (damage == "router" && n == router) return t.narrow(0, 0, 3).contiguous();
            if (damage == "expert" && n == expert) return at::Tensor();
            return t;
        });
        try {
            model::Checkpoint::load(dst.toStdString());
            QFAIL("accepted");
        } catch (const std::runtime_error& e) {
            QVERIFY2(QString(e.what()).contains(named), e.what());
        }
    }

    // Every method of the paper end to end on both families: the run completes, its run model
    // reloads and gives its own W4A4 and weight-only perplexities again; GPTQ's experts report the
    // tokens routed to them. Fold equivalence: with orthogonal transforms (no learned bias) the
    // folded, unquantized model computes the original one, so its perplexity is the original's to
    // float32 rounding (T1 into the router and every expert, T3 on every expert's down_proj).
    void everyMethodCompletes_data() {
        QTest::addColumn<QString>("family");
        QTest::addColumn<QString>("method");
        for (const char* f : {"qwen3-moe", "mixtral"})
            for (const char* m : {"rtn", "gptq", "quarot", "mr-gptq", "spinquant", "latmix-lu", "latmix-qr"})
                QTest::addRow("%s %s", f, m) << f << m;
    }
    void everyMethodCompletes() {
        QFETCH(QString, family);
        QFETCH(QString, method);
        const QString model = family == "mixtral"
                                  ? modelOf("mixtral-run", moeConfigText("MixtralForCausalLM", R"("num_local_experts": 4, "num_experts_per_tok": 2)", 2))
                                  : modelOf("qwen3-run", moeConfigText("Qwen3MoeForCausalLM", R"("num_experts": 4, "num_experts_per_tok": 2,
                                      "moe_intermediate_size": 64, "norm_topk_prob": true)", 2));
        auto o = test::smallRunOptions(method);
        // Mixtral's attention has no biases to take a learned T2 bias (refused otherwise, below).
        if (family == "mixtral") o.t2Bias = false;
        const auto calib = test::randomIds(2000, 300, 1), evalIds = test::randomIds(400, 300, 2);
        const QString runDir = m_tmp.filePath("runs/" + family + "-" + method);
        const auto r = run::runQuantize(model.toStdString(), calib, evalIds, runDir.toStdString(), o);
        QVERIFY(std::isfinite(r.quantizedPerplexity) && r.quantizedPerplexity > 1);
        // q, k, v, o and gate/up/down of each of 4 experts, in 2 layers.
        QCOMPARE(int(r.linears.size()), 2 * (4 + 3 * 4));
        const bool gptq = method != "rtn";
        for (const auto& L : r.linears) {
            const bool expert = L.linear.find(".experts.") != std::string::npos;
            QCOMPARE(L.tokens >= 0, expert && gptq);
            QVERIFY(std::isfinite(L.relativeError));
        }
        const auto ck = model::Checkpoint::load((runDir + "/model").toStdString());
        QVERIFY(ck.config().moe.has_value());
        QCOMPARE(test::runPerplexity(model::LlamaModel(ck, at::kFloat), evalIds, o), r.quantizedPerplexity);
        QCOMPARE(test::runPerplexity(model::LlamaModel(ck, at::kFloat, c10::kCPU, false), evalIds, o), r.weightOnlyPerplexity);
        // Every block linear of the run model is stored packed, the experts' included, and unpacks
        // to the weight the model computes with.
        const auto run = run::readRunModel((runDir + "/model").toStdString());
        QCOMPARE(int(run.packed.size()), int(r.linears.size()));

        // The Hugging Face export (bf16, T3 folded back into every expert's W_down, the family's
        // own class) computes the run's weight-only model.
        const QString hf = m_tmp.filePath("exports/" + family + "-" + method);
        exporting::exportRun(runDir.toStdString(), exporting::ExportFormat::Hf, hf.toStdString(), silentJob());
        exporting::verifyExport(hf.toStdString(), runDir.toStdString());
        const auto hck = model::Checkpoint::load(hf.toStdString());
        QCOMPARE(hck.config().architecture, ck.config().architecture);
        const double exported = test::runPerplexity(model::LlamaModel(hck, at::kFloat, c10::kCPU, false), evalIds, o);
        // bf16 weights (relative rounding 2^-9) on a near-uniform random model: a few 1e-3 (tst_families).
        QVERIFY2(std::abs(exported / r.weightOnlyPerplexity - 1) < 5e-3,
                 qPrintable(QString("export %1 vs run weight-only %2").arg(exported).arg(r.weightOnlyPerplexity)));
        // compressed-tensors: every expert linear packed, the router unquantized and ignored by the
        // quantization_config (verifyExport reloads the folder and compares it with the run);
        // refused with T3, which vLLM's fused MoE layers would leave out.
        const QString ct = m_tmp.filePath("exports/ct-" + family + "-" + method);
        const auto exportCt = [&] {
            exporting::exportRun(runDir.toStdString(), exporting::ExportFormat::CompressedTensors, ct.toStdString(), silentJob());
        };
        if (method == "rtn" || method == "gptq") {
            exportCt();
            exporting::verifyExport(ct.toStdString(), runDir.toStdString());
            QFile f(ct + "/config.json");
            QVERIFY(f.open(QIODevice::ReadOnly));
            const auto ignore = QJsonDocument::fromJson(f.readAll()).object()["quantization_config"].toObject()["ignore"].toArray();
            QVERIFY(ignore.contains(family == "mixtral" ? "re:.*block_sparse_moe\\.gate$" : "re:.*mlp\\.gate$"));
            const auto packed = io::SafeTensorsFile::open((ct + "/model.safetensors").toStdString());
            const std::string expert = family == "mixtral" ? "model.layers.1.block_sparse_moe.experts.3.w2"
                                                           : "model.layers.1.mlp.experts.3.down_proj";
            QVERIFY(packed->contains(expert + ".weight_packed") && packed->contains(expert + ".weight_scale"));
        } else {
            const auto refused = test::errorOf(exportCt);
            QVERIFY2(refused.contains("quantize with --method gptq or rtn (no T3) for a compressed-tensors export"),
                     qPrintable(refused));
        }
        if (method == "quarot" || method == "mr-gptq" || method == "spinquant") {
            qInfo("folded fp %.9g, fp %.9g", r.foldedPerplexity, r.fpPerplexity);
            // float32 folds and forward over 2 layers: ~1e-6 relative; 1e-4 leaves room, and an
            // unrotated router moves routing and the perplexity by far more (percent).
            QVERIFY2(std::abs(r.foldedPerplexity / r.fpPerplexity - 1) < 1e-4,
                     qPrintable(QString("folded %1 vs %2").arg(r.foldedPerplexity).arg(r.fpPerplexity)));
        }
    }

    // Experts that receive (almost) no calibration tokens: 64 experts, top-1, 128 tokens a layer,
    // so that some get none. Each is rounded to nearest and says so with its token count, the
    // others are GPTQ'd; nothing is NaN, and latmix.json counts the fallbacks.
    void starvedExpertsFallBackToRtn() {
        const QString model = modelOf("qwen3-many", moeConfigText("Qwen3MoeForCausalLM", R"("num_experts": 64,
            "num_experts_per_tok": 1, "moe_intermediate_size": 32)", 2));
        const QString runDir = m_tmp.filePath("runs/starved");
        auto o = test::smallRunOptions("gptq");
        const auto calib = test::randomIds(2000, 300, 1), evalIds = test::randomIds(400, 300, 2);
        const auto r = run::runQuantize(model.toStdString(), calib, evalIds, runDir.toStdString(), o);
        const double layerTokens = double(o.calibSamples) * o.seqLen;
        int zero = 0, fallbacks = 0, gptqd = 0;
        for (const auto& L : r.linears) {
            QVERIFY(std::isfinite(L.relativeError));
            if (L.tokens < 0) continue;
            const bool starved = double(L.tokens) < run::kStarvedShare * layerTokens;
            QCOMPARE(L.roundedToNearest, starved);
            zero += L.tokens == 0 ? 1 : 0;
            (starved ? fallbacks : gptqd) += 1;
        }
        QVERIFY2(zero > 0, "no expert without tokens in this data: the test shows nothing"); // a fact of the seeded data
        QVERIFY(gptqd > 0);
        QVERIFY(std::isfinite(r.quantizedPerplexity));
        QFile f(runDir + "/latmix.json");
        QVERIFY(f.open(QIODevice::ReadOnly));
        const auto j = QJsonDocument::fromJson(f.readAll()).object();
        QCOMPARE(j["weight_quantization"].toObject()["experts"].toObject()["linears_rounded_to_nearest"].toInt(), fallbacks);
        int rtnRecorded = 0;
        for (const auto& v : j["linears"].toArray())
            if (v.toObject().contains("tokens") && v.toObject()["algorithm"].toString() == "rtn") ++rtnRecorded;
        QCOMPARE(rtnRecorded, fallbacks);
        qInfo("%d expert linears without tokens, %d rounded to nearest, %d GPTQ", zero, fallbacks, gptqd);
    }

    // Refused before any work: a learned T1 bias (neither router nor experts can hold it), and T3
    // on a model whose dense layers and experts differ in width.
    void refusedBeforeAnyWork_data() {
        QTest::addColumn<QString>("config");
        QTest::addColumn<QString>("method");
        QTest::addColumn<bool>("t1Bias");
        QTest::addColumn<QString>("named");
        const std::string qwen = moeConfigText("Qwen3MoeForCausalLM", R"("num_experts": 4, "num_experts_per_tok": 2)");
        QTest::newRow("T1 bias") << QString::fromStdString(qwen) << "latmix-lu" << true << "--t1-bias off";
        QTest::newRow("T2 bias on Mixtral")
            << QString::fromStdString(moeConfigText("MixtralForCausalLM", R"("num_local_experts": 4)")) << "latmix-qr"
            << false << "Mixtral models have no attention biases: the run could not be exported (hf); use --t2-bias off";
        QTest::newRow("T3 over two widths")
            << QString::fromStdString(moeConfigText("Qwen3MoeForCausalLM", R"("num_experts": 4, "num_experts_per_tok": 2,
                   "moe_intermediate_size": 64, "mlp_only_layers": [0])"))
            << "mr-gptq" << false << "one online T3 cannot cover both (method mr-gptq applies T3); use --method gptq";
    }
    void refusedBeforeAnyWork() {
        QFETCH(QString, config);
        QFETCH(QString, method);
        QFETCH(bool, t1Bias);
        QFETCH(QString, named);
        const QString file = m_tmp.filePath("refused-" + QString::number(qHash(config)) + ".json");
        {
            QFile f(file);
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write(config.toUtf8());
        }
        auto o = test::smallRunOptions(method);
        if (t1Bias) o.t1Bias = true;
        try {
            run::preflight(file.toStdString(), o, run::PreflightFor::Estimate);
            QFAIL("accepted");
        } catch (const run::RunRefused& e) {
            QVERIFY2(QString(e.what()).contains(named), e.what());
        }
    }

    // --devices places the layers by their own weights: a sparse layer carries its router and all
    // its experts, a dense one (mlp_only_layers) its MLP. The devices' shares add up to exactly the
    // checkpoint's tensors as stored (matrices in the stored size, vectors in float32; lm_head once
    // per device holding it), counted here from model::requiredTensors, and the dense layers, four
    // times lighter here, go to the first device together with a sparse one.
    void placementBalancesExpertWeights() {
        const auto c = model::ModelConfig::fromJsonText(moeConfigText("Qwen3MoeForCausalLM", R"("num_experts": 8,
            "num_experts_per_tok": 2, "moe_intermediate_size": 64, "mlp_only_layers": [0, 1, 2])", 6));
        const auto plan = run::planLayerPlacement(c, 2, {"cuda:0", "cuda:1"}, test::smallRunOptions("latmix-lu"));
        QCOMPARE(int(plan.size()), 2);
        std::int64_t want = 0;
        for (const auto& [name, shape] : model::requiredTensors(c)) {
            std::int64_t n = 1;
            for (auto d : shape) n *= d;
            want += n * (shape.size() >= 2 ? 2 : 4);
        }
        QCOMPARE(plan[0].weightBytes + plan[1].weightBytes, want);
        QCOMPARE(plan[0].firstLayer, 0);
        QCOMPARE(plan[0].layers + plan[1].layers, 6);
        QVERIFY2(plan[0].layers >= 4, qPrintable(QString("first device: %1 layers").arg(plan[0].layers)));
    }

    // The shipped configs of the real models: their tensors add up to the parameter counts the
    // model cards state (Qwen3-30B-A3B: 30.5B, 3.3B activated; Mixtral-8x7B: 46.7B, 12.9B active),
    // the active count being the total less the experts a token does not use.
    void realConfigsHaveThePublishedSizes_data() {
        QTest::addColumn<QString>("file");
        QTest::addColumn<double>("totalB");
        QTest::addColumn<double>("activeB");
        QTest::newRow("Qwen3-30B-A3B") << "qwen3-30b-a3b" << 30.5 << 3.3;
        QTest::newRow("Mixtral-8x7B") << "mixtral-8x7b" << 46.7 << 12.9;
    }
    void realConfigsHaveThePublishedSizes() {
        QFETCH(QString, file);
        QFETCH(double, totalB);
        QFETCH(double, activeB);
        const auto c = test::realConfig(file);
        QVERIFY(c.moe.has_value());
        const double total = double(parameters(c));
        std::int64_t idle = 0; // expert weights a token skips
        for (int l = 0; l < c.numLayers; ++l)
            if (c.isSparseLayer(l))
                idle += std::int64_t(c.moe->numExperts - c.moe->expertsPerToken) * 3 * c.hiddenSize * c.moe->expertWidth;
        const double active = total - double(idle);
        qInfo("%s: %.4g B parameters, %.4g B active", qPrintable(file), total / 1e9, active / 1e9);
        // The cards give 0.1 B, rounded (Mistral: 12.88 -> 12.9) or cut (Qwen: 3.35 -> 3.3).
        for (const auto& [count, card] : {std::pair{total, totalB}, std::pair{active, activeB}})
            QVERIFY2(count / 1e9 >= card - 0.05 && count / 1e9 < card + 0.1, qPrintable(QString::number(count)));
        // The per-layer units agree: all of a sparse layer, and what one token meets.
        QCOMPARE(c.layerLinearWeights() - c.layerActiveWeights(),
                 std::int64_t(c.moe->numExperts - c.moe->expertsPerToken) * 3 * c.hiddenSize * c.moe->expertWidth);
    }
};

QTEST_GUILESS_MAIN(TestMoe)
#include "tst_moe.moc"
