// SPEC §3 metrics of an affine transform, each checked against a plain float64 computation
// written here with loops (its own MXFP4 quantizer, Gauss-Jordan inverse and Jacobi
// eigenvalues), plus the worked example of the paper (§3, x = [10, 1, 0.5, 0.5], B = 2, H4).
#include "metrics/TransformMetrics.h"
#include "mx/MxFormat.h"
#include "transforms/AffineTransform.h"
#include "transforms/FixedTransforms.h"
#include "transforms/LearnedTransforms.h"

#include <ATen/ATen.h>
#include <QtTest>

#include <cmath>
#include <random>
#include <vector>

using namespace latmix;
using Matrix = std::vector<std::vector<double>>;
using Vector = std::vector<double>;

namespace {

// ---- independent float64 reference ----

// E2M1 element rounding: nearest point of {0, .5, 1, 1.5, 2, 3, 4, 6}, ties to the even code
// (SPEC §1: 0.25→0, 0.75→1, 1.25→1, 1.75→2, 2.5→2, 3.5→4, 5→4), saturating at 6.
double roundE2M1(double v) {
    static const double grid[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    const double a = std::fabs(v);
    int best = 7;
    if (a < 6) {
        for (int k = 0; k < 7; ++k) {
            if (a > grid[k + 1]) continue;
            const double lo = a - grid[k], hi = grid[k + 1] - a;
            best = lo < hi ? k : hi < lo ? k + 1 : (k % 2 == 0 ? k : k + 1);
            break;
        }
    }
    return std::copysign(grid[best], v);
}

// MXFP4, floor scale mode: s = 2^(floor(log2 amax) - 2) per block of b (partial tail included).
Vector mxfp4(const Vector& y, int b) {
    Vector q(y.size());
    for (size_t start = 0; start < y.size(); start += b) {
        const size_t end = std::min(y.size(), start + b);
        double amax = 0;
        for (size_t j = start; j < end; ++j) amax = std::max(amax, std::fabs(y[j]));
        const double s = amax > 0 ? std::ldexp(1.0, static_cast<int>(std::floor(std::log2(amax))) - 2) : 1.0;
        for (size_t j = start; j < end; ++j) q[j] = s * roundE2M1(y[j] / s);
    }
    return q;
}

Vector matVec(const Matrix& a, const Vector& x) {
    Vector y(a.size(), 0.0);
    for (size_t i = 0; i < a.size(); ++i)
        for (size_t j = 0; j < x.size(); ++j) y[i] += a[i][j] * x[j];
    return y;
}

Matrix inverse(Matrix a) { // Gauss-Jordan with partial pivoting
    const size_t n = a.size();
    Matrix inv(n, Vector(n, 0.0));
    for (size_t i = 0; i < n; ++i) inv[i][i] = 1;
    for (size_t c = 0; c < n; ++c) {
        size_t p = c;
        for (size_t r = c + 1; r < n; ++r)
            if (std::fabs(a[r][c]) > std::fabs(a[p][c])) p = r;
        std::swap(a[c], a[p]);
        std::swap(inv[c], inv[p]);
        const double piv = a[c][c];
        for (size_t j = 0; j < n; ++j) a[c][j] /= piv, inv[c][j] /= piv;
        for (size_t r = 0; r < n; ++r) {
            if (r == c) continue;
            const double f = a[r][c];
            for (size_t j = 0; j < n; ++j) a[r][j] -= f * a[c][j], inv[r][j] -= f * inv[c][j];
        }
    }
    return inv;
}

Matrix transposeTimes(const Matrix& a, const Matrix& b) { // aᵀ b
    const size_t n = a.size();
    Matrix m(n, Vector(n, 0.0));
    for (size_t i = 0; i < n; ++i)
        for (size_t j = 0; j < n; ++j)
            for (size_t k = 0; k < n; ++k) m[i][j] += a[k][i] * b[k][j];
    return m;
}

// Eigenvalues of a symmetric matrix by cyclic Jacobi rotations.
Vector symmetricEigenvalues(Matrix s) {
    const size_t n = s.size();
    for (int sweep = 0; sweep < 100; ++sweep) {
        double off = 0;
        for (size_t p = 0; p < n; ++p)
            for (size_t q = p + 1; q < n; ++q) off += s[p][q] * s[p][q];
        if (off < 1e-26) break;
        for (size_t p = 0; p < n; ++p)
            for (size_t q = p + 1; q < n; ++q) {
                if (s[p][q] == 0) continue;
                const double theta = (s[q][q] - s[p][p]) / (2 * s[p][q]);
                const double t = (theta >= 0 ? 1 : -1) / (std::fabs(theta) + std::sqrt(theta * theta + 1));
                const double c = 1 / std::sqrt(t * t + 1), sn = t * c;
                for (size_t k = 0; k < n; ++k) { // columns p, q
                    const double kp = s[k][p], kq = s[k][q];
                    s[k][p] = c * kp - sn * kq;
                    s[k][q] = sn * kp + c * kq;
                }
                for (size_t k = 0; k < n; ++k) { // rows p, q
                    const double pk = s[p][k], qk = s[q][k];
                    s[p][k] = c * pk - sn * qk;
                    s[q][k] = sn * pk + c * qk;
                }
            }
    }
    Vector e(n);
    for (size_t i = 0; i < n; ++i) e[i] = s[i][i];
    return e;
}

Vector singularValuesRef(const Matrix& a) {
    Vector e = symmetricEigenvalues(transposeTimes(a, a));
    for (double& v : e) v = std::sqrt(std::max(v, 0.0));
    return e;
}

struct Reference {
    double mse = 0;
    Vector perBlock, blockMaxSq;
};

// E(T), E_B^i and M_i straight from the definitions (paper eq. q_error, Fig. 2c, eq. bound_mx).
Reference reference(const std::vector<Vector>& rows, const Matrix& a, const Vector& v, int b) {
    const size_t d = a.size(), nb = (d + b - 1) / b;
    const Matrix ainv = inverse(a);
    Reference r;
    r.perBlock.assign(nb, 0.0);
    r.blockMaxSq.assign(nb, 0.0);
    for (const Vector& x : rows) {
        Vector y = matVec(a, x);
        for (size_t j = 0; j < d; ++j) y[j] += v[j];
        Vector q = mxfp4(y, b);
        for (size_t j = 0; j < d; ++j) q[j] -= v[j];
        const Vector back = matVec(ainv, q);
        for (size_t i = 0; i < nb; ++i) {
            const size_t start = i * b, end = std::min(d, start + b);
            double sq = 0, m = 0;
            for (size_t j = start; j < end; ++j) {
                sq += (x[j] - back[j]) * (x[j] - back[j]);
                m = std::max(m, std::fabs(y[j]));
            }
            r.perBlock[i] += sq / double(end - start) / double(rows.size());
            r.blockMaxSq[i] += m * m / double(rows.size());
            r.mse += sq / double(d) / double(rows.size());
        }
    }
    return r;
}

// ---- conversions ----

at::Tensor toTensor(const Matrix& m) {
    auto t = at::empty({int64_t(m.size()), int64_t(m[0].size())}, at::kDouble);
    for (size_t i = 0; i < m.size(); ++i)
        for (size_t j = 0; j < m[i].size(); ++j) t[i][j] = m[i][j];
    return t;
}

at::Tensor toTensor(const Vector& v) {
    auto t = at::empty({int64_t(v.size())}, at::kDouble);
    for (size_t i = 0; i < v.size(); ++i) t[i] = v[i];
    return t;
}

Matrix identity(size_t n) {
    Matrix m(n, Vector(n, 0.0));
    for (size_t i = 0; i < n; ++i) m[i][i] = 1;
    return m;
}

// Normalised Sylvester Hadamard H_n = H_2 ⊗ H_{n/2} / sqrt(2), n a power of two.
Matrix sylvester(size_t n) {
    Matrix h{{1.0}};
    while (h.size() < n) {
        const size_t k = h.size();
        Matrix g(2 * k, Vector(2 * k));
        for (size_t i = 0; i < k; ++i)
            for (size_t j = 0; j < k; ++j) {
                g[i][j] = g[i][j + k] = g[i + k][j] = h[i][j] / std::sqrt(2.0);
                g[i + k][j + k] = -h[i][j] / std::sqrt(2.0);
            }
        h = g;
    }
    return h;
}

std::mt19937_64& rng() {
    static std::mt19937_64 r(1234);
    return r;
}

double gauss() {
    static std::normal_distribution<double> n(0.0, 1.0);
    return n(rng());
}

std::vector<Vector> randomRows(size_t n, size_t d) {
    std::vector<Vector> rows(n, Vector(d));
    for (auto& r : rows)
        for (size_t j = 0; j < d; ++j) r[j] = gauss() * (j == 1 ? 40.0 : 1.0) + (j == 3 ? 5.0 : 0.0); // outliers
    return rows;
}

at::Tensor rowsTensor(const std::vector<Vector>& rows) {
    auto t = at::empty({int64_t(rows.size()), int64_t(rows[0].size())}, at::kDouble);
    for (size_t i = 0; i < rows.size(); ++i)
        for (size_t j = 0; j < rows[i].size(); ++j) t[i][j] = rows[i][j];
    return t.to(at::kFloat).to(at::kDouble); // values a float32 run file can hold
}

std::vector<Vector> fromTensor(const at::Tensor& t) {
    std::vector<Vector> rows(t.size(0), Vector(t.size(1)));
    auto c = t.to(at::kDouble).contiguous();
    for (size_t i = 0; i < rows.size(); ++i)
        for (size_t j = 0; j < rows[i].size(); ++j) rows[i][j] = c[i][j].item<double>();
    return rows;
}

void compareVectors(const at::Tensor& got, const Vector& want, double tol) {
    QCOMPARE(got.numel(), int64_t(want.size()));
    for (size_t i = 0; i < want.size(); ++i) {
        const double g = got[i].item<double>();
        QVERIFY2(std::fabs(g - want[i]) <= tol * std::max(1.0, std::fabs(want[i])),
                 qPrintable(QString("element %1: got %2 want %3").arg(i).arg(g, 0, 'g', 17).arg(want[i], 0, 'g', 17)));
    }
}

mx::MxConfig mxfp4Block(int b) {
    mx::MxConfig c;
    c.format = mx::Format::MxFp4;
    c.blockSize = b;
    c.scaleMode = mx::ScaleMode::Floor;
    return c;
}

} // namespace

class TestTransformMetrics : public QObject {
    Q_OBJECT

private slots:
    // Paper §3: x = [10, 1, 0.5, 0.5] (one row), B = 2, MXFP4 (E2M1 elements, emax 2, floor scales).
    //
    // Identity: block 1 = [10, 1], amax 10, floor(log2 10) = 3, scale 2^(3-2) = 2: 10/2 = 5 ties
    //   between 4 and 6 and goes to 4 (even code) -> 8; 1/2 = 0.5 -> 1. Error [2, 0].
    //   Block 2 = [0.5, 0.5], amax 0.5, scale 2^(-1-2) = 1/8: 0.5/(1/8) = 4 -> exact. Error [0, 0].
    //   E_B = [(4 + 0)/2, 0] = [2, 0]; E = 4/4 = 1; M = [10², 0.5²] = [100, 0.25].
    // H4 = normalised Sylvester [[1,1,1,1],[1,-1,1,-1],[1,1,-1,-1],[1,-1,-1,1]]/2:
    //   T(x) = [12, 9, 10, 9]/2 = [6, 4.5, 5, 4.5]. Block 1: amax 6, scale 2^(2-2) = 1: 6 -> 6,
    //   4.5 -> 4 (nearest). Block 2: amax 5, scale 1: 5 ties -> 4, 4.5 -> 4. Q(Tx) = [6, 4, 4, 4],
    //   error in the transformed space r = [0, -0.5, -1, -0.5]; back with H4⁻¹ = H4:
    //   H4 r = [-2, 0, 1, 1]/2 = [-1, 0, 0.5, 0.5]. Squared [1, 0, 0.25, 0.25]:
    //   E_B = [0.5, 0.25], E = 1.5/4 = 0.375; M = [6², 5²] = [36, 25]; ‖H4⁻¹‖σ² = 1, N_B = 2:
    //   bound = (36 + 25)/2 = 30.5. H4 lowers block 1's error (2 -> 0.5) and raises block 2's
    //   (0 -> 0.25): the paper's argument for block-diagonal transforms.
    void paperExample_data() {
        QTest::addColumn<bool>("hadamard");
        QTest::addColumn<double>("mse");
        QTest::addColumn<QVector<double>>("perBlock");
        QTest::addColumn<QVector<double>>("blockMax");
        QTest::addColumn<double>("bound");
        QTest::newRow("identity") << false << 1.0 << QVector<double>{2, 0} << QVector<double>{100, 0.25} << 50.125;
        QTest::newRow("H4") << true << 0.375 << QVector<double>{0.5, 0.25} << QVector<double>{36, 25} << 30.5;
    }
    void paperExample() {
        QFETCH(bool, hadamard);
        QFETCH(double, mse);
        QFETCH(QVector<double>, perBlock);
        QFETCH(QVector<double>, blockMax);
        QFETCH(double, bound);
        const Matrix a = hadamard ? sylvester(4) : identity(4);
        const transforms::MatrixTransform t(hadamard ? "H4" : "identity", toTensor(a), true);
        const auto x = toTensor(Vector{10, 1, 0.5, 0.5}).unsqueeze(0).to(at::kFloat);
        const auto c = mxfp4Block(2);
        // Exact values in float64 (dyadic data; H4's 1/√2·1/√2 entries off 0.5 by an ulp at most):
        // 1e-12, and 1e-9 for the bound, which goes through an SVD.
        // The reference agrees with the hand computation above ...
        const Reference ref = reference(fromTensor(x), a, Vector(4, 0.0), 2);
        QVERIFY(std::fabs(ref.mse - mse) < 1e-12);
        compareVectors(toTensor(ref.perBlock), Vector(perBlock.begin(), perBlock.end()), 1e-12);
        // ... and so does the library.
        QVERIFY(std::fabs(metrics::transformationMse(x, t, c) - mse) < 1e-12);
        compareVectors(metrics::perBlockError(x, t, c), Vector(perBlock.begin(), perBlock.end()), 1e-12);
        compareVectors(metrics::blockMaxSquared(x, t, 2), Vector(blockMax.begin(), blockMax.end()), 1e-12);
        QVERIFY(std::fabs(metrics::errorBound(x, t, c) - bound) < 1e-9);
        const auto r = metrics::analyzeTransform("example", x, t, c, {2, 4});
        QVERIFY(std::fabs(r.mse - mse) < 1e-12);
        QVERIFY(std::fabs(r.bound - bound) < 1e-9);
        QVERIFY(std::fabs(r.perBlockMax - *std::max_element(perBlock.begin(), perBlock.end())) < 1e-12);
        QCOMPARE(int(r.sweep.size()), 2);
        QVERIFY(std::fabs(r.sweep[0].mse - mse) < 1e-12); // B = 2 is the configured block
    }

