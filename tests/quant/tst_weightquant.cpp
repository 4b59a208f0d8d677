// Weight quantization (SPEC §6): RTN and MX-aware GPTQ with static group scales, checked against
// core/mx (fakeQuantize, blockScales, pack), a naive float64 column-by-column GPTQ written here
// with the explicit inverse-Hessian update, and the output error on correlated inputs.
#include "DeviceRows.h"
#include "TestSupport.h"

#include "mx/MxPack.h"
#include "mx/MxQuantizer.h"
#include "mx/MxReference.h"
#include "quant/WeightQuantizer.h"

#include <ATen/core/Tensor.h>

#include <QtTest>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

using namespace latmix;
using namespace latmix::test;
using mx::MxConfig;

namespace {

MxConfig configOf(const QString& name) { return mx::makeConfig(mx::parseFormat(name.toStdString())); }

// Heavy-tailed weights with an outlier input and exact grid ties, [out, in] float32.
at::Tensor makeWeight(std::int64_t out, std::int64_t in, std::uint64_t seed) {
    auto gen = at::detail::createCPUGenerator(seed);
    auto w = at::randn({out, in}, gen) * at::exp(0.5 * at::randn({out, in}, gen));
    w.select(1, 3).mul_(8.0);
    // A few exact binary fractions so that element ties (x/s on a midpoint) occur.
    auto ties = at::randint(-24, 25, {out, in}, gen).to(at::kFloat) / 8.0;
    auto pick = at::rand({out, in}, gen) < 0.1;
    return at::where(pick, ties, w).contiguous();
}

// Correlated activations x = z M, [rows, in], float64.
at::Tensor correlatedInputs(std::int64_t rows, std::int64_t in, std::uint64_t seed) {
    auto gen = at::detail::createCPUGenerator(seed);
    auto z = at::randn({rows, in}, gen, at::kDouble);
    auto m = at::randn({in, in}, gen, at::kDouble) / std::sqrt(static_cast<double>(in));
    return at::mm(z, m);
}

at::Tensor gram(const at::Tensor& x) { return at::mm(x.t(), x) * (2.0 / static_cast<double>(x.size(0))); }

// Index of the first bitwise difference (any NaN equals any NaN), or -1.
long long mismatch(const at::Tensor& a, const at::Tensor& b) {
    if (a.sizes() != b.sizes()) return 0;
    return firstMismatch(toVector(a), toVector(b));
}

QString describe(const at::Tensor& got, const at::Tensor& want, long long i) {
    if (i < 0) return {};
    const auto g = toVector(got), w = toVector(want);
    if (g.size() != w.size()) return QString("shapes differ");
    return QString("element %1: got %2 want %3").arg(i).arg(g[i], 0, 'g', 9).arg(w[i], 0, 'g', 9);
}

// s * Qe(x / s) in scalar FP32 arithmetic through the reference element rounding of core/mx.
float onGridRef(float x, float s, mx::ElementFormat f) {
    return static_cast<float>(mx::ref::quantizeElement(static_cast<double>(x / s), f)) * s;
}

// Naive GPTQ / OBS in float64: columns one at a time (no blocks), the remaining weights updated
// with the explicit inverse Hessian, and that inverse updated by Gaussian elimination of the
// quantized column: Hinv <- Hinv - Hinv[:, j] Hinv[j, :] / Hinv[j, j]. Same static scales,
// damping and dead-input rule as SPEC §6. Returns the dequantized float32 [out, in].
at::Tensor naiveGptq(const at::Tensor& w, const at::Tensor& hessian, const MxConfig& c, bool actOrder,
                     double damping) {
    const std::int64_t out = w.size(0), in = w.size(1), B = c.blockSize, nb = (in + B - 1) / B;
    auto wc = w.to(at::kDouble).contiguous();
    auto hc = hessian.to(at::kDouble).contiguous();
    std::vector<double> W(wc.data_ptr<double>(), wc.data_ptr<double>() + out * in);
    std::vector<double> H(hc.data_ptr<double>(), hc.data_ptr<double>() + in * in);
    for (std::int64_t i = 0; i < in; ++i)
        if (H[i * in + i] == 0.0) {
            H[i * in + i] = 1.0;
            for (std::int64_t r = 0; r < out; ++r) W[r * in + i] = 0.0;
        }
    std::vector<float> Wf(W.begin(), W.end());
    const auto scales = toVector(mx::blockScales(at::from_blob(Wf.data(), {out, in}, at::kFloat), c));
    std::vector<std::int64_t> order(static_cast<size_t>(in));
    std::iota(order.begin(), order.end(), 0);
    if (actOrder)
        std::stable_sort(order.begin(), order.end(),
                         [&](std::int64_t a, std::int64_t b) { return H[a * in + a] > H[b * in + b]; });
    double mean = 0;
    for (std::int64_t i = 0; i < in; ++i) mean += H[i * in + i];
    mean /= static_cast<double>(in);
    for (std::int64_t i = 0; i < in; ++i) H[i * in + i] += damping * mean;
    auto inv = at::linalg_inv(at::from_blob(H.data(), {in, in}, at::kDouble)).contiguous();
    std::vector<double> Hi(inv.data_ptr<double>(), inv.data_ptr<double>() + in * in);

    std::vector<float> Q(static_cast<size_t>(out * in));
    std::vector<bool> done(static_cast<size_t>(in), false);
    for (std::int64_t j : order) {
        const double d = Hi[j * in + j];
        for (std::int64_t r = 0; r < out; ++r) {
            const float q = onGridRef(static_cast<float>(W[r * in + j]), scales[r * nb + j / B], c.element());
            Q[r * in + j] = q;
            const double e = (W[r * in + j] - q) / d;
            for (std::int64_t k = 0; k < in; ++k)
                if (!done[k] && k != j) W[r * in + k] -= e * Hi[j * in + k];
        }
        done[j] = true;
        const std::vector<double> rowJ(Hi.begin() + j * in, Hi.begin() + (j + 1) * in);
        for (std::int64_t a = 0; a < in; ++a) {
            const double f = Hi[a * in + j] / d;
            for (std::int64_t b = 0; b < in; ++b) Hi[a * in + b] -= f * rowJ[b];
        }
    }
    return at::from_blob(Q.data(), {out, in}, at::kFloat).clone();
}

// ||(W - Q) X^T||_F^2 in float64.
double outputError(const at::Tensor& w, const at::Tensor& q, const at::Tensor& x) {
    return at::mm(w.to(at::kDouble) - q.to(at::kDouble), x.t()).square().sum().item<double>();
}

// Message of the std::invalid_argument f throws; "" when it throws nothing (other types propagate).
QString invalidArgument(const std::function<void()>& f) {
    try {
        f();
    } catch (const std::invalid_argument& e) {
        return QString::fromStdString(e.what()).isEmpty() ? QString("?") : QString::fromStdString(e.what());
    }
    return {};
}

} // namespace

