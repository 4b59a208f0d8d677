// util::findNonFinite: the count, the first NaN/Inf's index (row-major) and value of float32,
// float64, bfloat16 and float16 tensors, by the bit scan and by the at::isfinite path (also when
// the first one lies past a chunk boundary), against a float64 loop over the values; integer tensors are finite; the message is the one
// worked by hand.
#include "util/NonFinite.h"

#include <ATen/ATen.h>

#include <QtTest>

#include <cmath>
#include <limits>
#include <vector>

using latmix::util::findNonFinite;

Q_DECLARE_METATYPE(std::vector<std::int64_t>)

class TestNonFinite : public QObject {
    Q_OBJECT

private slots:
    void againstLoop_data() {
        QTest::addColumn<int>("dtype");
        QTest::addColumn<std::vector<std::int64_t>>("shape");
        QTest::addColumn<std::vector<std::int64_t>>("bad");    // flat positions made non-finite
        QTest::addColumn<std::int64_t>("chunk");
        const std::pair<const char*, at::ScalarType> types[] = {
            {"f32", at::kFloat}, {"f64", at::kDouble}, {"bf16", at::kBFloat16}, {"f16", at::kHalf}};
        for (const auto& [name, type] : types) {
            QTest::addRow("%s all finite", name) << int(type) << std::vector<std::int64_t>{3, 5, 4}
                                                 << std::vector<std::int64_t>{} << (std::int64_t(1) << 24);
            QTest::addRow("%s one nan, 3-D", name) << int(type) << std::vector<std::int64_t>{3, 5, 4}
                                                   << std::vector<std::int64_t>{37} << (std::int64_t(1) << 24);
            // Chunks of 7: the first bad value in the third chunk, others in later ones.
            QTest::addRow("%s past chunk boundaries", name) << int(type) << std::vector<std::int64_t>{6, 10}
                                                            << std::vector<std::int64_t>{15, 16, 41, 59} << std::int64_t(7);
            QTest::addRow("%s 1-D, last value", name) << int(type) << std::vector<std::int64_t>{33}
                                                      << std::vector<std::int64_t>{32} << std::int64_t(8);
        }
    }
    void againstLoop() {
        QFETCH(int, dtype);
        QFETCH(std::vector<std::int64_t>, shape);
        QFETCH(std::vector<std::int64_t>, bad);
        QFETCH(std::int64_t, chunk);
        at::Tensor d = at::randn(shape, at::TensorOptions().dtype(at::kDouble).device(at::kCPU));
        // NaN, +inf, -inf in turn at the chosen positions.
        const double kinds[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                                -std::numeric_limits<double>::infinity()};
        for (std::size_t i = 0; i < bad.size(); ++i) d.view({-1})[bad[i]].fill_(kinds[i % 3]);
        const at::Tensor t = d.to(static_cast<at::ScalarType>(dtype));

        // The reference: a loop over the values in float64, unravelled by hand.
        const at::Tensor ref = t.to(at::kDouble).contiguous().view({-1});
        std::int64_t count = 0, first = -1;
        for (std::int64_t i = 0; i < ref.numel(); ++i)
            if (!std::isfinite(ref.data_ptr<double>()[i])) {
                ++count;
                if (first < 0) first = i;
            }
        for (bool bitScan : {true, false}) {
        const auto r = findNonFinite(t, chunk, bitScan);
        QCOMPARE(r.numel, t.numel());
        QCOMPARE(r.count, count);
        QCOMPARE(bool(r), count > 0);
        QCOMPARE(count, std::int64_t(bad.size()));
        if (count == 0) {
            QVERIFY(r.firstIndex.empty());
            continue;
        }
        std::vector<std::int64_t> index(shape.size());
        std::int64_t stride = 1;
        for (std::size_t k = shape.size(); k-- > 0;) {
            index[k] = (first / stride) % shape[k];
            stride *= shape[k];
        }
        QCOMPARE(r.firstIndex, index);
        const double want = ref.data_ptr<double>()[first];
        QCOMPARE(std::isnan(r.firstValue), std::isnan(want));
        if (!std::isnan(want)) QCOMPARE(r.firstValue, want);
        }
    }

    void integersAreFinite() {
        const auto r = findNonFinite(at::arange(12, at::kLong).reshape({3, 4}));
        QVERIFY(!r);
        QCOMPARE(r.numel, std::int64_t(12));
        QVERIFY(!findNonFinite(at::Tensor()));
        QVERIFY(!findNonFinite(at::zeros({0, 4})));
    }

    // Worked by hand: [[1, 2, 3], [4, nan, 6], [inf, 8, 9], [10, 11, 12]] holds 2 non-finite
    // values, the first at row 1, column 1.
    void describesTheFirst() {
        at::Tensor t = at::arange(1, 13, at::kFloat).reshape({4, 3});
        t.index_put_({1, 1}, std::nanf(""));
        t.index_put_({2, 0}, INFINITY);
        QCOMPARE(QString::fromStdString(findNonFinite(t).describe()), QString("first at [1, 1] (nan), 2 of 12 values"));
        t.index_put_({1, 1}, -INFINITY);
        QCOMPARE(QString::fromStdString(findNonFinite(t).describe()), QString("first at [1, 1] (-inf), 2 of 12 values"));
        t.index_put_({1, 1}, 5.0f);
        QCOMPARE(QString::fromStdString(findNonFinite(t).describe()), QString("first at [2, 0] (inf), 1 of 12 values"));
    }
};

QTEST_GUILESS_MAIN(TestNonFinite)
#include "tst_nonfinite.moc"
