// Fixed and learned affine transforms (SPEC §2): orthogonality, exact inverses through
// triangular solves, |det A| = Π|s|, gradients through LU / QR (matrix exponential) and the
// inverses, block-diagonal remainders, seeding, initialisations (paper Table 10).
#include "DeviceRows.h"

#include "transforms/BlockDiagonal.h"
#include "transforms/FixedTransforms.h"
#include "transforms/Hadamard.h"
#include "transforms/LearnedTransforms.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <QtTest>

#include <cmath>
#include <random>
#include <stdexcept>

using namespace latmix::transforms;
using namespace latmix::test;

namespace {

const std::vector<std::int64_t> kSizes{64, 96, 100, 128}; // 100: remainder block of 4 (B = 32)

double maxAbs(const at::Tensor& t) { return t.detach().abs().max().item<double>(); }

// Moves every learned parameter off its initial value (scale · N(0, 1)), so that L, U, G, R, s, v
// are all exercised (at initialisation G = 0, U and R are nearly 0, v = 0).
void perturb(AffineTransform& t, double scale, std::uint64_t seed) {
    at::NoGradGuard noGrad;
    for (const auto& p : t.parameters()) {
        const auto n = seededGaussian(1, p.numel(), seed++).reshape(p.sizes()).to(p.scalar_type());
        p.add_(n * scale);
    }
}

at::ScalarType dtypeOf(const QString& s) { return s == "float64" ? at::kDouble : at::kFloat; }

std::unique_ptr<AffineTransform> make(const QString& kind, std::int64_t dim, at::ScalarType dtype, std::uint64_t seed = 1) {
    TransformOptions o;
    o.dtype = dtype;
    o.seed = seed;
    return makeTransform(kind.toStdString(), dim, o);
}

bool isFixed(const QString& kind) { return !kind.startsWith("learned-"); }

} // namespace

class TestTransforms : public QObject {
    Q_OBJECT

    // One row per learned kind (so a new kind is tested too) and size.
    static void learnedKindRows(std::initializer_list<qint64> dims) {
        QTest::addColumn<QString>("kind");
        QTest::addColumn<qint64>("dim");
        for (const std::string& kind : transformKinds())
            if (isLearnedKind(kind))
                for (qint64 d : dims) QTest::addRow("%s %lld", kind.c_str(), d) << QString::fromStdString(kind) << d;
    }

private slots:
    void kinds() {
        const auto k = transformKinds();
        QCOMPARE(k.size(), size_t(10));
        for (const auto& kind : k) {
            auto t = make(QString::fromStdString(kind), 40, at::kFloat);
            QCOMPARE(t->dim(), std::int64_t(40));
            QVERIFY(!t->name().empty());
            QCOMPARE(isLearnedKind(kind), !t->parameters().empty());
            for (const auto& p : t->parameters()) QVERIFY(p.requires_grad() && p.is_leaf());
        }
        auto count = [](const char* kind) { return int(make(kind, 16, at::kFloat)->parameters().size()); };
        QCOMPARE(count("learned-rotation"), 1);      // G
        QCOMPARE(count("learned-rotation-bias"), 2); // G, v
        QCOMPARE(count("learned-invertible"), 3);    // L, U, log|s|
        QCOMPARE(count("learned-affine-lu"), 4);     // L, U, log|s|, v
        QCOMPARE(count("learned-affine-qr"), 4);     // G, R, log|s|, v
    }