class TestWeightQuant : public QObject {
    Q_OBJECT

    static void addFormats() {
        QTest::addColumn<QString>("format");
        QTest::addColumn<int>("in");
        QTest::newRow("mxfp4") << "mxfp4" << 96;
        QTest::newRow("mxint4") << "mxint4" << 96;
        QTest::newRow("nvfp4") << "nvfp4" << 96;
        // stories260K down_proj: in 172 = 5*32 + 12 (NVFP4: 10*16 + 12), a partial trailing group.
        QTest::newRow("mxfp4 partial 172") << "mxfp4" << 172;
        QTest::newRow("nvfp4 partial 172") << "nvfp4" << 172;
    }

private slots:
    // 1. With the block scales core/mx picks, quantizeWithScales is mx::fakeQuantize bit for bit.
    void quantizeWithScalesIsFakeQuantize_data() { addFormats(); }
    void quantizeWithScalesIsFakeQuantize() {
        QFETCH(QString, format);
        QFETCH(int, in);
        const MxConfig c = configOf(format);
        auto x = makeWeight(24, in, 11).reshape({2, 12, in});
        x.select(1, 4).narrow(1, 0, c.blockSize).zero_();  // an all-zero group
        x.select(1, 5).mul_(1e-39f);                      // subnormal inputs
        const auto got = quant::quantizeWithScales(x, mx::blockScales(x, c), c);
        QVERIFY(got.sizes() == x.sizes());
        QVERIFY(got.scalar_type() == at::kFloat);
        const auto want = mx::fakeQuantize(x, c);
        const auto i = mismatch(got, want);
        QVERIFY2(i < 0, qPrintable(describe(got, want, i)));
        // The tensor-ops scales (the CUDA path) are the same numbers.
        QCOMPARE(mismatch(mx::blockScales(x, c, mx::Backend::TensorOps), mx::blockScales(x, c)), -1LL);
    }

