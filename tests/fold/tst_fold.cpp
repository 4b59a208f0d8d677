// Folding of SPEC §4 against exact identities on real checkpoints: γ, orthogonal T1 with v1 = 0,
// any affine T2 and the online T3 leave the logits unchanged; a general affine T1 folds into a
// model equal to the "transformed student" computed independently (float64 ReferenceLlama whose
// RMSNorms see A1 h + v1).
#include "DeviceRows.h"
#include "MoeModels.h"
#include "ReferenceLlama.h"

#include "fold/Fold.h"
#include "model/Checkpoint.h"
#include "model/LlamaModel.h"
#include "analysis/ModelAnalysis.h"
#include "fold/ModelTransforms.h"
#include "transforms/FixedTransforms.h"
#include "transforms/LearnedTransforms.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <QtTest>

#include <QTemporaryDir>

#include <map>
#include <memory>
#include <random>
#include "TestData.h" // after ATen: Qt's slots macro breaks ATen headers

using namespace latmix;
using fold::AffineMatrices;

namespace {

double maxRelative(const at::Tensor& got, const at::Tensor& want) {
    return (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>() /
           want.to(at::kDouble).abs().max().item<double>();
}

at::Tensor sampleTokens(int vocab, int n, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<int64_t> ids(static_cast<size_t>(n));
    for (auto& t : ids) t = static_cast<int64_t>(rng() % static_cast<std::uint64_t>(vocab));
    return at::tensor(ids, at::kLong).reshape({1, n});
}

// A transform with every parameter moved off its start (so L, U, G, R, s and v all matter).
std::unique_ptr<transforms::AffineTransform> perturbed(const std::string& kind, std::int64_t dim, std::uint64_t seed,
                                                       double scale) {
    transforms::TransformOptions o;
    o.seed = seed;
    o.dtype = at::kDouble;
    auto t = transforms::makeTransform(kind, dim, o);
    at::NoGradGuard g;
    auto gen = at::detail::createCPUGenerator(seed);
    for (auto& p : t->parameters()) p.add_(at::randn(p.sizes(), gen, p.options()) * scale);
    return t;
}

AffineMatrices matricesOf(const transforms::AffineTransform& t) {
    return {t.matrix().detach(), t.inverseMatrix().detach(), t.bias().defined() ? t.bias().detach() : at::Tensor()};
}

// Logits (float32, CPU copies) of the original model and of the model with γ, T1 (v1 = 0), T2
// of every layer and T3 folded, both loaded, folded (float64) and run on `device`.
struct FoldRun {
    at::Tensor original, folded;
};
FoldRun runFold(const model::Checkpoint& ck, const QString& t1, const QString& t2, bool t3, const at::Tensor& tokens,
                c10::Device device, bool* attentionBiases = nullptr) {
    const auto& c = ck.config();
    const model::LlamaModel original(ck, at::kFloat, device);
    auto w = fold::foldNorms(c, model::loadWeights(ck, at::kDouble, device));
    if (!t1.isEmpty()) w = fold::applyT1(c, w, matricesOf(*perturbed(t1.toStdString(), c.hiddenSize, 5, 0.05)));
    if (!t2.isEmpty()) {
        std::vector<AffineMatrices> m;
        for (int l = 0; l < c.numLayers; ++l)
            m.push_back(matricesOf(*perturbed(t2.toStdString(), c.headDim, 100 + l, 0.05)));
        w = fold::applyT2(c, w, m);
    }
    model::ForwardOptions options;
    if (t3) {
        const auto h = transforms::blockHadamard(c.intermediateSize, 32, 9);
        w = fold::applyT3(w, h);
        options.t3 = h.to(at::TensorOptions().dtype(at::kFloat).device(device));
    }
    const auto fc = fold::foldedConfig(c, w);
    if (attentionBiases) *attentionBiases = fc.oProjBias && fc.qkvBias;
    const model::LlamaModel student(fc, model::convertWeights(w, at::TensorOptions().dtype(at::kFloat).device(device)), options);
    return {test::onCpu(original.forward(tokens)), test::onCpu(student.forward(tokens))};
}

} // namespace

class TestFold : public QObject {
    Q_OBJECT
private slots:
    void exactFolds_data() {
        QTest::addColumn<QString>("model");
        QTest::addColumn<QString>("t1");     // "", or a transform kind for T1 with v1 = 0
        QTest::addColumn<QString>("t2");     // "", or a transform kind for every layer's T2
        QTest::addColumn<bool>("t3");
        test::addDeviceColumn();
        for (const char* m : {"demo", "stories260K-hf", "brownpy-13M"}) // demo: runs without ../shared/data
            for (const QString& dev : test::testDevices()) { // the cpu rows keep their old names
                const QByteArray d = dev == "cpu" ? QByteArray() : " " + dev.toUtf8();
                QTest::addRow("%s norms only%s", m, d.constData()) << m << "" << "" << false << dev;
                QTest::addRow("%s hadamard T1%s", m, d.constData()) << m << "hadamard" << "" << false << dev;
                QTest::addRow("%s orthogonal T1%s", m, d.constData()) << m << "orthogonal" << "" << false << dev;
                QTest::addRow("%s learned rotation T1%s", m, d.constData()) << m << "learned-rotation" << "" << false << dev;
                QTest::addRow("%s affine-lu T2%s", m, d.constData()) << m << "" << "learned-affine-lu" << false << dev;
                QTest::addRow("%s affine-qr T2%s", m, d.constData()) << m << "" << "learned-affine-qr" << false << dev;
                QTest::addRow("%s T3 online%s", m, d.constData()) << m << "" << "" << true << dev;
                QTest::addRow("%s hadamard T1 + lu T2 + T3%s", m, d.constData())
                    << m << "hadamard" << "learned-affine-lu" << true << dev;
            }
    }
    // SPEC §4 / issue: unchanged logits, max relative error < 1e-4 (float32 forward), on the CPU
    // and on cuda:0 (model loaded there, the fold in float64 there, the folded model run there).
    // On cuda:0 also: its logits against the CPU's, original and folded model each, < 2e-5
    // (float32 forwards each within 1e-5 of the float64 reference, tst_llamamodel). The 1e-4: two
    // such float32 forwards (~1e-6 each where tst_llamamodel measured) plus the float32 rounding
    // of the folded weights.
    void exactFolds() {
        QFETCH(QString, model);
        QFETCH(QString, t1);
        QFETCH(QString, t2);
        QFETCH(bool, t3);
        QFETCH(QString, device);
        LATMIX_REQUIRE_DEVICE(dev, device);
        const QString dir = test::modelFolder(model);
        if (!QFile::exists(dir + "/config.json")) LATMIX_DATA_SKIP(qPrintable("no model at " + dir + " (set LATMIX_DATA_DIR)"));
        const auto ck = model::Checkpoint::load(dir.toStdString());
        const auto tokens = sampleTokens(ck.config().vocabSize, 48, 3);
        bool biases = false;
        const FoldRun r = runFold(ck, t1, t2, t3, tokens, dev, &biases);
        const double rel = maxRelative(r.folded, r.original);
        QVERIFY2(rel < 1e-4, qPrintable(QString("max relative logit error %1").arg(rel)));
        if (!t2.isEmpty() && t2.contains("affine")) QVERIFY(biases);
        if (dev.is_cpu()) return;
        const FoldRun cpu = runFold(ck, t1, t2, t3, tokens, c10::kCPU);
        const double original = maxRelative(r.original, cpu.original), folded = maxRelative(r.folded, cpu.folded);
        QVERIFY2(original < 2e-5 && folded < 2e-5,
                 qPrintable(QString("%1 vs CPU logits: original %2, folded %3").arg(device).arg(original).arg(folded)));
    }

