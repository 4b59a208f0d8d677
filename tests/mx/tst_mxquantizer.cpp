// MX fake quantization of tensors: hand-worked golden blocks and bit-for-bit agreement of the
// CPU kernel and the tensor-ops path with the scalar reference (SPEC §1), plus the
// straight-through gradient.
#include "DeviceRows.h"
#include "TestSupport.h"

#include "mx/MxCodes.h"
#include "mx/MxQuantizer.h"
#include "mx/MxReference.h"
#include "transforms/FixedTransforms.h"

#include <QtTest>

#include <cmath>
#include <limits>
#include <random>

using namespace latmix::mx;
using namespace latmix::test;

Q_DECLARE_METATYPE(Backend)

namespace {

const float kNan = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

// ~1e5 values covering what quantizers meet: log-normal magnitudes over many binades, outlier
// channels, exact grid ties, zero blocks, subnormal blocks, NaN and Inf blocks.
std::vector<float> stressValues(int64_t rows, int64_t cols, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> normal;
    std::uniform_int_distribution<int> small(-64, 64), binade(-20, 20), pick(0, 99);
    std::vector<float> x(static_cast<size_t>(rows * cols));
    for (auto& v : x) {
        const int kind = pick(rng);
        if (kind < 70) v = static_cast<float>(normal(rng) * std::exp(2.0 * normal(rng)));
        else if (kind < 90) v = static_cast<float>(std::ldexp(small(rng) / 8.0, binade(rng))); // ties
        else if (kind < 95) v = static_cast<float>(normal(rng) * 1e3); // outliers
        else v = static_cast<float>(normal(rng) * 1e-3);
    }
    if (cols < 192) qFatal("stressValues needs at least 192 columns for its special blocks");
    for (int64_t r = 0; r < rows; ++r) {
        float* row = x.data() + r * cols;
        row[3] *= 200.0f; // an outlier channel in every row
        switch (r % 7) {
        case 1: std::fill(row + 64, row + 96, 0.0f); break;                     // zero block
        case 2: row[40] = kNan; break;                                            // NaN block
        case 3: row[100] = (r % 2) ? kInf : -kInf; break;                          // Inf block
        case 4: for (int j = 128; j < 160; ++j) row[j] = 1e-40f * (j - 140); break; // subnormal block
        case 5: for (int j = 160; j < 192; ++j) row[j] = std::ldexp(1.9f, 100) * (j % 3 - 1); break;
        default: break;
        }
    }
    return x;
}

// Log-normal magnitudes without stressValues' 2^100 blocks, which make NVFP4's global scale so
// large that every other block's scale clamps to 2^-9 (both four-over-six candidates alike); one
// NaN block.
std::vector<float> logNormalValues(int64_t rows, int64_t cols, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> normal;
    std::vector<float> x(static_cast<size_t>(rows * cols));
    for (auto& v : x) v = static_cast<float>(normal(rng) * std::exp(normal(rng)));
    x[5] = kNan;
    return x;
}

} // namespace

