// Mixed-precision training (train::Precision::Bf16, `--precision bf16`) on stories260K, run on the
// CPU's bfloat16 kernels: the loss of a bf16 step and the curve of a bf16 run against the float32
// ones, within a bound worked out from what bfloat16's rounding does to the two models' logits,
// and the transforms with their gradients and AdamW's state still float32.
//
// The bound. Per token t, KL_t(p ‖ q) with p = softmax(a/τ) (teacher) and q = softmax(b/τ)
// (student) moves under logit errors Δa, Δb by at most ‖∂KL_t/∂a‖₁·max|Δa| + ‖∂KL_t/∂b‖₁·max|Δb|
// to first order, with ∂KL_t/∂b = (q − p)/τ and ∂KL_t/∂a = p ⊙ (L − KL_t)/τ, L = log p/q. The
// gradients are those of the float32 models; max|Δa|, max|Δb| each token's largest difference
// between a model's logits computed in bfloat16 and in float32, less the token's common shift
// that softmax ignores (half the range of the differences) (model::forwardHidden with each
// dtype; the student folded as ModelTransforms::fold folds it, its MX fake quantization included,
// so Δb holds the rounding decisions bfloat16's inputs flip: rare, but a whole grid step each).
// The second-order term is ½·Var_p((Δa − Δb)/τ) (KL ≈ ½·Var_p of the scaled logit difference near
// p = q), computed from the measured differences. Averaged over a window's tokens and doubled, that bounds the change of
// the window's mean KL; a step's KL is the mean over its windows. Without activation quantization
// the models are smooth and the bound is close (the rows "none"). With it, bfloat16's inputs flip
// some MX rounding decisions, a whole grid step each: Δb is then of the size of the quantization
// error itself (measured: KL between the float32 and bfloat16 MXFP4 students about that of either
// to the teacher), and the bound, still a bound, is loose. A run's later steps add the
// drift of the parameters: AdamW moves a parameter by at most lr·(1 + a little) a step, so after
// k steps the two runs' parameters differ by at most 2·lr·k each, and the loss by at most
// ‖∇‖₁·2·lr·k to first order (∇ the first step's gradient), doubled likewise.
//
// The statistical band (issue 71: the bound above let a bf16 step that skipped the activation
// quantization pass every row, its KL 0.0003 against 0.0645). With quantization, bfloat16 does
// not change how an activation rounds to the MX grid, only which grid point some take: the
// student's quantization noise is another draw of the same distribution. So the bf16 KL is the
// float32 one moved by a per-token difference d_t = KL_t(bf16) − KL_t(fp32) whose mean over a
// step's N tokens lies within |mean d| + 4·sd(d)/√N of zero, d measured on the plain forward in
// both dtypes (the same models, the same windows). Measured on stories260K: the bf16 steps are
// 0.04–0.25 of that band from the float32 ones; a bf16 student without its quantization is
// 1.5–2.5 bands away. Without quantization the rounding bound stays (it is close there, and the
// shift bfloat16 makes is systematic, not a draw).
#include "DeviceRows.h"
#include "StoriesFixture.h"
#include "TestSupport.h"

#include "fold/Fold.h"
#include "fold/ModelTransforms.h"
#include "model/Checkpoint.h"
#include "model/LlamaModel.h"
#include "train/Distillation.h"
#include "util/TorchCompat.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <QtTest>

#include "TestData.h"

using namespace latmix;

