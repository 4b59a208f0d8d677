// metrics/ActivationProfile (the activation view's numbers): a hand-worked MXFP4 case with
// blocks of 2 (every channel maximum, norm, histogram count, block value, shared exponent and
// block error worked on paper), and for fixed transforms of real width the after side against a
// float64 computation written here with loops and the scalar MX reference (mx/MxReference):
// channel maxima, token norms (an orthogonal T keeps them: an exact identity), histogram,
// the token's quantized values and scale exponents. Bad input names what is wrong.
#include "metrics/ActivationProfile.h"
#include "metrics/TransformMetrics.h"
#include "mx/MxReference.h"
#include "transforms/AffineTransform.h"
#include "transforms/LearnedTransforms.h"

#include <ATen/ATen.h>
// Qt after ATen: Qt's `slots` macro breaks ATen headers.
#include "TestSupport.h"

#include <QtTest>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

using namespace latmix;

namespace {

std::vector<double> toVector(const at::Tensor& t) {
    const auto c = t.to(at::kDouble).contiguous().cpu();
    return {c.data_ptr<double>(), c.data_ptr<double>() + c.numel()};
}

at::Tensor rows(const std::vector<std::vector<double>>& r) {
    auto t = at::empty({static_cast<std::int64_t>(r.size()), static_cast<std::int64_t>(r[0].size())}, at::kDouble);
    for (std::size_t i = 0; i < r.size(); ++i)
        for (std::size_t j = 0; j < r[0].size(); ++j) t[i][j] = r[i][j];
    return t;
}

mx::MxConfig mxfp4(int block) {
    mx::MxConfig c;
    c.format = mx::Format::MxFp4;
    c.blockSize = block;
    return c;
}

} // namespace

class TestActivationProfile : public QObject {
    Q_OBJECT

private slots:
    // x = [[1, -2.6, 0, 4], [3, 0.5, -1, 0]], MXFP4 in blocks of 2, token 0, 4 bins, T = identity.
    //  channel maxima |.|: [3, 2.6, 1, 4] -> top channels 3, 0, 1, 2
    //  token norms: sqrt(1 + 6.76 + 16) = sqrt(23.76), sqrt(9 + .25 + 1) = sqrt(10.25)
    //  histogram over [-4, 4] in bins of 2: -2.6 in [-4, -2) -> bin 0; -1 in [-2, 0) -> bin 1;
    //    0, 0, 0.5, 1 in [0, 2) -> bin 2; 3, 4 -> bin 3 (4 closes the last)
    //  token 0, block [1, -2.6]: amax 2.6, floor(log2 2.6) = 1, scale 2^(1-2) = 0.5: 2 -> 2,
    //    -5.2 -> -6 (nearer 6 than 4), so [1, -3]; E_B = (0 + 0.16)/2 = 0.08; log2 scale -1
    //  block [0, 4]: amax 4, scale 2^(2-2) = 1: [0, 4] exactly; E_B = 0; log2 scale 0
    //  token 1, block [3, 0.5]: scale 2^(1-2) = 0.5: 6 -> 6, 1 -> 1: exact; block [-1, 0]:
    //    scale 2^(0-2) = 0.25: -4 -> -4: exact. All-row E_B = [0.08/2, 0] = [0.04, 0]
    //  E(T) = (1/d) mean over rows of ‖x − x̂‖² = (0.16/4 + 0)/2 = 0.02
    void handWorked() {
        const auto x = rows({{1, -2.6, 0, 4}, {3, 0.5, -1, 0}});
        auto t = transforms::makeTransform("none", 4, transforms::TransformOptions{});
        metrics::ActivationProfileOptions o;
        o.format = mxfp4(2);
        o.histogramBins = 4;
        o.topChannels = 4;
        const auto p = metrics::profileActivations(x, *t, o, "hand");
        // Exact where the value is an input, |.|, a max, a count or an MX grid point (T = identity);
        // norms and errors are float64 of a few terms: 1e-12.
        for (const auto* side : {&p.before, &p.after}) {
            const auto& s = *side;
            QCOMPARE(toVector(s.channelAbsMax), (std::vector<double>{3, 2.6, 1, 4}));
            QCOMPARE(s.topChannels, (std::vector<std::int64_t>{3, 0, 1, 2}));
            const auto norms = toVector(s.tokenNorm);
            QVERIFY(std::fabs(norms[0] - std::sqrt(23.76)) < 1e-12 && std::fabs(norms[1] - std::sqrt(10.25)) < 1e-12);
            QCOMPARE(toVector(s.histogramEdges), (std::vector<double>{-4, -2, 0, 2, 4}));
            QCOMPARE(toVector(s.histogramCounts), (std::vector<double>{1, 1, 4, 2}));
            QCOMPARE(toVector(s.tokenValues), (std::vector<double>{1, -2.6, 0, 4}));
            QCOMPARE(toVector(s.tokenQuantized), (std::vector<double>{1, -3, 0, 4}));
            QCOMPARE(toVector(s.tokenScaleLog2), (std::vector<double>{-1, 0}));
            const auto tokenErr = toVector(s.tokenBlockError), allErr = toVector(s.blockError);
            QVERIFY(std::fabs(tokenErr[0] - 0.08) < 1e-12 && tokenErr[1] == 0);
            QVERIFY(std::fabs(allErr[0] - 0.04) < 1e-12 && allErr[1] == 0);
            QVERIFY(std::fabs(s.mse - 0.02) < 1e-12);
        }
        QCOMPARE(p.rows, std::int64_t(2));
        QCOMPARE(p.dim, std::int64_t(4));
    }

