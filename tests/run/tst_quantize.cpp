// The quantization pipeline (SPEC §4–§6) end to end on stories260K: every method writes a run
// that reloads; the reloaded W4A4 RTN model equals an independently assembled one bit for bit;
// GPTQ's layer errors are below RTN's; transformed methods record their transforms.
#include "FoldedStudent.h"
#include "TestSupport.h"

#include "run/RunModel.h"
#include "model/Checkpoint.h"
#include "model/LlamaModel.h"
#include "mx/MxQuantizer.h"
#include "eval/Perplexity.h"
#include "run/QuantizeRun.h"

#include <ATen/ATen.h>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include "run/quantize/Preflight.h"
#include <QTemporaryDir>
#include <nlohmann/json.hpp>
#include <QtTest>

#include <random>
#include "TestData.h"

using namespace latmix;
using test::randomIds;

namespace {

run::QuantizeOptions options(const QString& method, const QString& format) {
    run::QuantizeOptions o;
    o.method = method.toStdString();
    o.format = mx::makeConfig(mx::parseFormat(format.toStdString()));
    o.steps = 4;
    o.batch = 2;
    o.calibSamples = 8;
    o.seqLen = 32;
    o.seed = 1;
    o.device = "cpu";
    o.evalSeqLen = 64;
    o.evalWindows = 2;
    return o;
}

QString modelDir() { return test::dataDir() + "/models/stories260K-hf"; }

double layerErrorSum(const run::QuantizeResult& r) {
    double s = 0;
    for (const auto& l : r.linears) s += l.relativeError;
    return s;
}

} // namespace

class TestQuantize : public QObject {
    Q_OBJECT
private slots:
    void everyMethodWritesALoadableRun_data() {
        QTest::addColumn<QString>("method");
        QTest::addColumn<QString>("format");
        for (const auto& m : run::methods())
            for (const char* f : {"mxfp4", "mxint4"}) QTest::addRow("%s %s", m.name.c_str(), f) << QString::fromStdString(m.name) << f;
        QTest::newRow("latmix-lu nvfp4") << "latmix-lu" << "nvfp4";
    }
    void everyMethodWritesALoadableRun() {
        QFETCH(QString, method);
        QFETCH(QString, format);
        if (!QFile::exists(modelDir() + "/config.json")) LATMIX_DATA_SKIP("stories260K-hf not found (set LATMIX_DATA_DIR)");
        QTemporaryDir tmp;
        const auto& spec = run::methodSpec(method.toStdString());
        const auto ids = randomIds(4000, 512, 2);
        const auto r = run::runQuantize(modelDir().toStdString(), ids, randomIds(400, 512, 3), tmp.path().toStdString(),
                                          options(method, format));
        QCOMPARE(int(r.linears.size()), 5 * 7);
        for (const auto& l : r.linears) QVERIFY2(std::isfinite(l.relativeError) && l.relativeError < 1.0, l.linear.c_str());
        QVERIFY(QFile::exists(tmp.filePath("latmix.json")));
        QCOMPARE(QFile::exists(tmp.filePath("transforms.h5")), spec.transformed);
        QCOMPARE(QFile::exists(tmp.filePath("train.h5")), spec.learned);
        QCOMPARE(int(r.training.history.size()), spec.learned ? 4 : 0);
        // The run reloads as a checkpoint that knows its quantization; unpacked codes equal the weights.
        const auto ck = model::Checkpoint::load(tmp.filePath("model").toStdString());
        QVERIFY(ck.config().latmix.has_value());
        QCOMPARE(ck.config().latmix->method, method.toStdString());
        QCOMPARE(ck.config().latmix->t3Block > 0, spec.transformed);
        const auto run = run::readRunModel(tmp.filePath("model").toStdString());
        QCOMPARE(int(run.packed.size()), 5 * 7);
        QVERIFY(r.fpPerplexity > 1 && std::isfinite(r.quantizedPerplexity) && r.quantizedPerplexity > 1);

        // Paper Table 3's check on the folded, unquantized model, within FoldedStudent.h's bound
        // 2e-4 L on |log(perplexity ratio)|, L the largest |logit| of the model it should equal.
        const auto o = options(method, format);
        const auto evalIds = randomIds(400, 512, 3);
        const auto base = model::Checkpoint::load(modelDir().toStdString());
        if (!spec.transformed) {
            QCOMPARE(r.foldedPerplexity, 0.0); // nothing folded, nothing measured
        } else if (spec.t1Kind.find("affine") == std::string::npos) {
            // Orthogonal T1/T2 (and T3): the folded model computes the original function up to
            // float32 rounding, so it is compared with the FP model.
            const double largest = test::largestLogit(model::LlamaModel(base), evalIds, o.evalSeqLen, o.evalWindows);
            QVERIFY2(std::abs(std::log(r.foldedPerplexity / r.fpPerplexity)) <= test::foldedLogPerplexityBound(largest),
                     qPrintable(QString("folded %1 vs FP %2, largest logit %3").arg(r.foldedPerplexity).arg(r.fpPerplexity).arg(largest)));
        } else {
            // Affine T1: RMSNorm sees the transformed residual, so the folded model is the
            // trained student (SPEC §5) without activation quantization, not the original. Rebuild
            // that student independently from transforms.h5 (float32 folding; the run's is float64)
            // and compare.
            const auto student = test::foldedStudent(base, tmp.filePath("transforms.h5").toStdString());
            const double largest = test::largestLogit(student, evalIds, o.evalSeqLen, o.evalWindows);
            eval::PerplexityOptions p;
            p.seqLen = o.evalSeqLen;
            p.maxWindows = o.evalWindows;
            const double rebuilt = eval::evaluatePerplexity(student, evalIds, p).perplexity;
            QVERIFY2(std::abs(std::log(r.foldedPerplexity / rebuilt)) <= test::foldedLogPerplexityBound(largest),
                     qPrintable(QString("folded %1 vs student %2, largest logit %3").arg(r.foldedPerplexity).arg(rebuilt).arg(largest)));
        }
    }