namespace {

std::optional<mx::MxConfig> formatOf(const QString& name) {
    if (name == "none") return std::nullopt;
    return mx::makeConfig(mx::parseFormat(name.toStdString()));
}

fold::ModelTransforms transformsOf(const model::ModelConfig& c, const QString& kind) {
    fold::TransformSpec spec;
    spec.t1Kind = spec.t2Kind = kind.toStdString();
    spec.t3Block = 32;
    return fold::ModelTransforms(c, spec);
}

// Per calibration window, the first-order bound of the header on how far bfloat16 moves the mean
// KL of the window's tokens, doubled: float64 [windows].
at::Tensor klChangeBound(const test::StoriesFixture& f, const fold::ModelTransforms& t, const std::optional<mx::MxConfig>& act,
                         double tau) {
    at::NoGradGuard g;
    const auto& c = f.ck->config();
    const auto folded = t.fold(c, fold::applyT3(fold::foldNorms(c, f.w), t.t3()));
    auto logits = [&](const model::LlamaWeights& w, bool student, at::ScalarType dtype) {
        model::ForwardOptions o;
        o.dtype = dtype;
        if (student) {
            o.activationQuant = act;
            o.t3 = t.t3().to(at::TensorOptions().dtype(dtype));
        }
        return model::lmHead(c, w, model::forwardHidden(c, w, o, f.calib)).to(at::kDouble);
    };
    const auto a = logits(f.w, false, at::kFloat), b = logits(folded, true, at::kFloat);
    // Softmax ignores a shift of all of a token's logits: the error that counts is the largest
    // |Δ − c| at the best shift c, half the range of Δ over the vocabulary.
    auto worst = [](const at::Tensor& x, const at::Tensor& y) {
        const auto d = x - y;
        return (std::get<0>(d.max(-1)) - std::get<0>(d.min(-1))) / 2;
    };
    const auto a16 = logits(f.w, false, at::kBFloat16), b16 = logits(folded, true, at::kBFloat16);
    const auto errA = worst(a16, a), errB = worst(b16, b);
    const auto logP = at::log_softmax(a / tau, -1), logQ = at::log_softmax(b / tau, -1);
    const auto p = logP.exp(), L = logP - logQ;
    const auto kl = (p * L).sum(-1, true);
    const auto gradA = (p * (L - kl)).abs().sum(-1) / tau, gradB = (logQ.exp() - p).abs().sum(-1) / tau;
    const auto d = ((a16 - a) - (b16 - b)) / tau;
    const auto second = 0.5 * ((p * d.square()).sum(-1) - (p * d).sum(-1).square());
    return 2 * (gradA * errA + gradB * errB + second).mean(-1);
}

// Each token's KL of tokens' windows through the plain forward in dtype (the teacher, and the
// student folded as ModelTransforms::fold folds it with its MX fake quantization), float64 [B·T].
at::Tensor tokenKl(const test::StoriesFixture& f, const fold::ModelTransforms& t, const std::optional<mx::MxConfig>& act,
                   double tau, at::ScalarType dtype, const at::Tensor& tokens) {
    at::NoGradGuard g;
    const auto& c = f.ck->config();
    const auto folded = t.fold(c, fold::applyT3(fold::foldNorms(c, f.w), t.t3()));
    auto logits = [&](const model::LlamaWeights& w, bool student) {
        model::ForwardOptions o;
        o.dtype = dtype;
        if (student) {
            o.activationQuant = act;
            o.t3 = t.t3().to(at::TensorOptions().dtype(dtype));
        }
        return model::lmHead(c, w, model::forwardHidden(c, w, o, tokens)).to(at::kDouble);
    };
    const auto logP = at::log_softmax(logits(f.w, false) / tau, -1), logQ = at::log_softmax(logits(folded, true) / tau, -1);
    return (logP.exp() * (logP - logQ)).sum(-1).reshape({-1});
}

// The statistical band of the header for the mean KL of a step of stepTokens tokens: |mean d| +
// 4·sd(d)/√stepTokens, d the per-token bf16 − fp32 KL difference over `tokens`' windows.
double statisticalBand(const test::StoriesFixture& f, const fold::ModelTransforms& t,
                       const std::optional<mx::MxConfig>& act, double tau, const at::Tensor& tokens, std::int64_t stepTokens) {
    const auto d = tokenKl(f, t, act, tau, at::kBFloat16, tokens) - tokenKl(f, t, act, tau, at::kFloat, tokens);
    return std::fabs(d.mean().item<double>()) + 4 * d.std().item<double>() / std::sqrt(double(stepTokens));
}

train::DistillOptions runOptions(int steps, at::ScalarType compute) {
    train::DistillOptions o;
    o.steps = steps;
    o.batch = 2;
    o.lr = 1e-3;
    o.metricsEvery = 0;
    o.seed = 3;
    o.activation.reset(); // set by the row
    o.compute = compute;
    return o;
}

} // namespace

class TestMixedPrecision : public QObject {
    Q_OBJECT
private slots:
    void precisionNames_data() {
        QTest::addColumn<QString>("name");
        QTest::addColumn<bool>("cuda");
        QTest::addColumn<QString>("resolved");
        QTest::addColumn<bool>("bf16");
        QTest::addColumn<bool>("tf32");
        QTest::newRow("auto on cuda") << "auto" << true << "bf16" << true << true;
        QTest::newRow("auto on cpu") << "auto" << false << "fp32" << false << false;
        QTest::newRow("bf16 on cpu") << "bf16" << false << "bf16" << true << false;
        QTest::newRow("tf32 on cuda") << "tf32" << true << "tf32" << false << true;
        QTest::newRow("tf32 on cpu") << "tf32" << false << "tf32" << false << false;
        QTest::newRow("fp32 on cuda") << "fp32" << true << "fp32" << false << false;
    }
    void precisionNames() {
        QFETCH(QString, name);
        QFETCH(bool, cuda);
        QFETCH(QString, resolved);
        QFETCH(bool, bf16);
        QFETCH(bool, tf32);
        const train::Precision p = train::precisionOf(name.toStdString(), cuda);
        QCOMPARE(QString(train::precisionName(p)), resolved);
        QCOMPARE(train::computeDtype(p) == at::kBFloat16, bf16);
        QCOMPARE(train::usesTf32(p, cuda), tf32);
        QCOMPARE(train::precisionOf(train::precisionName(p), cuda), p);
    }

