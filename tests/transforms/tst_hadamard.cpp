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
    // The product by H_n's construction against the dense product with hadamardMatrix(n) in
    // float64: rows r ↦ H·(d ⊙ r) and r ↦ d ⊙ (Hᵀ r). Every output is a signed sum of the n terms
    // d_j r_j (or r_j), so each stage of additions (log2 of the Sylvester part, one inner product of
    // at most the Paley order per dense factor) adds at most 2^-53 of Σ|terms|: the bound counts
    // the stages as log2(n) + 1 + the largest dense factor (1.01: second-order terms). A wrong
    // order, sign or transpose is O(|r|).
    void hadamardRowsMatchDense_data() {
        QTest::addColumn<qint64>("n");
        QTest::addColumn<qint64>("rows");
        for (qint64 n : {1, 2, 4, 32, 256, 2048}) QTest::addRow("Sylvester n=%lld", n) << n << qint64(n >= 256 ? 9 : 40);
        // Paley I 12, Paley II 36, Sylvester 8 ⊗ Paley 12, Sylvester 16 ⊗ Paley 28 (the Llama-3 8B
        // intermediate 14336 is 512 ⊗ 28), 20 ⊗ 20 style products of two non-Sylvester factors.
        for (qint64 n : {12, 36, 96, 448, 3584, 400}) QTest::addRow("%s n=%lld", hadamardConstruction(n).c_str(), n) << n << qint64(7);
    }
    void hadamardRowsMatchDense() {
        QFETCH(qint64, n);
        QFETCH(qint64, rows);
        const auto x = at::randn({rows, n}, at::kDouble) * at::exp(at::randn({rows, 1}, at::kDouble) * 3);
        const auto d = at::randn({n}, at::kDouble);
        const auto h = hadamardMatrix(n);
        const double stages = std::ceil(std::log2(double(n))) + 1 + 64; // 64 ≥ any dense factor here
        const auto check = [&](const at::Tensor& got, const at::Tensor& want, const at::Tensor& terms) {
            const auto bound = 1.01 * stages * std::ldexp(1.0, -53) * terms.abs().sum(1, true);
            return (got.view({rows, n}) - want).abs().le(bound).all().item<bool>();
        };
        const auto got = hadamardRows(x.view({rows, 1, n}), d);
        QVERIFY(got.sizes() == at::IntArrayRef({rows, 1, n}));
        QVERIFY(check(got, at::matmul(x * d, h.t()), x * d));
        // Rows times H·diag(d): each r ↦ d ⊙ (Hᵀ r); the bound scales with |d|.
        const auto back = hadamardRowsTransposed(x, d);
        QVERIFY(check(back / d, at::matmul(x, h), x));
        // H·diag(d)/√n orthogonal with |d| = 1/√n: the transposed product undoes the forward one.
        if (n > 2) {
            const auto s = at::sign(d) / std::sqrt(double(n));
            QVERIFY(check(hadamardRowsTransposed(hadamardRows(x, s), s), x, x * 2));
        }
    }
    // The diagonal blocks from the construction's entries equal the dense matrix's, exactly (±1).
    void diagonalBlocksMatchDense_data() {
        QTest::addColumn<qint64>("n");
        QTest::addColumn<qint64>("block");
        QTest::newRow("Sylvester 64, B 16") << qint64(64) << qint64(16);
        QTest::newRow("Paley 12, B 5 (tail 2)") << qint64(12) << qint64(5);
        QTest::newRow("8 x 12, B 32 (tail)") << qint64(96) << qint64(32);
        QTest::newRow("16 x 28, B 32") << qint64(448) << qint64(32);
        QTest::newRow("20 x 20, B 16 (tail)") << qint64(400) << qint64(16);
    }
    void diagonalBlocksMatchDense() {
        QFETCH(qint64, n);
        QFETCH(qint64, block);
        const auto want = latmix::transforms::BlockDiagonal::ofDense(hadamardMatrix(n), block);
        const auto got = hadamardDiagonalBlocks(n, block);
        QCOMPARE(got.blocks().defined(), want.blocks().defined());
        QCOMPARE(got.tail().defined(), want.tail().defined());
        if (want.blocks().defined()) QVERIFY(at::equal(got.blocks(), want.blocks().contiguous()));
        if (want.tail().defined()) QVERIFY(at::equal(got.tail(), want.tail()));
    }

    void hadamardRowsRefuseOtherOrders() {
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, hadamardRows(at::zeros({2, 12}, at::kDouble), at::ones({8}, at::kDouble)));
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, hadamardRows(at::zeros({2, 172}, at::kDouble), at::ones({172}, at::kDouble)));
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, hadamardRowsTransposed(at::zeros({2, 6}, at::kDouble), at::ones({6}, at::kDouble)));
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
