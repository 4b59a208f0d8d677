// Mixed-precision schemes (run/FormatScheme.h, model/FusionGroups.h, run/Sensitivity.h; docs/spec.md
// "Mixed precision"): fusion groups and their weights counted by hand on real shapes, the average
// bits of a scheme by hand, the rules' refusals naming the rule and the group, and the measured
// sensitivity against an independent computation: the group's weights rewritten on disk with
// mx::fakeQuantize, its points' activations quantized by a hook, full logits and a float64 KL.
#include "fold/ModelTransforms.h"
#include "model/Checkpoint.h"
#include "model/FusionGroups.h"
#include "model/LlamaModel.h"
#include "model/QuantizationPoints.h"
#include "model/TensorNames.h"
#include "mx/MxQuantizer.h"
#include "run/FormatScheme.h"
#include "run/QuantizeRun.h"
#include "run/RunModel.h"
#include "run/Sensitivity.h"
#include "train/Distillation.h"

#include <ATen/ATen.h>

#include "MoeModels.h"
#include "SmallRuns.h"
#include "TestSupport.h"

#include <QTemporaryDir>
#include <QVector>
#include <QtTest>

#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>

using namespace latmix;
using latmix::test::errorOf;

namespace {

model::ModelConfig configNamed(const QString& name) {
    if (name == QLatin1String("qwen3-moe-small")) return model::ModelConfig::fromJsonText(test::moeRunConfigText("qwen3"), "qwen3-moe-small");
    if (name == QLatin1String("llama-small"))
        return model::ModelConfig::fromJsonText(
            R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
                "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300,
                "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu",
                "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": false})",
            "llama-small");
    return test::realConfig(name);
}

const run::GroupFormat& groupNamed(const std::vector<run::GroupFormat>& groups, const std::string& name) {
    for (const auto& g : groups)
        if (g.group.name == name) return g;
    throw std::runtime_error("no group " + name);
}

// KL(FP ‖ group quantized) per predicted token, float64, from whole logits: the group's weights
// rewritten with mx::fakeQuantize (RTN with static scales, SPEC §6), its points quantized by a hook.
double independentKl(const QString& modelDir, const QString& scratch, const model::FusionGroup& g, const mx::MxConfig& f,
                     const std::vector<int>& ids, int seqLen, int windows) {
    const std::set<std::string> linears(g.linears.begin(), g.linears.end()), points(g.points.begin(), g.points.end());
    test::rewriteModel(modelDir, scratch, [&](const std::string& name, const at::Tensor& t) {
        return linears.count(model::names::blockLinearOfWeight(name)) ? mx::fakeQuantize(t, f) : t;
    });
    const auto fpCk = model::Checkpoint::load(modelDir.toStdString()), qCk = model::Checkpoint::load(scratch.toStdString());
    const model::LlamaModel fp(fpCk), quantized(qCk);
    const auto tokens = at::tensor(std::vector<int64_t>(ids.begin(), ids.begin() + seqLen * windows), at::kLong).view({windows, seqLen});
    const auto hook = [&](const std::string& point, const at::Tensor& x) { return points.count(point) ? mx::fakeQuantize(x, f) : x; };
    const auto p = at::log_softmax(fp.forward(tokens).to(at::kDouble), -1).narrow(1, 0, seqLen - 1);
    const auto q = at::log_softmax(quantized.forward(tokens, hook).to(at::kDouble), -1).narrow(1, 0, seqLen - 1);
    return (p.exp() * (p - q)).sum(-1).mean().item<double>();
}

} // namespace

class TestScheme : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;

