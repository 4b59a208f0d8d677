// WUSH's closed form (SPEC §2) against float64 computations of what it must satisfy, made here
// another way: after T both second moments are the same matrix, H diag(√λ) Hᵀ, whose √λ are the
// square roots of the eigenvalues of G_W G_X (a general, non-symmetric eigensolver here, where
// the code takes Cholesky and a symmetric one); T T⁻¹ = I; (W T⁻¹)(T x) = W x; the block moments
// are X_bᵀ X_b / n. Tolerances: float64's epsilon times the block size and the conditioning of
// the damped moments, measured here.
#include "TestSupport.h"

#include "transforms/Hadamard.h"
#include "transforms/Wush.h"

#include <ATen/ATen.h>
#include <QtTest>

#include <cmath>
#include <limits>

using namespace latmix;
using transforms::BlockDiagonal;

namespace {

// Rows with correlated channels, a few outlier channels and per-channel scales over 3 decades.
at::Tensor activations(std::int64_t n, std::int64_t d, std::uint64_t seed) {
    auto g = at::detail::createCPUGenerator(seed);
    auto mix = at::randn({d, d}, g, at::kDouble) * 0.3 + at::eye(d, at::kDouble);
    auto x = at::matmul(at::randn({n, d}, g, at::kDouble), mix);
    x *= at::pow(10.0, at::rand({d}, g, at::kDouble) * 3 - 1.5);
    x.select(1, 3).mul_(40);
    return x;
}

// 1 % of the mean diagonal on the diagonal (SPEC §2's damping).
at::Tensor damped(const at::Tensor& g) {
    return g + 0.01 * g.diagonal().mean() * at::eye(g.size(0), g.options());
}

double cond(const at::Tensor& a) {
    const auto s = at::linalg_svdvals(a);
    return (s.max() / s.min()).item<double>();
}

double maxAbs(const at::Tensor& a) { return a.abs().max().item<double>(); }

} // namespace