    // The reloaded RTN run computes exactly what the original model computes with its block
    // linears fake-quantized (mx::fakeQuantize) and MX activations at the four points.
    void rtnRunEqualsFakeQuantizedModel() {
        if (!QFile::exists(modelDir() + "/config.json")) LATMIX_DATA_SKIP("stories260K-hf not found (set LATMIX_DATA_DIR)");
        QTemporaryDir tmp;
        auto o = options("rtn", "mxfp4");
        o.evalSeqLen = 0;
        run::runQuantize(modelDir().toStdString(), randomIds(4000, 512, 2), {}, tmp.path().toStdString(), o);
        const auto ck = model::Checkpoint::load(modelDir().toStdString());
        auto w = model::loadWeights(ck);
        for (auto& y : w.layers)
            for (at::Tensor* t : {&y.wq, &y.wk, &y.wv, &y.wo, &y.wGate, &y.wUp, &y.wDown}) *t = mx::fakeQuantize(*t, o.format);
        model::ForwardOptions f;
        f.activationQuant = o.format;
        const model::LlamaModel want(ck.config(), w, f);
        const auto qck = model::Checkpoint::load(tmp.filePath("model").toStdString());
        const model::LlamaModel got(qck);
        const auto tokens = at::tensor(std::vector<int64_t>{1, 5, 99, 300, 7, 42, 511, 3}, at::kLong).reshape({1, 8});
        QVERIFY(at::equal(got.forward(tokens), want.forward(tokens)));
    }

