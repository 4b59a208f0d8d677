// The bit budget (quant/BitBudget.h, docs/spec.md "Mixed precision"): bits per weight counted by
// hand from the formats' definitions, and the exact solver against brute force over every choice
// of small problems, with fixed groups, ties and budgets at and outside the reachable range.
#include "quant/BitBudget.h"

#include "TestSupport.h"

#include <QRegularExpression>
#include <QtTest>

#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

using namespace latmix;
using latmix::test::errorOf;

namespace {

// Every choice, the least KL with bits <= budget (ties: fewer bits), or none (choice empty).
quant::BudgetSolution bruteForce(const quant::BudgetProblem& p) {
    quant::BudgetSolution best;
    double total = 0;
    for (auto w : p.weights) total += static_cast<double>(w);
    std::vector<int> c(p.weights.size(), 0);
    while (true) {
        double bits = 0, kl = 0;
        for (std::size_t g = 0; g < c.size(); ++g) {
            const auto& k = p.candidates[g][static_cast<std::size_t>(c[g])];
            bits += k.bits * static_cast<double>(p.weights[g]);
            kl += k.predictedKl;
        }
        bits /= total;
        if (bits <= p.budget + 1e-12 &&
            (best.choice.empty() || kl < best.predictedKl - 1e-12 || (std::abs(kl - best.predictedKl) <= 1e-12 && bits < best.bits)))
            best = {c, bits, kl};
        std::size_t g = 0;
        while (g < c.size() && ++c[g] == static_cast<int>(p.candidates[g].size())) c[g++] = 0;
        if (g == c.size()) break;
    }
    return best;
}

// A random problem: groups of a few sizes, the real formats' bits, KL falling with bits as a
// group's sensitivity times the format's error (ties where two groups share both).
quant::BudgetProblem randomProblem(int groups, std::uint64_t seed, bool withFixed) {
    std::mt19937_64 rng(seed);
    const double bits[] = {4.25, 4.5, 8.25, 16};
    const double error[] = {1.0, 0.8, 0.06, 0};
    const std::int64_t sizes[] = {4096, 8192, 12288};
    quant::BudgetProblem p;
    for (int g = 0; g < groups; ++g) {
        p.weights.push_back(sizes[rng() % 3]);
        const double sensitivity = 0.001 * static_cast<double>(1 + rng() % 7);
        std::vector<quant::BudgetCandidate> c;
        const int first = static_cast<int>(rng() % 2), count = 2 + static_cast<int>(rng() % 3 == 0 ? 2 : rng() % 2);
        for (int k = first; k < std::min(4, first + count); ++k) c.push_back({bits[k], sensitivity * error[k]});
        if (withFixed && g == 1) c = {c.back()}; // a user's rule: one format
        p.candidates.push_back(c);
    }
    return p;
}

} // namespace

class TestBitBudget : public QObject {
    Q_OBJECT
private slots:
    // Element bits + one 8-bit scale per block (E8M0 for MX, E4M3 for NVFP4), bf16's 16.
    void bitsPerWeightByHand_data() {
        QTest::addColumn<QString>("format");
        QTest::addColumn<int>("block");
        QTest::addColumn<double>("bits");
        QTest::newRow("mxfp4") << "mxfp4" << 32 << 4.25;   // 4 + 8/32
        QTest::newRow("nvfp4") << "nvfp4" << 16 << 4.5;    // 4 + 8/16
        QTest::newRow("mxint4") << "mxint4" << 32 << 4.25;
        QTest::newRow("mxfp8") << "mxfp8_e4m3" << 32 << 8.25; // 8 + 8/32
        QTest::newRow("mxint8") << "mxint8" << 32 << 8.25;
        QTest::newRow("mxfp6") << "mxfp6_e2m3" << 32 << 6.25;
        QTest::newRow("mxfp4 block 64") << "mxfp4" << 64 << 4.125;
        QTest::newRow("bf16") << "" << 0 << 16.0;
    }
    void bitsPerWeightByHand() {
        QFETCH(QString, format);
        QFETCH(int, block);
        QFETCH(double, bits);
        std::optional<mx::MxConfig> f;
        if (!format.isEmpty()) {
            f = mx::makeConfig(mx::parseFormat(format.toStdString()));
            f->blockSize = block;
        }
        QCOMPARE(quant::bitsPerWeight(f), bits);
    }