    // 2. RTN: fakeQuantize values, blockScales scales, mx::pack's codes and scale bytes; the
    //    packed form unpacks to the dequantized values bit for bit; relativeError is ||W-Q||²/||W||².
    void rtnIsFakeQuantize_data() { addFormats(); }
    void rtnIsFakeQuantize() {
        QFETCH(QString, format);
        QFETCH(int, in);
        const MxConfig c = configOf(format);
        const auto w = makeWeight(16, in, 21);
        const auto r = quant::quantizeRtn(w, c);
        auto i = mismatch(r.dequantized, mx::fakeQuantize(w, c));
        QVERIFY2(i < 0, qPrintable(describe(r.dequantized, mx::fakeQuantize(w, c), i)));
        QCOMPARE(mismatch(r.scales, mx::blockScales(w, c)), -1LL);
        QVERIFY(r.scales.sizes() == at::IntArrayRef({16, (in + c.blockSize - 1) / c.blockSize}));
        i = mismatch(mx::unpack(r.packed), r.dequantized);
        QVERIFY2(i < 0, qPrintable(describe(mx::unpack(r.packed), r.dequantized, i)));
        const mx::PackedTensor p = mx::pack(w, c); // core/mx's own packer
        QVERIFY(at::equal(r.packed.codes, p.codes));
        QVERIFY(at::equal(r.packed.scales, p.scales));
        QCOMPARE(bitsOf(r.packed.globalScale), bitsOf(p.globalScale));
        QCOMPARE(r.packed.lastDim, int64_t(in));
        const double want = (w.to(at::kDouble) - r.dequantized.to(at::kDouble)).square().sum().item<double>() /
                            w.to(at::kDouble).square().sum().item<double>();
        QVERIFY(std::fabs(r.relativeError - want) <= 1e-4 * want);
        QVERIFY(r.relativeError > 0 && r.relativeError < 0.1);
    }

    // 2b. Weights a runtime fuses share NVFP4's tensor scale (SPEC §6): with the g of the group,
    //     a part is quantized exactly as its rows of the stacked weight are, RTN and GPTQ's static
    //     scales alike; g is the stacked weight's own, non-finite values left out. MX formats,
    //     whose scales have no tensor part, ignore the argument.
    void sharedGlobalScaleIsTheStackedWeights_data() {
        QTest::addColumn<QString>("format");
        QTest::addColumn<QString>("scaleMode");
        QTest::addColumn<int>("in");
        QTest::newRow("nvfp4") << "nvfp4" << "" << 96;
        QTest::newRow("nvfp4 four-over-six") << "nvfp4" << "four-over-six" << 96;
        QTest::newRow("nvfp4 partial 172") << "nvfp4" << "" << 172;
        QTest::newRow("mxfp4 (no tensor scale)") << "mxfp4" << "" << 96;
    }
    void sharedGlobalScaleIsTheStackedWeights() {
        QFETCH(QString, format);
        QFETCH(QString, scaleMode);
        QFETCH(int, in);
        MxConfig c = configOf(format);
        if (!scaleMode.isEmpty()) c.scaleMode = mx::parseScaleMode(scaleMode.toStdString());
        const auto a = makeWeight(8, in, 41), b = makeWeight(12, in, 42) * 3.0; // b holds the larger maximum
        const auto stacked = at::cat({a, b}, 0);
        const float g = quant::sharedGlobalScale({a, b});
        const auto whole = quant::quantizeRtn(stacked, c);
        if (!c.isNvfp4()) {
            const auto own = quant::quantizeRtn(a, c);
            QCOMPARE(mismatch(quant::quantizeRtn(a, c, {}, g).dequantized, own.dequantized), -1LL);
            return;
        }
        QCOMPARE(bitsOf(g), bitsOf(quant::staticScales(stacked, c).globalScale));
        QVERIFY(bitsOf(g) != bitsOf(quant::staticScales(a, c).globalScale)); // the case that matters
        const auto part = quant::quantizeRtn(a, c, {}, g);
        QCOMPARE(mismatch(part.dequantized, whole.dequantized.narrow(0, 0, 8)), -1LL);
        QVERIFY(at::equal(part.packed.codes, whole.packed.codes.narrow(0, 0, 8)));
        QVERIFY(at::equal(part.packed.scales, whole.packed.scales.narrow(0, 0, 8)));
        QCOMPARE(bitsOf(part.packed.globalScale), bitsOf(g));
        QCOMPARE(mismatch(mx::unpack(part.packed), part.dequantized), -1LL);
        // GPTQ: its static scales are the stacked weight's rows (no dead input here).
        auto gen = at::detail::createCPUGenerator(43);
        const auto x = at::randn({4 * in, in}, gen, at::kDouble);
        const auto h = x.t().mm(x) / double(x.size(0));
        const auto gptq = quant::quantizeGptq(a, h, c, {}, g);
        QCOMPARE(mismatch(gptq.scales, whole.scales.narrow(0, 0, 8)), -1LL);
        QCOMPARE(bitsOf(gptq.packed.globalScale), bitsOf(g));
        QCOMPARE(mismatch(mx::unpack(gptq.packed), gptq.dequantized), -1LL);
        // Non-finite values do not count (as cpu::nvfp4GlobalScale); all zeros give 1.
        auto withInf = b.clone();
        withInf[0][0] = std::numeric_limits<float>::infinity();
        withInf[1][1] = std::numeric_limits<float>::quiet_NaN();
        QCOMPARE(bitsOf(quant::sharedGlobalScale({a, withInf})),
                 bitsOf(quant::staticScales(at::cat({a, withInf}, 0), c).globalScale));
        QCOMPARE(quant::sharedGlobalScale({at::zeros({2, in})}), 1.0f);
    }