    void hadamardMovesErrorBetweenBlocks() {
        const auto x = toTensor(Vector{10, 1, 0.5, 0.5}).unsqueeze(0);
        const auto c = mxfp4Block(2);
        const transforms::MatrixTransform id("identity", toTensor(identity(4)), true);
        const transforms::MatrixTransform h4("H4", toTensor(sylvester(4)), true);
        const auto eId = metrics::perBlockError(x, id, c), eH = metrics::perBlockError(x, h4, c);
        QVERIFY(eH[0].item<double>() < eId[0].item<double>());
        QVERIFY(eH[1].item<double>() > eId[1].item<double>());
    }

    void againstReference_data() {
        QTest::addColumn<int>("d");
        QTest::addColumn<int>("block");
        QTest::addColumn<QString>("kind");
        QTest::newRow("d 8 B 4 Hadamard") << 8 << 4 << "hadamard";
        QTest::newRow("d 8 B 4 orthogonal") << 8 << 4 << "orthogonal";
        QTest::newRow("d 10 B 4 affine (partial block)") << 10 << 4 << "affine";
        QTest::newRow("d 12 B 8 affine (partial block)") << 12 << 8 << "affine";
        QTest::newRow("d 16 B 2 identity") << 16 << 2 << "identity";
    }
    void againstReference() {
        QFETCH(int, d);
        QFETCH(int, block);
        QFETCH(QString, kind);
        Matrix a = identity(d);
        Vector v(d, 0.0);
        bool orthogonal = true;
        if (kind == "hadamard") a = sylvester(d);
        if (kind == "orthogonal") { // Q of a Gaussian matrix by Gram-Schmidt, rows orthonormal
            for (auto& r : a)
                for (double& e : r) e = gauss();
            for (int i = 0; i < d; ++i) {
                for (int k = 0; k < i; ++k) {
                    double dot = 0;
                    for (int j = 0; j < d; ++j) dot += a[i][j] * a[k][j];
                    for (int j = 0; j < d; ++j) a[i][j] -= dot * a[k][j];
                }
                double nrm = 0;
                for (int j = 0; j < d; ++j) nrm += a[i][j] * a[i][j];
                for (int j = 0; j < d; ++j) a[i][j] /= std::sqrt(nrm);
            }
        }
        if (kind == "affine") {
            orthogonal = false;
            for (int i = 0; i < d; ++i)
                for (int j = 0; j < d; ++j) a[i][j] += 0.3 * gauss();
            for (double& e : v) e = gauss();
        }
        const transforms::MatrixTransform t(kind.toStdString(), toTensor(a), orthogonal, toTensor(v));
        const auto xt = rowsTensor(randomRows(7, d));
        const auto rows = fromTensor(xt);
        const auto c = mxfp4Block(block);
        const Reference ref = reference(rows, a, v, block);
        // float64 both sides, d ≤ 16: rounding ~1e-15, times cond(A) for the affine rows, times
        // cond(A)² for σ_min from the Jacobi eigenvalues of AᵀA (seeded affine rows: cond ≈ 24, ~1e-13).
        QVERIFY2(std::fabs(metrics::transformationMse(xt.to(at::kFloat), t, c) - ref.mse) < 1e-9 * std::max(1.0, ref.mse),
                 qPrintable(QString("E(T) %1 vs %2").arg(metrics::transformationMse(xt, t, c)).arg(ref.mse)));
        compareVectors(metrics::perBlockError(xt, t, c), ref.perBlock, 1e-9);
        compareVectors(metrics::blockMaxSquared(xt, t, block), ref.blockMaxSq, 1e-9);
        const Vector sv = singularValuesRef(a);
        const double smin = *std::min_element(sv.begin(), sv.end()), smax = *std::max_element(sv.begin(), sv.end());
        double sumM = 0;
        for (double m : ref.blockMaxSq) sumM += m;
        const double bound = sumM / (smin * smin) / double(ref.blockMaxSq.size());
        QVERIFY(std::fabs(metrics::errorBound(xt, t, c) - bound) < 1e-8 * bound);
        QVERIFY(std::fabs(metrics::conditionNumber(toTensor(a)) - smax / smin) < 1e-8 * smax / smin);
        // The differentiable loss is the same number.
        QVERIFY(std::fabs(metrics::transformationMseLoss(xt, t, c).item<double>() - ref.mse) < 1e-9 * std::max(1.0, ref.mse));
    }

