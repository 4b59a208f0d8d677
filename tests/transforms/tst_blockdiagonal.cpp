// The block-diagonal T3 applied block by block (transforms::BlockDiagonal) against the dense
// matrix in float64: x·Mᵀ, x·M, gradient, and the block Hadamard's structure.
#include "transforms/BlockDiagonal.h"
#include "transforms/FixedTransforms.h"
#include "transforms/Hadamard.h"

#include <ATen/ATen.h>
#include <QtTest>

#include <cmath>
#include <vector>

using namespace latmix;

class TestBlockDiagonal : public QObject {
    Q_OBJECT
private slots:
    void matchesDense_data() {
        QTest::addColumn<qint64>("n");
        QTest::addColumn<qint64>("block");
        QTest::addColumn<QList<qint64>>("lead"); // leading dimensions of x
        QTest::addColumn<qint64>("lastBlock");   // size of the smaller last block, 0 if none
        QTest::newRow("768/32, [5]") << qint64(768) << qint64(32) << QList<qint64>{5} << qint64(0);
        QTest::newRow("172/32 (last 12), [2,3]") << qint64(172) << qint64(32) << QList<qint64>{2, 3} << qint64(12);
        QTest::newRow("70/32 (last 6: identity), [4]") << qint64(70) << qint64(32) << QList<qint64>{4} << qint64(6);
        QTest::newRow("20/32 (one block of 20), [3]") << qint64(20) << qint64(32) << QList<qint64>{3} << qint64(20);
        QTest::newRow("64/16, [1,1,2]") << qint64(64) << qint64(16) << QList<qint64>{1, 1, 2} << qint64(0);
    }
    void matchesDense() {
        QFETCH(qint64, n);
        QFETCH(qint64, block);
        QFETCH(QList<qint64>, lead);
        QFETCH(qint64, lastBlock);
        const auto m = transforms::blockHadamard(n, block, 5);
        QCOMPARE(m.size(), n);
        QCOMPARE(m.tail().defined() ? m.tail().size(0) : 0, lastBlock);
        const at::Tensor d = m.dense();
        QVERIFY(at::equal(d, transforms::blockHadamardMatrix(n, block, 5)));
        // Orthogonal, and zero outside the diagonal blocks. float64 products of ≤ 32 terms here and
        // below: ≲ 32·2^-53·|x| ≈ 2e-14 for |x| ≲ 5, against 1e-12.
        QVERIFY((d.mm(d.t()) - at::eye(n, at::kDouble)).abs().max().item<double>() < 1e-12);
        at::Tensor mask = at::zeros({n, n}, at::kDouble);
        for (qint64 s = 0; s < n; s += block) {
            const qint64 e = std::min(n, s + block);
            mask.slice(0, s, e).slice(1, s, e).fill_(1.0);
        }
        QCOMPARE((d * (1 - mask)).abs().max().item<double>(), 0.0);

        std::vector<int64_t> shape(lead.begin(), lead.end());
        shape.push_back(n);
        const at::Tensor x = at::randn(shape, at::kDouble);
        const at::Tensor flat = x.reshape({-1, n});
        QVERIFY((m.apply(x).reshape({-1, n}) - flat.mm(d.t())).abs().max().item<double>() < 1e-12);
        QVERIFY((m.transposed().apply(x).reshape({-1, n}) - flat.mm(d)).abs().max().item<double>() < 1e-12);
        QVERIFY(m.apply(x).sizes() == x.sizes());

        // d/dx Σ g ⊙ (x Mᵀ) = g M.
        const at::Tensor xg = x.clone().requires_grad_(true);
        const at::Tensor g = at::randn(shape, at::kDouble);
        (m.apply(xg) * g).sum().backward();
        QVERIFY((xg.grad().reshape({-1, n}) - g.reshape({-1, n}).mm(d)).abs().max().item<double>() < 1e-12);

        // float32 on the same data: within float32 rounding of the float64 result (x and ±1/√B
        // rounded, B ≤ 32-term sums: ~2^-24·√B ≈ 3e-7 of |y| ≲ 5; 1e-5 is ~5× the largest expected).
        const auto m32 = m.to(at::TensorOptions().dtype(at::kFloat));
        QVERIFY((m32.apply(x.to(at::kFloat)).to(at::kDouble).reshape({-1, n}) - flat.mm(d.t())).abs().max().item<double>() < 1e-5);
    }

    // The signs blockHadamard records for the fused T3 kernel: each block is exactly
    // (H_B/√B)·diag(s_b) with Sylvester H_B, in float64; none where a smaller last block exists.
    void hadamardSigns_data() {
        QTest::addColumn<qint64>("n");
        QTest::addColumn<qint64>("block");
        QTest::addColumn<bool>("recorded");
        QTest::newRow("768/32") << qint64(768) << qint64(32) << true;
        QTest::newRow("64/16") << qint64(64) << qint64(16) << true;
        QTest::newRow("256/64") << qint64(256) << qint64(64) << true;
        QTest::newRow("172/32 (last 12)") << qint64(172) << qint64(32) << false;
        QTest::newRow("96/12 (Paley)") << qint64(96) << qint64(12) << false;
    }
    void hadamardSigns() {
        QFETCH(qint64, n);
        QFETCH(qint64, block);
        QFETCH(bool, recorded);
        const auto m = transforms::blockHadamard(n, block, 11);
        QCOMPARE(m.hadamardSigns().defined(), recorded);
        if (!recorded) return;
        const at::Tensor s = m.hadamardSigns().to(at::kDouble);
        QCOMPARE(s.numel(), n);
        QVERIFY(at::equal(s.abs(), at::ones({n}, at::kDouble)));
        QVERIFY(s.lt(0).any().item<bool>() && s.gt(0).any().item<bool>()); // a real draw, not all +1
        const at::Tensor h = transforms::hadamardMatrix(block) / std::sqrt(double(block));
        for (qint64 b = 0; b < n / block; ++b)
            QVERIFY(at::equal(m.blocks()[b], h * s.narrow(0, b * block, block).unsqueeze(0)));
        QVERIFY(at::equal(m.to(at::kFloat).hadamardSigns(), m.hadamardSigns())); // to() keeps them
        QVERIFY(!m.transposed().hadamardSigns().defined());                       // diag(s)·H is another form
    }

    void undefinedIsIdentity() {
        const transforms::BlockDiagonal none;
        QVERIFY(!none.defined());
        const at::Tensor x = at::randn({3, 7});
        QVERIFY(at::equal(none.apply(x), x));
    }

    void wrongWidthThrows() {
        const auto m = transforms::blockHadamard(64, 32, 0);
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, m.apply(at::zeros({2, 63}, at::kDouble)));
    }
};

QTEST_APPLESS_MAIN(TestBlockDiagonal)
#include "tst_blockdiagonal.moc"