    // 3. A diagonal Hessian has no cross terms: nothing propagates and GPTQ is RTN exactly.
    void gptqDiagonalHessianIsRtn_data() { addFormats(); }
    void gptqDiagonalHessianIsRtn() {
        QFETCH(QString, format);
        QFETCH(int, in);
        const MxConfig c = configOf(format);
        const auto w = makeWeight(12, in, 31);
        auto gen = at::detail::createCPUGenerator(32);
        const auto h = at::diag(0.1 + 10.0 * at::rand({in}, gen, at::kDouble));
        const auto rtn = quant::quantizeRtn(w, c, h);
        for (bool act : {false, true}) {
            quant::GptqOptions o;
            o.columnBlock = 32;
            o.actOrder = act;
            const auto g = quant::quantizeGptq(w, h, c, o);
            const auto i = mismatch(g.dequantized, rtn.dequantized);
            QVERIFY2(i < 0, qPrintable(QString("actOrder %1: ").arg(act) + describe(g.dequantized, rtn.dequantized, i)));
            QVERIFY(at::equal(g.packed.codes, rtn.packed.codes));
            QCOMPARE(g.relativeError, rtn.relativeError);
        }
    }

    // 4. The blocked Cholesky implementation equals the naive column-by-column OBS update. Both
    //    run in float64; their updated weights differ by rounding (~1e-13 relative), which could
    //    only change an output if a weight sat that close to a rounding boundary: with these
    //    fixed seeds the outputs are identical, so the comparison is exact.
    // Both column loops: the fused CPU kernel (quant/GptqKernelCpu, the default) and tensor ops.
    void gptqMatchesNaiveReference_data() {
        QTest::addColumn<QString>("format");
        QTest::addColumn<int>("in");
        QTest::addColumn<bool>("actOrder");
        QTest::addColumn<bool>("tensorOps");
        for (const auto& [f, in] : std::vector<std::pair<const char*, int>>{
                 {"mxfp4", 96}, {"mxint4", 96}, {"nvfp4", 96}, {"mxfp4", 172}, {"nvfp4", 172}})
            for (bool act : {false, true})
                for (bool ops : {false, true})
                    QTest::addRow("%s in %d%s%s", f, in, act ? " act-order" : "", ops ? " tensor ops" : "")
                        << QString(f) << in << act << ops;
    }
    void gptqMatchesNaiveReference() {
        QFETCH(QString, format);
        QFETCH(int, in);
        QFETCH(bool, actOrder);
        QFETCH(bool, tensorOps);
        const MxConfig c = configOf(format);
        const auto w = makeWeight(8, in, 41);
        auto x = correlatedInputs(256, in, 42);
        x.select(1, 5).zero_(); // a dead input
        const auto h = gram(x);
        quant::GptqOptions o;
        o.columnBlock = 32; // several lazy blocks, the last one partial for in = 172
        o.actOrder = actOrder;
        o.backend = tensorOps ? mx::Backend::TensorOps : mx::Backend::Auto;
        const auto g = quant::quantizeGptq(w, h, c, o);
        QCOMPARE(g.deadInputs, int64_t(1));
        const auto want = naiveGptq(w, h, c, actOrder, o.damping);
        const auto i = mismatch(g.dequantized, want);
        QVERIFY2(i < 0, qPrintable(describe(g.dequantized, want, i)));
        QVERIFY(g.dequantized.select(1, 5).abs().max().item<float>() == 0.0f);
        // The reference is not RTN: errors did propagate.
        QVERIFY(!at::equal(want, quant::quantizeRtn(w, c).dequantized));
    }