    // Heavy-tailed rows with two "massive" channels; the after side against loops over
    // A = t.matrix() in float64 and the scalar MX reference.
    void afterSideAgainstLoops_data() {
        QTest::addColumn<QString>("kind");
        QTest::addColumn<int>("dim");
        QTest::addColumn<int>("block");
        QTest::newRow("hadamard 64") << "hadamard" << 64 << 32;
        QTest::newRow("block-hadamard 96, block 32") << "block-hadamard" << 96 << 32;
        QTest::newRow("orthogonal 48, block 16") << "orthogonal" << 48 << 16;
        QTest::newRow("none 40 (partial block)") << "none" << 40 << 16;
    }
    void afterSideAgainstLoops() {
        QFETCH(QString, kind);
        QFETCH(int, dim);
        QFETCH(int, block);
        const int n = 24, bins = 31;
        std::mt19937 rng(7);
        std::student_t_distribution<double> heavy(3.0);
        auto x = at::empty({n, dim}, at::kDouble);
        for (int r = 0; r < n; ++r)
            for (int c = 0; c < dim; ++c) x[r][c] = heavy(rng) * (c == 5 ? 40.0 : c == dim - 3 ? 25.0 : 1.0);
        transforms::TransformOptions to;
        to.blockSize = block;
        to.seed = 3;
        to.dtype = at::kDouble;
        auto t = transforms::makeTransform(kind.toStdString(), dim, to);
        metrics::ActivationProfileOptions o;
        o.format = mxfp4(block);
        o.token = 11;
        o.histogramBins = bins;
        const auto p = metrics::profileActivations(x, *t, o, "p");

        const auto a = toVector(t->matrix()), xv = toVector(x);
        std::vector<double> y(static_cast<std::size_t>(n * dim), 0.0);
        for (int r = 0; r < n; ++r)
            for (int i = 0; i < dim; ++i)
                for (int j = 0; j < dim; ++j) y[r * dim + i] += a[i * dim + j] * xv[r * dim + j];
        std::vector<double> colMax(dim, 0.0), norm(n, 0.0), normX(n, 0.0);
        double range = 0;
        for (int r = 0; r < n; ++r)
            for (int i = 0; i < dim; ++i) {
                const double v = y[r * dim + i];
                colMax[i] = std::max(colMax[i], std::fabs(v));
                norm[r] += v * v;
                normX[r] += xv[r * dim + i] * xv[r * dim + i];
                range = std::max(range, std::fabs(v));
            }
        // float64 both sides, d ≤ 96-term products: ~1e-15 of the range; 1e-9 covers BLAS order and
        // the float64 rounding of an orthogonal T's norm preservation.
        const auto gotMax = toVector(p.after.channelAbsMax), gotNorm = toVector(p.after.tokenNorm);
        for (int i = 0; i < dim; ++i) QVERIFY2(std::fabs(gotMax[i] - colMax[i]) < 1e-9 * range, qPrintable(QString::number(i)));
        for (int r = 0; r < n; ++r) {
            QVERIFY(std::fabs(gotNorm[r] - std::sqrt(norm[r])) < 1e-9 * std::sqrt(norm[r]));
            // Orthogonal transforms keep every token's norm: before and after agree.
            QVERIFY(std::fabs(toVector(p.before.tokenNorm)[r] - std::sqrt(normX[r])) < 1e-9 * std::sqrt(normX[r]));
            QVERIFY(std::fabs(gotNorm[r] - toVector(p.before.tokenNorm)[r]) < 1e-9 * gotNorm[r]);
        }
        QCOMPARE(p.after.topChannels.size(), std::size_t(8));
        for (std::size_t k = 1; k < p.after.topChannels.size(); ++k)
            QVERIFY(gotMax[p.after.topChannels[k - 1]] >= gotMax[p.after.topChannels[k]]);
        QCOMPARE(gotMax[p.after.topChannels[0]], *std::max_element(gotMax.begin(), gotMax.end())); // the same values
        // Histogram: every value counted once, each in the bin whose edges hold it (values within
        // 1e-9 of an edge are allowed either neighbour).
        const auto counts = toVector(p.after.histogramCounts), edges = toVector(p.after.histogramEdges);
        QCOMPARE(int(counts.size()), bins);
        QVERIFY(std::fabs(edges.front() + range) < 1e-12 * range && std::fabs(edges.back() - range) < 1e-12 * range);
        std::vector<double> want(bins, 0.0), slack(bins, 0.0);
        for (double v : y) {
            int b = 0;
            while (b < bins - 1 && v >= edges[b + 1]) ++b;
            want[b] += 1;
            if (b + 1 < bins && std::fabs(v - edges[b + 1]) < 1e-9 * range) slack[b] += 1, slack[b + 1] += 1;
            if (b > 0 && std::fabs(v - edges[b]) < 1e-9 * range) slack[b] += 1, slack[b - 1] += 1;
        }
        double total = 0;
        for (int b = 0; b < bins; ++b) {
            QVERIFY2(std::fabs(counts[b] - want[b]) <= slack[b], qPrintable(QString("bin %1: %2 vs %3").arg(b).arg(counts[b]).arg(want[b])));
            total += counts[b];
        }
        QCOMPARE(total, double(n * dim));
        // The token's blocks: the scalar reference quantizer on y_t (float32, as the kernels run).
        std::vector<float> yt(y.begin() + o.token * dim, y.begin() + (o.token + 1) * dim);
        const auto q = mx::ref::fakeQuantize(yt, dim, o.format);
        const auto gotQ = toVector(p.after.tokenQuantized), gotY = toVector(p.after.tokenValues);
        const auto scales = toVector(p.after.tokenScaleLog2);
        const int nb = (dim + block - 1) / block;
        QCOMPARE(int(scales.size()), nb);
        for (int i = 0; i < dim; ++i) {
            QVERIFY(std::fabs(gotY[i] - y[o.token * dim + i]) < 1e-9 * range);
            // MX grid values of the same y_t (loops vs BLAS differ by ~1e-16, far below a grid step): in
            // practice equal; the slack is not a rounding bound, a wrong code is off by a whole step.
            QVERIFY2(std::fabs(gotQ[i] - q[i]) <= 1e-5 * std::fabs(q[i]) + 1e-6,
                     qPrintable(QString("channel %1: %2 vs %3").arg(i).arg(gotQ[i]).arg(q[i])));
        }
        for (int b = 0; b < nb; ++b) {
            double amax = 0;
            for (int i = b * block; i < std::min(dim, (b + 1) * block); ++i) amax = std::max(amax, double(std::fabs(yt[i])));
            QCOMPARE(scales[b], double(mx::ref::sharedExponent(amax, mx::ElementFormat::E2M1, o.format.scaleMode))); // integer
        }
        // The errors are SPEC §3's (TransformMetrics' own tests check those against loops). Exact:
        // the profile calls the same functions on the same rows.
        QCOMPARE(p.after.mse, metrics::transformationMse(x, *t, o.format));
        QVERIFY(at::equal(p.after.blockError, metrics::perBlockError(x, *t, o.format)));
    }