    void affineT1MatchesTransformedStudent_data() {
        QTest::addColumn<QString>("model");
        QTest::addColumn<QString>("kind");
        for (const char* m : {"demo", "stories260K-hf", "brownpy-13M"})
            for (const char* k : {"learned-affine-lu", "learned-affine-qr"}) QTest::addRow("%s %s", m, k) << m << k;
    }
    // A general affine T1 (non-orthogonal A1, v1 ≠ 0) is not an identity: the folded model must
    // equal the student whose RMSNorms see the transformed residual, computed independently in
    // float64; and it must differ from the original model (else the check above proves nothing).
    void affineT1MatchesTransformedStudent() {
        QFETCH(QString, model);
        QFETCH(QString, kind);
        const QString dir = test::modelFolder(model);
        if (!QFile::exists(dir + "/config.json")) LATMIX_DATA_SKIP(qPrintable("no model at " + dir + " (set LATMIX_DATA_DIR)"));
        const auto ck = model::Checkpoint::load(dir.toStdString());
        const auto& c = ck.config();
        auto t = perturbed(kind.toStdString(), c.hiddenSize, 21, 0.05);
        const auto m = matricesOf(*t);
        QVERIFY(m.v.defined() && m.v.abs().max().item<double>() > 0.01); // max of d ≥ 64 draws of 0.05·|N(0, 1)|
        auto w = fold::applyT1(c, fold::foldNorms(c, model::loadWeights(ck, at::kDouble)), m);
        const auto fc = fold::foldedConfig(c, w);
        QVERIFY(!fc.lmHeadBias); // T1's bias stays out of lm_head: no runtime loads a head bias (issue 71)
        const model::LlamaModel student(fc, model::convertWeights(w, at::TensorOptions().dtype(at::kFloat)));
        const auto tokens = sampleTokens(c.vocabSize, 24, 4);
        const auto got = student.forward(tokens)[0];

        test::ReferenceLlama ref(ck);
        ref.t1A = m.a;
        ref.t1v = m.v;
        std::vector<int64_t> ids(tokens.data_ptr<int64_t>(), tokens.data_ptr<int64_t>() + tokens.numel());
        const auto want = ref.logits(ids);
        // float32 forward of float32-rounded folded weights vs float64: as in exactFolds; the
        // original model must differ by ≥ 10× that, or the identity would prove nothing.
        const double rel = maxRelative(got, want);
        QVERIFY2(rel < 1e-4, qPrintable(QString("folded vs transformed student: %1").arg(rel)));
        const double changed = maxRelative(model::LlamaModel(ck).forward(tokens)[0], want);
        QVERIFY2(changed > 1e-3, qPrintable(QString("the affine T1 changed nothing (%1)").arg(changed)));
    }