    // 5. On correlated inputs GPTQ's output error ||(W-Q)X^T||² is well below RTN's, and
    //    relativeError is that error over ||W X^T||² (H = 2/n X^T X).
    void gptqBeatsRtnOnCorrelatedInputs_data() { addFormats(); }
    void gptqBeatsRtnOnCorrelatedInputs() {
        QFETCH(QString, format);
        QFETCH(int, in);
        const MxConfig c = configOf(format);
        const auto w = makeWeight(32, in, 51);
        const auto x = correlatedInputs(512, in, 52);
        quant::HessianAccumulator acc(in);
        acc.add(x);
        const auto h = acc.hessian();
        const auto rtn = quant::quantizeRtn(w, c, h);
        const double eRtn = outputError(w, rtn.dequantized, x);
        const double ref = at::mm(w.to(at::kDouble), x.t()).square().sum().item<double>();
        QVERIFY(std::fabs(rtn.relativeError - eRtn / ref) <= 1e-4 * rtn.relativeError);
        for (bool act : {false, true}) {
            quant::GptqOptions o;
            o.actOrder = act;
            const auto g = quant::quantizeGptq(w, h, c, o);
            const double eGptq = outputError(w, g.dequantized, x);
            qInfo("%s in %d actOrder %d: output error GPTQ/RTN = %.3f", qPrintable(format), in, int(act),
                  eGptq / eRtn);
            QVERIFY2(eGptq < 0.9 * eRtn, qPrintable(QString("GPTQ %1 vs RTN %2").arg(eGptq).arg(eRtn)));
            QVERIFY(std::fabs(g.relativeError - eGptq / ref) <= 1e-4 * g.relativeError);
        }
    }

    // 5b. On the CPU, above 512 output rows relativeError is measured on 512 evenly spaced rows
    //     (linspace(0, rows-1, 512) rounded, as WeightQuantizer.cpp picks them): on those rows it
    //     is the float64 ratio up to float32 summation (each trace a sum of 512 * 64 terms:
    //     512 * 64 * eps/2 relative, as in 5c). As an estimate of the whole it is a ratio
    //     estimator over a systematic sample of independent rows: it lies within 4 standard errors
    //     of the whole, the standard error worked out from the sampled rows' own spread (with the
    //     finite population correction), with and without a Hessian.
    void relativeErrorSampledRows_data() {
        QTest::addColumn<QString>("format");
        QTest::addColumn<int>("rows");
        QTest::newRow("mxfp4 2048 rows") << "mxfp4" << 2048;
        QTest::newRow("nvfp4 1500 rows") << "nvfp4" << 1500;
    }
    void relativeErrorSampledRows() {
        QFETCH(QString, format);
        QFETCH(int, rows);
        const MxConfig c = configOf(format);
        const auto w = makeWeight(rows, 64, 131);
        const auto h = gram(correlatedInputs(256, 64, 132));
        const auto picked = at::linspace(0, double(rows - 1), 512, at::kFloat).round().to(at::kLong);
        const double rounding = 512.0 * 64 * std::numeric_limits<float>::epsilon() / 2;
        for (const bool hessian : {true, false}) {
            const auto r = hessian ? quant::quantizeRtn(w, c, h) : quant::quantizeRtn(w, c);
            const auto H = hessian ? h : at::eye(64, at::kDouble);
            const auto W = w.to(at::kDouble), D = W - r.dequantized.to(at::kDouble);
            const auto num = (at::mm(D, H) * D).sum(1), den = (at::mm(W, H) * W).sum(1); // per row
            const double whole = num.sum().item<double>() / den.sum().item<double>();
            const auto n = num.index_select(0, picked), d = den.index_select(0, picked);
            const double sampled = n.sum().item<double>() / d.sum().item<double>();
            const double m = 512, N = rows;
            const double se = std::sqrt((n - sampled * d).square().sum().item<double>() / (m - 1) / m * (1 - m / N)) /
                              d.mean().item<double>();
            qInfo("Hessian %d: reported %.5f, sampled rows %.5f, whole %.5f, standard error %.5f", int(hessian),
                  r.relativeError, sampled, whole, se);
            QVERIFY2(std::fabs(r.relativeError - sampled) <= rounding * sampled,
                     qPrintable(QString("reported %1 vs its rows in float64 %2").arg(r.relativeError).arg(sampled)));
            QVERIFY2(std::fabs(sampled - whole) <= 4 * se,
                     qPrintable(QString("sampled %1 vs whole %2, standard error %3").arg(sampled).arg(whole).arg(se)));
        }
    }

