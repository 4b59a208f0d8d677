// Element codes, nibble packing and packed MX tensors (SPEC §1 packing rules).
#include "TestSupport.h"

#include "mx/MxCodes.h"
#include "mx/MxPack.h"
#include "mx/MxQuantizer.h"
#include "mx/MxReference.h"

#include <QtTest>

#include <algorithm>
#include <cmath>
#include <random>

using namespace latmix::mx;
using namespace latmix::test;

Q_DECLARE_METATYPE(ElementFormat)

class TestMxPack : public QObject {
    Q_OBJECT
private slots:
    // SPEC §1: E2M1 codes 0..7 = {0, .5, 1, 1.5, 2, 3, 4, 6}, bit 3 the sign.
    void e2m1CodeTable_data() {
        QTest::addColumn<int>("code");
        QTest::addColumn<double>("value");
        const double mags[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
        for (int c = 0; c < 16; ++c)
            QTest::addRow("code %d", c) << c << (c & 8 ? -mags[c & 7] : mags[c & 7]);
    }
    void e2m1CodeTable() {
        QFETCH(int, code);
        QFETCH(double, value);
        QCOMPARE(decodeElement(static_cast<std::uint8_t>(code), ElementFormat::E2M1), value);
        QCOMPARE(int(encodeElement(decodeElement(static_cast<std::uint8_t>(code), ElementFormat::E2M1), ElementFormat::E2M1)), code);
    }

    // Every code of every format decodes to a grid value that encodes back to the same code
    // (NaN/Inf codes of the FP8 formats excepted), and that value is fixed by the reference.
    void everyCodeRoundTrips_data() {
        QTest::addColumn<ElementFormat>("format");
        QTest::newRow("e2m1") << ElementFormat::E2M1;
        QTest::newRow("e2m3") << ElementFormat::E2M3;
        QTest::newRow("e3m2") << ElementFormat::E3M2;
        QTest::newRow("e4m3") << ElementFormat::E4M3;
        QTest::newRow("e5m2") << ElementFormat::E5M2;
        QTest::newRow("int8") << ElementFormat::Int8;
        QTest::newRow("int4") << ElementFormat::Int4;
    }
    void everyCodeRoundTrips() {
        QFETCH(ElementFormat, format);
        const int codes = 1 << elementSpec(format).bits;
        const ElementCodebook book(format);
        std::vector<double> values;
        int checked = 0;
        for (int c = 0; c < codes; ++c) {
            const double v = decodeElement(static_cast<std::uint8_t>(c), format);
            if (!std::isfinite(v)) continue;
            if (format == ElementFormat::Int8 && c == 0x80) continue; // -128/64: outside the symmetric range
            QCOMPARE(ref::quantizeElement(v, format), v);
            QCOMPARE(int(encodeElement(v, format)), c);
            double got = 1;
            QCOMPARE(int(book.nearest(v, &got)), c); // the codebook packing uses: the same code
            QCOMPARE(got, v);
            QCOMPARE(std::signbit(got), std::signbit(v));
            ++checked;
            values.push_back(v);
        }
        QVERIFY(checked >= codes - 8); // E5M2 has 8 Inf/NaN codes
        // Off the grid, a quarter of the way from one grid value to the next (no tie): the nearest
        // code's value is the reference quantizer's round to nearest.
        std::sort(values.begin(), values.end());
        for (size_t i = 0; i + 1 < values.size(); ++i)
            for (double f : {0.25, 0.75}) {
                const double x = values[i] + f * (values[i + 1] - values[i]);
                double got = 0;
                book.nearest(x, &got);
                QCOMPARE(got, ref::quantizeElement(x, format));
            }
    }

    void nibbleLayout() {
        // Even column in the low nibble; an odd length leaves the last high nibble zero.
        auto codes = at::tensor({1, 2, 3, 4, 5, 0xF, 0x9}, at::kByte).reshape({1, 7});
        auto packed = packNibbles(codes);
        QCOMPARE(packed.size(1), int64_t(4));
        const std::uint8_t* p = packed.data_ptr<std::uint8_t>();
        QCOMPARE(int(p[0]), 0x21);
        QCOMPARE(int(p[1]), 0x43);
        QCOMPARE(int(p[2]), 0xF5);
        QCOMPARE(int(p[3]), 0x09);
        QVERIFY(at::equal(unpackNibbles(packed, 7), codes));
    }

    void e8m0Bytes() {
        QCOMPARE(decodeE8M0(127), 1.0);
        QCOMPARE(decodeE8M0(0), std::ldexp(1.0, -127));
        QCOMPARE(decodeE8M0(254), std::ldexp(1.0, 127));
        QVERIFY(std::isnan(decodeE8M0(0xFF)));
        QCOMPARE(int(encodeE8M0(-3)), 124);
    }

    void packMatchesFakeQuantize_data() {
        QTest::addColumn<QString>("format");
        QTest::addColumn<QString>("mode");
        QTest::addColumn<int>("cols");
        for (const auto& f : allFormats()) {
            QTest::addRow("%s even cols", f.name) << QString(f.name) << "floor" << 96;
            QTest::addRow("%s odd cols", f.name) << QString(f.name) << "floor" << 75;
        }
        // The scale bytes must hold each block's own choice of candidate.
        QTest::newRow("nvfp4 four-over-six even cols") << "nvfp4" << "four-over-six" << 96;
        QTest::newRow("nvfp4 four-over-six odd cols") << "nvfp4" << "four-over-six" << 75;
    }
    void packMatchesFakeQuantize() {
        QFETCH(QString, format);
        QFETCH(QString, mode);
        QFETCH(int, cols);
        const MxConfig c = makeConfig(parseFormat(format.toStdString()), parseScaleMode(mode.toStdString()));
        auto x = at::randn({5, cols}) * at::exp(at::randn({5, cols}));
        x.index_put_({1, 2}, std::numeric_limits<float>::quiet_NaN());
        x.index_put_({2, 0}, 300.0f);
        const PackedTensor p = pack(x, c);
        const bool fourBit = elementSpec(c.element()).bits == 4;
        QCOMPARE(p.codes.size(1), fourBit ? int64_t((cols + 1) / 2) : int64_t(cols));
        QCOMPARE(p.scales.size(1), int64_t((cols + c.blockSize - 1) / c.blockSize));
        const auto got = toVector(unpack(p)), want = toVector(fakeQuantize(x, c));
        // Value equality: INT8 is two's complement and has no -0, which fake quantization keeps.
        for (size_t i = 0; i < got.size(); ++i)
            QVERIFY2(got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i])),
                     qPrintable(describeMismatch(toVector(x), got, want, static_cast<long long>(i))));
        // The NaN block is marked in its scale byte (E8M0 0xFF; NVFP4's E4M3 NaN 0x7F).
        QCOMPARE(int(p.scales[1][0].item<std::uint8_t>()), c.isNvfp4() ? 0x7F : 0xFF);
        if (!c.isNvfp4()) {
            // Scale bytes are 127 + the reference's shared exponent.
            auto row = toVector(x[2].slice(0, 0, c.blockSize));
            double amax = 0;
            for (float v : row) amax = std::max(amax, std::fabs(double(v)));
            QCOMPARE(int(p.scales[2][0].item<std::uint8_t>()),
                     127 + ref::sharedExponent(amax, c.element(), c.scaleMode));
        }
    }
};

QTEST_APPLESS_MAIN(TestMxPack)
#include "tst_mxpack.moc"
