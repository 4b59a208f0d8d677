// train/KlKernelCpu: the distillation loss's fused CPU kernel against float64 references.
// exp and expm1 within a few ulp of libm's double results; for rows of logits a, b (teacher,
// student), p = softmax(a), q = softmax(b): the log-sum-exps, Σp, Σp·d, Σp·expm1(−d) (d = a − b)
// and the gradient scale·(q − p) against the same quantities in float64, with bounds from the
// float32 arithmetic (a few roundings per term, partial sums of 256 values). Vocabulary sizes that
// are not multiples of the vector width exercise the tails; CI reruns this on the baseline path.
#include "train/KlKernelCpu.h"

#include <ATen/ATen.h>

#include <QtTest>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

using namespace latmix::train::cpu;

namespace {
constexpr double kEps = std::numeric_limits<float>::epsilon(); // 2^-23
} // namespace

class TestKlKernel : public QObject {
    Q_OBJECT

private slots:
    void expAndExpm1_data() {
        QTest::addColumn<bool>("minus1");
        QTest::addColumn<double>("lo");
        QTest::addColumn<double>("hi");
        QTest::newRow("exp, softmax range") << false << -87.0 << 0.0;
        QTest::newRow("exp, positive") << false << 0.0 << 88.0;
        QTest::newRow("expm1, small") << true << -0.6 << 0.6;
        QTest::newRow("expm1, wide") << true << -30.0 << 30.0;
        QTest::newRow("expm1, tiny") << true << -1e-5 << 1e-5;
    }
    void expAndExpm1() {
        QFETCH(bool, minus1);
        QFETCH(double, lo);
        QFETCH(double, hi);
        const std::int64_t n = 100003; // odd: the tail runs too
        std::vector<float> x(n), y(n);
        for (std::int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(lo + (hi - lo) * double(i) / double(n - 1));
        (minus1 ? expm1Values : expValues)(x.data(), y.data(), n);
        double worst = 0;
        for (std::int64_t i = 0; i < n; ++i) {
            const double want = minus1 ? std::expm1(double(x[i])) : std::exp(double(x[i]));
            if (want == 0) continue;
            worst = std::max(worst, std::abs(double(y[i]) - want) / std::abs(want));
        }
        // Cephes' expf is about 1 ulp; expm1 from exp − 1 at |x| ≥ 0.5 adds up to 2.5 ulp.
        QVERIFY2(worst <= 4 * kEps, qPrintable(QString("worst relative error %1 (%2 ulp)").arg(worst).arg(worst / kEps)));
    }

    void klRowsMatchFloat64_data() {
        QTest::addColumn<int>("rows");
        QTest::addColumn<int>("vocab");
        QTest::addColumn<double>("spread"); // student = teacher + spread·noise
        QTest::newRow("close, vocab 32000") << 7 << 32000 << 0.01;
        QTest::newRow("far, vocab 32000") << 5 << 32000 << 3.0;
        QTest::newRow("close, odd vocab 1037") << 9 << 1037 << 0.05;
        QTest::newRow("identical, vocab 513") << 3 << 513 << 0.0;
        QTest::newRow("one row, vocab 5") << 1 << 5 << 1.0;
    }
    void klRowsMatchFloat64() {
        QFETCH(int, rows);
        QFETCH(int, vocab);
        QFETCH(double, spread);
        at::manual_seed(7);
        const std::int64_t stride = vocab + 3; // rows apart by more than their length, as in a block's view
        const at::Tensor teacher = at::randn({rows, vocab}, at::kFloat) * 4;
        const at::Tensor student = teacher + at::randn({rows, vocab}, at::kFloat) * spread;
        at::Tensor a = at::zeros({rows, stride}, at::kFloat), b = a.clone();
        a.narrow(1, 0, vocab).copy_(teacher);
        b.narrow(1, 0, vocab).copy_(student);
        const float scale = 0.125f;
        std::vector<float> lseA(rows), lseB(rows), mass(rows), meanD(rows), expD(rows);
        klRows(a.data_ptr<float>(), b.data_ptr<float>(), rows, vocab, stride, scale,
               {lseA.data(), lseB.data(), mass.data(), meanD.data(), expD.data()});

        const at::Tensor ta = teacher.to(at::kDouble), sb = student.to(at::kDouble);
        const at::Tensor la = at::logsumexp(ta, 1), lb = at::logsumexp(sb, 1);
        const at::Tensor p = (ta - la.unsqueeze(1)).exp(), q = (sb - lb.unsqueeze(1)).exp();
        const at::Tensor d = ta - sb;
        const at::Tensor wantMeanD = (p * d).sum(1), wantExpD = (p * at::expm1(-d)).sum(1);
        const at::Tensor grad = a.narrow(1, 0, vocab).to(at::kDouble);
        for (int r = 0; r < rows; ++r) {
            const double absD = (p[r] * d[r].abs()).sum().item<double>();
            const double absE = (p[r] * at::expm1(-d[r]).abs()).sum().item<double>();
            const double logitScale = std::max({1.0, ta[r].abs().max().item<double>(), sb[r].abs().max().item<double>()});
            // log-sum-exp: the maximum plus log of a sum of exps each within ~2 ulp
            QVERIFY(std::abs(lseA[r] - la[r].item<double>()) <= 8 * kEps * logitScale);
            QVERIFY(std::abs(lseB[r] - lb[r].item<double>()) <= 8 * kEps * logitScale);
            // The sums. A term p·x carries p's error (exp's argument a − max rounds at ε·|a|, exp
            // and 1/Σ add a few ulp: 8ε·logitScale relative) and its own roundings; the float
            // partial sums of 256 values add at most 256ε of the magnitudes, 32ε in practice
            // bounds them with room (the terms have mixed signs, random order).
            const double tolMass = 8 * kEps * logitScale + 32 * kEps;
            const double tolMeanD = (8 * kEps * logitScale + 32 * kEps) * absD;
            const double tolExpD = (8 * kEps * logitScale + 32 * kEps) * absE;
            QVERIFY2(std::abs(mass[r] - 1.0) <= tolMass, qPrintable(QString::number(mass[r] - 1.0)));
            QVERIFY2(std::abs(meanD[r] - wantMeanD[r].item<double>()) <= tolMeanD + 1e-37,
                     qPrintable(QString("row %1: %2 vs %3").arg(r).arg(meanD[r]).arg(wantMeanD[r].item<double>())));
            QVERIFY2(std::abs(expD[r] - wantExpD[r].item<double>()) <= tolExpD + 1e-37,
                     qPrintable(QString("row %1: %2 vs %3").arg(r).arg(expD[r]).arg(wantExpD[r].item<double>())));
            // the gradient: scale·(q − p) elementwise, p and q each within 8ε·logitScale relative
            const at::Tensor want = (q[r] - p[r]) * double(scale);
            const at::Tensor bound = (p[r] + q[r]) * double(scale) * (8 * kEps * logitScale) + 1e-38;
            const double excess = ((grad[r] - want).abs() - bound).max().item<double>();
            QVERIFY2(excess <= 0, qPrintable(QString("row %1: gradient off by %2 beyond its bound").arg(r).arg(excess)));
            // KL itself (the loss reported) from the kernel's sums as DistillationStep.cpp forms it,
            // against Σ p (log p − log q) in float64: the sums' bounds carried through the formula
            // (1/mass and log1p are well conditioned here: mass ≈ 1, expD/mass > −1).
            const double m = wantExpD[r].item<double>();
            const double kl = double(meanD[r]) / mass[r] + std::log1p(double(expD[r]) / mass[r]);
            const double wantKl = (p[r] * (p[r].log() - q[r].log())).sum().item<double>();
            const double tolKl = tolMeanD + tolExpD / (1 + m) + (absD + absE / (1 + m)) * tolMass + 4 * kEps * std::abs(wantKl);
            QVERIFY2(std::abs(kl - wantKl) <= tolKl + 1e-37,
                     qPrintable(QString("row %1: KL %2 vs %3 (bound %4)").arg(r).arg(kl).arg(wantKl).arg(tolKl)));
        }
    }
};

QTEST_GUILESS_MAIN(TestKlKernel)
#include "tst_klkernel.moc"