class TestMxQuantizer : public QObject {
    Q_OBJECT
private slots:
    void goldenBlocks_data() {
        QTest::addColumn<QString>("format");
        QTest::addColumn<QString>("mode");
        QTest::addColumn<int>("block");
        QTest::addColumn<QList<double>>("input");
        QTest::addColumn<QList<double>>("expected");
        const double nan = kNan;
        // scale 2^0 (amax in [4, 8)): the E2M1 ties of SPEC §1 come out unchanged
        QTest::newRow("e2m1 ties") << "mxfp4" << "floor" << 16
            << QList<double>{4, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, -2.5, -0.25, 0, 5.9, 3.9}
            << QList<double>{4, 0, 1, 1, 2, 2, 4, -2, -0.0, 0, 6, 4};
        // amax = 7*2^3: floor keeps scale 8 and clips 56 to 48; ceil takes 16 and rounds 3.5 to 4
        QTest::newRow("7*2^3 floor") << "mxfp4" << "floor" << 32 << QList<double>{56, 8, -20}
                                     << QList<double>{48, 8, -16};
        QTest::newRow("7*2^3 ceil") << "mxfp4" << "ceil" << 32 << QList<double>{56, 8, -20}
                                    << QList<double>{64, 8, -16};
        // amax = 1.8: floor gives scale 1/4 (1.8 -> 7.2 -> 6), even rounds 1.8 up to 2 first
        QTest::newRow("1.8 floor") << "mxfp4" << "floor" << 32 << QList<double>{1.8, 0.3, -1.1}
                                   << QList<double>{1.5, 0.25, -1};
        QTest::newRow("1.8 even") << "mxfp4" << "even" << 32 << QList<double>{1.8, 0.3, -1.1}
                                  << QList<double>{2, 0.25, -1};
        QTest::newRow("all-zero block") << "mxfp4" << "floor" << 4 << QList<double>{0, 0, 0, 0, 1, 2, 3, 4}
                                        << QList<double>{0, 0, 0, 0, 1, 2, 3, 4};
        QTest::newRow("NaN block") << "mxfp4" << "floor" << 4 << QList<double>{1, nan, 2, 3, 1, 2, 3, 4}
                                   << QList<double>{nan, nan, nan, nan, 1, 2, 3, 4};
        QTest::newRow("Inf block") << "mxint8" << "floor" << 4
                                   << QList<double>{double(kInf), 1, 2, 3, 0.5, 0.5, 0.5, 0.5}
                                   << QList<double>{nan, nan, nan, nan, 0.5, 0.5, 0.5, 0.5};
        // INT4 saturates at +-1.75 * scale
        QTest::newRow("int4 saturation") << "mxint4" << "floor" << 32 << QList<double>{1.9, -1.95, 1.0, 0.3}
                                         << QList<double>{1.75, -1.75, 1, 0.25};
        QTest::newRow("int4 saturation x4") << "mxint4" << "floor" << 32 << QList<double>{7.6, -7.8, 4, 1.2}
                                            << QList<double>{7, -7, 4, 1};
        // 6 values, block 4: the trailing block of 2 gets its own scale (12 -> 2^1)
        QTest::newRow("partial block") << "mxfp4" << "floor" << 4 << QList<double>{1, 2, 3, 4, 12, 0.7}
                                       << QList<double>{1, 2, 3, 4, 12, 1};
        // amax 4e-39 wants 2^-130, E8M0 stops at 2^-127: 4e-39 / 2^-127 = 0.68 -> 0.5
        QTest::newRow("E8M0 lower clamp") << "mxfp4" << "floor" << 32 << QList<double>{1e-39, 4e-39}
                                          << QList<double>{0, std::ldexp(1.0, -128)};
        // subnormal amax 15*2^-130 under ceil for INT4: ceil(log2(1.875/1.75 * 2^-127)) = -126
        QTest::newRow("int4 subnormal ceil") << "mxint4" << "ceil" << 32 << QList<double>{std::ldexp(15.0, -130)}
                                             << QList<double>{std::ldexp(1.0, -126)};
        // NVFP4 with g = 2688/2688 = 1: block 2 asks for scale 0.001/6 < 2^-9 and is clamped
        QList<double> nvIn(32, 0.0), nvOut(32, 0.0);
        nvIn[0] = 2688; nvIn[1] = 1000; nvIn[16] = 0.001; nvIn[17] = 0.0004;
        nvOut[0] = 2688; nvOut[1] = 896; nvOut[16] = std::ldexp(1.0, -10); nvOut[17] = 0;
        QTest::newRow("nvfp4 scale clamp") << "nvfp4" << "floor" << 16 << nvIn << nvOut;
        QList<double> nv2In(32, 0.0), nv2Out(32, 0.0);
        nv2In[0] = 2688; nv2In[16] = 3; nv2In[17] = 1.1; nv2In[18] = -0.4;
        nv2Out[0] = 2688; nv2Out[16] = 3; nv2Out[17] = 1; nv2Out[18] = -0.5;
        QTest::newRow("nvfp4 scale 0.5") << "nvfp4" << "floor" << 16 << nv2In << nv2Out;
        // Four over six with g = 1 (the first block holds 2688: both of its candidates clamp to
        // 448, a tie, and it keeps 6). Block 2 = {4, 3}: the standard scale E4M3(4/6) = 0.6875
        // gives {4.125, 2.75}; the scale E4M3(4/4) = 1 gives {4, 3} exactly, so four-over-six takes it.
        // Block 3 = {6, 0.5}: 6 is exact under scale 1, while scale 1.5 moves 0.5 to 0.75: it keeps 6.
        QList<double> fosIn(48, 0.0), floorOut(48, 0.0), fosOut(48, 0.0);
        fosIn[0] = 2688; fosIn[16] = 4; fosIn[17] = 3; fosIn[32] = 6; fosIn[33] = 0.5;
        floorOut[0] = 2688; floorOut[16] = 4.125; floorOut[17] = 2.75; floorOut[32] = 6; floorOut[33] = 0.5;
        fosOut[0] = 2688; fosOut[16] = 4; fosOut[17] = 3; fosOut[32] = 6; fosOut[33] = 0.5;
        QTest::newRow("nvfp4 4/6 input, floor") << "nvfp4" << "floor" << 16 << fosIn << floorOut;
        QTest::newRow("nvfp4 four-over-six") << "nvfp4" << "four-over-six" << 16 << fosIn << fosOut;
    }
    void goldenBlocks() {
        QFETCH(QString, format);
        QFETCH(QString, mode);
        QFETCH(int, block);
        QFETCH(QList<double>, input);
        QFETCH(QList<double>, expected);
        const MxConfig c{parseFormat(format.toStdString()), block, parseScaleMode(mode.toStdString())};
        std::vector<float> x(input.begin(), input.end()), want(expected.begin(), expected.end());
        const auto n = static_cast<int64_t>(x.size());
        struct Impl { const char* name; std::vector<float> out; };
        const Impl impls[] = {
            {"reference", ref::fakeQuantize(x, n, c)},
            {"cpu kernel", toVector(fakeQuantize(toTensor(x), c, Backend::CpuKernel))},
            {"tensor ops", toVector(fakeQuantize(toTensor(x), c, Backend::TensorOps))},
        };
        for (const Impl& impl : impls) {
            const long long bad = firstMismatch(impl.out, want);
            QVERIFY2(bad < 0, qPrintable(QString(impl.name) + ": " + describeMismatch(x, impl.out, want, bad)));
        }
    }