    // The solver's choice is brute force's: the same least KL and, among equal KL, the same bits.
    void solverMatchesBruteForce_data() {
        QTest::addColumn<int>("groups");
        QTest::addColumn<int>("seed");
        QTest::addColumn<bool>("fixed");
        QTest::addColumn<double>("budget");
        for (int seed = 1; seed <= 6; ++seed)
            for (double budget : {4.5, 5.0, 6.0, 8.25, 12.0})
                for (int groups : {3, 7}) {
                    const QString name = QStringLiteral("%1 groups, seed %2, %3 bits").arg(groups).arg(seed).arg(budget);
                    QTest::newRow(qPrintable(name)) << groups << seed << false << budget;
                    QTest::newRow(qPrintable(name + " fixed")) << groups << seed << true << budget;
                }
    }
    void solverMatchesBruteForce() {
        QFETCH(int, groups);
        QFETCH(int, seed);
        QFETCH(bool, fixed);
        QFETCH(double, budget);
        auto p = randomProblem(groups, static_cast<std::uint64_t>(seed), fixed);
        p.budget = budget;
        const auto expected = bruteForce(p);
        const auto range = quant::reachableBits(p);
        if (expected.choice.empty() || budget > range.most) { // out of range: refused, naming it
            const QString e = errorOf([&] { quant::solveBudget(p); });
            const auto m = QRegularExpression("reach: ([0-9.]+) to ([0-9.]+) bits").match(e);
            QVERIFY2(m.hasMatch(), qPrintable(e));
            QVERIFY2(std::abs(m.captured(1).toDouble() / range.least - 1) < 1e-5 && std::abs(m.captured(2).toDouble() / range.most - 1) < 1e-5,
                     qPrintable(e)); // six significant digits
            QVERIFY(budget < range.least || budget > range.most);
            return;
        }
        const auto got = quant::solveBudget(p);
        QVERIFY2(std::abs(got.predictedKl - expected.predictedKl) <= 1e-12,
                 qPrintable(QStringLiteral("KL %1, brute force %2").arg(got.predictedKl, 0, 'g', 17).arg(expected.predictedKl, 0, 'g', 17)));
        QCOMPARE(got.bits, expected.bits);
        QVERIFY(got.bits <= budget);
        if (fixed) QCOMPARE(got.choice[1], 0); // the rule's one candidate
    }

    // The front: every brute-force choice is matched or beaten by a front point with no more bits,
    // and every front point is a real choice (its bits and KL recomputed from the choice).
    void paretoFrontIsExact_data() {
        QTest::addColumn<int>("seed");
        for (int seed = 11; seed <= 16; ++seed) QTest::newRow(qPrintable(QString::number(seed))) << seed;
    }
    void paretoFrontIsExact() {
        QFETCH(int, seed);
        auto p = randomProblem(6, static_cast<std::uint64_t>(seed), false);
        const auto front = quant::paretoFront(p);
        QVERIFY(front.size() >= 2);
        for (std::size_t i = 1; i < front.size(); ++i) {
            QVERIFY(front[i].bits > front[i - 1].bits);
            QVERIFY(front[i].predictedKl < front[i - 1].predictedKl);
        }
        for (const auto& f : front) { // each point is the brute-force optimum at its own bits
            p.budget = f.bits;
            QVERIFY(std::abs(bruteForce(p).predictedKl - f.predictedKl) <= 1e-12);
        }
    }

    void refusesMalformedProblems() {
        quant::BudgetProblem p;
        QVERIFY(errorOf([&] { quant::solveBudget(p); }).contains("at least one group"));
        p.weights = {10};
        p.candidates = {{}};
        QVERIFY(errorOf([&] { quant::solveBudget(p); }).contains("no candidate"));
        p.candidates = {{{4.1, 0}}}; // not a whole number of 1/256 bits
        p.budget = 4.1;
        QVERIFY(errorOf([&] { quant::solveBudget(p); }).contains("1/256"));
    }
};

QTEST_APPLESS_MAIN(TestBitBudget)
#include "tst_bitbudget.moc"
