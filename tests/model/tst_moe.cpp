// Mixture-of-experts models (Qwen3-MoE, Mixtral): the config keys and their refusals, the tensors
// a checkpoint must hold, every method end to end on small random checkpoints of both families
// (with their exports), experts starved of calibration tokens, placement; the real Qwen3-30B-A3B
// and Mixtral-8x7B configs give their published parameter counts. The forward pass and its
// routing against the float64 reference, on every device: tst_moerouting.
#include "MoeModels.h"
#include "SmallRuns.h"
#include "TestSupport.h"

#include "eval/Perplexity.h"
#include "export/Export.h"
#include "io/SafeTensors.h"
#include "model/Checkpoint.h"
#include "model/LlamaModel.h"
#include "model/TensorNames.h"
#include "run/quantize/MemoryEstimate.h"
#include "run/QuantizeRun.h"
#include "run/RunModel.h"
#include "run/quantize/LayerQuantizer.h"
#include "run/quantize/OptionTable.h"
#include "run/quantize/Preflight.h"

#include <ATen/ATen.h>

#include <cmath>
#include <map>

#include "TestData.h" // after ATen: Qt's slots macro breaks ATen headers
#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

using namespace latmix;
using test::moeConfigText;

namespace {

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

    QString modelOf(const QString& name, const std::string& configText) {
        return test::moeModel(m_tmp.filePath("models/" + name), configText, name.toStdString());
    }

private slots:
    void initTestCase() { QVERIFY(m_tmp.isValid()); }

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
        test::rewriteModel(src, dst, [&](const std::string& n, const at::Tensor& t) {
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
        const QString model = modelOf(family + "-run", test::moeRunConfigText(family));
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