    // Two captures of one point: each side profiled as it is. With after = x A^T for an
    // orthogonal A, the after side is profileActivations' after side exactly (the same rows).
    void pairOfCaptures() {
        const auto x = rows({{1, -2.6, 0, 4}, {3, 0.5, -1, 0}, {0.25, 7, -3, 2}});
        transforms::TransformOptions to;
        to.dtype = at::kDouble;
        to.blockSize = 2;
        auto t = transforms::makeTransform("hadamard", 4, to);
        metrics::ActivationProfileOptions o;
        o.format = mxfp4(2);
        o.token = 2;
        o.histogramBins = 5;
        const auto single = metrics::profileActivations(x, *t, o, "p");
        const auto pair = metrics::profileActivationPair(x, t->forward(x), "run's model", o, "p");
        QCOMPARE(QString::fromStdString(pair.transform), QStringLiteral("run's model"));
        for (auto get : {+[](const metrics::ActivationSide& s) { return s.channelAbsMax; },
                         +[](const metrics::ActivationSide& s) { return s.tokenNorm; },
                         +[](const metrics::ActivationSide& s) { return s.histogramCounts; },
                         +[](const metrics::ActivationSide& s) { return s.tokenQuantized; },
                         +[](const metrics::ActivationSide& s) { return s.tokenScaleLog2; }}) {
            // float64, the same T(x) both ways (H4's ±1/2 entries are exact): rounding only
            QVERIFY(at::allclose(get(pair.before), get(single.before), 0, 1e-12));
            QVERIFY(at::allclose(get(pair.after), get(single.after), 0, 1e-12));
        }
        // The pair's after error is the MX error of T(x) in its own coordinates; for an
        // orthogonal T that is E(T) (‖x − T⁻¹Q(Tx)‖ = ‖Tx − Q(Tx)‖).
        QVERIFY(std::fabs(pair.after.mse - single.after.mse) < 1e-12);
        const QString e = test::errorOf([&] { metrics::profileActivationPair(x, x.narrow(0, 0, 2), "r", o, "p"); });
        QVERIFY2(e.contains("p: the two captures differ in shape ([3, 4] and [2, 4])"), qPrintable(e));
    }