    void unknownKindOrInit() {
        try {
            makeTransform("spin", 64, {});
            QFAIL("expected std::invalid_argument");
        } catch (const std::invalid_argument& e) {
            const QString msg = e.what();
            QVERIFY2(msg.contains("spin") && msg.contains("block-hadamard") && msg.contains("learned-affine-qr"), e.what());
        }
        TransformOptions o;
        o.init = "noise";
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, makeTransform("learned-affine-lu", 64, o));
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, makeTransform("none", 0, {}));
        try {
            makeTransform("hadamard", 172, {});
            QFAIL("expected std::invalid_argument");
        } catch (const std::invalid_argument& e) {
            QVERIFY2(QString(e.what()).contains("172") && QString(e.what()).contains("block"), e.what());
        }
        o = {};
        o.blockSize = 6; // no Hadamard of order 6
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, makeTransform("block-hadamard", 64, o));
    }

    // Every fixed transform (and the learned rotation, wherever G is) is orthogonal in float32.
    void orthogonal_data() {
        QTest::addColumn<QString>("kind");
        QTest::addColumn<qint64>("dim");
        for (const char* kind : {"none", "hadamard", "block-hadamard", "orthogonal", "block-orthogonal", "learned-rotation",
                                 "learned-rotation-bias"})
            for (auto d : kSizes) QTest::addRow("%s %lld", kind, static_cast<long long>(d)) << QString(kind) << qint64(d);
    }
    void orthogonal() {
        QFETCH(QString, kind);
        QFETCH(qint64, dim);
        auto t = make(kind, dim, at::kFloat);
        perturb(*t, 0.05, 7);
        const auto a = t->matrix().detach();
        QCOMPARE(a.scalar_type(), at::kFloat);
        const double dev = maxAbs(at::matmul(a.t(), a) - at::eye(dim, at::kFloat));
        // Fixed: float64 matrices rounded to float32. Learned rotation: float32 matrix exponential
        // of the perturbed G, a few ulps more. Scale: an entry of AᵀA is a d-term float32 dot
        // product of unit columns, off by at most d·2^-24 ≈ 7.6e-6 at d = 128 in any order.
        QVERIFY2(dev <= (isFixed(kind) ? 1e-5 : 5e-5), qPrintable(QString("|AᵀA - I|max = %1").arg(dev)));
        QVERIFY(!t->logAbsScales().defined());
    }

    // T⁻¹(T(x)) = x with the bias, perturbed parameters and a batch of rows shaped [2, 3, d], on
    // the CPU and on cuda:0 (the transform perturbed on the CPU, then moved with to()).
    // Tolerances, relative to the largest value: forward = x Aᵀ + v 1e-5 (float32) / 1e-12
    // (float64); round trip 1e-5 / 1e-10 on every device; the device's forward against the CPU's
    // 1e-5 / 1e-12 (float32: A = L·U or Q0·expm(G)·R is built on the device, other summation order).
    // Origin: each value is a d-term (d ≤ 128) product, rounding ~2^-24·√d ≈ 7e-7 of the largest
    // (2^-53·√d in float64), the round trip times cond(A), a few here (perturbation 0.01): ~10× margin.
    void roundTrip_data() {
        QTest::addColumn<QString>("kind");
        QTest::addColumn<qint64>("dim");
        QTest::addColumn<QString>("dtype");
        addDeviceColumn();
        for (const auto& kind : transformKinds())
            for (auto d : kSizes)
                for (const char* dt : {"float32", "float64"})
                    for (const QString& dev : testDevices()) // the cpu rows keep their old names
                        QTest::addRow("%s %lld %s%s", kind.c_str(), static_cast<long long>(d), dt,
                                      dev == "cpu" ? "" : qPrintable(" " + dev))
                            << QString::fromStdString(kind) << qint64(d) << QString(dt) << dev;
    }
    void roundTrip() {
        QFETCH(QString, kind);
        QFETCH(qint64, dim);
        QFETCH(QString, dtype);
        QFETCH(QString, device);
        LATMIX_REQUIRE_DEVICE(dev, device);
        const auto st = dtypeOf(dtype);
        const double tol = st == at::kDouble ? 1e-12 : 1e-5;
        auto t = make(kind, dim, st);
        perturb(*t, 0.01, 11);
        const auto xCpu = (seededGaussian(6, dim, 5) * 3.0).to(st).reshape({2, 3, dim});
        const auto yCpu = t->forward(xCpu).detach();
        t->to(dev);
        const auto x = xCpu.to(dev);
        const auto y = t->forward(x);
        QCOMPARE(y.sizes(), x.sizes());
        QCOMPARE(y.scalar_type(), st);
        QVERIFY(y.device() == dev);
        // forward = x Aᵀ + v
        auto want = at::matmul(x, t->matrix().detach().t());
        if (t->bias().defined()) want = want + t->bias().detach();
        QVERIFY(maxAbs(y - want) <= tol * maxAbs(want));
        const double vsCpu = maxRelativeDiff(y, yCpu);
        QVERIFY2(vsCpu <= tol, qPrintable(QString("forward on %1 vs CPU: relative %2").arg(device).arg(vsCpu)));
        const auto back = t->inverse(y);
        QCOMPARE(back.sizes(), x.sizes());
        QCOMPARE(back.scalar_type(), st);
        QVERIFY(back.device() == dev);
        const double rel = maxAbs(back - x) / maxAbs(x);
        QVERIFY2(rel <= (st == at::kDouble ? 1e-10 : 1e-5), qPrintable(QString("relative error %1").arg(rel)));
    }

    // inverseMatrix() is A⁻¹ (checked against A and against inverse() on rows), for every kind, on
    // the CPU and on cuda:0 (tolerance 1e-4 float32 / 1e-10 float64, relative to max(1, |x|max),
    // also for the device's A⁻¹ against the CPU's). Origin: A and A⁻¹ are each rounded and built
    // from d ≤ 128-term products, ≲ cond(A)·d·2^-24 ≈ 1e-5 in float32 (products checked in float64).
    void inverseMatrix_data() { roundTrip_data(); }
    void inverseMatrix() {
        QFETCH(QString, kind);
        QFETCH(qint64, dim);
        QFETCH(QString, dtype);
        QFETCH(QString, device);
        LATMIX_REQUIRE_DEVICE(dev, device);
        const auto st = dtypeOf(dtype);
        auto t = make(kind, dim, st);
        perturb(*t, 0.01, 13);
        const auto aiCpu = t->inverseMatrix().detach().to(at::kDouble);
        t->to(dev);
        const auto a = t->matrix().detach().to(at::kDouble), ai = t->inverseMatrix().detach().to(at::kDouble);
        QVERIFY(ai.device() == dev);
        const double tol = st == at::kDouble ? 1e-10 : 1e-4;
        QVERIFY(maxAbs(at::matmul(ai, a) - at::eye(dim, a.options())) <= tol);
        QVERIFY(maxAbs(ai.cpu() - aiCpu) <= tol * std::max(1.0, maxAbs(aiCpu)));
        // Rows: inverse(y) = (y - v) A⁻ᵀ.
        const auto y = seededGaussian(4, dim, 3).to(st).to(dev);
        auto want = y.to(at::kDouble);
        if (t->bias().defined()) want = want - t->bias().detach().to(at::kDouble);
        want = at::matmul(want, ai.t());
        QVERIFY(maxAbs(t->inverse(y).to(at::kDouble) - want) <= tol * std::max(1.0, maxAbs(want)));
    }

    // |det A| = Π|s| (paper §3, the volume regulariser's premise), against LAPACK's slogdet.
    void determinant_data() {
        QTest::addColumn<QString>("kind");
        QTest::addColumn<qint64>("dim");
        for (const char* kind : {"learned-invertible", "learned-affine-lu", "learned-affine-qr"})
            for (auto d : kSizes) QTest::addRow("%s %lld", kind, static_cast<long long>(d)) << QString(kind) << qint64(d);
    }
    void determinant() {
        QFETCH(QString, kind);
        QFETCH(qint64, dim);
        auto t = make(kind, dim, at::kDouble);
        perturb(*t, 0.02, 3);
        const auto logS = t->logAbsScales().detach();
        QVERIFY(logS.defined());
        QCOMPARE(logS.size(0), dim);
        // the perturbation moved the volume: Σ of d seeded 0.02·N(0, 1) draws, ~0.02·√d ≥ 0.16
        QVERIFY(std::abs(logS.sum().item<double>()) > 1e-3);
        at::Tensor sign, logAbsDet;
        std::tie(sign, logAbsDet) = at::linalg_slogdet(t->matrix().detach());
        QVERIFY(sign.item<double>() != 0);
        // float64: LAPACK's LU sums d ≤ 128 logs of pivots, ~d·cond·2^-53 ≈ 1e-13 off; 1e-9 still
        // sees any one scale that is wrong by more than a rounding.
        const double got = logS.sum().item<double>(), want = logAbsDet.item<double>();
        QVERIFY2(std::abs(got - want) <= 1e-9, qPrintable(QString("Σlog|s| %1 vs log|det A| %2").arg(got).arg(want)));
    }

    // Autograd through P L (U + diag s), Q0 expm((G − Gᵀ)/2)(R + diag s), the triangular solves of
    // the inverses and the bias, against central finite differences in float64.
    void gradients_data() { learnedKindRows({8, 12}); }
    void gradients() {
        QFETCH(QString, kind);
        QFETCH(qint64, dim);
        TransformOptions o;
        o.dtype = at::kDouble;
        o.blockSize = 4;
        o.noiseStd = 0.05;
        auto t = makeTransform(kind.toStdString(), dim, o);
        perturb(*t, 0.2, 21);
        const auto x = seededGaussian(3, dim, 8), y = seededGaussian(3, dim, 9);
        auto loss = [&] { return at::sin(t->forward(x)).sum() + at::sin(t->inverse(y)).sum(); };
        const auto params = t->parameters();
        for (const auto& p : params)
            if (p.grad().defined()) p.grad().zero_();
        loss().backward();

        std::mt19937_64 rng(99);
        const double h = 1e-6;
        int nonzero = 0;
        for (size_t k = 0; k < params.size(); ++k) {
            const auto& p = params[k];
            const auto g = p.grad();
            QVERIFY(g.defined());
            const auto nz = at::nonzero(g.reshape({-1}) != 0).reshape({-1});
            QVERIFY2(nz.numel() > 0, qPrintable(QString("parameter %1 has no gradient").arg(k)));
            std::vector<std::int64_t> picks;
            for (int i = 0; i < 4; ++i) picks.push_back(nz[static_cast<std::int64_t>(rng() % nz.numel())].item<std::int64_t>());
            picks.push_back(static_cast<std::int64_t>(rng() % p.numel())); // anywhere, zeros included
            for (auto idx : picks) {
                double* v = p.data_ptr<double>() + idx;
                const double orig = *v;
                double up, down;
                {
                    at::NoGradGuard noGrad;
                    *v = orig + h;
                    up = loss().item<double>();
                    *v = orig - h;
                    down = loss().item<double>();
                    *v = orig;
                }
                // float64 central differences: truncation ~h²·f''' and rounding ~2^-53·Σ|terms|/h ≈ 1e-9;
                // on a like computation (sin(x Aᵀ) + sin(y A⁻ᵀ), d = 12) |fd − an| stayed ≤ 0.11 of this bound.
                const double fd = (up - down) / (2 * h), an = g.reshape({-1})[idx].item<double>();
                nonzero += an != 0;
                QVERIFY2(std::abs(fd - an) <= 1e-6 * std::max(std::abs(an), 1e-2),
                         qPrintable(QString("parameter %1 entry %2: autograd %3 finite differences %4").arg(k).arg(idx).arg(an, 0, 'g', 12).arg(fd, 0, 'g', 12)));
            }
        }
        QVERIFY(nonzero >= 4 * int(params.size()));
    }

    // SPEC §1/§2: a dimension the block does not divide ends in a smaller block, Hadamard where
    // its size has one, else identity, and the transform says so.
    void blockRemainder_data() {
        QTest::addColumn<qint64>("dim");
        QTest::addColumn<qint64>("block");
        QTest::addColumn<QString>("note");
        QTest::addColumn<bool>("identityTail");
        QTest::newRow("128/32") << qint64(128) << qint64(32) << "" << false;
        QTest::newRow("100/32") << qint64(100) << qint64(32) << "last block of 4 channels: Hadamard 4" << false;
        QTest::newRow("172/32 (stories260K)") << qint64(172) << qint64(32) << "last block of 12 channels: Hadamard 12" << false;
        QTest::newRow("102/32") << qint64(102) << qint64(32) << "last block of 6 channels: identity" << true;
        QTest::newRow("20/32") << qint64(20) << qint64(32) << "last block of 20 channels: Hadamard 20" << false;
        QTest::newRow("70/16") << qint64(70) << qint64(16) << "last block of 6 channels: identity" << true;
    }
    void blockRemainder() {
        QFETCH(qint64, dim);
        QFETCH(qint64, block);
        QFETCH(QString, note);
        QFETCH(bool, identityTail);
        TransformOptions o;
        o.blockSize = block;
        o.dtype = at::kDouble;
        auto t = makeTransform("block-hadamard", dim, o);
        QCOMPARE(QString::fromStdString(t->name()), QString("block-hadamard(%1)").arg(block));
        const QString got = QString::fromStdString(t->remainderNote());
        QVERIFY2(note.isEmpty() ? got.isEmpty() : got.startsWith(note), qPrintable(got));
        const auto a = t->matrix();
        for (std::int64_t s = 0; s < dim; s += block) {
            const std::int64_t n = std::min(block, dim - s);
            const auto blk = a.narrow(0, s, n).narrow(1, s, n);
            const bool tail = n < block;
            if (tail && identityTail) {
                QVERIFY(at::equal(blk, at::eye(n, at::kDouble)));
            } else {
                // ±1/√n entries, orthogonal (float64: an ulp or two of 1/√n ≈ 3e-17 each; n ≤ 32-term
                // products ≲ n·2^-53 ≈ 4e-15)
                QVERIFY(maxAbs(blk.abs() - 1.0 / std::sqrt(double(n))) <= 1e-15);
                QVERIFY(maxAbs(at::matmul(blk, blk.t()) - at::eye(n, at::kDouble)) <= 1e-12);
            }
            // nothing outside the block diagonal
            QCOMPARE(at::count_nonzero(a.narrow(0, s, n)).item<std::int64_t>(), at::count_nonzero(blk).item<std::int64_t>());
        }
        // The learned LU transform initialised from the block-diagonal Hadamard reports it too.
        auto lu = makeTransform("learned-affine-lu", dim, o);
        QCOMPARE(QString::fromStdString(lu->remainderNote()), got);
        auto bo = makeTransform("block-orthogonal", dim, o);
        QCOMPARE(bo->remainderNote().empty(), dim % block == 0);
    }

    // Same seed → same matrix (bit for bit), another seed → another matrix.
    void seeding_data() {
        QTest::addColumn<QString>("kind");
        for (const auto& kind : transformKinds())
            if (kind != "none") QTest::newRow(kind.c_str()) << QString::fromStdString(kind);
    }
    void seeding() {
        QFETCH(QString, kind);
        const auto a = make(kind, 64, at::kDouble, 5)->matrix().detach();
        const auto b = make(kind, 64, at::kDouble, 5)->matrix().detach();
        const auto c = make(kind, 64, at::kDouble, 6)->matrix().detach();
        QVERIFY(at::equal(a, b));
        QVERIFY(!at::equal(a, c));
    }

    // The random signs act on the input before the mixing (H·diag(s), as QuaRot), so the seed
    // changes |A x| and with it every quantization error; signs after the mixing (diag(s)·H)
    // would only flip the signs of A x. Reference: the spec's formula built here from
    // hadamardMatrix and seededSigns, and the magnitudes of two seeds on one input.
    void seedActsBeforeMixing_data() {
        QTest::addColumn<QString>("kind");
        QTest::addColumn<int>("dim");
        QTest::newRow("hadamard 64") << "hadamard" << 64;
        QTest::newRow("hadamard 12 (Paley)") << "hadamard" << 12;
        QTest::newRow("block-hadamard 64") << "block-hadamard" << 64;
        QTest::newRow("learned-affine-lu init") << "learned-affine-lu" << 64;
    }
    void seedActsBeforeMixing() {
        QFETCH(QString, kind);
        QFETCH(int, dim);
        if (kind == "hadamard") {
            const auto want = hadamardMatrix(dim) / std::sqrt(double(dim)) * seededSigns(dim, 5).unsqueeze(0);
            QVERIFY(at::equal(randomHadamardMatrix(dim, 5), want));
        }
        const auto matrix = [&](std::uint64_t seed) {
            TransformOptions o;
            o.dtype = at::kDouble;
            o.seed = seed;
            o.noiseStd = 0; // the LU init's block Hadamard alone
            return makeTransform(kind.toStdString(), dim, o)->matrix().detach();
        };
        const auto x = seededGaussian(dim, 1, 99).squeeze(1);
        const auto m5 = at::matmul(matrix(5), x).abs();
        const auto m6 = at::matmul(matrix(6), x).abs();
        // effect: other input signs give other |A x| by O(1) (x ~ N(0, 1)); identical ones give 0
        const double diff = (m5 - m6).abs().max().item<double>();
        QVERIFY2(diff > 0.1, qPrintable(QString("max | |A5 x| - |A6 x| | = %1").arg(diff)));
    }

    // The generator is mt19937_64 + Box–Muller: fixed values on every platform and libtorch.
    void seededStreamIsFixed() {
        const auto g = seededGaussian(1, 4, 42);
        const double want[4] = {-0.48121769980184498, -0.57453687389830577, 0.49458385623521328, 0.57012155220737415};
        // 1e-12, not equality: libm's log and cos may differ by an ulp between C libraries.
        for (int i = 0; i < 4; ++i) QVERIFY(std::abs(g[0][i].item<double>() - want[i]) <= 1e-12);
        const auto s = seededSigns(8, 42); // sign = top bit of each draw
        const double signs[8] = {-1, -1, -1, 1, -1, 1, -1, 1};
        for (int i = 0; i < 8; ++i) QCOMPARE(s[i].item<double>(), signs[i]);
    }

    // Paper §3 example: the normalised Walsh–Hadamard H4 maps [10, 1, 0.5, 0.5] to [6, 4.5, 5, 4.5].
    void paperExample() {
        MatrixTransform h4("H4", hadamardMatrix(4) / 2.0, /*orthogonal=*/true);
        const auto x = at::tensor({10.0, 1.0, 0.5, 0.5}, at::kDouble);
        const auto y = h4.forward(x);
        // exact: entries ±1/2 and inputs that are multiples of 1/2, every partial sum representable
        const double want[4] = {6, 4.5, 5, 4.5};
        for (int i = 0; i < 4; ++i) QCOMPARE(y[i].item<double>(), want[i]);
        QVERIFY(at::equal(h4.inverse(y), x));
    }

    // Paper Table 10 initialisations: A starts at the requested matrix.
    void initialisations_data() {
        QTest::addColumn<QString>("kind");
        QTest::addColumn<QString>("init");
        for (const char* kind : {"learned-affine-lu", "learned-affine-qr"})
            for (const auto& init : initKinds())
                QTest::addRow("%s %s", kind, init.c_str()) << QString(kind) << QString::fromStdString(init);
    }
    void initialisations() {
        QFETCH(QString, kind);
        QFETCH(QString, init);
        const std::int64_t dim = 100, block = 32;
        TransformOptions o;
        o.init = init.toStdString();
        o.dtype = at::kDouble;
        o.seed = 3;
        auto t = makeTransform(kind.toStdString(), dim, o);
        const std::string resolved = resolveInit(kind.toStdString(), o.init);
        if (init == "default")
            QCOMPARE(QString::fromStdString(resolved), kind.endsWith("lu") ? QString("block-hadamard+noise") : QString("block-orthogonal+noise"));
        const auto want = initialMatrix(resolved, dim, block, o.seed, o.noiseStd);
        const auto a = t->matrix().detach();
        // float64: A rebuilt from the factors of A0 (d = 100-term products), ≲ d·2^-53 ≈ 1e-14
        QVERIFY2(maxAbs(a - want) <= 1e-12, qPrintable(QString("|A - A0|max = %1").arg(maxAbs(a - want))));
        QVERIFY(maxAbs(t->bias()) == 0.0);
        // Off-block-diagonal entries: N(0, 1e-3²) for "+noise", exactly 0 for the other block inits.
        const bool identity = QString::fromStdString(resolved).startsWith("identity");
        const std::int64_t b = identity ? 1 : block;
        const auto blockOf = at::arange(dim, at::kLong).div(b, "floor");
        const auto off = blockOf.unsqueeze(1) != blockOf.unsqueeze(0);
        const auto offVals = want.masked_select(off);
        if (QString::fromStdString(resolved).endsWith("+noise")) {
            // statistical: ≥ 6912 seeded draws, the sample std's relative spread 1/√(2N) ≈ 0.9%:
            // ±10% is > 10σ
            const double sd = offVals.std().item<double>();
            QVERIFY2(sd > 0.9e-3 && sd < 1.1e-3, qPrintable(QString("noise std %1").arg(sd)));
        } else if (resolved != "orthogonal" && resolved != "hadamard") {
            QCOMPARE(maxAbs(offVals), 0.0);
        }
        if (resolved == "identity") QVERIFY(at::equal(want, at::eye(dim, at::kDouble)));
    }

    // Block granularity (paper Table 1 "Block"): the learned matrix starts at the block-diagonal
    // part of the initialisation (its "+noise" lies off the blocks) and stays block-diagonal
    // however its parameters move; at the start its gradients are the full transform's (built
    // from the same matrix) masked to the blocks, exactly, since both compute the same A.
    void blockGranularity_data() { learnedKindRows({64, 100}); }
    void blockGranularity() {
        QFETCH(QString, kind);
        QFETCH(qint64, dim);
        const std::int64_t block = 32;
        TransformOptions o;
        o.dtype = at::kDouble;
        o.seed = 3;
        o.blockDiagonal = true;
        auto blk = makeTransform(kind.toStdString(), dim, o);
        std::string init = resolveInit(kind.toStdString(), "default");
        init = init.substr(0, init.find('+'));
        const auto mask = sameBlockMask(dim, block, at::kDouble);
        TransformOptions full = o;
        full.blockDiagonal = false;
        full.init = init; // the same draw without the off-block noise
        auto ref = makeTransform(kind.toStdString(), dim, full);
        // float64: the same A from two factorisations, rounding only (≲ d·2^-53); off the blocks
        // the products meet exact zeros, so exactly 0
        QVERIFY(maxAbs(blk->matrix() - ref->matrix()) <= 1e-12);
        QVERIFY(maxAbs(ref->matrix() * (1 - mask)) == 0.0);

        const auto x = seededGaussian(3, dim, 8), y = seededGaussian(3, dim, 9);
        for (auto* t : {blk.get(), ref.get()}) (at::sin(t->forward(x)).sum() + at::sin(t->inverse(y)).sum()).backward();
        const auto pb = blk->parameters(), pr = ref->parameters();
        QCOMPARE(pb.size(), pr.size());
        for (size_t i = 0; i < pb.size(); ++i) {
            const auto want = pr[i].dim() == 2 ? pr[i].grad() * mask : pr[i].grad();
            QVERIFY2(maxAbs(pb[i].grad() - want) <= 1e-10 * std::max(1.0, maxAbs(want)),
                     qPrintable(QString("parameter %1: |grad - masked full grad| %2").arg(i).arg(maxAbs(pb[i].grad() - want))));
        }

        perturb(*blk, 0.2, 21);
        const auto a = blk->matrix().detach(), aInv = blk->inverseMatrix().detach();
        // A: masked, exactly 0 off the blocks; A⁻¹ from triangular solves: at most rounding dust.
        // A·A⁻¹: float64 d = 100 terms, ~d·2^-53·cond(A) ≈ 1e-14·cond: 1e-10 allows cond up to ~1e4.
        QCOMPARE(maxAbs(a * (1 - mask)), 0.0);
        QVERIFY(maxAbs(aInv * (1 - mask)) <= 1e-14);
        QVERIFY(maxAbs(at::matmul(a, aInv) - at::eye(dim, at::kDouble)) <= 1e-10);
        QVERIFY(maxAbs(a * mask - ref->matrix().detach()) > 1e-3); // it did move, inside the blocks (0.2·N(0, 1) steps)

        o.init = "hadamard"; // a full initialisation has no block-diagonal part to start from
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, makeTransform(kind.toStdString(), dim, o));
    }

    // v = −A·mean makes T(mean) = 0; kinds without a learned bias refuse.
    void biasFromMean_data() {
        QTest::addColumn<QString>("kind");
        QTest::addColumn<bool>("hasBias");
        for (const auto& kind : transformKinds())
            QTest::newRow(kind.c_str()) << QString::fromStdString(kind)
                                        << (kind == "learned-rotation-bias" || kind.rfind("learned-affine", 0) == 0);
    }
    void biasFromMean() {
        QFETCH(QString, kind);
        QFETCH(bool, hasBias);
        auto t = make(kind, 64, at::kDouble);
        perturb(*t, 0.01, 4);
        const auto mean = seededGaussian(1, 64, 12).reshape({64}) + 2.0;
        if (!hasBias) {
            QVERIFY_THROWS_EXCEPTION(std::logic_error, t->initBiasFromMean(mean));
            return;
        }
        const auto params = t->parameters();
        t->initBiasFromMean(mean);
        // float64: A·mean (64 terms, Σ|a||mean| ≲ 20) formed twice, ≲ 64·2^-53·20 ≈ 1.4e-13 apart
        QVERIFY(maxAbs(t->forward(mean)) <= 1e-12);
        QVERIFY(at::allclose(t->inverse(at::zeros({64}, at::kDouble)), mean, 1e-10, 1e-10));
        // same leaf, still trainable (an optimizer holding parameters() sees the new value)
        QVERIFY(t->bias().is_same(params.back()));
        QVERIFY(t->bias().requires_grad() && t->bias().is_leaf());
    }

    // to(device): the matrix, bias and learnable leaves move, the function stays. On the device a
    // transform already lives on, nothing is copied: an optimizer holding parameters() keeps
    // training the transform's own leaves.
    void moveToDevice_data() {
        QTest::addColumn<QString>("kind");
        addDeviceColumn();
        for (const char* k : {"learned-affine-qr", "learned-affine-lu", "block-hadamard"})
            for (const auto& d : testDevices()) QTest::addRow("%s %s", k, qPrintable(d)) << k << d;
    }
    // The structured products (block by block, the fast Walsh–Hadamard transform, LU through
    // its factors) against the dense matrix in float64: x Aᵀ + v and (y − v) A⁻ᵀ. Bound: float64
    // sums of ≤ d terms, d·2^-53 relative to Σ|A_ij x_j| ≤ ‖A‖_max·‖x‖₁ (1e-12 is far above it
    // for d ≤ 256, far below any wrong block, sign or permutation). The learned row trains a
    // step first so that L, U, s, v and the permutation all matter; and its gradient agrees.
    void structuredProductsMatchDense_data() {
        QTest::addColumn<QString>("kind");
        QTest::addColumn<qint64>("dim");
        QTest::addColumn<qint64>("rows");
        QTest::newRow("none 96") << "none" << qint64(96) << qint64(7);
        QTest::newRow("hadamard 256 (Sylvester)") << "hadamard" << qint64(256) << qint64(7);
        QTest::newRow("hadamard 96 (dense)") << "hadamard" << qint64(96) << qint64(7);
        QTest::newRow("block-hadamard 172 (tail 12)") << "block-hadamard" << qint64(172) << qint64(7);
        QTest::newRow("block-orthogonal 100") << "block-orthogonal" << qint64(100) << qint64(7);
        QTest::newRow("learned-affine-lu 64, 7 rows (factors)") << "learned-affine-lu" << qint64(64) << qint64(7);
        QTest::newRow("learned-affine-lu 64, 80 rows (matrix)") << "learned-affine-lu" << qint64(64) << qint64(80);
    }
    void structuredProductsMatchDense() {
        QFETCH(QString, kind);
        QFETCH(qint64, dim);
        QFETCH(qint64, rows);
        TransformOptions o;
        o.dtype = at::kDouble;
        o.seed = 3;
        auto t = makeTransform(kind.toStdString(), dim, o);
        if (!t->parameters().empty()) {
            at::NoGradGuard g;
            auto gen = at::detail::createCPUGenerator(9);
            for (auto& p : t->parameters()) p.add_(at::randn(p.sizes(), gen, p.options()) * 0.05);
        }
        const auto x = at::randn({rows, dim}, at::kDouble);
        const auto a = t->matrix().detach();
        const auto v = t->bias().defined() ? t->bias().detach() : at::zeros({dim}, at::kDouble);
        const auto want = x.matmul(a.t()) + v;
        const double scale = a.abs().max().item<double>() * x.abs().sum(1).max().item<double>();
        QVERIFY((t->forward(x).detach() - want).abs().max().item<double>() <= 1e-12 * scale);
        const auto back = t->inverse(want).detach();
        QVERIFY((back - x).abs().max().item<double>() <= 1e-9 * x.abs().max().item<double>());
        if (t->parameters().empty()) return;
        // d/dθ Σ g ⊙ T(x) through the factors equals it through the formed matrix.
        const auto g = at::randn({rows, dim}, at::kDouble);
        auto grads = [&](bool viaMatrix) {
            for (auto& p : t->parameters())
                if (p.grad().defined()) p.grad().zero_();
            const auto y = viaMatrix ? x.matmul(t->matrix().t()) + (t->bias().defined() ? t->bias() : at::zeros({dim}, at::kDouble))
                                     : t->forward(x);
            (y * g).sum().backward();
            std::vector<at::Tensor> r;
            for (auto& p : t->parameters()) r.push_back(p.grad().clone());
            return r;
        };
        const auto viaForward = grads(false), viaMatrix = grads(true);
        for (size_t i = 0; i < viaForward.size(); ++i)
            QVERIFY((viaForward[i] - viaMatrix[i]).abs().max().item<double>() <=
                    1e-10 * (1.0 + viaMatrix[i].abs().max().item<double>()));
    }

    void moveToDevice() {
        QFETCH(QString, kind);
        QFETCH(QString, device);
        LATMIX_REQUIRE_DEVICE(dev, device);
        auto t = make(kind, 32, at::kDouble);
        if (!t->parameters().empty()) perturb(*t, 0.05, 2);
        const auto x = seededGaussian(5, 32, 3);
        const auto want = t->forward(x).detach().clone();
        const auto before = t->parameters();
        t->to(dev);
        QCOMPARE(t->matrix().device(), dev);
        QVERIFY(maxRelativeDiff(t->forward(x.to(dev)), want) < 1e-12); // float64 d = 32: summation order only
        const auto after = t->parameters();
        QCOMPARE(after.size(), before.size());
        for (std::size_t i = 0; i < after.size(); ++i) {
            QCOMPARE(after[i].device(), dev);
            QVERIFY(after[i].requires_grad() && after[i].is_leaf());
            if (dev.is_cpu()) QVERIFY(after[i].is_same(before[i]));
        }
    }
};

QTEST_APPLESS_MAIN(TestTransforms)
#include "tst_transforms.moc"
