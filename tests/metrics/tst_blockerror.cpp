// Per-MX-block error (SPEC §3, T = identity) against sums worked out by hand.
#include "metrics/BlockError.h"

#include <ATen/ATen.h>
#include <QtTest>

#include <cmath>
#include <limits>

class TestBlockError : public QObject {
    Q_OBJECT
private slots:
    void handWorked_data() {
        QTest::addColumn<QList<double>>("x");
        QTest::addColumn<QList<double>>("xq");
        QTest::addColumn<int>("rows");
        QTest::addColumn<int>("block");
        QTest::addColumn<QList<double>>("expected");
        // blocks {1,2},{3,4},{5}: squared errors {0,1},{0,1},{0} -> means .5, .5, 0 (last block of 1)
        QTest::newRow("partial block") << QList<double>{1, 2, 3, 4, 5} << QList<double>{1, 1, 3, 3, 5} << 1 << 2
                                       << QList<double>{0.5, 0.5, 0.0};
        // rows [2,0,0,0] and [0,0,0,3]: block means {2,0} and {0,4.5}, averaged over rows {1, 2.25}
        QTest::newRow("two rows") << QList<double>{2, 0, 0, 0, 0, 0, 0, 3} << QList<double>{0, 0, 0, 0, 0, 0, 0, 0} << 2 << 2
                                  << QList<double>{(4.0 / 2 + 0) / 2, (0 + 9.0 / 2) / 2};
        QTest::newRow("one block") << QList<double>{1, -1, 1, -1} << QList<double>{0, 0, 0, 0} << 1 << 8
                                   << QList<double>{1.0};
    }
    void handWorked() {
        QFETCH(QList<double>, x);
        QFETCH(QList<double>, xq);
        QFETCH(int, rows);
        QFETCH(int, block);
        QFETCH(QList<double>, expected);
        const int64_t n = x.size() / rows;
        auto tx = at::tensor(std::vector<double>(x.begin(), x.end())).reshape({rows, n});
        auto tq = at::tensor(std::vector<double>(xq.begin(), xq.end())).reshape({rows, n});
        auto e = latmix::metrics::perBlockError(tx, tq, block);
        QCOMPARE(e.size(0), int64_t(expected.size()));
        for (int i = 0; i < expected.size(); ++i) QCOMPARE(e[i].item<double>(), expected[i]); // exact: dyadic values
    }

    // MSE and SQNR of the whole tensor, worked by hand.
    void errorSummary_data() {
        QTest::addColumn<QList<double>>("x");
        QTest::addColumn<QList<double>>("xq");
        QTest::addColumn<double>("mse");
        QTest::addColumn<double>("sqnrDb"); // inf: no error; nan: no signal
        // noise 0+1 = 1 over 2 values, signal 1+4 = 5: 10 log10 5
        QTest::newRow("one error") << QList<double>{1, 2} << QList<double>{1, 1} << 0.5 << 10.0 * std::log10(5.0);
        // noise 4·0.25 = 1, signal 4·100: 10 log10 400
        QTest::newRow("every value off") << QList<double>{10, -10, 10, -10} << QList<double>{9.5, -9.5, 9.5, -9.5} << 0.25
                                         << 10.0 * std::log10(400.0);
        QTest::newRow("exact") << QList<double>{3, -4} << QList<double>{3, -4} << 0.0
                               << std::numeric_limits<double>::infinity();
        QTest::newRow("no signal") << QList<double>{0, 0} << QList<double>{1, 0} << 0.5
                                   << std::numeric_limits<double>::quiet_NaN();
    }
    void errorSummary() {
        QFETCH(QList<double>, x);
        QFETCH(QList<double>, xq);
        QFETCH(double, mse);
        QFETCH(double, sqnrDb);
        const auto e = latmix::metrics::errorSummary(at::tensor(std::vector<double>(x.begin(), x.end())),
                                                     at::tensor(std::vector<double>(xq.begin(), xq.end())));
        QCOMPARE(e.mse, mse); // exact: dyadic values; the SQNR goes through log10 (an ulp or so)
        if (std::isnan(sqnrDb)) QVERIFY(std::isnan(e.sqnrDb));
        else if (std::isinf(sqnrDb)) QVERIFY(std::isinf(e.sqnrDb) && e.sqnrDb > 0);
        else QVERIFY2(std::abs(e.sqnrDb - sqnrDb) < 1e-12, qPrintable(QString::number(e.sqnrDb)));
    }
};

QTEST_APPLESS_MAIN(TestBlockError)
#include "tst_blockerror.moc"