    // 5c. A GPU measures the same 512 rows: the relative error of an RTN weight on the device is
    //     the CPU's up to float32 summation order (each trace a sum of rows x in terms, relative
    //     rounding below rows * in * eps = 512 * 64 * 6e-8 = 2e-3 in the worst case), well inside
    //     the sampled rows' own distance from the whole (4% for this weight: 5b).
    void relativeErrorSameRowsOnDevice_data() {
        addDeviceColumn();
        for (const QString& dev : acceleratorDevices()) QTest::addRow("mxfp4 2048 rows %s", qPrintable(dev)) << dev;
    }
    void relativeErrorSameRowsOnDevice() {
        QFETCH(QString, device);
        LATMIX_REQUIRE_DEVICE(dev, device);
        const MxConfig c = configOf("mxfp4");
        const auto w = makeWeight(2048, 64, 131);
        const auto h = gram(correlatedInputs(256, 64, 132));
        const double bound = 512.0 * 64 * std::numeric_limits<float>::epsilon() / 2;
        for (const bool hessian : {true, false}) {
            const auto cpu = hessian ? quant::quantizeRtn(w, c, h) : quant::quantizeRtn(w, c);
            const auto got = hessian ? quant::quantizeRtn(w.to(dev), c, h.to(dev)) : quant::quantizeRtn(w.to(dev), c);
            QVERIFY(at::equal(got.packed.codes, cpu.packed.codes)); // the same rounding: only the measure can differ
            const auto W = w.to(at::kDouble), D = W - cpu.dequantized.to(at::kDouble);
            const auto H = hessian ? h : at::eye(64, at::kDouble);
            const double whole = (at::mm(D, H) * D).sum().item<double>() / (at::mm(W, H) * W).sum().item<double>();
            qInfo("Hessian %d: device %.6f, cpu %.6f, whole %.6f", int(hessian), got.relativeError, cpu.relativeError, whole);
            QVERIFY2(std::fabs(got.relativeError - cpu.relativeError) <= bound * cpu.relativeError,
                     qPrintable(QString("device %1 vs cpu %2").arg(got.relativeError).arg(cpu.relativeError)));
            QVERIFY(std::fabs(cpu.relativeError - whole) > 5 * bound * whole); // the rows sampled differ from the whole
        }
    }

    // 6. Every GPTQ output lies on the grid of its own static group scale (the blockScales of the
    //    full W), and the packed form reproduces it bit for bit.
    void gptqOutputOnStaticGrid_data() { addFormats(); }
    void gptqOutputOnStaticGrid() {
        QFETCH(QString, format);
        QFETCH(int, in);
        const MxConfig c = configOf(format);
        const auto w = makeWeight(16, in, 61);
        const auto h = gram(correlatedInputs(256, in, 62));
        quant::GptqOptions o;
        o.actOrder = true;
        const auto g = quant::quantizeGptq(w, h, c, o);
        QCOMPARE(mismatch(g.scales, mx::blockScales(w, c)), -1LL);
        const auto i = mismatch(mx::unpack(g.packed), g.dequantized);
        QVERIFY2(i < 0, qPrintable(describe(mx::unpack(g.packed), g.dequantized, i)));
        const auto q = toVector(g.dequantized), s = toVector(g.scales);
        const std::int64_t nb = g.scales.size(1);
        const double maxElem = mx::elementSpec(c.element()).maxValue;
        int saturated = 0;
        for (std::int64_t r = 0; r < 16; ++r)
            for (std::int64_t j = 0; j < in; ++j) {
                const float v = q[r * in + j], sc = s[r * nb + j / c.blockSize];
                const double e = mx::ref::quantizeElement(static_cast<double>(v) / sc, c.element());
                QVERIFY2(sameFloat(static_cast<float>(e) * sc, v),
                         qPrintable(QString("[%1, %2] = %3 is off the grid of scale %4").arg(r).arg(j).arg(v).arg(sc)));
                saturated += std::fabs(e) == maxElem;
            }
        QVERIFY(saturated > 0); // the group maxima map to +-max (floor scales), so the check has teeth
    }