    // Every backend on every device it runs on: the CPU kernel on the CPU, the tensor ops on the
    // CPU and on cuda:0 (rows "... tensor ops cuda:0", skipped without CUDA). Tolerance: none, bit
    // for bit with the scalar reference (any NaN equals any NaN) on every device.
    void agreesWithReference_data() {
        QTest::addColumn<QString>("format");
        QTest::addColumn<QString>("mode");
        QTest::addColumn<int>("block");
        QTest::addColumn<Backend>("backend");
        addDeviceColumn();
        auto add = [](const char* name, const char* mode, int block) {
            QTest::addRow("%s %s B%d cpu kernel", name, mode, block) << QString(name) << QString(mode) << block
                                                                      << Backend::CpuKernel << QString("cpu");
            for (const QString& dev : testDevices()) // the cpu rows keep their old names
                QTest::addRow("%s %s B%d tensor ops%s", name, mode, block, dev == "cpu" ? "" : qPrintable(" " + dev))
                    << QString(name) << QString(mode) << block << Backend::TensorOps << dev;
        };
        for (const auto& f : allFormats())
            for (const char* mode : {"floor", "ceil", "even"})
                if (!f.nvfp4 || QString(mode) == "floor") add(f.name, mode, f.defaultBlock); // NVFP4: its own modes
        add("nvfp4", "four-over-six", 16);
        for (int block : {8, 64, 256}) add("mxfp4", "floor", block);
    }
    void agreesWithReference() {
        QFETCH(QString, format);
        QFETCH(QString, mode);
        QFETCH(int, block);
        QFETCH(Backend, backend);
        QFETCH(QString, device);
        LATMIX_REQUIRE_DEVICE(dev, device);
        const MxConfig c{parseFormat(format.toStdString()), block, parseScaleMode(mode.toStdString())};
        const int64_t rows = 100, cols = 1000; // 1e5 values; 1000 = 31*32 + 8: a partial block per row
        const std::vector<float> x = stressValues(rows, cols, 12345 + block);
        const std::vector<float> want = ref::fakeQuantize(x, cols, c);
        const at::Tensor y = fakeQuantize(toTensor(x).reshape({rows, cols}).to(dev), c, backend);
        QVERIFY2(y.device() == dev, y.device().str().c_str()); // "returns x's dtype and device"
        const std::vector<float> got = toVector(y);
        const long long bad = firstMismatch(got, want);
        QVERIFY2(bad < 0, qPrintable(describeMismatch(x, got, want, bad)));
        // The data must exercise saturation, rounding and NaN blocks, or agreement means little.
        int changed = 0, nans = 0;
        for (size_t i = 0; i < x.size(); ++i) {
            nans += std::isnan(want[i]);
            changed += !std::isnan(want[i]) && want[i] != x[i];
        }
        QVERIFY(nans >= 28 * std::min(block, 32)); // 14 NaN and 14 Inf blocks
        QVERIFY(changed > 1000);
    }