    // unfoldT3 undoes applyT3 (export hf folds T3 back into W_down).
    // analysis::captureModelActivations with a run's transforms.h5 captures from the model that run
    // quantizes (fold::foldedModel): at a point it holds the original model's activations
    // mapped by that point's transform, exactly where no RMSNorm sees a non-orthogonal T1: T3
    // at down_proj (x T3ᵀ), the layer's affine T2 per head at o_proj, an orthogonal T1 at q/k/v
    // and gate/up acting on the γ-free normalised residual (γ folds into the weights: x / γ,
    // then A1 — what the workbench's activation view shows for a run).
    void runCaptureSeesItsTransforms_data() {
        QTest::addColumn<QString>("point");
        QTest::addColumn<QString>("t1");
        QTest::addColumn<QString>("t2");
        QTest::addColumn<int>("t3");
        QTest::newRow("T3 at down_proj") << "layers.1.mlp.down_proj.input" << "none" << "none" << 32;
        QTest::newRow("learned T2 at o_proj") << "layers.2.self_attn.o_proj.input" << "none" << "learned-affine-lu" << 0;
        QTest::newRow("hadamard T1 at qkv") << "layers.0.self_attn.qkv.input" << "hadamard" << "none" << 0;
        QTest::newRow("hadamard T1 at gate_up, all three") << "layers.3.mlp.gate_up.input" << "hadamard" << "learned-affine-qr" << 32;
    }
    void runCaptureSeesItsTransforms() {
        QFETCH(QString, point);
        QFETCH(QString, t1);
        QFETCH(QString, t2);
        QFETCH(int, t3);
        const QString dir = test::modelFolder("demo");
        const auto ck = model::Checkpoint::load(dir.toStdString());
        const auto& c = ck.config();
        fold::TransformSpec spec;
        spec.t1Kind = t1.toStdString();
        spec.t2Kind = t2.toStdString();
        spec.t3Block = t3;
        spec.seed = 4;
        spec.t3Seed = 11;
        fold::ModelTransforms t(c, spec);
        {
            at::NoGradGuard g;
            auto gen = at::detail::createCPUGenerator(17);
            for (auto& p : t.parameters()) p.add_(at::randn(p.sizes(), gen, p.options()) * 0.05);
        }
        QTemporaryDir tmp;
        const std::string file = tmp.filePath("transforms.h5").toStdString();
        t.save(file);
        analysis::ModelCapture r;
        r.modelDir = dir.toStdString();
        r.calibrationText = "Once upon a time there was a little model that wanted to know where its quantization error "
                            "came from, so it looked at every block of every activation, one channel at a time.";
        r.pointsRegex = "^" + point.toStdString() + "$";
        r.samples = 2;
        r.seqLen = 16;
        const auto before = analysis::captureModelActivations(r).at(0).second.to(at::kDouble);
        r.transformsFile = file;
        const auto after = analysis::captureModelActivations(r).at(0).second.to(at::kDouble);
        at::NoGradGuard g;
        at::Tensor want;
        const int layer = QStringView(point).mid(7, point.indexOf('.', 7) - 7).toInt();
        if (point.endsWith("down_proj.input")) {
            want = t.t3().to(at::TensorOptions().dtype(at::kDouble)).apply(before);
        } else if (point.endsWith("o_proj.input")) {
            const auto heads = before.reshape({-1, c.headDim});
            want = t.t2(layer)->forward(heads.to(t.t2(layer)->matrix().scalar_type())).to(at::kDouble).reshape(before.sizes());
        } else {
            const auto w = model::loadWeights(ck, at::kDouble);
            const auto& y = w.layers[size_t(layer)];
            const auto gamma = point.contains("qkv") ? y.inputNorm : y.postNorm;
            const auto normalised = before / gamma;
            want = t.t1()->forward(normalised.to(t.t1()->matrix().scalar_type())).to(at::kDouble);
        }
        // float32 captures through up to 4 layers of two differently folded models (rounding ~1e-6
        // of the largest value each, as in exactFolds), the transform applied here in float64: 1e-4.
        const double rel = maxRelative(after, want);
        QVERIFY2(rel < 1e-4, qPrintable(QString("max relative error %1 against the transform applied by hand").arg(rel)));
        // And the capture did change: the transforms are not the identity there.
        QVERIFY(maxRelative(after, before) > 1e-2);
    }

