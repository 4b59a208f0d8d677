// Golden values for the scalar MX reference (SPEC §1), worked out by hand from the element
// grids: each grid's spacing in the binade of the value, ties to the even code, saturation.
#include "mx/MxReference.h"

#include <QtTest>

#include <algorithm>
#include <cmath>
#include <limits>

using namespace latmix::mx;

Q_DECLARE_METATYPE(ElementFormat)
Q_DECLARE_METATYPE(ScaleMode)

class TestMxReference : public QObject {
    Q_OBJECT
private slots:
    void elementRounding_data() {
        QTest::addColumn<ElementFormat>("format");
        QTest::addColumn<double>("input");
        QTest::addColumn<double>("expected");
        const auto e2m1 = ElementFormat::E2M1;
        // SPEC §1 ties of E2M1 (grid 0, .5, 1, 1.5, 2, 3, 4, 6)
        QTest::newRow("e2m1 0.25 tie -> 0") << e2m1 << 0.25 << 0.0;
        QTest::newRow("e2m1 0.75 tie -> 1") << e2m1 << 0.75 << 1.0;
        QTest::newRow("e2m1 1.25 tie -> 1") << e2m1 << 1.25 << 1.0;
        QTest::newRow("e2m1 1.75 tie -> 2") << e2m1 << 1.75 << 2.0;
        QTest::newRow("e2m1 2.5 tie -> 2") << e2m1 << 2.5 << 2.0;
        QTest::newRow("e2m1 3.5 tie -> 4") << e2m1 << 3.5 << 4.0;
        QTest::newRow("e2m1 5 tie -> 4") << e2m1 << 5.0 << 4.0;
        QTest::newRow("e2m1 7 tie -> 6") << e2m1 << 7.0 << 6.0;
        QTest::newRow("e2m1 -2.5 tie -> -2") << e2m1 << -2.5 << -2.0;
        QTest::newRow("e2m1 -0.3 -> -0.5") << e2m1 << -0.3 << -0.5;
        QTest::newRow("e2m1 5.1 -> 6") << e2m1 << 5.1 << 6.0;
        QTest::newRow("e2m1 100 saturates") << e2m1 << 100.0 << 6.0;
        QTest::newRow("e2m1 -inf saturates") << e2m1 << -std::numeric_limits<double>::infinity() << -6.0;
        // E2M3: subnormal step 1/8, max 7.5
        QTest::newRow("e2m3 1/16 tie -> 0") << ElementFormat::E2M3 << 0.0625 << 0.0;
        QTest::newRow("e2m3 3/16 tie -> 1/4") << ElementFormat::E2M3 << 0.1875 << 0.25;
        QTest::newRow("e2m3 5.25 -> 5.0") << ElementFormat::E2M3 << 5.25 << 5.0;
        QTest::newRow("e2m3 7.75 saturates") << ElementFormat::E2M3 << 7.75 << 7.5;
        // E3M2: subnormal step 1/16, max 28
        QTest::newRow("e3m2 1/32 tie -> 0") << ElementFormat::E3M2 << 1.0 / 32 << 0.0;
        QTest::newRow("e3m2 3/32 tie -> 1/8") << ElementFormat::E3M2 << 3.0 / 32 << 0.125;
        QTest::newRow("e3m2 18 tie -> 16") << ElementFormat::E3M2 << 18.0 << 16.0;
        QTest::newRow("e3m2 30 saturates") << ElementFormat::E3M2 << 30.0 << 28.0;
        // E4M3: subnormal step 2^-9, max 448 (no 480: that code is NaN)
        QTest::newRow("e4m3 2^-10 tie -> 0") << ElementFormat::E4M3 << std::ldexp(1.0, -10) << 0.0;
        QTest::newRow("e4m3 3*2^-10 tie -> 2^-8") << ElementFormat::E4M3 << 3 * std::ldexp(1.0, -10) << std::ldexp(1.0, -8);
        QTest::newRow("e4m3 464 tie -> 448") << ElementFormat::E4M3 << 464.0 << 448.0;
        QTest::newRow("e4m3 470 saturates") << ElementFormat::E4M3 << 470.0 << 448.0;
        QTest::newRow("e4m3 17 tie -> 16") << ElementFormat::E4M3 << 17.0 << 16.0;
        // E5M2: subnormal step 2^-16, max 57344
        QTest::newRow("e5m2 2^-17 tie -> 0") << ElementFormat::E5M2 << std::ldexp(1.0, -17) << 0.0;
        QTest::newRow("e5m2 5*2^-17 tie -> 2^-15") << ElementFormat::E5M2 << 5 * std::ldexp(1.0, -17) << std::ldexp(1.0, -15);
        QTest::newRow("e5m2 1e6 saturates") << ElementFormat::E5M2 << 1e6 << 57344.0;
        // INT8: step 1/64, max 127/64
        QTest::newRow("int8 1/128 tie -> 0") << ElementFormat::Int8 << 1.0 / 128 << 0.0;
        QTest::newRow("int8 3/128 tie -> 2/64") << ElementFormat::Int8 << 3.0 / 128 << 2.0 / 64;
        QTest::newRow("int8 2 saturates") << ElementFormat::Int8 << 2.0 << 127.0 / 64;
        // INT4: sign-magnitude, step 0.25, max 1.75
        QTest::newRow("int4 0.125 tie -> 0") << ElementFormat::Int4 << 0.125 << 0.0;
        QTest::newRow("int4 0.375 tie -> 0.5") << ElementFormat::Int4 << 0.375 << 0.5;
        QTest::newRow("int4 0.625 tie -> 0.5") << ElementFormat::Int4 << 0.625 << 0.5;
        QTest::newRow("int4 1.8 saturates") << ElementFormat::Int4 << 1.8 << 1.75;
        QTest::newRow("int4 -5 saturates") << ElementFormat::Int4 << -5.0 << -1.75;
    }
    void elementRounding() {
        QFETCH(ElementFormat, format);
        QFETCH(double, input);
        QFETCH(double, expected);
        QCOMPARE(ref::quantizeElement(input, format), expected); // exact: grid points are small dyadic numbers
    }