    // Four over six against the standard NVFP4 rule on the stress data, by a float64 measure of
    // our own (not the implementations' sums): no block errs more than under the standard scale
    // (each block takes the better of two candidates, one of which is the standard), the blocks that
    // changed err strictly less, and both choices occur, so that agreement above covers both.
    void fourOverSixNeverErrsMore() {
        const int64_t rows = 100, cols = 1008; // 63 blocks of 16 per row
        const std::vector<float> x = logNormalValues(rows, cols, 777);
        const MxConfig standard = makeConfig(Format::NvFp4), fos = makeConfig(Format::NvFp4, ScaleMode::FourOverSix);
        const std::vector<float> a = ref::fakeQuantize(x, cols, standard), b = ref::fakeQuantize(x, cols, fos);
        int changed = 0, kept = 0;
        for (size_t begin = 0; begin < x.size(); begin += 16) {
            double ea = 0, eb = 0;
            bool differ = false, finite = true;
            for (size_t i = begin; i < begin + 16; ++i) {
                finite = finite && std::isfinite(x[i]);
                ea += (double(x[i]) - a[i]) * (double(x[i]) - a[i]);
                eb += (double(x[i]) - b[i]) * (double(x[i]) - b[i]);
                differ = differ || a[i] != b[i];
            }
            if (!finite) continue;
            QVERIFY2(eb <= ea, qPrintable(QString("block at %1: four-over-six error %2 > standard %3").arg(begin).arg(eb).arg(ea)));
            if (differ) {
                QVERIFY2(eb < ea, qPrintable(QString("block at %1 changed without a smaller error").arg(begin)));
                ++changed;
            } else {
                ++kept;
            }
        }
        QVERIFY2(changed > 100 && kept > 100, qPrintable(QString("%1 blocks took 4, %2 kept 6").arg(changed).arg(kept)));
    }

    // NVFP4 with both scale modes on data where four-over-six chooses (fourOverSixNeverErrsMore
    // counts both choices there): every backend and device bit for bit with the reference.
    void nvfp4AgreesOnLogNormal_data() {
        QTest::addColumn<QString>("mode");
        QTest::addColumn<Backend>("backend");
        addDeviceColumn();
        for (const char* mode : {"floor", "four-over-six"}) {
            QTest::addRow("%s cpu kernel", mode) << QString(mode) << Backend::CpuKernel << QString("cpu");
            for (const QString& dev : testDevices())
                QTest::addRow("%s tensor ops %s", mode, qPrintable(dev)) << QString(mode) << Backend::TensorOps << dev;
        }
    }
    void nvfp4AgreesOnLogNormal() {
        QFETCH(QString, mode);
        QFETCH(Backend, backend);
        QFETCH(QString, device);
        LATMIX_REQUIRE_DEVICE(dev, device);
        const MxConfig c = makeConfig(Format::NvFp4, parseScaleMode(mode.toStdString()));
        const int64_t rows = 64, cols = 1000; // 62 blocks of 16 and one of 8 per row
        const std::vector<float> x = logNormalValues(rows, cols, 4242);
        const std::vector<float> want = ref::fakeQuantize(x, cols, c);
        const std::vector<float> got = toVector(fakeQuantize(toTensor(x).reshape({rows, cols}).to(dev), c, backend));
        const long long bad = firstMismatch(got, want);
        QVERIFY2(bad < 0, qPrintable(describeMismatch(x, got, want, bad)));
    }