    void unknownPrecisionIsNamed() {
        try {
            train::precisionOf("fp16", true);
            QFAIL("fp16 was taken");
        } catch (const std::invalid_argument& e) {
            QVERIFY2(QString(e.what()).contains("'fp16'") && QString(e.what()).contains("auto, bf16, tf32 or fp32"), e.what());
        }
    }

    // One step at the same transforms and windows in both precisions: the bf16 loss within the
    // bound of the header (it cannot be the float32 one: the layers ran in bfloat16), the
    // gradients on the float32 parameters finite and the parameters still float32.
    void bf16StepWithinRoundingOfFloat32_data() {
        QTest::addColumn<QString>("kind");
        QTest::addColumn<QString>("format");
        QTest::newRow("lu none") << "learned-affine-lu" << "none";
        QTest::newRow("qr none") << "learned-affine-qr" << "none";
        QTest::newRow("lu mxfp4") << "learned-affine-lu" << "mxfp4";
        QTest::newRow("qr mxfp4") << "learned-affine-qr" << "mxfp4";
        QTest::newRow("lu nvfp4") << "learned-affine-lu" << "nvfp4";
        QTest::newRow("lu mxfp8_e4m3") << "learned-affine-lu" << "mxfp8_e4m3";
    }
    void bf16StepWithinRoundingOfFloat32() {
        QFETCH(QString, kind);
        QFETCH(QString, format);
        test::StoriesFixture f;
        if (!test::loadStoriesFixture(f)) LATMIX_DATA_SKIP("stories260K-hf not found (set LATMIX_DATA_DIR)");
        const auto& c = f.ck->config();
        const auto act = formatOf(format);
        fold::ModelTransforms t = transformsOf(c, kind);
        const double tau = 1.5;
        const auto tokens = f.calib.narrow(0, 0, 2);
        auto step = [&](at::ScalarType compute) {
            for (auto& p : t.parameters()) p.mutable_grad() = at::Tensor();
            return train::distillationStep(c, f.w, t, act, tokens, tau, 0.0, train::Objective::Kl, std::nullopt, {}, compute);
        };
        const auto fp32 = step(at::kFloat);
        const auto bf16 = step(at::kBFloat16);
        for (const auto& p : t.parameters()) {
            QCOMPARE(p.scalar_type(), at::kFloat);
            QVERIFY(p.grad().defined() && p.grad().scalar_type() == at::kFloat);
            QVERIFY(at::isfinite(p.grad()).all().item<bool>());
        }
        const double rounding = klChangeBound(f, t, act, tau).narrow(0, 0, tokens.size(0)).mean().item<double>();
        // Without quantization the rounding bound is a close bound; with it, the band (header).
        const double band = act ? statisticalBand(f, t, act, tau, tokens, tokens.numel()) : rounding;
        const double bound = std::min(rounding, band);
        qInfo("KL fp32 %.6g, bf16 %.6g, |difference| %.3g, rounding bound %.3g, statistical band %.3g", fp32.objective,
              bf16.objective, std::fabs(bf16.objective - fp32.objective), rounding, band);
        QVERIFY2(bf16.objective != fp32.objective, "the bf16 step gave the float32 loss: it did not compute in bfloat16");
        QVERIFY2(std::fabs(bf16.objective - fp32.objective) <= bound,
                 qPrintable(QString("KL bf16 %1, fp32 %2, bound %3").arg(bf16.objective).arg(fp32.objective).arg(bound)));
    }