    // GPTQ with w and H on cuda:0 against GPTQ on the CPU (both float64 with float32 rounding onto
    // the grid), with either column loop there: the fused kernel on host copies of each block (the
    // default) or tensor ops on the device. The static scales come from core/mx (tensor ops there,
    // bit for bit with the CPU kernel): identical. The working weights differ only by float64
    // rounding (Cholesky, matmul order, a GPU's fused multiply-adds), which changes a code only
    // where a value sits at a rounding tie, and such a change propagates along its row: tolerance
    // >= 99.9% bitwise-identical quantized values, relative output error within 1e-3 of the CPU's
    // (relative).
    void gptqOnDeviceMatchesCpu_data() {
        QTest::addColumn<QString>("format");
        QTest::addColumn<int>("in");
        QTest::addColumn<bool>("actOrder");
        QTest::addColumn<bool>("tensorOps");
        addDeviceColumn();
        for (const QString& dev : acceleratorDevices())
            for (bool ops : {false, true}) {
                const char* loop = ops ? "tensor ops" : "fused";
                QTest::addRow("mxfp4 in 256 %s %s", loop, qPrintable(dev)) << "mxfp4" << 256 << false << ops << dev;
                QTest::addRow("mxint4 in 256 act-order %s %s", loop, qPrintable(dev))
                    << "mxint4" << 256 << true << ops << dev;
                QTest::addRow("nvfp4 in 172 act-order %s %s", loop, qPrintable(dev))
                    << "nvfp4" << 172 << true << ops << dev;
            }
    }
    void gptqOnDeviceMatchesCpu() {
        QFETCH(QString, format);
        QFETCH(int, in);
        QFETCH(bool, actOrder);
        QFETCH(bool, tensorOps);
        QFETCH(QString, device);
        LATMIX_REQUIRE_DEVICE(dev, device);
        const MxConfig c = configOf(format);
        const auto w = makeWeight(64, in, 111);
        auto x = correlatedInputs(512, in, 112);
        x.select(1, 5).zero_(); // a dead input
        const auto h = gram(x);
        quant::GptqOptions o;
        o.columnBlock = 64; // several lazy blocks
        o.actOrder = actOrder;
        const auto cpu = quant::quantizeGptq(w, h, c, o);
        o.backend = tensorOps ? mx::Backend::TensorOps : mx::Backend::Auto;
        const auto got = quant::quantizeGptq(w.to(dev), h.to(dev), c, o);
        QVERIFY(got.dequantized.device().is_cpu() && got.scales.device().is_cpu()); // results come back on the CPU
        QCOMPARE(got.deadInputs, cpu.deadInputs);
        QCOMPARE(mismatch(got.scales, cpu.scales), -1LL);
        QVERIFY(at::equal(got.packed.scales, cpu.packed.scales));
        QCOMPARE(bitsOf(got.packed.globalScale), bitsOf(cpu.packed.globalScale));
        const auto a = toVector(got.dequantized), b = toVector(cpu.dequantized);
        QCOMPARE(a.size(), b.size());
        std::size_t same = 0;
        for (std::size_t i = 0; i < a.size(); ++i) same += sameFloat(a[i], b[i]);
        QVERIFY2(double(same) >= 0.999 * double(a.size()),
                 qPrintable(QString("%1 of %2 quantized values equal the CPU's").arg(same).arg(a.size())));
        QVERIFY2(std::fabs(got.relativeError - cpu.relativeError) <= 1e-3 * cpu.relativeError,
                 qPrintable(QString("relative error %1 vs CPU %2").arg(got.relativeError).arg(cpu.relativeError)));
        QVERIFY(!at::equal(cpu.dequantized, quant::quantizeRtn(w, c).dequantized)); // GPTQ did propagate errors
    }

    // Dead inputs (H_ii == 0) are dropped: weight 0, finite everything else, counted.
    void gptqDeadInputs() {
        const MxConfig c = configOf("mxfp4");
        const auto w = makeWeight(8, 64, 71);
        auto x = correlatedInputs(128, 64, 72);
        x.select(1, 2).zero_();
        x.select(1, 40).zero_();
        const auto g = quant::quantizeGptq(w, gram(x), c);
        QCOMPARE(g.deadInputs, int64_t(2));
        QVERIFY(at::isfinite(g.dequantized).all().item<bool>());
        QCOMPARE(g.dequantized.select(1, 2).abs().max().item<float>(), 0.0f);
        QCOMPARE(g.dequantized.select(1, 40).abs().max().item<float>(), 0.0f);
    }