    void spectralMetrics_data() {
        QTest::addColumn<QVector<double>>("entries"); // row-major square matrix
        QTest::addColumn<int>("block");
        QTest::newRow("diag(1,2,4)") << QVector<double>{1, 0, 0, 0, 2, 0, 0, 0, 4} << 1;
        QTest::newRow("full 3x3") << QVector<double>{2, -1, 0.5, 0.3, 1, 1, -0.7, 0.2, 3} << 2;
        QTest::newRow("full 4x4 B 2") << QVector<double>{1, 2, 0, 1, 0, 1, 3, 0, 2, 0, 1, 1, 1, 1, 0, 2} << 2;
        QTest::newRow("5x5 B 2 partial") << QVector<double>{1, 0.1, 0.2, 0, 0.5, 0.3, 1, 0, 0.1, 0,  0, 0.2, 2, 0.4, 0.1,
                                                            0.1, 0, 0.3, 1, 0.2, 0.6, 0.1, 0, 0.2, 1} << 2;
    }
    void spectralMetrics() {
        QFETCH(QVector<double>, entries);
        QFETCH(int, block);
        const size_t n = static_cast<size_t>(std::lround(std::sqrt(entries.size())));
        Matrix a(n, Vector(n));
        for (size_t i = 0; i < n; ++i)
            for (size_t j = 0; j < n; ++j) a[i][j] = entries[int(i * n + j)];
        const Vector sv = singularValuesRef(a);
        const double smin = *std::min_element(sv.begin(), sv.end()), smax = *std::max_element(sv.begin(), sv.end());
        // ‖AᵀA − I‖σ from the eigenvalues of AᵀA − I itself.
        Matrix g = transposeTimes(a, a);
        for (size_t i = 0; i < n; ++i) g[i][i] -= 1;
        double orth = 0;
        for (double e : symmetricEigenvalues(g)) orth = std::max(orth, std::fabs(e));
        // A with its diagonal blocks zeroed.
        Matrix off = a;
        for (size_t i = 0; i < n; ++i)
            for (size_t j = 0; j < n; ++j)
                if (i / block == j / block) off[i][j] = 0;
        const Vector svOff = singularValuesRef(off);
        const double offNorm = *std::max_element(svOff.begin(), svOff.end());
        const auto at = toTensor(a);
        // float64 SVD vs Jacobi on AᵀA: ~2^-53·cond² relative, cond ≲ 10 for these matrices
        QVERIFY(std::fabs(metrics::conditionNumber(at) - smax / smin) < 1e-9 * smax / smin);
        QVERIFY(std::fabs(metrics::inverseSpectralNormSquared(at) - 1 / (smin * smin)) < 1e-9 / (smin * smin));
        QVERIFY(std::fabs(metrics::orthogonalityDeviation(at) - orth) < 1e-9 * std::max(1.0, orth));
        QVERIFY(std::fabs(metrics::offBlockNorm(at, block) - offNorm) < 1e-9 * std::max(1.0, offNorm));
    }