    void negativeZeroKeepsSign() {
        QVERIFY(std::signbit(ref::quantizeElement(-0.1, ElementFormat::E2M1)));
        QCOMPARE(ref::quantizeElement(-0.1, ElementFormat::E2M1), 0.0);
    }

    void sharedExponent_data() {
        QTest::addColumn<ElementFormat>("format");
        QTest::addColumn<ScaleMode>("mode");
        QTest::addColumn<double>("amax");
        QTest::addColumn<int>("expected");
        const auto e2m1 = ElementFormat::E2M1;
        // amax = 7 * 2^3 = 56: floor(log2 56) = 5, minus emax 2 -> 3; ceil(log2(56/6)) = 4.
        QTest::newRow("7*2^3 floor") << e2m1 << ScaleMode::Floor << 56.0 << 3;
        QTest::newRow("7*2^3 ceil") << e2m1 << ScaleMode::Ceil << 56.0 << 4;
        QTest::newRow("7*2^3 even") << e2m1 << ScaleMode::Even << 56.0 << 4; // 1.75 -> 2.0 at 1 bit
        // amax = 1.8 * 2^-2: even rounds 1.8 to 2 (1 mantissa bit) -> exponent -1, minus 2.
        QTest::newRow("1.8*2^-2 floor") << e2m1 << ScaleMode::Floor << 0.45 << -4;
        QTest::newRow("1.8*2^-2 even") << e2m1 << ScaleMode::Even << 0.45 << -3;
        QTest::newRow("1.8*2^-2 ceil") << e2m1 << ScaleMode::Ceil << 0.45 << -3;
        // 1.25 rounds to 1.5 at 1 mantissa bit: it stays in its binade, so even = floor here
        QTest::newRow("1.25 even") << e2m1 << ScaleMode::Even << 1.25 << -2;
        // exact power: ceil(log2(6*2^5/6)) = 5, never above
        QTest::newRow("6*2^5 ceil") << e2m1 << ScaleMode::Ceil << 192.0 << 5;
        QTest::newRow("int4 1.75 ceil") << ElementFormat::Int4 << ScaleMode::Ceil << 1.75 << 0;
        QTest::newRow("int4 1.76 ceil") << ElementFormat::Int4 << ScaleMode::Ceil << 1.76 << 1;
        QTest::newRow("e4m3 448 floor") << ElementFormat::E4M3 << ScaleMode::Floor << 448.0 << 0;
        QTest::newRow("zero") << e2m1 << ScaleMode::Floor << 0.0 << -127;
        QTest::newRow("tiny clamps to -127") << e2m1 << ScaleMode::Floor << 1e-40 << -127;
        QTest::newRow("huge clamps to 127") << ElementFormat::Int8 << ScaleMode::Ceil << 1e300 << 127;
    }
    void sharedExponent() {
        QFETCH(ElementFormat, format);
        QFETCH(ScaleMode, mode);
        QFETCH(double, amax);
        QFETCH(int, expected);
        QCOMPARE(ref::sharedExponent(amax, format, mode), expected);
    }

