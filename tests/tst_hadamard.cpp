// Exact Hadamard matrices (SPEC §2): Sylvester, Paley I/II over GF(q), Kronecker products.
#include "transforms/Hadamard.h"

#include <ATen/ATen.h>
#include <QtTest>

#include <cmath>
#include <stdexcept>
#include <string>

using namespace latmix::transforms;

class TestHadamard : public QObject {
    Q_OBJECT
private slots:
    // H Hᵀ = n I exactly in float64 (sums of ±1 products are exact integers) and every entry ±1.
    void orthogonalExactly_data() {
        QTest::addColumn<qint64>("n");
        QTest::addColumn<QString>("construction"); // substring of hadamardConstruction(n)
        QTest::newRow("1") << qint64(1) << "Sylvester 2^0";
        QTest::newRow("2") << qint64(2) << "Sylvester 2^1";
        QTest::newRow("4") << qint64(4) << "Sylvester 2^2";
        QTest::newRow("12 Paley I q=11") << qint64(12) << "Paley I (q=11)";
        QTest::newRow("20 Paley I q=19") << qint64(20) << "Paley I (q=19)";
        QTest::newRow("28 Paley I q=27=3^3") << qint64(28) << "Paley I (q=27)";
        QTest::newRow("36 Paley II q=17") << qint64(36) << "Paley II (q=17)";
        QTest::newRow("40 = 2 x 20") << qint64(40) << "Paley I (q=19)";
        QTest::newRow("52 Paley II q=25=5^2") << qint64(52) << "Paley II (q=25)";
        QTest::newRow("60 Paley I q=59") << qint64(60) << "Paley I (q=59)";
        QTest::newRow("100 Paley II q=49=7^2") << qint64(100) << "Paley II (q=49)";
        QTest::newRow("288 = 36 x 8") << qint64(288) << "Sylvester 2^3 ⊗ Paley II (q=17)";
        QTest::newRow("576 = 36 x 16") << qint64(576) << "Sylvester 2^4 ⊗ Paley II (q=17)";
        QTest::newRow("768 = 12 x 64") << qint64(768) << "Sylvester 2^6 ⊗ Paley I (q=11)";
        QTest::newRow("1536 = 12 x 128") << qint64(1536) << "Sylvester 2^7 ⊗ Paley I (q=11)";
        QTest::newRow("3584 = 28 x 128") << qint64(3584) << "Sylvester 2^7 ⊗ Paley I (q=27)";
        QTest::newRow("5120 = 20 x 256") << qint64(5120) << "Sylvester 2^8 ⊗ Paley I (q=19)";
    }
    void orthogonalExactly() {
        QFETCH(qint64, n);
        QFETCH(QString, construction);
        QVERIFY(hasHadamard(n));
        const QString how = QString::fromStdString(hadamardConstruction(n));
        QVERIFY2(how.contains(construction), qPrintable(how));
        const at::Tensor h = hadamardMatrix(n);
        QCOMPARE(h.scalar_type(), at::kDouble);
        QCOMPARE(h.size(0), n);
        QCOMPARE(h.size(1), n);
        QVERIFY(at::all(at::abs(h) == 1).item<bool>());
        // exact: ±1 entries, integer sums ≤ n are exact in float64 in any order
        const auto gram = at::matmul(h, h.t());
        QVERIFY(at::equal(gram, at::eye(n, at::kDouble) * static_cast<double>(n)));
    }

    // Every order up to 256 that has a construction gives an exact Hadamard matrix; the
    // orders that have none are exactly the ones this builder cannot reach.
    void everySmallOrder() {
        int built = 0;
        for (std::int64_t n = 1; n <= 256; ++n) {
            if (!hasHadamard(n)) {
                QVERIFY2(n > 2 && (n % 4 != 0 || n == 92 || n == 116 || n == 156 || n == 172 || n == 184 || n == 188 ||
                                   n == 232 || n == 236),
                         qPrintable(QString("no construction for %1").arg(n)));
                continue;
            }
            const at::Tensor h = hadamardMatrix(n);
            QVERIFY(at::all(at::abs(h) == 1).item<bool>());
            QVERIFY2(at::equal(at::matmul(h, h.t()), at::eye(n, at::kDouble) * static_cast<double>(n)), // integers: exact
                     qPrintable(QString("order %1 (%2)").arg(n).arg(QString::fromStdString(hadamardConstruction(n)))));
            ++built;
        }
        QCOMPARE(built, 2 + 64 - 8); // 1, 2 and the multiples of 4 except the eight above
    }

    // The paper's H_4 (Sylvester, natural order): rows ++++, +-+-, ++--, +--+.
    void sylvesterNaturalOrder() {
        const double want[4][4] = {{1, 1, 1, 1}, {1, -1, 1, -1}, {1, 1, -1, -1}, {1, -1, -1, 1}};
        const at::Tensor h = hadamardMatrix(4);
        for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 4; ++j) QCOMPARE(h[i][j].item<double>(), want[i][j]);
    }

    // No construction: an error naming the size and pointing to block mode.
    // The fast Walsh–Hadamard transform against the dense product with hadamardMatrix(n) in
    // float64: rows r ↦ H·(d ⊙ r). Error: log2(n) rounded additions and one product, each ≤ 2^-53
    // relative to the row's Σ|d_j r_j| (1.01: second-order terms); a wrong order or sign is O(|r|).
    void walshHadamardRowsMatchesDense_data() {
        QTest::addColumn<qint64>("n");
        QTest::addColumn<qint64>("rows");
        for (qint64 n : {1, 2, 4, 32, 256, 2048}) QTest::addRow("n=%lld", n) << n << qint64(n >= 256 ? 9 : 40);
    }
    void walshHadamardRowsMatchesDense() {
        QFETCH(qint64, n);
        QFETCH(qint64, rows);
        const auto x = at::randn({rows, n}, at::kDouble) * at::exp(at::randn({rows, 1}, at::kDouble) * 3);
        const auto d = at::randn({n}, at::kDouble);
        const auto got = walshHadamardRows(x.view({rows, 1, n}), d);
        QVERIFY(got.sizes() == at::IntArrayRef({rows, 1, n}));
        const auto want = at::matmul(x * d, hadamardMatrix(n).t());
        const double stages = std::log2(double(n));
        const auto bound = 1.01 * (stages + 1) * std::ldexp(1.0, -53) * (x * d).abs().sum(1, true);
        QVERIFY((got.view({rows, n}) - want).abs().le(bound).all().item<bool>());
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, walshHadamardRows(at::zeros({2, 12}, at::kDouble), at::ones({12}, at::kDouble)));
    }

    void noConstruction_data() {
        QTest::addColumn<qint64>("n");
        QTest::newRow("172 (stories260K intermediate)") << qint64(172);
        QTest::newRow("6") << qint64(6);
        QTest::newRow("22") << qint64(22);
        QTest::newRow("0") << qint64(0);
    }
    void noConstruction() {
        QFETCH(qint64, n);
        QVERIFY(!hasHadamard(n));
        QVERIFY(hadamardConstruction(n).empty());
        try {
            hadamardMatrix(n);
            QFAIL("expected std::invalid_argument");
        } catch (const std::invalid_argument& e) {
            const QString msg = QString::fromUtf8(e.what());
            QVERIFY2(msg.contains(QString::number(n)), qPrintable(msg));
            QVERIFY2(msg.contains("block"), qPrintable(msg));
            QVERIFY2(msg.contains("block-hadamard"), qPrintable(msg));
        }
    }
};

QTEST_APPLESS_MAIN(TestHadamard)
#include "tst_hadamard.moc"