    void conditionNumberOfDiagonal() {
        const auto a = at::diag(toTensor(Vector{1, 2, 4}));
        // exact inputs, float64 SVD: an ulp or so
        QVERIFY(std::fabs(metrics::conditionNumber(a) - 4.0) < 1e-12);
        QVERIFY(std::fabs(metrics::inverseSpectralNormSquared(a) - 1.0) < 1e-12);
        QVERIFY(std::fabs(metrics::orthogonalityDeviation(a) - 15.0) < 1e-12); // 4² − 1
        const auto h = toTensor(sylvester(8));
        QVERIFY(std::fabs(metrics::conditionNumber(h) - 1.0) < 1e-12);
        QVERIFY(metrics::orthogonalityDeviation(h) < 1e-12);
    }

    void offBlockNorm() {
        // Block-diagonal of H4 blocks (and a partial 2x2 tail) has nothing off the blocks.
        Matrix bd(10, Vector(10, 0.0));
        const Matrix h4 = sylvester(4), h2 = sylvester(2);
        for (int b = 0; b < 2; ++b)
            for (int i = 0; i < 4; ++i)
                for (int j = 0; j < 4; ++j) bd[4 * b + i][4 * b + j] = h4[i][j];
        for (int i = 0; i < 2; ++i)
            for (int j = 0; j < 2; ++j) bd[8 + i][8 + j] = h2[i][j];
        QCOMPARE(metrics::offBlockNorm(toTensor(bd), 4), 0.0); // exact: the masked matrix is all zeros
        QVERIFY(metrics::offBlockNorm(toTensor(bd), 2) > 0.1); // finer blocks cut the H4s (entries ±1/2)
        QVERIFY(metrics::offBlockNorm(toTensor(sylvester(8)), 4) > 0.5); // [0 H4; H4 0]/√2: norm 1/√2
        QCOMPARE(metrics::offBlockNorm(toTensor(sylvester(8)), 8), 0.0);
    }