    void unfoldT3RoundTrip() {
        const QString dir = test::demoModelDir();
        const auto ck = model::Checkpoint::load(dir.toStdString());
        const auto h = transforms::blockHadamard(ck.config().intermediateSize, 32, 0);
        const auto w = model::loadWeights(ck, at::kDouble);
        const auto back = fold::unfoldT3(fold::applyT3(w, h), h);
        // float64 W·Hᵀ·H in blocks of 32: ≲ 32·2^-53 per product
        for (size_t l = 0; l < w.layers.size(); ++l) QVERIFY(maxRelative(back.layers[l].wDown, w.layers[l].wDown) < 1e-12);
    }

    // QuaRot's T1 (a random Hadamard of a power-of-two width) folds through the fast Walsh–
    // Hadamard transform; the dense matrices give the same model to float64 rounding (the demo
    // model's hidden 64: embedding, q/k/v/gate/up input side, o/down output side, lm_head).
    void sylvesterFoldMatchesDense() {
        const auto ck = model::Checkpoint::load(test::demoModelDir().toStdString());
        const auto& c = ck.config();
        const auto t1 = transforms::makeRandomHadamard(c.hiddenSize, 77, at::kDouble);
        const AffineMatrices fast{t1->matrix(), t1->inverseMatrix(), {}, t1->hadamardDiagonal()};
        QVERIFY(fast.hadamardDiagonal.defined());
        const auto w = fold::foldNorms(c, model::loadWeights(ck, at::kDouble));
        const auto a = fold::applyT1(c, w, fast), b = fold::applyT1(c, w, matricesOf(*t1));
        // Sums of 64 float64 terms either way: ≲ 2·64·2^-53 ≈ 1.4e-14 of the largest weight.
        QVERIFY(maxRelative(a.embed, b.embed) < 1e-12);
        QVERIFY(maxRelative(a.lmHead, b.lmHead) < 1e-12);
        for (size_t l = 0; l < w.layers.size(); ++l) {
            const auto &x = a.layers[l], &y = b.layers[l];
            for (const auto& [p, q] : {std::pair{x.wq, y.wq}, {x.wk, y.wk}, {x.wv, y.wv}, {x.wo, y.wo}, {x.wGate, y.wGate},
                                       {x.wUp, y.wUp}, {x.wDown, y.wDown}})
                QVERIFY(maxRelative(p, q) < 1e-12);
        }
        // And T1 did something: the embedding moved by O(1) of its size.
        QVERIFY(maxRelative(a.embed, w.embed) > 0.1);
        // Not a power of two (12: Paley I) goes by its construction as well, to the same rounding.
        const auto t12 = transforms::makeRandomHadamard(12, 1, at::kDouble);
        QVERIFY(t12->hadamardDiagonal().defined());
        // Sums of 12 float64 terms either way: ≲ 2·12·2^-53 of the largest term.
        const auto x12 = at::randn({5, 12}, at::kDouble);
        const auto a12 = t12->matrix();
        QVERIFY(maxRelative(t12->forward(x12), at::matmul(x12, a12.t())) < 1e-13);
        QVERIFY(maxRelative(t12->inverse(x12), at::matmul(x12, a12)) < 1e-13);
    }