    // 7. H = 2/n Σ x xᵀ over every row of every batch, in float64.
    void hessianAccumulator() {
        const std::int64_t in = 20;
        auto gen = at::detail::createCPUGenerator(81);
        const auto a = at::randn({3, 7, in}, gen);                 // float32, 3-D
        const auto b = at::randn({10, in}, gen, at::kDouble) * 3.0; // float64
        quant::HessianAccumulator acc(in);
        acc.add(a);
        acc.add(b);
        acc.add(at::empty({0, in}));
        QCOMPARE(acc.rows(), int64_t(31));
        const auto x = at::cat({a.reshape({-1, in}).to(at::kDouble), b});
        const auto want = at::mm(x.t(), x) * (2.0 / 31.0);
        const auto h = acc.hessian();
        QVERIFY(h.scalar_type() == at::kDouble);
        QVERIFY((h - want).abs().max().item<double>() <= 1e-12 * want.abs().max().item<double>());
        // take() gives the same matrix and leaves the accumulator empty; it sums anew after.
        const auto taken = acc.take();
        QVERIFY(at::equal(taken, h));
        QCOMPARE(acc.rows(), int64_t(0));
        QVERIFY_THROWS_EXCEPTION(std::logic_error, acc.take());
        acc.add(b);
        const auto wantB = at::mm(b.t(), b) * (2.0 / 10.0);
        QVERIFY((acc.hessian() - wantB).abs().max().item<double>() <= 1e-12 * wantB.abs().max().item<double>());
        acc.reset();
        QCOMPARE(acc.rows(), int64_t(0));
        QVERIFY_THROWS_EXCEPTION(std::logic_error, acc.hessian());
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, quant::HessianAccumulator(0));
        QVERIFY(invalidArgument([&] { acc.add(at::randn({4, in + 1})); }).contains("[..., 20]"));
        auto bad = at::randn({4, in});
        bad.index_put_({2, 7}, std::nanf(""));
        const QString why = invalidArgument([&] { acc.add(bad); });
        QVERIFY2(why.contains("NaN/Inf (row/input first at [2, 7] (nan), 1 of 80 values)") && !why.contains("HessianAccumulator"),
                 qPrintable(why));
        QCOMPARE(acc.rows(), int64_t(0)); // rejected batches leave nothing behind
    }

    // Timing on a stories110M-sized down_proj (only with LATMIX_BENCH set).

    // Bad inputs are rejected with messages that say what is wrong.
    void badInputs() {
        const MxConfig c = configOf("mxfp4");
        const auto w = makeWeight(4, 64, 91);
        const auto h = gram(correlatedInputs(64, 64, 92));
        QVERIFY(invalidArgument([&] { quant::quantizeRtn(w.reshape({-1}), c); }).contains("2-D"));
        auto wNan = w.clone();
        wNan.index_put_({1, 9}, std::nanf(""));
        const QString m = invalidArgument([&] { quant::quantizeGptq(wNan, h, c); });
        QVERIFY2(m.contains("weight") && m.contains("NaN/Inf") && m.contains("[1, 9]"), qPrintable(m));
        QVERIFY(invalidArgument([&] { quant::quantizeGptq(w, h.narrow(0, 0, 63), c); }).contains("Hessian"));
        auto hInf = h.clone();
        hInf.index_put_({3, 4}, INFINITY);
        QVERIFY(invalidArgument([&] { quant::quantizeGptq(w, hInf, c); })
                    .contains("Hessian holds NaN/Inf (first at [3, 4] (inf), 1 of 4096 values)"));
        QVERIFY(invalidArgument([&] { quant::quantizeRtn(w, c, hInf); }).contains("Hessian"));
        QVERIFY(invalidArgument([&] { quant::quantizeGptq(w, -h, c); }).contains("negative diagonal"));
        quant::GptqOptions o;
        o.columnBlock = 0;
        QVERIFY(invalidArgument([&] { quant::quantizeGptq(w, h, c, o); }).contains("columnBlock"));
        o = {};
        o.damping = -1;
        QVERIFY(invalidArgument([&] { quant::quantizeGptq(w, h, c, o); }).contains("damping"));
        const auto s = mx::blockScales(w, c);
        QVERIFY(invalidArgument([&] { quant::quantizeWithScales(w, s.narrow(1, 0, 1), c); }).contains("scales"));
        QVERIFY(invalidArgument([&] { quant::quantizeWithScales(w, s * 0, c); }).contains("positive"));
        // packWithScales: values off the grid, scales that are not powers of two.
        QVERIFY(invalidArgument([&] { quant::packWithScales(w, s, c); }).contains("not on the grid"));
        const auto q = mx::fakeQuantize(w, c);
        QVERIFY(invalidArgument([&] { quant::packWithScales(q, s * 1.5, c); }).contains("power of two"));
        QVERIFY(invalidArgument([&] { quant::packWithScales(q, s, c, 2.0f); }).contains("NVFP4"));
    }
};

QTEST_APPLESS_MAIN(TestWeightQuant)
#include "tst_weightquant.moc"