    // The spectral summary and off-block norm read off a transform's structure (blocks,
    // Sylvester) against the SVD of its dense matrix in float64: both are exact up to the SVD's
    // own rounding (~d·2^-53 relative; 1e-9 leaves room and catches any wrong block or factor).
    void structuredSpectralMatchesDense_data() {
        QTest::addColumn<QString>("kind");
        QTest::addColumn<qint64>("dim");
        QTest::addColumn<int>("mxBlock");
        QTest::newRow("none 48") << "none" << qint64(48) << 32;
        QTest::newRow("hadamard 256, MX 32") << "hadamard" << qint64(256) << 32;
        QTest::newRow("hadamard 64, MX 16") << "hadamard" << qint64(64) << 16;
        QTest::newRow("block-hadamard 172, MX 32") << "block-hadamard" << qint64(172) << 32;
        QTest::newRow("block-hadamard 128, MX 16 (blocks straddle)") << "block-hadamard" << qint64(128) << 16;
        QTest::newRow("block-orthogonal 100, MX 32") << "block-orthogonal" << qint64(100) << 32;
        // Other Hadamard orders: σ from √n·|d|, the off-block norm by Lanczos above 1024 with the
        // product by the construction (12 = Paley I; 1536 = Sylvester 128 ⊗ Paley 12; 1792 = 64 ⊗ 28).
        QTest::newRow("hadamard 96, MX 32") << "hadamard" << qint64(96) << 32;
        QTest::newRow("hadamard 1536, MX 32") << "hadamard" << qint64(1536) << 32;
        QTest::newRow("hadamard 1792, MX 16") << "hadamard" << qint64(1792) << 16;
    }
    void structuredSpectralMatchesDense() {
        QFETCH(QString, kind);
        QFETCH(qint64, dim);
        QFETCH(int, mxBlock);
        transforms::TransformOptions o;
        o.seed = 4;
        o.dtype = at::kFloat; // as the views build them: the float32 rounding must be seen too
        const auto t = transforms::makeTransform(kind.toStdString(), dim, o);
        QVERIFY(t->blockStructure() || t->hadamardDiagonal().defined());
        const auto fast = metrics::spectralSummary(*t), dense = metrics::spectralSummary(t->matrix());
        auto near = [](double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(1.0, std::fabs(b)); };
        QVERIFY2(near(fast.sigmaMax, dense.sigmaMax), qPrintable(QString("%1 vs %2").arg(fast.sigmaMax).arg(dense.sigmaMax)));
        QVERIFY(near(fast.sigmaMin, dense.sigmaMin));
        QVERIFY(near(fast.conditionNumber, dense.conditionNumber));
        QVERIFY(std::fabs(fast.orthogonalityDeviation - dense.orthogonalityDeviation) <= 1e-9);
        const double off = metrics::offBlockNorm(*t, mxBlock);
        const double offDense = at::linalg_svdvals(metrics::offBlockPart(t->matrix(), mxBlock)).max().item<double>();
        QVERIFY2(near(off, offDense), qPrintable(QString("%1 vs %2").arg(off).arg(offDense)));
    }