    // The run folds a sparse layer's experts one at a time, each in float64 only while it is folded
    // (fold::foldedLayer, fold::foldExpert); the whole-model folds step by step over every expert
    // (foldNorms, applyT3, applyT1, applyT2). The same operations on each tensor in the same order
    // and precision: equal bit for bit in float32, router and attention included.
    void expertsOneAtATimeEqualTheWholeModelFold_data() {
        QTest::addColumn<QString>("family");
        QTest::addColumn<QString>("t1");
        QTest::newRow("qwen3-moe, learned LU") << "qwen3-moe" << "learned-affine-lu";
        QTest::newRow("mixtral, random Hadamard") << "mixtral" << "hadamard";
    }
    void expertsOneAtATimeEqualTheWholeModelFold() {
        QFETCH(QString, family);
        QFETCH(QString, t1);
        QTemporaryDir tmp;
        const QString dir = test::moeModel(tmp.filePath("m"), test::moeRunConfigText(family), family.toStdString());
        const auto ck = model::Checkpoint::load(dir.toStdString());
        const auto& c = ck.config();
        fold::TransformSpec spec;
        spec.t1Kind = t1.toStdString();
        spec.t1Bias = false; // the experts and the router have no biases to take one
        spec.seed = 3;
        fold::ModelTransforms t(c, spec);
        {
            at::NoGradGuard g;
            auto gen = at::detail::createCPUGenerator(23);
            for (auto& p : t.parameters()) p.add_(at::randn(p.sizes(), gen, p.options()) * 0.05);
        }
        const auto w = model::loadStoredWeights(ck, at::kFloat);
        const auto f64 = at::TensorOptions().dtype(at::kDouble), f32 = at::TensorOptions().dtype(at::kFloat);
        const auto whole = fold::foldedModel(c, w, t, f64).weights();
        for (int l = 0; l < c.numLayers; ++l) {
            const auto one = fold::foldedLayer(c, w.layers[size_t(l)], t, l, f64, f32);
            // foldedModel also completes the bias groups with zeros (fold::foldedConfig; the run
            // does that on the spill): those are the only tensors foldedLayer has not.
            std::map<std::string, at::Tensor> got;
            for (const auto& [name, x] : model::namedLayerTensors(c, one, l)) got[name] = x;
            QVERIFY(!one.experts.empty());
            int compared = 0;
            for (const auto& [name, x] : model::namedLayerTensors(c, model::convertLayer(whole.layers[size_t(l)], f32), l)) {
                const auto it = got.find(name);
                if (it == got.end()) {
                    const bool bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
                    QVERIFY2(bias && !x.any().item<bool>(), name.c_str());
                    continue;
                }
                QCOMPARE(it->second.scalar_type(), at::kFloat);
                QVERIFY2(at::equal(it->second, x), name.c_str());
                ++compared;
            }
            QCOMPARE(compared, int(got.size()));
            // And the fold did something: an expert's gate moved from the checkpoint's.
            QVERIFY(maxRelative(one.experts.front().wGate, w.layers[size_t(l)].experts.front().wGate) > 1e-2);
        }
    }

    void badShapesThrow() {
        const QString dir = test::demoModelDir();
        const auto ck = model::Checkpoint::load(dir.toStdString());
        const auto w = model::loadWeights(ck, at::kDouble);
        const auto eye = at::eye(ck.config().hiddenSize + 1, at::kDouble);
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, fold::applyT1(ck.config(), w, {eye, eye, {}}));
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, fold::applyT2(ck.config(), w, {}));
    }
};

QTEST_GUILESS_MAIN(TestFold)
#include "tst_fold.moc"