    // NVFP4 (SPEC §6): the linears vLLM fuses (q/k/v, gate/up) share one tensor scale g, the
    // largest |w| of the group over 448·6, worked out here from the checkpoint (rtn and gptq fold
    // nothing); o_proj and down_proj keep their own (RTN: exactly their own maximum's).
    void nvfp4FusedLinearsShareOneGlobalScale_data() {
        QTest::addColumn<QString>("method");
        QTest::newRow("rtn") << "rtn";
        QTest::newRow("gptq") << "gptq";
    }
    void nvfp4FusedLinearsShareOneGlobalScale() {
        QFETCH(QString, method);
        if (!QFile::exists(modelDir() + "/config.json")) LATMIX_DATA_SKIP("stories260K-hf not found (set LATMIX_DATA_DIR)");
        QTemporaryDir tmp;
        auto o = options(method, "nvfp4");
        o.evalSeqLen = 0;
        run::runQuantize(modelDir().toStdString(), randomIds(4000, 512, 2), {}, tmp.path().toStdString(), o);
        const auto ck = model::Checkpoint::load(modelDir().toStdString());
        const run::RunModel r = run::readRunModel(tmp.filePath("model").toStdString());
        auto amax = [&](const std::string& n) { return ck.weight(n + ".weight").to(at::kFloat).abs().max().item<float>(); };
        int differing = 0;
        for (int l = 0; l < ck.config().numLayers; ++l) {
            const std::string p = "model.layers." + std::to_string(l) + ".";
            for (const std::vector<std::string>& group : {std::vector<std::string>{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"},
                                                          {"mlp.gate_proj", "mlp.up_proj"}}) {
                float m = 0;
                for (const auto& g : group) m = std::max(m, amax(p + g));
                for (const auto& g : group) differing += amax(p + g) != m; // members whose own g would differ
                for (const auto& g : group)
                    QVERIFY2(test::bitsOf(r.packed.at(p + g).globalScale) == test::bitsOf(m / (448.0f * 6.0f)), (p + g).c_str());
            }
            if (method == "rtn")
                for (const std::string g : {"self_attn.o_proj", "mlp.down_proj"})
                    QVERIFY2(test::bitsOf(r.packed.at(p + g).globalScale) == test::bitsOf(amax(p + g) / (448.0f * 6.0f)), (p + g).c_str());
        }
        QVERIFY(differing > 0); // the shared scale is not every member's own
    }

    // GPTQ minimises the layer-wise output error that RTN ignores: summed over all linears its
    // relative error is lower.
    void gptqBeatsRtnLayerwise_data() {
        QTest::addColumn<QString>("format");
        QTest::newRow("mxfp4") << "mxfp4";
        QTest::newRow("mxint4") << "mxint4";
    }
    void gptqBeatsRtnLayerwise() {
        QFETCH(QString, format);
        if (!QFile::exists(modelDir() + "/config.json")) LATMIX_DATA_SKIP("stories260K-hf not found (set LATMIX_DATA_DIR)");
        QTemporaryDir a, b;
        auto o = options("rtn", format);
        o.evalSeqLen = 0;
        o.rtnErrorWindows = o.calibSamples; // RTN's error on GPTQ's windows, in GPTQ's output space
        const auto ids = randomIds(4000, 512, 2);
        const auto rtn = run::runQuantize(modelDir().toStdString(), ids, {}, a.path().toStdString(), o);
        o.method = "gptq";
        const auto gptq = run::runQuantize(modelDir().toStdString(), ids, {}, b.path().toStdString(), o);
        // effect: GPTQ must remove ≥ 10% of RTN's summed error; other BLAS orders in the Hessian
        // flip at most a few codes, which moves these sums by far less than 10%.
        QVERIFY2(layerErrorSum(gptq) < 0.9 * layerErrorSum(rtn),
                 qPrintable(QString("GPTQ %1 RTN %2").arg(layerErrorSum(gptq)).arg(layerErrorSum(rtn))));
    }

    // RTN needs no calibration: without --rtn-error-windows no window passes through the layers,
    // the quantized weights are the same bits as with them (RTN reads nothing but W), and each
    // linear's error is its weight-space one, ||Q(W) - W||^2 / ||W||^2, recomputed here in
    // float64 from the run model against the checkpoint (rtn: nothing folded). With windows the
    // error is the output-space one, which weights the columns differently.
    void rtnNeedsNoCalibration_data() {
        QTest::addColumn<QString>("method");
        QTest::newRow("rtn") << "rtn";
        QTest::newRow("quarot-rtn") << "quarot-rtn";
    }
    void rtnNeedsNoCalibration() {
        QFETCH(QString, method);
        if (!QFile::exists(modelDir() + "/config.json")) LATMIX_DATA_SKIP("stories260K-hf not found (set LATMIX_DATA_DIR)");
        QTemporaryDir a, b;
        auto o = options(method, "mxfp4");
        o.evalSeqLen = 0;
        const auto ids = randomIds(4000, 512, 2);
        const auto none = run::runQuantize(modelDir().toStdString(), ids, {}, a.path().toStdString(), o);
        o.rtnErrorWindows = 4;
        const auto some = run::runQuantize(modelDir().toStdString(), ids, {}, b.path().toStdString(), o);
        auto bytes = [](const QString& path) {
            QFile f(path);
            return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
        };
        for (const char* file : {"/model/model.safetensors", "/model/quantized.safetensors"}) {
            const QByteArray x = bytes(a.path() + file);
            QVERIFY2(!x.isEmpty() && x == bytes(b.path() + file), file);
        }
        auto kind = [](const QString& dir) {
            QFile f(dir + "/latmix.json");
            if (!f.open(QIODevice::ReadOnly)) return QString();
            return QJsonDocument::fromJson(f.readAll())["weight_quantization"]["relative_error"].toString();
        };
        QCOMPARE(kind(a.path()), QString("weights"));
        QCOMPARE(kind(b.path()), QString("outputs (4 windows)"));
        QCOMPARE(none.linears.size(), some.linears.size());
        int differ = 0;
        for (size_t i = 0; i < none.linears.size(); ++i) differ += none.linears[i].relativeError != some.linears[i].relativeError;
        QVERIFY(differ > int(none.linears.size()) / 2);
        if (method != "rtn") return; // quarot-rtn's weights are the folded ones, not the checkpoint's
        const auto ck = model::Checkpoint::load(modelDir().toStdString());
        const auto run = model::Checkpoint::load(a.filePath("model").toStdString());
        for (const auto& l : none.linears) {
            const std::string name = "model.layers." + std::to_string(l.layer) + "." + l.linear + ".weight";
            const auto w = ck.weight(name).to(at::kDouble), q = run.weight(name).to(at::kDouble);
            const double want = (q - w).square().sum().item<double>() / w.square().sum().item<double>();
            // The run's diagnostic sums in float32 (quant/WeightQuantizer.cpp): each of its two sums of
            // n squares within n * 2^-24 relative of the exact one, whatever the summation order.
            const double tol = 4.0 * double(w.numel()) * std::ldexp(1.0, -24) * want;
            QVERIFY2(std::abs(l.relativeError - want) <= tol,
                     qPrintable(QString("%1: %2 vs %3").arg(QString::fromStdString(name)).arg(l.relativeError).arg(want)));
        }
    }

    // --offload keeps the layers in host memory and moves one at a time to the device; on the
    // CPU the layer round trips must leave the run bit-identical (packed codes, perplexities).
    void offloadGivesTheSameRun_data() {
        QTest::addColumn<QString>("method");
        QTest::newRow("gptq") << "gptq";
        QTest::newRow("mr-gptq (T1/T2/T3 folded on the host)") << "mr-gptq";
        QTest::newRow("latmix-qr (trained, then offloaded)") << "latmix-qr";
    }
    void offloadGivesTheSameRun() {
        QFETCH(QString, method);
        if (!QFile::exists(modelDir() + "/config.json")) LATMIX_DATA_SKIP("stories260K-hf not found (set LATMIX_DATA_DIR)");
        QTemporaryDir a, b;
        auto o = options(method, "mxfp4");
        const auto ids = randomIds(4000, 512, 2), evalIds = randomIds(400, 512, 3);
        const auto plain = run::runQuantize(modelDir().toStdString(), ids, evalIds, a.path().toStdString(), o);
        o.offload = true;
        const auto off = run::runQuantize(modelDir().toStdString(), ids, evalIds, b.path().toStdString(), o);
        QCOMPARE(off.quantizedPerplexity, plain.quantizedPerplexity);
        QCOMPARE(off.weightOnlyPerplexity, plain.weightOnlyPerplexity);
        QCOMPARE(off.fpPerplexity, plain.fpPerplexity);
        const auto ra = run::readRunModel(a.filePath("model").toStdString());
        const auto rb = run::readRunModel(b.filePath("model").toStdString());
        QCOMPARE(ra.packed.size(), rb.packed.size());
        for (const auto& [name, p] : ra.packed) {
            QVERIFY2(at::equal(p.codes, rb.packed.at(name).codes), name.c_str());
            QVERIFY2(at::equal(p.scales, rb.packed.at(name).scales), name.c_str());
        }
    }

    // --keep (SPEC §4 "Kept linears"): the linears it matches keep bf16 weights and unquantized
    // inputs, have no packed weight, and are named in latmix.json; with RTN the reloaded run is
    // exactly the original with every other linear fake-quantized and the kept ones rounded to bf16.
    void keepLeavesLinearsInBf16_data() {
        QTest::addColumn<QString>("method");
        QTest::newRow("rtn") << "rtn";
        QTest::newRow("mr-gptq (T3 on a kept down_proj)") << "mr-gptq";
        QTest::newRow("wush-gptq (kept q_proj outside the qkv stack)") << "wush-gptq";
    }
    void keepLeavesLinearsInBf16() {
        QFETCH(QString, method);
        if (!QFile::exists(modelDir() + "/config.json")) LATMIX_DATA_SKIP("stories260K-hf not found (set LATMIX_DATA_DIR)");
        QTemporaryDir tmp;
        auto o = options(method, "mxfp4");
        o.keep = "layers\\.0\\.mlp\\.down_proj|layers\\.[0-9]+\\.self_attn\\.q_proj";
        const auto r = run::runQuantize(modelDir().toStdString(), randomIds(4000, 512, 2), randomIds(400, 512, 3),
                                          tmp.path().toStdString(), o);
        int kept = 0;
        for (const auto& l : r.linears) {
            const bool want = l.linear == "self_attn.q_proj" || (l.layer == 0 && l.linear == "mlp.down_proj");
            QCOMPARE(l.kept, want);
            kept += l.kept;
            if (l.kept) QVERIFY2(l.relativeError < 1e-4, l.linear.c_str()); // bf16: 2^-9 relative per entry
        }
        QCOMPARE(kept, 5 + 1);
        const auto run = run::readRunModel(tmp.filePath("model").toStdString());
        QCOMPARE(int(run.packed.size()), 5 * 7 - 6);
        QCOMPARE(int(run.quant.keptLinears.size()), 6);
        for (const auto& k : run.quant.keptLinears) {
            QVERIFY2(!run.packed.count(k), k.c_str());
            const at::Tensor& w = run.tensors.at(k + ".weight");
            QVERIFY2(at::equal(w.to(at::kBFloat16).to(at::kFloat), w), k.c_str()); // bf16 values
        }
        QFile f(tmp.filePath("latmix.json"));
        QVERIFY(f.open(QIODevice::ReadOnly));
        const auto j = nlohmann::json::parse(f.readAll().toStdString());
        QCOMPARE(int(j["weight_quantization"]["kept"]["linears"].size()), 6);
        QVERIFY(r.quantizedPerplexity > 1);
        if (method != "rtn") return;
        const auto ck = model::Checkpoint::load(modelDir().toStdString());
        auto w = model::loadWeights(ck);
        for (auto& y : w.layers)
            for (at::Tensor* t : {&y.wk, &y.wv, &y.wo, &y.wGate, &y.wUp, &y.wDown}) *t = mx::fakeQuantize(*t, o.format);
        for (auto& y : w.layers) y.wq = y.wq.to(at::kBFloat16).to(at::kFloat);
        w.layers[0].wDown = model::loadWeights(ck).layers[0].wDown.to(at::kBFloat16).to(at::kFloat);
        model::ForwardOptions fo;
        fo.activationQuant = o.format;
        fo.keptLinears = std::set<std::string>(run.quant.keptLinears.begin(), run.quant.keptLinears.end());
        const model::LlamaModel want(ck.config(), w, fo);
        const model::LlamaModel got(model::Checkpoint::load(tmp.filePath("model").toStdString()));
        const auto tokens = at::tensor(std::vector<int64_t>{1, 5, 99, 300, 7, 42, 511, 3}, at::kLong).reshape({1, 8});
        QVERIFY(at::equal(got.forward(tokens), want.forward(tokens)));
    }

    // What preflight refuses before any work, named: --keep matching nothing, everything, or no
    // regular expression at all; WUSH with a T3 on top.
    void refusedBeforeAnyWork_data() {
        QTest::addColumn<QString>("method");
        QTest::addColumn<QString>("keep");
        QTest::addColumn<int>("t3");
        QTest::addColumn<QString>("says");
        QTest::newRow("keep matches none") << "rtn" << "lm_head" << -1 << "matches none of the 35 block linears";
        QTest::newRow("keep matches all") << "gptq" << "layers" << -1 << "matches every block linear";
        QTest::newRow("keep not a regex") << "rtn" << "down_proj(" << -1 << "is not a regular expression";
        QTest::newRow("wush with T3") << "wush-rtn" << "" << 32 << "takes no T1, T2 or T3";
    }
    void refusedBeforeAnyWork() {
        QFETCH(QString, method);
        QFETCH(QString, keep);
        QFETCH(int, t3);
        QFETCH(QString, says);
        if (!QFile::exists(modelDir() + "/config.json")) LATMIX_DATA_SKIP("stories260K-hf not found (set LATMIX_DATA_DIR)");
        auto o = options(method, "mxfp4");
        o.keep = keep.toStdString();
        o.t3Block = t3;
        const QString error = test::errorOf([&] { run::preflight(modelDir().toStdString(), o); });
        QVERIFY2(error.contains(says) && (keep.isEmpty() || error.contains(keep)), qPrintable(error));
    }

    void unknownMethodIsRejected() {
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, run::methodSpec("awq"));
    }
};

QTEST_GUILESS_MAIN(TestQuantize)
#include "tst_quantize.moc"
