// Mixture-of-experts routing on every device (DeviceRows.h: the cuda rows run on a GPU machine's
// check, packaging/device-check.sh): the forward pass routes each token as the float64 reference
// does (ReferenceLlama's own routing, written from transformers' modeling files) and gives its
// logits; each expert's own activations are captured; an idle expert is refused; and, on an
// accelerator, the quantization pipeline runs every kind of method on the small MoE models beside
// the CPU. Configs, checkpoints and the end-to-end runs on the CPU: tst_moe.
#include "DeviceRows.h"
#include "MoeModels.h"
#include "ReferenceLlama.h"
#include "SmallRuns.h"
#include "TestSupport.h"

#include "eval/ExpertLoad.h"
#include "model/Capture.h"
#include "model/Checkpoint.h"
#include "model/LlamaModel.h"
#include "model/MixtureOfExperts.h"
#include "run/QuantizeRun.h"
#include "run/RunModel.h"
#include "train/TransformAnalysis.h"

#include <ATen/ATen.h>

#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include <QTemporaryDir>
#include <QtTest>

using namespace latmix;
using test::moeConfigText;

class TestMoeRouting : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;

    QString modelOf(const QString& name, const std::string& configText) {
        return test::moeModel(m_tmp.filePath("models/" + name), configText, name.toStdString());
    }

    // The small end-to-end runs' calibration and evaluation ids, options and run folders.
    const std::vector<int> m_calib = test::randomIds(2000, 300, 1), m_eval = test::randomIds(400, 300, 2);
    static run::QuantizeOptions runOptions(const QString& family, const QString& method, const QString& device) {
        auto o = test::smallRunOptions(method);
        if (family == "mixtral") o.t2Bias = false; // no attention biases to take it (tst_moe)
        o.device = device.toStdString();
        return o;
    }
    run::QuantizeResult quantizeOn(const QString& family, const QString& method, const QString& device) {
        return run::runQuantize(modelOf(family + "-run", test::moeRunConfigText(family)).toStdString(), m_calib, m_eval,
                                runDir(family, method, device).toStdString(), runOptions(family, method, device));
    }
    QString runDir(const QString& family, const QString& method, const QString& device) {
        return m_tmp.filePath("runs/" + family + "-" + method + "-" + QString(device).replace(':', '-'));
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
        test::addDeviceColumn();
        const auto row = [](const char* name, const std::string& arch, const std::string& extra, QList<int> sparse,
                            int layers = 3) {
            for (const QString& d : test::testDevices())
                QTest::addRow("%s %s", name, qPrintable(d))
                    << QString::fromStdString(moeConfigText(arch, extra, layers)) << QString(name) << sparse << d;
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
        QFETCH(QString, device);
        LATMIX_REQUIRE_DEVICE(dev, device);
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

        const model::LlamaModel m(ck, at::kFloat, dev);
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

        QCOMPARE(got.device(), dev);
        const double err = test::maxRelativeDiff(got, want);
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
        test::addDeviceColumn();
        for (const QString& d : test::testDevices()) {
            QTest::addRow("qwen3-moe %s", qPrintable(d))
                << QString::fromStdString(moeConfigText("Qwen3MoeForCausalLM", R"("num_experts": 8, "num_experts_per_tok": 2,
                       "moe_intermediate_size": 64, "norm_topk_prob": true)"))
                << "qwen3-moe top-2 of 8 renormalised" << d;
            QTest::addRow("mixtral %s", qPrintable(d))
                << QString::fromStdString(moeConfigText("MixtralForCausalLM", R"("num_local_experts": 8, "num_experts_per_tok": 2)"))
                << "mixtral top-2 of 8" << d;
        }
    }
    void expertPointsCaptureTheirOwnTokens() {
        QFETCH(QString, config);
        QFETCH(QString, name);
        QFETCH(QString, device);
        LATMIX_REQUIRE_DEVICE(dev, device);
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

        const model::LlamaModel m(ck, at::kFloat, dev);
        const auto acts = train::captureActivationsInMemory(m, ids, regex, 3, 16, 0, 0, true);
        QCOMPARE(int(acts.size()), int(routed.size()));
        std::map<int, std::int64_t> rowsPerLayer;
        for (size_t i = 0; i < acts.size(); ++i) {
            const auto& [point, x] = acts[i];
            QCOMPARE(QString::fromStdString(point), routed[int(i)]);
            const auto want = at::cat(ref.expertInputs.at(point), 0);
            QCOMPARE(x.size(0), want.size(0));
            QCOMPARE(x.size(1), std::int64_t(c.moe->expertWidth));
            const double err = test::maxRelativeDiff(x, want);
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


    // The pipeline on an accelerator, beside the CPU, on tst_moe's end-to-end models (2 layers,
    // 4 experts, top 2; seconds). rtn without transforms gives every linear, the experts', the
    // CPU run's codes and scales bit for bit (the same float32 weights; MX rounding is exact on
    // both, tst_mxquantizer's cuda rows). quarot's fold on the device computes the original model
    // (folded perplexity = fp's to float32 rounding, as tst_moe's CPU rows) and GPTQ's experts
    // count every calibration token k times per sparse layer. latmix-lu trains on the device, and
    // its run model, reloaded there, gives the run's W4A4 and weight-only perplexities.
    void methodsRunOnTheDevice_data() {
        QTest::addColumn<QString>("family");
        QTest::addColumn<QString>("method");
        test::addDeviceColumn();
        const std::pair<const char*, const char*> runs[] = {{"qwen3-moe", "rtn"}, {"mixtral", "quarot"}, {"qwen3-moe", "latmix-lu"}};
        for (const QString& d : test::acceleratorDevices())
            for (const auto& [family, method] : runs)
                QTest::addRow("%s %s %s", family, method, qPrintable(d)) << family << method << d;
    }
    void methodsRunOnTheDevice() {
        QFETCH(QString, family);
        QFETCH(QString, method);
        QFETCH(QString, device);
        LATMIX_REQUIRE_DEVICE(dev, device);
        const auto r = quantizeOn(family, method, device);
        QVERIFY(std::isfinite(r.quantizedPerplexity) && r.quantizedPerplexity > 1);
        if (dev.is_cuda()) QVERIFY2(r.peakGpuMb > 0, "the run's device held nothing");
        QCOMPARE(int(r.linears.size()), 2 * (4 + 3 * 4)); // q, k, v, o and each expert's gate, up, down
        for (const auto& L : r.linears) QVERIFY2(std::isfinite(L.relativeError), L.linear.c_str());
        const auto o = runOptions(family, method, device);
        if (method == "rtn") {
            quantizeOn(family, method, "cpu");
            const auto a = run::readRunModel((runDir(family, method, device) + "/model").toStdString());
            const auto b = run::readRunModel((runDir(family, method, "cpu") + "/model").toStdString());
            QCOMPARE(int(a.packed.size()), int(r.linears.size()));
            QCOMPARE(int(b.packed.size()), int(a.packed.size()));
            for (const auto& [name, p] : a.packed) {
                const auto& q = b.packed.at(name);
                QVERIFY2(at::equal(p.codes, q.codes) && at::equal(p.scales, q.scales), name.c_str());
            }
        } else {
            // Per sparse layer, the tokens GPTQ's experts saw add up to every calibration token
            // k = 2 times, at each of an expert's three linears.
            std::map<int, std::int64_t> perLayer;
            for (const auto& L : r.linears)
                if (L.linear.find(".experts.") != std::string::npos) perLayer[L.layer] += L.tokens;
            QCOMPARE(int(perLayer.size()), 2);
            for (const auto& [layer, tokens] : perLayer)
                QCOMPARE(tokens, 3 * std::int64_t(o.calibSamples) * o.seqLen * 2);
        }
        if (method == "quarot") {
            qInfo("folded fp %.9g, fp %.9g", r.foldedPerplexity, r.fpPerplexity);
            // float32 folds and forward over 2 layers: ~1e-6 relative; an unrotated router moves
            // the routing and the perplexity by percents.
            QVERIFY2(std::abs(r.foldedPerplexity / r.fpPerplexity - 1) < 1e-4,
                     qPrintable(QString("folded %1 vs %2").arg(r.foldedPerplexity).arg(r.fpPerplexity)));
        }
        if (method == "latmix-lu") {
            const auto ck = model::Checkpoint::load((runDir(family, method, device) + "/model").toStdString());
            // The same model on the same device; float32 rounding of the logits (~1e-6 relative)
            // bounds any difference of the kernels' order: 1e-5.
            const double w4a4 = test::runPerplexity(model::LlamaModel(ck, at::kFloat, dev), m_eval, o);
            const double weightOnly = test::runPerplexity(model::LlamaModel(ck, at::kFloat, dev, false), m_eval, o);
            QVERIFY2(std::abs(w4a4 / r.quantizedPerplexity - 1) < 1e-5,
                     qPrintable(QString("reloaded %1 vs run %2").arg(w4a4).arg(r.quantizedPerplexity)));
            QVERIFY2(std::abs(weightOnly / r.weightOnlyPerplexity - 1) < 1e-5,
                     qPrintable(QString("reloaded %1 vs run %2").arg(weightOnly).arg(r.weightOnlyPerplexity)));
        }
    }
};

QTEST_GUILESS_MAIN(TestMoeRouting)
#include "tst_moerouting.moc"
