// The distillation's AdamW (train/AdamW, written out so its state saves the same way on libtorch
// 1.13 and 2.x) against libtorch's own torch::optim::AdamW: the same parameters, gradients and
// per-step learning rates (a warmup and cosine decay, as the training's schedule) give the same
// parameters after every step, in float64; and the first step worked by hand.
#include "train/AdamW.h"

#include <torch/torch.h>
// Qt after torch: Qt's `slots` macro breaks ATen headers.
#include <QtTest>

#include <cmath>

using namespace latmix;

class TestAdamW : public QObject {
    Q_OBJECT

private slots:
    void matchesTorchAdamW_data() {
        QTest::addColumn<double>("weightDecay");
        QTest::newRow("no decay") << 0.0;
        QTest::newRow("PyTorch's default 0.01") << 0.01;
        QTest::newRow("strong 0.5") << 0.5;
    }
    void matchesTorchAdamW() {
        QFETCH(double, weightDecay);
        torch::manual_seed(3);
        const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
        std::vector<torch::Tensor> ours = {torch::randn({4, 5}, f64), torch::randn({7}, f64)};
        std::vector<torch::Tensor> theirs;
        for (auto& p : ours) {
            theirs.push_back(p.clone().set_requires_grad(true));
            p.set_requires_grad(true);
        }
        train::AdamW a(ours, weightDecay);
        torch::optim::AdamW b(theirs, torch::optim::AdamWOptions(1e-3).weight_decay(weightDecay));
        for (int step = 0; step < 30; ++step) {
            const double lr = 1e-2 * (step < 5 ? 0.1 + 0.9 * step / 5.0 : 0.5 * (1 + std::cos(M_PI * (step - 5) / 25.0)));
            static_cast<torch::optim::AdamWOptions&>(b.param_groups()[0].options()).lr(lr);
            for (size_t i = 0; i < ours.size(); ++i) {
                const auto g = torch::randn(ours[i].sizes(), f64);
                ours[i].mutable_grad() = g.clone();
                theirs[i].mutable_grad() = g.clone();
            }
            a.step(lr);
            b.step();
            // float64: the two updates differ in operation order only, ~2^-53 of |p| ≈ 1 a step
            for (size_t i = 0; i < ours.size(); ++i)
                QVERIFY2(torch::allclose(ours[i], theirs[i], 0, 1e-12),
                         qPrintable(QString("step %1 parameter %2: %3").arg(step).arg(i).arg((ours[i] - theirs[i]).abs().max().item<double>())));
        }
        QCOMPARE(int(a.t), 30);
    }

    // Step 1 by hand: m = 0.1 g, v = 0.001 g², bias corrections 0.1 and 0.001, so the update is
    // lr g / (|g| + eps): p = 2 (1 - 0.1 x 0.5) - 0.1 x 3 / (3 + 1e-8) = 1.9 - 0.1 (1 - 3.3e-9).
    void firstStepByHand() {
        auto p = torch::full({1}, 2.0, torch::TensorOptions().dtype(torch::kDouble)).set_requires_grad(true);
        train::AdamW a({p}, 0.5);
        p.mutable_grad() = torch::full({1}, 3.0, torch::TensorOptions().dtype(torch::kDouble));
        a.step(0.1);
        QVERIFY(std::abs(p.item<double>() - (1.9 - 0.1 * 3 / (3 + 1e-8))) < 1e-15); // a few ulps of 1.9 (2.2e-16)
        a.zeroGrad();
        QVERIFY(!p.grad().defined());
        // A parameter without a gradient is left as it is (decay included). The step count is one
        // for all parameters (where PyTorch counts per parameter): the training gives every
        // parameter a gradient at every step, so the two agree there.
        const double before = p.item<double>();
        a.step(0.1);
        QCOMPARE(p.item<double>(), before);
        QCOMPARE(int(a.t), 2);
    }
};

QTEST_GUILESS_MAIN(TestAdamW)
#include "tst_adamw.moc"