    void badInput_data() {
        QTest::addColumn<int>("token");
        QTest::addColumn<int>("transformDim");
        QTest::addColumn<bool>("nan");
        QTest::addColumn<QString>("message");
        QTest::newRow("token out of range") << 9 << 8 << false << "pt: token 9 is not one of the 4 captured tokens (0..3)";
        QTest::newRow("width mismatch") << 0 << 16 << false << "pt: 8 channels but transform";
        QTest::newRow("NaN") << 0 << 8 << true << "activations of point 'pt' hold 1 NaN/Inf";
    }
    void badInput() {
        QFETCH(int, token);
        QFETCH(int, transformDim);
        QFETCH(bool, nan);
        QFETCH(QString, message);
        auto x = at::ones({4, 8}, at::kFloat);
        if (nan) x[2][3] = std::nan("");
        auto t = transforms::makeTransform("none", transformDim, transforms::TransformOptions{});
        metrics::ActivationProfileOptions o;
        o.format = mxfp4(8);
        o.token = token;
        const QString e = test::errorOf([&] { metrics::profileActivations(x, *t, o, "pt"); });
        QVERIFY2(e.contains(message), qPrintable(e));
    }
};

QTEST_GUILESS_MAIN(TestActivationProfile)
#include "tst_activationprofile.moc"