    // Above 1024 channels a dense matrix's off-block norm comes from Lanczos iterations; the SVD
    // of the same off-block part is the reference. Stopping at a residual of 1e-10·‖P‖² puts the
    // estimate within 1e-10 relative of an eigenvalue of PᵀP, so σ within ~1e-10 (1e-9: rounding).
    void offBlockNormLanczosMatchesSvd_data() {
        QTest::addColumn<QString>("matrix");
        QTest::addColumn<int>("mxBlock");
        QTest::newRow("random orthogonal 1100, MX 32") << "orthogonal" << 32;
        QTest::newRow("block-diagonal + 1e-3 Gaussian, MX 32") << "noisy-blocks" << 32;
        QTest::newRow("random orthogonal 1100, MX 8") << "orthogonal" << 8;
    }
    void offBlockNormLanczosMatchesSvd() {
        QFETCH(QString, matrix);
        QFETCH(int, mxBlock);
        const std::int64_t n = 1100;
        at::Tensor a;
        if (matrix == "orthogonal") {
            a = transforms::randomOrthogonalMatrix(n, 9);
        } else {
            transforms::TransformOptions o;
            o.seed = 9;
            o.blockSize = mxBlock;
            a = transforms::makeTransform("block-orthogonal", n, o)->matrix().to(at::kDouble);
            a = a + 1e-3 * at::randn({n, n}, at::kDouble);
        }
        const double got = metrics::offBlockNorm(a, mxBlock);
        const double want = at::linalg_svdvals(metrics::offBlockPart(a, mxBlock)).max().item<double>();
        QVERIFY2(std::fabs(got - want) <= 1e-9 * want, qPrintable(QString("%1 vs %2").arg(got, 0, 'g', 17).arg(want, 0, 'g', 17)));
    }