    // Issue 71: the CUDA default (bf16) and TF32 had no CUDA row. One step on the device in each
    // precision against the CPU's float32 step at the same transforms and windows, within the
    // statistical band of the header (bfloat16's measured on the CPU's forward; TF32 keeps 10
    // mantissa bits to bfloat16's 7, so its draw is smaller and the band bounds it too). The rows
    // skip without CUDA (packaging/cuda-rows.txt lists them for the GPU visit).
    void cudaStepWithinBandOfCpuFloat32_data() {
        QTest::addColumn<QString>("precision");
        test::addDeviceColumn();
        for (const char* precision : {"bf16", "tf32"})
            for (const QString& dev : test::acceleratorDevices())
                QTest::addRow("lu mxfp4 %s %s", precision, qPrintable(dev)) << QString(precision) << dev;
    }
    void cudaStepWithinBandOfCpuFloat32() {
        QFETCH(QString, precision);
        QFETCH(QString, device);
        LATMIX_REQUIRE_DEVICE(dev, device);
        test::StoriesFixture f;
        if (!test::loadStoriesFixture(f)) LATMIX_DATA_SKIP("stories260K-hf not found (set LATMIX_DATA_DIR)");
        const auto& c = f.ck->config();
        const auto act = formatOf("mxfp4");
        const double tau = 1.5;
        const auto tokens = f.calib.narrow(0, 0, 2);
        fold::ModelTransforms cpuT = transformsOf(c, "learned-affine-lu");
        const double cpu = train::distillationStep(c, f.w, cpuT, act, tokens, tau, 0.0).objective;
        fold::ModelTransforms t = transformsOf(c, "learned-affine-lu");
        t.to(dev);
        const auto w = model::convertWeights(f.w, at::TensorOptions().dtype(at::kFloat).device(dev));
        double got = 0;
        {
            const compat::Tf32Matmuls tf32(precision == "tf32");
            got = train::distillationStep(c, w, t, act, tokens.to(dev), tau, 0.0, train::Objective::Kl, std::nullopt, {},
                                          precision == "bf16" ? at::kBFloat16 : at::kFloat)
                      .objective;
        }
        const double band = statisticalBand(f, cpuT, act, tau, tokens, tokens.numel());
        qInfo("%s on %s: KL %.6g, CPU float32 %.6g, |difference| %.3g, band %.3g", qPrintable(precision), qPrintable(device), got,
              cpu, std::fabs(got - cpu), band);
        QVERIFY(std::isfinite(got));
        QVERIFY2(std::fabs(got - cpu) <= band,
                 qPrintable(QString("%1: KL %2, CPU float32 %3, band %4").arg(precision).arg(got).arg(cpu).arg(band)));
    }

    // A bf16 run's loss curve beside the float32 run's from the same start: step k within the
    // rounding bound plus the parameters' drift (header). The runs learn the same way, and the
    // bf16 run's transforms stay float32.
    void bf16RunFollowsFloat32Run_data() {
        QTest::addColumn<QString>("kind");
        QTest::addColumn<QString>("format");
        QTest::newRow("latmix-lu mxfp4") << "learned-affine-lu" << "mxfp4";
        QTest::newRow("latmix-qr mxfp4") << "learned-affine-qr" << "mxfp4";
        QTest::newRow("latmix-lu none") << "learned-affine-lu" << "none";
    }
    void bf16RunFollowsFloat32Run() {
        QFETCH(QString, kind);
        QFETCH(QString, format);
        test::StoriesFixture f;
        if (!test::loadStoriesFixture(f)) LATMIX_DATA_SKIP("stories260K-hf not found (set LATMIX_DATA_DIR)");
        const auto& c = f.ck->config();
        const auto act = formatOf(format);
        const int steps = 6;
        auto run = [&](at::ScalarType compute) {
            fold::ModelTransforms t = transformsOf(c, kind);
            auto o = runOptions(steps, compute);
            o.activation = act;
            auto r = train::distill(c, f.w, f.calib, t, o);
            for (const auto& p : t.parameters()) QTEST_ASSERT(p.scalar_type() == at::kFloat);
            return r.history;
        };
        const auto fp32 = run(at::kFloat), bf16 = run(at::kBFloat16);
        QCOMPARE(int(bf16.size()), steps);

        // The first step's gradient (float32) for the drift term, and the logit errors at the start.
        fold::ModelTransforms t = transformsOf(c, kind);
        const auto o = runOptions(steps, at::kFloat);
        train::distillationStep(c, f.w, t, act, f.calib.narrow(0, 0, 8), o.temperature, o.volumeWeight);
        double gradL1 = 0;
        for (const auto& p : t.parameters()) gradL1 += p.grad().abs().sum().item<double>();
        // A step's windows are some 2 of the 8: its mean KL moves by at most the largest window's
        // bound; the band's d is measured over all 8, for a mean over a step's 2.
        double rounding = klChangeBound(f, t, act, o.temperature).max().item<double>();
        if (act) rounding = std::min(rounding, statisticalBand(f, t, act, o.temperature, f.calib, o.batch * f.calib.size(1)));
        for (int k = 0; k < steps; ++k) {
            const double a = fp32[size_t(k)].objective, b = bf16[size_t(k)].objective;
            const double bound = rounding + 2 * gradL1 * 2 * o.lr * k;
            qInfo("step %d: KL fp32 %.6g, bf16 %.6g, |difference| %.3g, bound %.3g", k + 1, a, b, std::fabs(a - b), bound);
            QVERIFY(std::isfinite(b));
            QVERIFY2(std::fabs(a - b) <= bound, qPrintable(QString("step %1: KL fp32 %2, bf16 %3, bound %4").arg(k + 1).arg(a).arg(b).arg(bound)));
        }
    }
};

QTEST_GUILESS_MAIN(TestMixedPrecision)
#include "tst_mixedprecision.moc"
