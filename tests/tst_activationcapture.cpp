// Calibration windows and activation capture to HDF5 run files, read back and compared with
// what a forward hook sees for the same windows.
#include "TestSupport.h"

#include "eval/ActivationCapture.h"
#include "model/Capture.h"
#include "io/ActivationStore.h"
#include "model/Checkpoint.h"
#include "import/DemoModel.h"
#include "model/LlamaModel.h"

#include <ATen/ATen.h>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include <numeric>

using namespace latmix;

class TestActivationCapture : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;
    std::unique_ptr<model::Checkpoint> m_ck;
    std::vector<int> m_ids;

private slots:
    void initTestCase() {
        importing::writeDemoModel(m_tmp.filePath("demo").toStdString());
        m_ck = std::make_unique<model::Checkpoint>(model::Checkpoint::load(m_tmp.filePath("demo").toStdString()));
        m_ids.resize(5000);
        for (size_t i = 0; i < m_ids.size(); ++i) m_ids[i] = static_cast<int>((i * 31 + i / 7) % m_ck->config().vocabSize);
    }

    void windowsAreSlicesAndSeeded() {
        const auto a = model::sampleCalibrationWindows(m_ids, 6, 100, 1);
        const auto b = model::sampleCalibrationWindows(m_ids, 6, 100, 1);
        const auto c = model::sampleCalibrationWindows(m_ids, 6, 100, 2);
        QCOMPARE(a, b);
        QVERIFY(a != c);
        for (const auto& w : a) {
            QCOMPARE(int(w.size()), 100);
            auto it = std::search(m_ids.begin(), m_ids.end(), w.begin(), w.end());
            QVERIFY(it != m_ids.end());
        }
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, model::sampleCalibrationWindows(m_ids, 1, 6000, 0));
    }

    void capturedEqualsHook_data() {
        QTest::addColumn<QString>("regex");
        QTest::addColumn<bool>("bf16");
        QTest::addColumn<int>("points");
        QTest::newRow("all float32") << ".*" << false << 4 * m_ck->config().numLayers;
        QTest::newRow("down_proj of layers 0-1 bf16") << "layers\\.[01]\\..*down_proj" << true << 2;
        QTest::newRow("qkv only") << "qkv" << false << m_ck->config().numLayers;
    }
    void capturedEqualsHook() {
        QFETCH(QString, regex);
        QFETCH(bool, bf16);
        QFETCH(int, points);
        const model::LlamaModel m(*m_ck);
        eval::CaptureOptions o;
        o.pointsRegex = regex.toStdString();
        o.samples = 3;
        o.seqLen = 40;
        o.seed = 5;
        o.bfloat16 = bf16;
        const QString out = m_tmp.filePath("run.h5");
        const auto r = eval::captureActivations(m, m_ids, o, out.toStdString(), {{"model", "demo"}});
        QCOMPARE(int(r.points.size()), points);
        QCOMPARE(r.rowsPerPoint, 120LL);
        QVERIFY(!QFile::exists(out + ".partial"));
        const io::ActivationReader reader(out.toStdString());
        QCOMPARE(int(reader.points().size()), points);
        QCOMPARE(QString::fromStdString(reader.attributes().at("model")), QString("demo"));
        QCOMPARE(QString::fromStdString(reader.attributes().at("seed")), QString("5"));
        // The same windows through a hook, concatenated per point.
        const auto windows = model::sampleCalibrationWindows(m_ids, 3, 40, 5);
        std::map<std::string, std::vector<at::Tensor>> seen;
        for (const auto& w : windows)
            m.forward(at::tensor(std::vector<int64_t>(w.begin(), w.end()), at::kLong).unsqueeze(0),
                      [&](const std::string& p, const at::Tensor& x) {
                          seen[p].push_back(x.reshape({-1, x.size(-1)}));
                          return x;
                      });
        for (const auto& p : r.points) {
            auto want = at::cat(seen.at(p));
            if (bf16) want = want.to(at::kBFloat16).to(at::kFloat);
            QVERIFY2(at::equal(reader.read(p), want), p.c_str());
            QCOMPARE(reader.read(p, 7).size(0), int64_t(7));
        }
        auto tokens = reader.tokens();
        QCOMPARE(tokens.size(0), int64_t(3));
        QCOMPARE(tokens[2][0].item<int>(), windows[2][0]);
    }

    void cancelLeavesNoFile() {
        test::CancelAfter job(1);
        const model::LlamaModel m(*m_ck);
        eval::CaptureOptions o;
        o.samples = 4;
        o.seqLen = 16;
        const QString out = m_tmp.filePath("cancelled.h5");
        QVERIFY_THROWS_EXCEPTION(JobCancelled, eval::captureActivations(m, m_ids, o, out.toStdString(), {}, job));
        QVERIFY(!QFile::exists(out));
        QVERIFY(!QFile::exists(out + ".partial"));
    }

    void badInputIsNamed() {
        const model::LlamaModel m(*m_ck);
        eval::CaptureOptions o;
        o.pointsRegex = "no_such_point";
        try {
            eval::captureActivations(m, m_ids, o, m_tmp.filePath("x.h5").toStdString(), {});
            QFAIL("no error");
        } catch (const std::invalid_argument& e) {
            QVERIFY(QString(e.what()).contains("no quantization point matches 'no_such_point'"));
        }
        o.pointsRegex = "([";
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument,
                                 eval::captureActivations(m, m_ids, o, m_tmp.filePath("x.h5").toStdString(), {}));
        QVERIFY_THROWS_EXCEPTION(std::runtime_error, io::ActivationReader(m_tmp.filePath("missing.h5").toStdString()));
    }
};

QTEST_APPLESS_MAIN(TestActivationCapture)
#include "tst_activationcapture.moc"