class TestWush : public QObject {
    Q_OBJECT
private slots:
    void closedForm_data() {
        QTest::addColumn<int>("width");
        QTest::addColumn<int>("block");
        QTest::addColumn<int>("rows");   // the weight's R
        QTest::addColumn<int>("tokens");
        QTest::newRow("32 x 2, R > B") << 64 << 32 << 96 << 400;
        QTest::newRow("16 x 3, R < B (rank-deficient G_W)") << 48 << 16 << 8 << 300;
        QTest::newRow("32 + tail 12 (Paley H_12)") << 44 << 32 << 50 << 300;
        QTest::newRow("32 + tail 8") << 40 << 32 << 64 << 200;
    }
    void closedForm() {
        QFETCH(int, width);
        QFETCH(int, block);
        QFETCH(int, rows);
        QFETCH(int, tokens);
        const auto x = activations(tokens, width, 7);
        auto g = at::detail::createCPUGenerator(11);
        const auto w = at::randn({rows, width}, g, at::kDouble) * 0.05;
        transforms::BlockMoments moments(width, block);
        moments.add(x.to(at::kFloat).narrow(0, 0, tokens / 2)); // two parts, any dtype
        moments.add(x.narrow(0, tokens / 2, tokens - tokens / 2));
        QCOMPARE(moments.rows(), int64_t(tokens));
        const auto t = transforms::wushTransform(moments.mean(), w, "test point");
        QVERIFY2(t.notes.empty(), qPrintable(QString::fromStdString(t.notes.empty() ? "" : t.notes.front())));
        const auto T = t.forward.dense(), Ti = t.inverse.dense();
        QCOMPARE(T.size(0), int64_t(width));
        const double eps = std::numeric_limits<double>::epsilon();
        std::int64_t start = 0;
        for (const auto& tb : t.forward.diagonalBlocks()) {
            const std::int64_t b = tb.size(0);
            // The moments: float32 rows (half of them) widen exactly, so X_bᵀX_b / n up to summation.
            const auto xb = x.narrow(1, start, b);
            const auto xb32 = at::cat({xb.narrow(0, 0, tokens / 2).to(at::kFloat).to(at::kDouble), xb.narrow(0, tokens / 2, tokens - tokens / 2)});
            const auto gx = at::matmul(xb32.t(), xb32) / double(tokens);
            const auto wb = w.narrow(1, start, b);
            const auto gw = at::matmul(wb.t(), wb) / double(rows);
            const auto gxd = damped(gx), gwd = damped(gw);
            const double tol = 1e3 * b * eps * cond(gxd) * cond(gwd);
            const auto tBlock = T.narrow(0, start, b).narrow(1, start, b), tInv = Ti.narrow(0, start, b).narrow(1, start, b);
            // T T⁻¹ = I.
            QVERIFY2(maxAbs(at::matmul(tBlock, tInv) - at::eye(b, at::kDouble)) < tol,
                     qPrintable(QString("block at %1: T T^-1 off I by %2").arg(start).arg(maxAbs(at::matmul(tBlock, tInv) - at::eye(b, at::kDouble)))));
            // Balanced: T G_X Tᵀ = T⁻ᵀ G_W T⁻¹.
            const auto mx = at::matmul(at::matmul(tBlock, gxd), tBlock.t());
            const auto mw = at::matmul(at::matmul(tInv.t(), gwd), tInv);
            QVERIFY2(maxAbs(mx - mw) <= tol * maxAbs(mx),
                     qPrintable(QString("block at %1: T G_X T^T and T^-T G_W T^-1 differ by %2 (scale %3, tol %4)")
                                    .arg(start).arg(maxAbs(mx - mw)).arg(maxAbs(mx)).arg(tol)));
            // ... = H diag(√λ) Hᵀ, λ the eigenvalues of G_W G_X, for the block's Hadamard H.
            const auto h = transforms::hadamardMatrix(b) / std::sqrt(double(b));
            const auto inner = at::matmul(at::matmul(h.t(), mx), h);
            QVERIFY2(maxAbs(inner - at::diag(inner.diagonal())) <= tol * maxAbs(mx), "H^T (T G_X T^T) H is not diagonal");
            const auto lambda = at::real(at::linalg_eigvals(at::matmul(gwd, gxd)));
            const auto want = std::get<0>(at::sort(lambda.sqrt()));
            const auto got = std::get<0>(at::sort(inner.diagonal()));
            QVERIFY2(maxAbs(got - want) <= tol * maxAbs(want),
                     qPrintable(QString("block at %1: spectrum off by %2").arg(start).arg(maxAbs(got - want))));
            start += b;
        }
        // The product is unchanged: (W T⁻¹)(T x) = W x.
        const auto wt = t.inverse.transposed().apply(w), xt = t.forward.apply(x);
        const auto y = at::matmul(x, w.t()), yt = at::matmul(xt, wt.t());
        QVERIFY(maxAbs(yt - y) <= 1e6 * eps * width * maxAbs(y) * cond(T));
        // T is data-aware and not orthogonal.
        QVERIFY(maxAbs(at::matmul(T, T.t()) - at::eye(width, at::kDouble)) > 0.1);
    }

    // A block whose activations are all zero has no second moment to balance: the identity's
    // damping regularises it, the run's log says so, and T stays finite and invertible.
    void zeroBlockIsRegularisedAndSaid() {
        auto x = activations(200, 64, 3);
        x.narrow(1, 32, 32).zero_();
        const auto w = at::randn({40, 64}, at::detail::createCPUGenerator(5), at::kDouble);
        transforms::BlockMoments m(64, 32);
        m.add(x);
        const auto t = transforms::wushTransform(m.mean(), w, "layers.0.mlp.down_proj.input");
        QCOMPARE(int(t.notes.size()), 1);
        QVERIFY2(QString::fromStdString(t.notes[0]).contains("block 1 of layers.0.mlp.down_proj.input") &&
                     QString::fromStdString(t.notes[0]).contains("zero"),
                 t.notes[0].c_str());
        const auto T = t.forward.dense(), Ti = t.inverse.dense();
        QVERIFY(at::isfinite(T).all().item<bool>());
        QVERIFY(maxAbs(at::matmul(T, Ti) - at::eye(64, at::kDouble)) < 1e-8);
    }

    void refusals() {
        transforms::BlockMoments m(32, 32);
        QVERIFY_THROWS_EXCEPTION(std::logic_error, m.mean()); // no rows
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, m.add(at::ones({4, 31})));
        m.add(at::randn({8, 32}));
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, transforms::wushTransform(m.mean(), at::ones({4, 16})));
    }
};

QTEST_APPLESS_MAIN(TestWush)
#include "tst_wush.moc"
