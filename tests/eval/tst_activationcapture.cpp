// Calibration windows and activation capture to HDF5 run files, read back and compared with
// what a forward hook sees for the same windows.
#include "TestSupport.h"

#include "eval/ActivationCapture.h"
#include "model/Capture.h"
#include "io/ActivationStore.h"
#include "io/StoredTensors.h"
#include "model/Checkpoint.h"
#include "import/DemoModel.h"
#include "model/LlamaModel.h"

#include <ATen/ATen.h>
#include <H5Cpp.h>
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

    // Windows run together as one batch give each window's rows, in window order per point, as
    // one window per pass does (the views batch; the pipeline does not). Batched products may
    // sum in another order: float32, a few layers of a 64-wide model, 1e-5 of the largest value
    // is ~100 ulps of headroom; a window mixed up with another differs by O(1).
    void batchedPassesMatchOneWindowEach_data() {
        QTest::addColumn<qint64>("tokensPerPass");
        QTest::newRow("two windows a pass") << qint64(80);
        QTest::newRow("all five in one pass") << qint64(4096);
    }
    void batchedPassesMatchOneWindowEach() {
        QFETCH(qint64, tokensPerPass);
        const model::LlamaModel m(*m_ck);
        const auto windows = model::sampleCalibrationWindows(m_ids, 5, 40, 9);
        const auto names = model::quantizationPointNames(m_ck->config());
        auto capture = [&](std::int64_t perPass) {
            std::vector<std::pair<std::size_t, std::string>> order;
            std::map<std::string, std::vector<at::Tensor>> rows;
            model::captureWindows(m, windows, names, [&](std::size_t w, const std::string& p, const at::Tensor& x) {
                order.emplace_back(w, p);
                rows[p].push_back(x.clone());
            }, silentJob(), nullptr, perPass);
            return std::make_pair(order, rows);
        };
        const auto one = capture(0), batched = capture(tokensPerPass);
        QCOMPARE(batched.first.size(), one.first.size());
        for (const auto& name : names) {
            const auto& a = one.second.at(name);
            const auto& b = batched.second.at(name);
            QCOMPARE(b.size(), a.size());
            for (size_t w = 0; w < a.size(); ++w) {
                const double scale = a[w].abs().max().item<double>();
                QVERIFY2((a[w] - b[w]).abs().max().item<double>() <= 1e-5 * scale, name.c_str());
            }
        }
        // Each point's windows arrive in order.
        std::map<std::string, std::size_t> next;
        for (const auto& [w, p] : batched.first) QCOMPARE(w, next[p]++);
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

    // Issue 17.2: activation run files are sealed (size + CRC-32, io/StoredTensors.h) and every
    // dataset is checked before it is read. Damaged files and sealed files of the wrong layout
    // (made here with libhdf5, then sealed) are refused with one error naming the file, the
    // dataset where there is one, and the way out; none reaches a read.
    void damagedFilesAreRefused_data() {
        QTest::addColumn<QString>("damage");
        QTest::addColumn<QString>("message");
        QTest::newRow("bit flip") << "flip" << "does not match its checksum";
        QTest::newRow("truncated") << "truncate" << "(truncated or appended to)";
        QTest::newRow("unsealed (written before the seal)") << "unsealed" << "is not a sealed LATMiX tensor file";
        QTest::newRow("no /activations") << "nogroup" << "has no /activations group";
        QTest::newRow("3-D dataset") << "rank3" << "dataset 'p' is not 2-D";
        QTest::newRow("integer dataset") << "integer" << "dataset 'p' does not hold floating-point values";
        QTest::newRow("bfloat16 label on 4-byte floats") << "bf16label" << "dataset 'p' says bfloat16";
        QTest::newRow("group among the points") << "subgroup" << "'p' under /activations is not a dataset";
        QTest::newRow("rows declared, never written") << "unwritten" << "declares 4000000000 bytes but the file stores 0";
        QTest::newRow("text tokens") << "texttokens" << "'/tokens' does not hold integers";
    }
    void damagedFilesAreRefused() {
        QFETCH(QString, damage);
        QFETCH(QString, message);
        const std::string path = m_tmp.filePath("damaged-" + damage + ".h5").toStdString();
        if (damage == "flip" || damage == "truncate") {
            const model::LlamaModel m(*m_ck);
            eval::CaptureOptions o;
            o.samples = 1;
            o.seqLen = 16;
            eval::captureActivations(m, m_ids, o, path, {});
            QVERIFY(io::ActivationReader(path).points().size() > 0); // sound before the damage
            QFile f(QString::fromStdString(path));
            QVERIFY(f.open(QIODevice::ReadWrite));
            if (damage == "flip") {
                QVERIFY(f.seek(f.size() / 2));
                char c = 0;
                QVERIFY(f.getChar(&c) && f.seek(f.size() / 2) && f.putChar(char(c ^ 0x10)));
            } else {
                QVERIFY(f.resize(f.size() - 100));
            }
        } else {
            H5::FileAccPropList access;
            access.setLibverBounds(H5F_LIBVER_V18, H5F_LIBVER_LATEST);
            H5::FileCreatPropList create;
            if (damage != "unsealed") create.setUserblock(io::kTensorFileSealBytes);
            H5::H5File f(path, H5F_ACC_TRUNC, create, access);
            const hsize_t d2[2] = {2, 3}, d3[3] = {2, 3, 1};
            const float v[6] = {1, 2, 3, 4, 5, 6};
            if (damage != "nogroup") {
                H5::Group g = f.createGroup("/activations");
                if (damage == "rank3")
                    g.createDataSet("p", H5::PredType::NATIVE_FLOAT, H5::DataSpace(3, d3)).write(v, H5::PredType::NATIVE_FLOAT);
                else if (damage == "integer")
                    g.createDataSet("p", H5::PredType::NATIVE_INT32, H5::DataSpace(2, d2));
                else if (damage == "subgroup")
                    g.createGroup("p");
                else if (damage == "unwritten") {
                    const hsize_t big[2] = {1000000000, 1}, chunk[2] = {1024, 1};
                    H5::DSetCreatPropList props;
                    props.setChunk(2, chunk);
                    g.createDataSet("p", H5::PredType::NATIVE_FLOAT, H5::DataSpace(2, big), props);
                } else {
                    H5::DataSet ds = g.createDataSet("p", H5::PredType::NATIVE_FLOAT, H5::DataSpace(2, d2));
                    ds.write(v, H5::PredType::NATIVE_FLOAT);
                    if (damage == "bf16label") {
                        H5::StrType t(H5::PredType::C_S1, 8);
                        ds.createAttribute("dtype", t, H5::DataSpace(H5S_SCALAR)).write(t, std::string("bfloat16"));
                    }
                }
            }
            if (damage == "texttokens") {
                H5::StrType t(H5::PredType::C_S1, 4);
                f.createDataSet("/tokens", t, H5::DataSpace(2, d2));
            }
            f.close();
            if (damage != "unsealed") io::sealTensorFile(path);
        }
        try {
            io::ActivationReader reader(path);
            QFAIL("accepted");
        } catch (const std::runtime_error& e) {
            const QString what = e.what();
            QVERIFY2(what.contains(QString::fromStdString(path)) && what.contains(message), qPrintable(what));
            QVERIFY2(what.contains("again"), qPrintable(what)); // the way out: capture (or run) again
        }
    }
};

QTEST_APPLESS_MAIN(TestActivationCapture)
#include "tst_activationcapture.moc"