private slots:
    // The preview the workbench shows before a run, on Llama-3.2-1B's shape: layer 0's q/k/v in
    // MXFP8, the rest MXFP4. Per layer (3072 + 2048 + 2·8192 + 8192)·2048 weights, q/k/v 3072·2048
    // of them: 4.25 + 4 · 3072 / (16 · 29696) = 4.25 + 3/116 bits. A rule that takes nothing: no
    // formats, the rule named.
    void previewByHand() {
        const auto c = configNamed("llama-3.2-1b");
        const auto p = run::previewScheme(c, "layers\\.0\\.self_attn\\.qkv = mxfp8", mx::makeConfig(mx::Format::MxFp4));
        QVERIFY2(p.error.empty(), p.error.c_str());
        QCOMPARE(p.pointFormats.at(model::pointName(0, model::PointKind::QkvInput)), std::string("mxfp8"));
        QCOMPARE(p.pointFormats.at(model::pointName(1, model::PointKind::QkvInput)), std::string("mxfp4"));
        QCOMPARE(p.pointFormats.at(model::pointName(0, model::PointKind::DownProjInput)), std::string("mxfp4"));
        QCOMPARE(int(p.pointFormats.size()), 4 * c.numLayers);
        QVERIFY(std::abs(p.bits - (4.25 + 3.0 / 116)) <= 1e-12);
        const auto bad = run::previewScheme(c, "layers\\.99\\. = mxfp8", mx::makeConfig(mx::Format::MxFp4));
        QVERIFY2(bad.pointFormats.empty() && bad.error.find("layers\\.99\\.") != std::string::npos, bad.error.c_str());
    }

    // latmix sensitivity checks its memory before loading anything. On Llama-3.2-1B's shape the
    // estimate costs at least 8 bytes a block-linear weight beyond the measured KL's peak (its
    // float32 copies and their gradients): 8 · 16 · 2048 · 29696 bytes. Over the memory available
    // a run is refused naming both amounts and the ways out (--no-estimate only when it estimates).
    void sensitivityMemoryIsChecked() {
        const auto big = configNamed("llama-3.2-1b");
        run::SensitivityRequest r;
        r.seqLen = 512;
        const std::int64_t withEstimate = run::sensitivityPeakBytes(big, 1235814400, r);
        r.estimate = false;
        const std::int64_t measuredOnly = run::sensitivityPeakBytes(big, 1235814400, r);
        QVERIFY2(withEstimate - measuredOnly >= 8LL * 16 * 2048 * 29696,
                 qPrintable(QString("%1 vs %2").arg(withEstimate).arg(measuredOnly)));
        const QString dir = m_tmp.filePath("models/llama-small");
        const auto c = configNamed("llama-small");
        test::moeModel(dir, c.toJsonText(), "llama-small");
        r = run::SensitivityRequest{};
        r.modelDir = dir.toStdString();
        r.calibrationIds = test::randomIds(4 * 24, c.vocabSize, 3);
        r.seqLen = 24, r.windows = 2;
        r.availableBytes = 4096;
        QString e = test::errorOf([&] { run::measureSensitivity(r); });
        QVERIFY2(e.contains("needs about") && e.contains("is available") && e.contains("--no-estimate"), qPrintable(e));
        r.estimate = false;
        e = test::errorOf([&] { run::measureSensitivity(r); });
        QVERIFY2(e.contains("needs about") && !e.contains("--no-estimate") && e.contains("--dtype bfloat16"), qPrintable(e));
    }

    // Weights per group from the published shapes, worked by hand:
    // Llama-3.2-1B: hidden 2048, 32 heads and 8 KV heads of 64, MLP 8192, 16 layers;
    // Qwen3-30B-A3B: hidden 2048, 32 heads and 4 KV heads of 128, 128 experts of 768, 48 layers.
    void groupsByHand_data() {
        QTest::addColumn<QString>("config");
        QTest::addColumn<int>("groups");
        QTest::addColumn<QString>("group");
        QTest::addColumn<qlonglong>("weights");
        QTest::addColumn<int>("points");
        QTest::newRow("1b qkv") << "llama-3.2-1b" << 64 << "layers.3.self_attn.qkv" << qlonglong((2048 + 2 * 512) * 2048LL) << 1;
        QTest::newRow("1b o_proj") << "llama-3.2-1b" << 64 << "layers.15.self_attn.o_proj" << qlonglong(2048LL * 2048) << 1;
        QTest::newRow("1b gate_up") << "llama-3.2-1b" << 64 << "layers.0.mlp.gate_up" << qlonglong(2 * 8192LL * 2048) << 1;
        QTest::newRow("1b down") << "llama-3.2-1b" << 64 << "layers.0.mlp.down_proj" << qlonglong(8192LL * 2048) << 1;
        QTest::newRow("30b-a3b qkv") << "qwen3-30b-a3b" << 144 << "layers.47.self_attn.qkv" << qlonglong((4096 + 2 * 512) * 2048LL) << 1;
        QTest::newRow("30b-a3b experts") << "qwen3-30b-a3b" << 144 << "layers.47.mlp.experts" << qlonglong(128LL * 3 * 768 * 2048)
                                         << 129;
    }
    void groupsByHand() {
        QFETCH(QString, config);
        QFETCH(int, groups);
        QFETCH(QString, group);
        QFETCH(qlonglong, weights);
        QFETCH(int, points);
        const auto c = configNamed(config);
        const auto all = model::fusionGroups(c);
        QCOMPARE(int(all.size()), groups);
        const auto resolved = run::resolveScheme(c, {}, mx::makeConfig(mx::Format::MxFp4));
        const auto& g = groupNamed(resolved, group.toStdString()).group;
        QCOMPARE(qlonglong(g.weights), weights);
        QCOMPARE(int(g.points.size()), points);
        // Every block linear in exactly one group.
        std::multiset<std::string> seen;
        for (const auto& x : all) seen.insert(x.linears.begin(), x.linears.end());
        const auto linears = model::names::blockLinearPrefixes(c);
        QCOMPARE(seen.size(), linears.size());
        for (const auto& l : linears) QCOMPARE(int(seen.count(l)), 1);
    }

    // Average bits per weight by hand on Llama-3.2-1B (per layer: attention 10,485,760 weights,
    // MLP 50,331,648): uniform MXFP4 4.25; attention MXFP8 + MLP MXFP4
    // (10485760·8.25 + 50331648·4.25) / 60817408 = 4.939655...; layer 0 kept in bf16 and NVFP4
    // elsewhere (60817408·16 + 15·60817408·4.5) / (16·60817408) = 5.21875.
    void averageBitsByHand_data() {
        QTest::addColumn<QString>("rules");
        QTest::addColumn<double>("bits");
        QTest::newRow("uniform") << "" << 4.25;
        QTest::newRow("attention mxfp8") << "self_attn = mxfp8" << (10485760 * 8.25 + 50331648 * 4.25) / 60817408;
        QTest::newRow("layer 0 bf16, nvfp4") << "layers\\.0\\. = bf16; . = nvfp4" << 5.21875;
        QTest::newRow("first rule wins") << "layers\\.0\\. = bf16\nlayers\\.0\\. = mxfp8  # never reached\n. = nvfp4" << 5.21875;
    }
    void averageBitsByHand() {
        QFETCH(QString, rules);
        QFETCH(double, bits);
        const auto r = run::resolveScheme(test::realConfig("llama-3.2-1b"), run::parseSchemeRules(rules.toStdString()),
                                          mx::makeConfig(mx::Format::MxFp4));
        QVERIFY(std::abs(run::averageBits(r) - bits) <= 1e-12 * bits);
    }

    // What a rule cannot do is refused naming the rule (and the group it would split).
    void refusals_data() {
        QTest::addColumn<QString>("config");
        QTest::addColumn<QString>("rules");
        QTest::addColumn<QString>("says");
        QTest::newRow("split qkv") << "llama-small" << "q_proj = mxfp8" << "splits the fusion group layers.0.self_attn.qkv";
        QTest::newRow("split gate_up") << "llama-small" << "layers\\.1\\.mlp\\.up_proj = bf16" << "splits the fusion group layers.1.mlp.gate_up";
        QTest::newRow("split experts") << "qwen3-moe-small" << "experts\\.0\\. = mxfp8" << "splits the fusion group layers.0.mlp.experts";
        QTest::newRow("matches nothing") << "llama-small" << "layers\\.7\\. = mxfp8" << "'layers\\.7\\. = mxfp8' matches none of the 8";
        QTest::newRow("unknown format") << "llama-small" << "self_attn = mxfp9" << "unknown format 'mxfp9'";
        QTest::newRow("no equals") << "llama-small" << "self_attn mxfp8" << "has no '='";
        QTest::newRow("bad regex") << "llama-small" << "layers\\.( = mxfp8" << "is not a regular expression";
    }
    void refusals() {
        QFETCH(QString, config);
        QFETCH(QString, rules);
        QFETCH(QString, says);
        const QString e = errorOf([&] {
            run::resolveScheme(configNamed(config), run::parseSchemeRules(rules.toStdString()), mx::makeConfig(mx::Format::MxFp4));
        });
        QVERIFY2(e.contains(says), qPrintable(e));
    }

    // A group named whole takes the format; experts and their points move together; a plan's rules
    // (one per group) read back to the same formats.
    void groupsTakeOneFormat() {
        const auto c = configNamed("qwen3-moe-small");
        const auto r = run::resolveScheme(c, run::parseSchemeRules("mlp\\.experts = mxfp8; layers\\.1\\.self_attn\\.qkv = bf16"),
                                          mx::makeConfig(mx::Format::MxFp4));
        QCOMPARE(run::schemeFormatName(groupNamed(r, "layers.0.mlp.experts").format), std::string("mxfp8"));
        QCOMPARE(run::schemeFormatName(groupNamed(r, "layers.1.self_attn.qkv").format), std::string("bf16"));
        QCOMPARE(run::schemeFormatName(groupNamed(r, "layers.1.self_attn.o_proj").format), std::string("mxfp4"));
        QCOMPARE(groupNamed(r, "layers.1.self_attn.o_proj").rule, -1);
        const auto again = run::resolveScheme(c, run::parseSchemeRules(run::schemeRulesText(run::rulesNamingEachGroup(r))),
                                              std::nullopt);
        for (std::size_t g = 0; g < r.size(); ++g)
            QCOMPARE(run::schemeFormatName(again[g].format), run::schemeFormatName(r[g].format));
    }

    // The measured sensitivity equals the independent computation. Both quantize the same
    // weights bit for bit (quantizeWithScales equals fakeQuantize, WeightQuantizer.h) and the same
    // activations, so the hidden states agree; the paths differ in forming the logits (vocabulary
    // chunks against one product) and in summing the per-token KL (float32 over V = 300 terms
    // against float64): a relative V·ε32 ≈ 2e-5, bounded here by 1e-4, plus 1e-7 for the logits.
    void measuredMatchesIndependent_data() {
        QTest::addColumn<QString>("config");
        QTest::addColumn<QString>("group");
        QTest::addColumn<QString>("format");
        QTest::newRow("dense qkv mxfp4") << "llama-small" << "layers.0.self_attn.qkv" << "mxfp4";
        QTest::newRow("dense down mxint8") << "llama-small" << "layers.1.mlp.down_proj" << "mxint8";
        QTest::newRow("dense gate_up mxfp8") << "llama-small" << "layers.1.mlp.gate_up" << "mxfp8";
        QTest::newRow("moe experts mxfp4") << "qwen3-moe-small" << "layers.1.mlp.experts" << "mxfp4";
        QTest::newRow("moe o_proj mxfp4") << "qwen3-moe-small" << "layers.0.self_attn.o_proj" << "mxfp4";
    }
    void measuredMatchesIndependent() {
        QFETCH(QString, config);
        QFETCH(QString, group);
        QFETCH(QString, format);
        const QString dir = m_tmp.filePath("models/" + config);
        const auto c = configNamed(config);
        test::moeModel(dir, c.toJsonText(), config.toStdString());
        run::SensitivityRequest r;
        r.modelDir = dir.toStdString();
        r.calibrationIds = test::randomIds(4 * 24, c.vocabSize, 3);
        r.seqLen = 24, r.windows = 4;
        r.formats = {format.toStdString()};
        const auto t = run::measureSensitivity(r);
        QCOMPARE(t.formats.back(), std::string("bf16"));
        std::size_t g = 0;
        while (t.groups[g].name != group.toStdString()) ++g;
        const double measured = t.kl[g][0];
        const double expected = independentKl(dir, m_tmp.filePath("scratch-" + QString::number(qHash(QTest::currentDataTag()))),
                                              t.groups[g], *run::parseSchemeFormat(format.toStdString()), r.calibrationIds,
                                              r.seqLen, r.windows);
        qInfo("measured %.10g, independent %.10g", measured, expected);
        QVERIFY2(expected > 1e-9, qPrintable(QString::number(expected))); // an effect to compare
        QVERIFY2(std::abs(measured - expected) <= 1e-4 * expected + 1e-10,
                 qPrintable(QStringLiteral("measured %1, independent %2").arg(measured, 0, 'g', 10).arg(expected, 0, 'g', 10)));
    }

    // A run under a scheme computes what the scheme says: its model's logits equal those of the
    // model rebuilt independently — every weight rewritten with mx::fakeQuantize in its group's
    // format (bf16 groups rounded to bf16), every point's activations quantized by a hook in its
    // group's format (bf16 groups: none). The same float operations in the same order, so the
    // logits agree to a few float32 roundings of the largest one. GPTQ under the same scheme packs
    // each linear in its group's format (readRunModel checks every packed weight against it).
    void runHonoursScheme_data() {
        QTest::addColumn<QString>("method");
        QTest::newRow("rtn") << "rtn";
        QTest::newRow("gptq") << "gptq";
        QTest::newRow("latmix-lu") << "latmix-lu"; // trained under the scheme, folded, GPTQ per group format
    }
    void runHonoursScheme() {
        QFETCH(QString, method);
        const QString dir = m_tmp.filePath("models/llama-small");
        const auto c = configNamed("llama-small");
        test::moeModel(dir, c.toJsonText(), "llama-small");
        auto o = test::smallRunOptions(method);
        o.scheme = "layers\\.0\\.self_attn\\.qkv = mxfp8; layers\\.1\\.mlp\\.gate_up = bf16; layers\\.1\\.mlp\\.down_proj = nvfp4";
        const QString runDir = m_tmp.filePath("run-" + method);
        const auto calib = test::randomIds(2000, c.vocabSize, 1), evalIds = test::randomIds(400, c.vocabSize, 2);
        run::runQuantize(dir.toStdString(), calib, evalIds, runDir.toStdString(), o);
        const auto rm = run::readRunModel((runDir + "/model").toStdString());
        QCOMPARE(rm.packed.at("model.layers.0.self_attn.k_proj").config.format, mx::Format::MxFp8E4M3);
        QCOMPARE(rm.packed.at("model.layers.1.mlp.down_proj").config.format, mx::Format::NvFp4);
        QCOMPARE(rm.packed.at("model.layers.0.mlp.up_proj").config.format, mx::Format::MxFp4);
        QVERIFY(!rm.packed.count("model.layers.1.mlp.gate_proj")); // kept: bf16, nothing packed
        if (method != QLatin1String("rtn")) return;
        const auto groups = run::resolveScheme(c, run::parseSchemeRules(o.scheme), o.format);
        std::map<std::string, std::optional<mx::MxConfig>> formatOfLinear, formatOfPoint;
        for (const auto& g : groups) {
            for (const auto& l : g.group.linears) formatOfLinear[l] = g.format;
            for (const auto& p : g.group.points) formatOfPoint[p] = g.format;
        }
        const QString rebuilt = m_tmp.filePath("rebuilt");
        test::rewriteModel(dir, rebuilt, [&](const std::string& name, const at::Tensor& t) {
            const auto it = formatOfLinear.find(model::names::blockLinearOfWeight(name));
            if (it == formatOfLinear.end()) return t;
            return it->second ? mx::fakeQuantize(t, *it->second) : t.to(at::kBFloat16).to(at::kFloat);
        });
        const auto hook = [&](const std::string& point, const at::Tensor& x) {
            const auto it = formatOfPoint.find(point);
            return it != formatOfPoint.end() && it->second ? mx::fakeQuantize(x, *it->second) : x;
        };
        const auto tokens = at::tensor(std::vector<int64_t>(evalIds.begin(), evalIds.begin() + 64), at::kLong).view({2, 32});
        const auto runCk = model::Checkpoint::load((runDir + "/model").toStdString());
        const auto rebuiltCk = model::Checkpoint::load(rebuilt.toStdString());
        const auto got = model::LlamaModel(runCk).forward(tokens), expected = model::LlamaModel(rebuiltCk).forward(tokens, hook);
        const double largest = expected.abs().max().item<double>(), diff = (got - expected).abs().max().item<double>();
        QVERIFY2(diff <= 8 * std::numeric_limits<float>::epsilon() * largest,
                 qPrintable(QStringLiteral("largest logit difference %1 of %2").arg(diff).arg(largest)));
    }

    // Spearman's rank correlation worked by hand, ties at their mean rank:
    // ranks (0.5, 0.5, 2) and (0, 1, 2): covariance 1.5, variances 1.5 and 2, ρ = 1.5 / √3.
    void rankCorrelationByHand_data() {
        QTest::addColumn<QVector<double>>("a");
        QTest::addColumn<QVector<double>>("b");
        QTest::addColumn<double>("rho");
        QTest::newRow("same order") << QVector<double>{1, 2, 3, 4} << QVector<double>{10, 20, 30, 45} << 1.0;
        QTest::newRow("reversed") << QVector<double>{1, 2, 3, 4} << QVector<double>{4, 3, 2, 1} << -1.0;
        QTest::newRow("one swap") << QVector<double>{1, 2, 3} << QVector<double>{1, 3, 2} << 0.5;
        QTest::newRow("a tie") << QVector<double>{1, 1, 2} << QVector<double>{1, 2, 3} << 1.5 / std::sqrt(3.0);
    }
    void rankCorrelationByHand() {
        QFETCH(QVector<double>, a);
        QFETCH(QVector<double>, b);
        QFETCH(double, rho);
        const double got = run::rankCorrelation(std::vector<double>(a.begin(), a.end()), std::vector<double>(b.begin(), b.end()));
        QVERIFY2(std::abs(got - rho) <= 1e-15, qPrintable(QString::number(got, 'g', 17)));
        QVERIFY(std::isnan(run::rankCorrelation({1, 1, 1}, {1, 2, 3})));
    }

    // The first-order estimate against the same definition computed here in float64: the weights
    // as float64 leaves, the cross-entropy of each window through log_softmax in float64, each
    // group's Σ |∂L/∂W ⊙ (Q(W) − W)| with the gradient summed over the windows, and per window
    // Σ |∂L/∂x ⊙ (Q(x) − x)| at its points (Q in float32, as the run quantizes). The estimate's
    // gradients are float32: a relative 1e-3 covers their rounding (a few ε32 per product, times
    // the depth of the network's backward) with a wide margin; bf16 is 0.
    void estimateMatchesFloat64() {
        try {
            estimateMatchesFloat64Body();
        } catch (const std::exception& e) {
            QFAIL(e.what());
        }
    }