    void straightThroughGradient_data() {
        QTest::addColumn<QString>("mode");
        QTest::addColumn<Backend>("backend");
        QTest::newRow("floor cpu kernel") << "floor" << Backend::CpuKernel;
        QTest::newRow("floor tensor ops") << "floor" << Backend::TensorOps;
        QTest::newRow("ceil cpu kernel") << "ceil" << Backend::CpuKernel;
    }
    void straightThroughGradient() {
        QFETCH(QString, mode);
        QFETCH(Backend, backend);
        const MxConfig c{Format::MxFp4, 32, parseScaleMode(mode.toStdString())};
        const int64_t rows = 6, cols = 192;
        std::vector<float> x = stressValues(rows, cols, 7);
        for (auto& v : x) if (!std::isfinite(v)) v = 1.0f;
        auto xt = toTensor(x).reshape({rows, cols}).set_requires_grad(true);
        auto y = fakeQuantize(xt, c, backend);
        y.sum().backward();
        const std::vector<float> grad = toVector(xt.grad());
        QCOMPARE(toVector(y), ref::fakeQuantize(x, cols, c)); // values unchanged by autograd
        // Identity where |x| <= 6 * 2^e (inside the E2M1 range at the block scale), else 0.
        int zeros = 0;
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t b = 0; b < cols; b += 32) {
                double amax = 0;
                for (int64_t j = b; j < b + 32; ++j) amax = std::max(amax, std::fabs(double(x[r * cols + j])));
                const double limit = 6.0 * std::ldexp(1.0, ref::sharedExponent(amax, ElementFormat::E2M1, c.scaleMode));
                for (int64_t j = b; j < b + 32; ++j) {
                    const float want = std::fabs(x[r * cols + j]) <= limit ? 1.0f : 0.0f;
                    zeros += want == 0.0f;
                    QCOMPARE(grad[r * cols + j], want);
                }
            }
        if (c.scaleMode == ScaleMode::Floor) QVERIFY(zeros > 0); // floor clips some maxima
        else QCOMPARE(zeros, 0);                                 // ceil never clips
    }

    // T3 fused with the quantization (SPEC §4), against two independent paths: bit for bit
    // against the scalar reference (ref::walshHadamard, then ref::fakeQuantize; every CPU path,
    // as CI's baseline leg reruns it), and its rotation against blockHadamard's float64 blocks.
    void fusedHadamardAgreesWithReference_data() {
        QTest::addColumn<QString>("format");
        QTest::addColumn<QString>("mode");
        QTest::addColumn<int>("block");
        for (const char* f : {"mxfp4", "mxint4", "mxfp6_e2m3", "mxfp8_e4m3", "mxint8"})
            for (const char* mode : {"floor", "even"}) QTest::addRow("%s %s B32", f, mode) << QString(f) << QString(mode) << 32;
        QTest::addRow("mxfp4 floor B16") << QString("mxfp4") << QString("floor") << 16;
        QTest::addRow("mxint4 ceil B64") << QString("mxint4") << QString("ceil") << 64;
    }
    void fusedHadamardAgreesWithReference() {
        QFETCH(QString, format);
        QFETCH(QString, mode);
        QFETCH(int, block);
        const MxConfig c{parseFormat(format.toStdString()), block, parseScaleMode(mode.toStdString())};
        const int64_t rows = 60, cols = 1024;
        const std::vector<float> x = stressValues(rows, cols, 777 + block);
        const auto t3 = latmix::transforms::blockHadamard(cols, block, 42);
        QVERIFY(t3.hadamardSigns().defined());
        const std::vector<float> signs = toVector(t3.hadamardSigns());
        const std::vector<float> rotated = ref::walshHadamard(x, signs, block);
        const std::vector<float> want = ref::fakeQuantize(rotated, cols, c);
        const at::Tensor xt = toTensor(x).reshape({rows, cols});
        QVERIFY(fusedHadamardApplies(xt, c, block));
        const std::vector<float> got = toVector(fakeQuantizeAfterHadamard(xt, t3.hadamardSigns(), c));
        const long long bad = firstMismatch(got, want);
        QVERIFY2(bad < 0, qPrintable(describeMismatch(rotated, got, want, bad)));

        // The rotation is the float64 block Hadamard up to float32 rounding: log2(B) butterfly
        // stages, the rounded 1/√B and the product each add at most u = 2^-24 relative to the
        // block's Σ|x| / √B (1.01: second-order terms). Blocks with NaN/Inf are skipped.
        const std::vector<double> exact = [&] {
            const at::Tensor e = t3.apply(xt.to(at::kDouble)).contiguous();
            return std::vector<double>(e.data_ptr<double>(), e.data_ptr<double>() + e.numel());
        }();
        const int stages = static_cast<int>(std::log2(block));
        int checked = 0;
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t b = 0; b < cols; b += block) {
                double l1 = 0;
                bool finite = true;
                for (int64_t j = b; j < b + block; ++j) {
                    finite = finite && std::isfinite(x[r * cols + j]);
                    l1 += std::fabs(double(x[r * cols + j]));
                }
                if (!finite) continue;
                const double bound = 1.01 * (stages + 2) * std::ldexp(1.0, -24) * l1 / std::sqrt(double(block));
                for (int64_t j = b; j < b + block; ++j) {
                    const double err = std::fabs(double(rotated[r * cols + j]) - exact[r * cols + j]);
                    if (err > bound) QFAIL(qPrintable(QString("row %1 column %2: |error| %3 > %4").arg(r).arg(j).arg(err).arg(bound)));
                }
                ++checked;
            }
        QVERIFY(checked > rows * cols / block / 2);
        // Refused where it does not apply: NVFP4 (no power-of-two scale), a block that does not
        // divide the row, a Hadamard block other than the MX block.
        QVERIFY(!fusedHadamardApplies(xt, makeConfig(Format::NvFp4), 16));
        QVERIFY(!fusedHadamardApplies(xt.narrow(1, 0, cols - 8), c, block));
        QVERIFY(!fusedHadamardApplies(xt, c, block * 2));
    }

    // roundToElement (the tensor path's rounding: a search over the grid's midpoints) against the
    // scalar reference at every place a rounding can go wrong: each grid value, each midpoint
    // between neighbours (the ties, half to even) and the floats on either side of it, both
    // signs, zeros, beyond ±max and float32 subnormals. Bit for bit, zeros' signs included.
    void roundToElementAtEveryTie_data() {
        QTest::addColumn<int>("element");
        addDeviceColumn();
        const std::vector<std::pair<const char*, ElementFormat>> elements = {
            {"e2m1", ElementFormat::E2M1}, {"e2m3", ElementFormat::E2M3}, {"e3m2", ElementFormat::E3M2},
            {"e4m3", ElementFormat::E4M3}, {"e5m2", ElementFormat::E5M2}, {"int8", ElementFormat::Int8},
            {"int4", ElementFormat::Int4}};
        for (const auto& [name, f] : elements)
            for (const QString& dev : testDevices())
                QTest::addRow("%s %s", name, qPrintable(dev)) << int(f) << dev;
    }
    void roundToElementAtEveryTie() {
        QFETCH(int, element);
        QFETCH(QString, device);
        LATMIX_REQUIRE_DEVICE(dev, device);
        const auto f = static_cast<ElementFormat>(element);
        const ElementCodebook book(f);
        const std::vector<double>& grid = book.values();
        const float up = kInf, down = -kInf;
        std::vector<float> y = {0.0f, -0.0f, 1e-45f, -1e-45f, 1e-38f, kInf, -kInf};
        for (std::size_t i = 0; i < grid.size(); ++i) {
            const auto v = static_cast<float>(grid[i]);
            y.insert(y.end(), {v, std::nextafter(v, up), std::nextafter(v, down), 2 * v, 1.5f * v});
            if (i + 1 < grid.size()) {
                const auto mid = static_cast<float>(0.5 * (grid[i] + grid[i + 1]));
                y.insert(y.end(), {mid, std::nextafter(mid, up), std::nextafter(mid, down)});
            }
        }
        std::vector<float> want;
        for (float v : y) want.push_back(static_cast<float>(ref::quantizeElement(v, f)));
        const std::vector<float> got = toVector(roundToElement(toTensor(y).to(dev), f));
        const long long bad = firstMismatch(got, want);
        QVERIFY2(bad < 0, qPrintable(describeMismatch(y, got, want, bad)));
        QVERIFY(grid.size() >= 15); // both signs of at least 8 magnitudes (INT4's)
    }

    // Activations in bfloat16 (mixed-precision training) are quantized from their float32 values
    // and the result rounded to bfloat16 once, on every backend: for the MX formats that rounding
    // is exact (a grid value times a power of two has at most 8 significant bits), for NVFP4 (an
    // E4M3 scale times the float32 global scale) it is bfloat16's round to nearest.
    void bf16ActivationsRoundOnce_data() {
        QTest::addColumn<QString>("format");
        QTest::addColumn<Backend>("backend");
        addDeviceColumn();
        for (const auto& f : allFormats()) {
            QTest::addRow("%s cpu kernel", f.name) << QString(f.name) << Backend::CpuKernel << QString("cpu");
            for (const QString& dev : testDevices())
                QTest::addRow("%s tensor ops %s", f.name, qPrintable(dev)) << QString(f.name) << Backend::TensorOps << dev;
        }
    }
    void bf16ActivationsRoundOnce() {
        QFETCH(QString, format);
        QFETCH(Backend, backend);
        QFETCH(QString, device);
        LATMIX_REQUIRE_DEVICE(dev, device);
        const MxConfig c = makeConfig(parseFormat(format.toStdString()));
        const int64_t rows = 50, cols = 256;
        const auto x = toTensor(stressValues(rows, cols, 31)).reshape({rows, cols}).to(at::kBFloat16).to(dev);
        const at::Tensor y = fakeQuantize(x, c, backend);
        QCOMPARE(y.scalar_type(), at::kBFloat16);
        const at::Tensor wide = fakeQuantize(x.to(at::kFloat), c, backend);
        const std::vector<float> got = toVector(y), want = toVector(wide.to(at::kBFloat16));
        const long long bad = firstMismatch(got, want);
        QVERIFY2(bad < 0, qPrintable(describeMismatch(toVector(x), got, want, bad)));
        if (!c.isNvfp4()) QCOMPARE(firstMismatch(got, toVector(wide)), -1LL);
    }

    void keepsDtypeAndShape() {
        const MxConfig c = makeConfig(Format::MxFp8E4M3);
        auto x = at::randn({2, 3, 40}).to(at::kBFloat16);
        auto y = fakeQuantize(x, c);
        QCOMPARE(y.scalar_type(), at::kBFloat16);
        QVERIFY(y.sizes().equals(x.sizes()));
        // MX values of E4M3 have 4 significant bits: exact in bfloat16.
        QVERIFY(at::equal(y.to(at::kFloat), fakeQuantize(x.to(at::kFloat), c)));
    }

    void blockScalesMatchReference() {
        const MxConfig c{Format::MxInt4, 32, ScaleMode::Even};
        const int rows = 7, cols = 200, nb = 7; // 200 = 6*32 + 8
        const std::vector<float> x = stressValues(rows, cols, 99);
        auto scales = toVector(blockScales(toTensor(x).reshape({rows, cols}), c));
        QCOMPARE(scales.size(), size_t(rows * nb));
        for (int r = 0; r < rows; ++r)
            for (int b = 0; b < nb; ++b) {
                double amax = 0;
                bool finite = true;
                for (int j = b * 32; j < std::min(cols, b * 32 + 32); ++j) {
                    finite = finite && std::isfinite(x[r * cols + j]);
                    amax = std::max(amax, std::fabs(double(x[r * cols + j])));
                }
                const float want = finite ? float(std::ldexp(1.0, ref::sharedExponent(amax, ElementFormat::Int4, c.scaleMode))) : kNan;
                QVERIFY(sameFloat(scales[r * nb + b], want));
            }
    }
};

QTEST_APPLESS_MAIN(TestMxQuantizer)
#include "tst_mxquantizer.moc"