    void sweepSkipsLargeBlocks() {
        const auto x = rowsTensor(randomRows(5, 32));
        const transforms::MatrixTransform t("H32", toTensor(sylvester(32)), true);
        const auto sweep = metrics::blockSizeSweep(x, t, mxfp4Block(32));
        QCOMPARE(int(sweep.size()), 3); // 8, 16, 32; 64.. exceed d
        const int expected[3] = {8, 16, 32};
        for (int i = 0; i < 3; ++i) {
            QCOMPARE(sweep[i].blockSize, expected[i]);
            const Reference ref = reference(fromTensor(x), sylvester(32), Vector(32, 0.0), expected[i]);
            // float64, orthogonal A: summation order only
            QVERIFY(std::fabs(sweep[i].mse - ref.mse) < 1e-9 * std::max(1.0, ref.mse));
        }
        auto nv = mx::makeConfig(mx::Format::NvFp4);
        const auto nvSweep = metrics::blockSizeSweep(x, t, nv);
        QCOMPARE(int(nvSweep.size()), 1);
        QCOMPARE(nvSweep[0].blockSize, 16);
    }

    void nonFiniteActivationsNameThePoint_data() {
        QTest::addColumn<double>("bad");
        QTest::newRow("NaN") << std::nan("");
        QTest::newRow("Inf") << HUGE_VAL;
    }
    void nonFiniteActivationsNameThePoint() {
        QFETCH(double, bad);
        auto x = rowsTensor(randomRows(3, 8));
        x[1][2] = bad;
        const transforms::MatrixTransform t("identity", toTensor(identity(8)), true);
        try {
            metrics::analyzeTransform("layers.2.mlp.down_proj.input", x, t, mxfp4Block(4));
            QFAIL("no error for non-finite activations");
        } catch (const std::invalid_argument& e) {
            const QString msg = e.what();
            QVERIFY2(msg.contains("layers.2.mlp.down_proj.input") && msg.contains("NaN/Inf"), e.what());
        }
    }

    void dimensionMismatchIsAnError() {
        const auto x = rowsTensor(randomRows(3, 8));
        const transforms::MatrixTransform t("H4", toTensor(sylvester(4)), true);
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, metrics::transformationMse(x, t, mxfp4Block(4)));
    }
};

QTEST_GUILESS_MAIN(TestTransformMetrics)
#include "tst_transformmetrics.moc"