private:
    void estimateMatchesFloat64Body() {
        const QString dir = m_tmp.filePath("models/llama-small");
        const auto c = configNamed("llama-small");
        test::moeModel(dir, c.toJsonText(), "llama-small");
        run::SensitivityRequest r;
        r.modelDir = dir.toStdString();
        r.calibrationIds = test::randomIds(2 * 16, c.vocabSize, 6);
        r.seqLen = 16, r.windows = 2;
        r.formats = {"mxfp4", "mxfp8"};
        const auto t = run::measureSensitivity(r);
        QCOMPARE(t.estimate.size(), t.groups.size());
        QCOMPARE(t.rankCorrelation.size(), std::size_t(2));

        const auto ck = model::Checkpoint::load(r.modelDir);
        auto w = model::loadWeights(ck, at::kDouble);
        std::map<std::string, at::Tensor*> linear;
        for (int l = 0; l < c.numLayers; ++l) {
            auto& y = w.layers[static_cast<std::size_t>(l)];
            const std::string p = model::names::layerPrefix(l);
            for (auto [m, t] : {std::pair{model::names::kQProj, &y.wq}, {model::names::kKProj, &y.wk}, {model::names::kVProj, &y.wv},
                                {model::names::kOProj, &y.wo}, {model::names::kGateProj, &y.wGate},
                                {model::names::kUpProj, &y.wUp}, {model::names::kDownProj, &y.wDown}}) {
                *t = t->detach().clone().requires_grad_(true);
                linear[p + m] = t;
            }
        }
        const mx::MxConfig formats[] = {*run::parseSchemeFormat("mxfp4"), *run::parseSchemeFormat("mxfp8")};
        const auto q = [&](const at::Tensor& x, int k) { return mx::fakeQuantize(x.detach().to(at::kFloat), formats[k]).to(at::kDouble); };
        std::vector<std::array<double, 2>> expected(t.groups.size(), {0.0, 0.0});
        for (int i = 0; i < r.windows; ++i) {
            std::map<std::string, at::Tensor> inputs;
            const model::ActivationHook hook = [&](const std::string& point, const at::Tensor& x) {
                at::Tensor y = x.detach().requires_grad_(true); // every point's gradient, its own leaf
                inputs[point] = y;
                return x + (y - y.detach()); // x's value, gradients to both
            };
            const auto tokens = at::tensor(std::vector<int64_t>(r.calibrationIds.begin() + i * 16, r.calibrationIds.begin() + (i + 1) * 16),
                                           at::kLong).view({1, 16});
            const auto logits = model::forwardWith(c, w, {}, tokens, hook).squeeze(0).to(at::kDouble);
            at::nll_loss(at::log_softmax(logits.narrow(0, 0, 15), -1), tokens[0].narrow(0, 1, 15)).backward();
            for (std::size_t g = 0; g < t.groups.size(); ++g)
                for (const auto& p : t.groups[g].points)
                    for (int k = 0; k < 2; ++k)
                        expected[g][k] += (inputs.at(p).grad() * (q(inputs.at(p), k) - inputs.at(p).detach())).abs().sum().item<double>();
        }
        for (std::size_t g = 0; g < t.groups.size(); ++g)
            for (const auto& m : t.groups[g].linears)
                for (int k = 0; k < 2; ++k)
                    expected[g][k] += (linear.at(m)->grad() * (q(*linear.at(m), k) - linear.at(m)->detach())).abs().sum().item<double>();
        for (std::size_t g = 0; g < t.groups.size(); ++g) {
            for (int k = 0; k < 2; ++k)
                QVERIFY2(std::abs(t.estimate[g][static_cast<std::size_t>(k)] / expected[g][k] - 1) <= 1e-3,
                         qPrintable(QStringLiteral("%1 %2: %3, float64 %4").arg(QString::fromStdString(t.groups[g].name)).arg(k)
                                        .arg(t.estimate[g][static_cast<std::size_t>(k)], 0, 'g', 10).arg(expected[g][k], 0, 'g', 10)));
            QCOMPARE(t.estimate[g][2], 0.0);
        }
    }