    void nvfp4BlockScaleClamps() {
        // g = 1: a block maximum of 0.001 asks for 0.001/6 < 2^-9 and is clamped up to 2^-9.
        QCOMPARE(ref::nvfp4BlockScale(0.001f, 1.0f), 1.0f / 512.0f);
        // 3/6 = 0.5 is an E4M3 value: kept exactly.
        QCOMPARE(ref::nvfp4BlockScale(3.0f, 1.0f), 0.5f);
        // 2.9/6 = 0.48333 on the E4M3 grid (step 2^-5 in [0.25, 0.5)): 15.47 steps -> 15 -> 0.46875.
        QCOMPARE(ref::nvfp4BlockScale(2.9f, 1.0f), 0.46875f);
        // Four over six's candidate maps the maximum to 4: 3/4 = 0.75 is an E4M3 value; 2.9/4 = 0.725
        // (step 2^-4 in [0.5, 1)): 11.6 steps -> 12 -> 0.75.
        QCOMPARE(ref::nvfp4BlockScale(3.0f, 1.0f, 4.0f), 0.75f);
        QCOMPARE(ref::nvfp4BlockScale(2.9f, 1.0f, 4.0f), 0.75f);
        // Above 4 * 448 the candidate clamps to 448, as the standard scale does from 6 * 448.
        QCOMPARE(ref::nvfp4BlockScale(2688.0f, 1.0f, 4.0f), 448.0f);
        QCOMPARE(ref::nvfp4GlobalScale({0.0f, 0.0f}), 1.0f);
        QCOMPARE(ref::nvfp4GlobalScale({1.0f, -2688.0f, std::numeric_limits<float>::infinity()}), 1.0f);
    }

    // Four over six's choice, worked by hand with g = 1 (SPEC §1). Candidates: s6 = E4M3(amax/6),
    // s4 = E4M3(amax/4); each value x -> s * E2M1(x / s); 4 wins only on a strictly smaller sum of
    // squared errors.
    void nvfp4FourOverSixChoice_data() {
        QTest::addColumn<QList<double>>("block");
        QTest::addColumn<bool>("four");
        // {4, 3}: s6 = E4M3(0.667) = 0.6875 gives {4.125, 2.75}, error 0.078; s4 = 1 gives {4, 3}, 0.
        QTest::newRow("4 and 3: four wins") << QList<double>{4, 3} << true;
        // {6, 0.5}: s6 = 1 is exact; s4 = 1.5 turns 0.5 into 0.75 (error 0.0625).
        QTest::newRow("6 and 0.5: six wins") << QList<double>{6, 0.5} << false;
        // {6, 1.5}: both exact (1.5 = 1.5 * 1): a tie keeps six.
        QTest::newRow("tie keeps six") << QList<double>{6, 1.5} << false;
        // {5}: s6 = E4M3(0.833) = 0.8125, 5 / 0.8125 = 6.15 -> 6 -> 4.875 (error 0.0156);
        // s4 = 1.25, 5 / 1.25 = 4 -> exact.
        QTest::newRow("5 alone: four wins") << QList<double>{5} << true;
        QTest::newRow("zeros keep six") << QList<double>{0, 0, 0} << false;
    }
    void nvfp4FourOverSixChoice() {
        QFETCH(QList<double>, block);
        QFETCH(bool, four);
        std::vector<float> x(block.begin(), block.end());
        double amax = 0;
        for (float v : x) amax = std::max(amax, std::fabs(double(v)));
        QCOMPARE(ref::nvfp4PrefersFour(x.data(), static_cast<int64_t>(x.size()), amax, 1.0f), four);
    }
};

QTEST_APPLESS_MAIN(TestMxReference)
#include "tst_mxreference.moc"