private slots:

    // The training's student honours the scheme: every point given "unquantized" by name gives the
    // bits of a student without activation quantization, every point given the run's format the
    // bits of one with it, and one group in another format a loss between them and neither.
    void studentFollowsScheme() {
        const QString dir = m_tmp.filePath("models/llama-small");
        const auto c = configNamed("llama-small");
        test::moeModel(dir, c.toJsonText(), "llama-small");
        const auto ck = model::Checkpoint::load(dir.toStdString());
        const auto w = model::loadWeights(ck);
        fold::TransformSpec spec;
        spec.t1Kind = spec.t2Kind = "learned-affine-lu";
        spec.t3Block = 32;
        const fold::ModelTransforms t(c, spec);
        const auto ids = test::randomIds(2 * 24, c.vocabSize, 9);
        const auto tokens = at::tensor(std::vector<int64_t>(ids.begin(), ids.end()), at::kLong).view({2, 24});
        const auto loss = [&](const train::StudentQuantization& s) { return train::distillationStep(c, w, t, s, tokens, 1.5, 0.0).objective; };
        const mx::MxConfig fp4 = mx::makeConfig(mx::Format::MxFp4);
        train::StudentQuantization none(std::nullopt), all(fp4), offByName(fp4), fp4ByName(std::nullopt), mixed(fp4);
        for (const auto& p : model::quantizationPointNames(c)) offByName.pointQuant[p] = std::nullopt, fp4ByName.pointQuant[p] = fp4;
        const auto groups = model::fusionGroups(c);
        for (const auto& p : groups[0].points) mixed.pointQuant[p] = mx::makeConfig(mx::Format::MxFp8E4M3);
        QCOMPARE(loss(offByName), loss(none));
        QCOMPARE(loss(fp4ByName), loss(all));
        const double m = loss(mixed), a = loss(all), n = loss(none);
        QVERIFY2(m != a && m != n, qPrintable(QStringLiteral("%1 %2 %3").arg(m).arg(a).arg(n)));
    }

    // A plan: the table written and read back, a budget problem whose fixed group keeps its rule's
    // format, refused where the table lacks that format.
    void planFromTable() {
        const QString dir = m_tmp.filePath("models/llama-small");
        const auto c = configNamed("llama-small");
        test::moeModel(dir, c.toJsonText(), "llama-small");
        run::SensitivityRequest r;
        r.modelDir = dir.toStdString();
        r.calibrationIds = test::randomIds(2 * 16, c.vocabSize, 4);
        r.seqLen = 16, r.windows = 2;
        r.formats = {"mxfp4", "mxfp8"};
        const QString file = m_tmp.filePath("sens.json");
        QFile out(file);
        QVERIFY(out.open(QIODevice::WriteOnly));
        out.write(QByteArray::fromStdString(run::sensitivityJson(run::measureSensitivity(r))));
        out.close();
        const auto t = run::readSensitivity(file.toStdString());
        QCOMPARE(t.formats, (std::vector<std::string>{"mxfp4", "mxfp8", "bf16"}));
        const auto fixed = run::resolveScheme(c, run::parseSchemeRules("layers\\.0\\.self_attn\\.qkv = bf16"), std::nullopt);
        const auto p = run::budgetProblem(t, fixed, 8.0);
        QCOMPARE(int(p.candidates[0].size()), 1);
        QCOMPARE(p.candidates[0][0].bits, 16.0);
        QCOMPARE(int(p.candidates[1].size()), 3);
        const auto chosen = run::chosenScheme(t, fixed, quant::solveBudget(p));
        QCOMPARE(run::schemeFormatName(chosen[0].format), std::string("bf16"));
        const auto nv = run::resolveScheme(c, run::parseSchemeRules("layers\\.0\\.self_attn\\.qkv = nvfp4"), std::nullopt);
        QVERIFY(errorOf([&] { run::budgetProblem(t, nv, 5.0); }).contains("did not measure"));
        // The estimate alone: planned by it, refused by the measured KL it lacks.
        r.measure = false;
        const auto e = run::measureSensitivity(r);
        QVERIFY(e.kl.empty() && e.estimate.size() == e.groups.size() && e.rankCorrelation.empty());
        QVERIFY(errorOf([&] { run::budgetProblem(e, fixed, 8.0); }).contains("--estimate-only"));
        QCOMPARE(run::budgetProblem(e, fixed, 8.0, true).candidates[1][0].predictedKl, e.estimate[1][0]);
    }
};

QTEST_GUILESS_MAIN(TestScheme)
#include "tst_scheme.moc"
