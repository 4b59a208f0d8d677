// Hugging Face model folders (SPEC §8): single-file and sharded checkpoints, parameter counts,
// and the errors for incomplete folders.
#include "io/SafeTensors.h"
#include "model/Checkpoint.h"

#include <ATen/ATen.h>
#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include <chrono>
#include <filesystem>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <limits>
#include <stdexcept>
#include "TestData.h" // after ATen: Qt's slots macro breaks ATen headers
#include "PoisonedModel.h"

using namespace latmix;
using namespace latmix::model;

namespace {

using latmix::test::dataDir;

QString modelDir(const QString& name) { return latmix::test::modelFolder(name); }

// Parameters of a Llama-family model computed from its config alone (SPEC §4 tensor list).
std::int64_t expectedParams(const ModelConfig& c) {
    const std::int64_t h = c.hiddenSize, q = std::int64_t(c.numHeads) * c.headDim,
                       kv = std::int64_t(c.numKvHeads) * c.headDim, f = c.intermediateSize;
    const std::int64_t layer = 2 * h + h * q + 2 * h * kv + q * h + 3 * h * f;
    return std::int64_t(c.vocabSize) * h * (c.tieWordEmbeddings ? 1 : 2) + c.numLayers * layer + h;
}

void copyFile(const QString& from, const QString& to) {
    QFile::remove(to);
    QVERIFY(QFile::copy(from, to));
    QFile::setPermissions(to, QFile::ReadOwner | QFile::WriteOwner);
}

// A copy of `src` with its tensors split over two shards and an index, as transformers writes it.
void makeSharded(const QString& src, const QString& dst) {
    QDir().mkpath(dst);
    copyFile(src + "/config.json", dst + "/config.json");
    auto f = io::SafeTensorsFile::open((src + "/model.safetensors").toStdString());
    std::vector<std::pair<std::string, at::Tensor>> a, b;
    nlohmann::json index;
    index["metadata"] = {{"total_size", 0}};
    std::uint64_t total = 0;
    const auto& entries = f->entries();
    for (size_t i = 0; i < entries.size(); ++i) {
        const bool first = i < entries.size() / 2;
        (first ? a : b).emplace_back(entries[i].name, f->tensor(entries[i].name));
        index["weight_map"][entries[i].name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
        total += entries[i].end - entries[i].begin;
    }
    index["metadata"]["total_size"] = total;
    io::writeSafeTensors((dst + "/model-00001-of-00002.safetensors").toStdString(), a, {{"format", "pt"}});
    io::writeSafeTensors((dst + "/model-00002-of-00002.safetensors").toStdString(), b, {{"format", "pt"}});
    std::ofstream((dst + "/model.safetensors.index.json").toStdString()) << index.dump(2);
}

} // namespace

class TestCheckpoint : public QObject {
    Q_OBJECT
private slots:
    void loadReal_data() {
        QTest::addColumn<QString>("model");
        QTest::addColumn<qint64>("params"); // -1: compute from config
        QTest::addColumn<int>("tensors");
        QTest::newRow("stories260K-hf") << "stories260K-hf" << qint64(260032) << 47; // PROVENANCE.md
        QTest::newRow("brownpy-13M") << "brownpy-13M" << qint64(-1) << 2 + 6 * 9;
    }
    void loadReal() {
        QFETCH(QString, model);
        QFETCH(qint64, params);
        QFETCH(int, tensors);
        const QString dir = modelDir(model);
        if (!QFile::exists(dir + "/config.json")) LATMIX_DATA_SKIP(qPrintable("not found: " + dir + " (set LATMIX_DATA_DIR)"));
        const Checkpoint ck = Checkpoint::load(dir.toStdString());
        QCOMPARE(ck.dir(), dir.toStdString());
        const qint64 want = params >= 0 ? params : expectedParams(ck.config());
        QCOMPARE(qint64(ck.parameterCount()), want);
        if (model == "brownpy-13M") QCOMPARE(want, qint64(12913920)); // PROVENANCE.md, cross-check
        QCOMPARE(qint64(ck.weightBytes()), want * 4);
        QCOMPARE(int(ck.names().size()), tensors);
        QVERIFY(ck.has("model.embed_tokens.weight"));
        QVERIFY(!ck.has("lm_head.weight")); // both tie the classifier
        for (const auto& [name, shape] : requiredTensors(ck.config())) {
            const auto w = ck.weight(name);
            QCOMPARE(w.sizes().vec(), shape);
            QCOMPARE(w.scalar_type(), at::kFloat);
        }
        // The view outlives the Checkpoint.
        at::Tensor e;
        {
            const Checkpoint copy = Checkpoint::load(dir.toStdString());
            e = copy.weight("model.norm.weight");
        }
        QVERIFY(at::equal(e, ck.weight("model.norm.weight")));
    }

    void sharded_data() {
        QTest::addColumn<QString>("model");
        QTest::newRow("demo") << "demo"; // runs without ../shared/data
        QTest::newRow("stories260K-hf") << "stories260K-hf";
        QTest::newRow("brownpy-13M") << "brownpy-13M";
    }
    void sharded() {
        QFETCH(QString, model);
        const QString src = modelDir(model);
        if (!QFile::exists(src + "/config.json")) LATMIX_DATA_SKIP(qPrintable("not found: " + src + " (set LATMIX_DATA_DIR)"));
        QTemporaryDir tmp;
        const QString dst = tmp.filePath("sharded");
        makeSharded(src, dst);
        const Checkpoint a = Checkpoint::load(src.toStdString());
        const Checkpoint b = Checkpoint::load(dst.toStdString());
        QCOMPARE(b.names(), a.names());
        QCOMPARE(b.parameterCount(), a.parameterCount());
        QCOMPARE(b.weightBytes(), a.weightBytes());
        for (const auto& n : a.names()) QVERIFY2(at::equal(a.weight(n), b.weight(n)), n.c_str());
    }

    void errors_data() {
        QTest::addColumn<QString>("damage");
        QTest::addColumn<QStringList>("phrases");
        QTest::newRow("missing folder") << "no folder" << QStringList{"does not exist"};
        QTest::newRow("missing config") << "no config" << QStringList{"has no config.json"};
        QTest::newRow("no weights") << "no weights"
                                    << QStringList{"expected model.safetensors or model.safetensors.index.json"};
        QTest::newRow("missing shard") << "no shard"
                                       << QStringList{"model-00002-of-00002.safetensors", "listed in", "missing"};
        QTest::newRow("index names a tensor the shard lacks")
            << "index lies" << QStringList{"model.layers.9.mlp.up_proj.weight", "does not contain it"};
        // The demo model (hidden 128, intermediate 384, 4 layers): no real data needed.
        QTest::newRow("missing tensor") << "no tensor"
                                        << QStringList{"model.layers.3.mlp.up_proj.weight", "is missing", "[384, 128]"};
        QTest::newRow("wrong shape") << "wrong shape"
                                     << QStringList{"model.norm.weight", "has shape [127]", "implies [128]"};
        QTest::newRow("bad config") << "bad config" << QStringList{"unsupported architecture 'BertModel'"};
        QTest::newRow("integer weights") << "int weights"
                                         << QStringList{"model.norm.weight", "is I32", "F32, BF16 or F16"};
    }
    void errors() {
        QFETCH(QString, damage);
        QFETCH(QStringList, phrases);
        const QString src = latmix::test::demoModelDir();
        QTemporaryDir tmp;
        QString dir = tmp.filePath("model");
        if (damage == "no folder") {
            dir = tmp.filePath("does-not-exist");
        } else if (damage == "no shard" || damage == "index lies") {
            makeSharded(src, dir);
            if (damage == "no shard") QVERIFY(QFile::remove(dir + "/model-00002-of-00002.safetensors"));
            else {
                nlohmann::json j;
                std::ifstream((dir + "/model.safetensors.index.json").toStdString()) >> j;
                j["weight_map"]["model.layers.9.mlp.up_proj.weight"] = "model-00001-of-00002.safetensors";
                std::ofstream((dir + "/model.safetensors.index.json").toStdString()) << j.dump();
            }
        } else {
            QDir().mkpath(dir);
            if (damage != "no config") copyFile(src + "/config.json", dir + "/config.json");
            if (damage == "bad config") {
                QFile f(dir + "/config.json");
                QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
                f.write(R"({"architectures": ["BertModel"], "hidden_size": 64})");
            }
            if (damage == "no tensor" || damage == "wrong shape" || damage == "int weights") {
                auto f = io::SafeTensorsFile::open((src + "/model.safetensors").toStdString());
                std::vector<std::pair<std::string, at::Tensor>> t;
                for (const auto& e : f->entries()) {
                    if (damage == "no tensor" && e.name == "model.layers.3.mlp.up_proj.weight") continue;
                    auto w = f->tensor(e.name);
                    if (damage == "wrong shape" && e.name == "model.norm.weight") w = w.slice(0, 0, 127);
                    if (damage == "int weights" && e.name == "model.norm.weight") w = w.to(at::kInt);
                    t.emplace_back(e.name, w);
                }
                io::writeSafeTensors((dir + "/model.safetensors").toStdString(), t);
            } else if (damage != "no weights") {
                copyFile(src + "/model.safetensors", dir + "/model.safetensors");
            }
        }
        try {
            Checkpoint::load(dir.toStdString());
            QFAIL("no error");
        } catch (const std::runtime_error& e) {
            const QString msg = QString::fromStdString(e.what());
            QVERIFY2(msg.contains(dir), qPrintable(msg));
            for (const auto& p : phrases) QVERIFY2(msg.contains(p), qPrintable(msg + "\n  lacks: " + p));
        }
    }

    // One NaN or Inf weight: the checkpoint opens (the header is fine), and the check names the
    // folder, the tensor, its file, the first bad index and value; a clean model passes with its
    // progress ending at 1.
    void nonFiniteWeights_data() {
        QTest::addColumn<QString>("tensor"); // empty: the clean demo model
        QTest::addColumn<qint64>("flat");
        QTest::addColumn<double>("value");
        QTest::addColumn<QString>("where");
        const double inf = std::numeric_limits<double>::infinity();
        QTest::newRow("clean") << QString() << qint64(0) << 0.0 << QString();
        // down_proj is [hidden 128, intermediate 384]: flat 5·384 + 7 is [5, 7].
        QTest::newRow("nan in down_proj") << "model.layers.1.mlp.down_proj.weight" << qint64(5 * 384 + 7)
                                          << std::numeric_limits<double>::quiet_NaN() << "first at [5, 7] (nan), 1 of 49152 values";
        QTest::newRow("inf in the embedding") << "model.embed_tokens.weight" << qint64(128 * 3 + 1) << inf
                                              << "first at [3, 1] (inf), 1 of";
        QTest::newRow("-inf in the final norm") << "model.norm.weight" << qint64(127) << -inf
                                                << "first at [127] (-inf), 1 of 128 values";
    }
    void nonFiniteWeights() {
        QFETCH(QString, tensor);
        QFETCH(qint64, flat);
        QFETCH(double, value);
        QFETCH(QString, where);
        QTemporaryDir tmp;
        QString dir = latmix::test::demoModelDir();
        if (!tensor.isEmpty()) {
            dir = tmp.filePath("model");
            QVERIFY(latmix::test::writePoisonedModel(latmix::test::demoModelDir(), dir, tensor.toStdString(), flat, value));
        }
        const Checkpoint ck = Checkpoint::load(dir.toStdString());
        struct Progress : latmix::JobContext {
            std::vector<double> seen;
            void progress(double f, const std::string&) override { seen.push_back(f); }
        } progress;
        try {
            checkWeightsFinite(ck, progress);
            QVERIFY2(tensor.isEmpty(), "no error");
            QVERIFY(!progress.seen.empty() && progress.seen.back() == 1.0);
            QVERIFY(std::is_sorted(progress.seen.begin(), progress.seen.end()));
        } catch (const std::runtime_error& e) {
            const QString msg = QString::fromStdString(e.what());
            QVERIFY2(!tensor.isEmpty(), qPrintable(msg));
            for (const QString& p : {dir, "tensor '" + tensor + "' in model.safetensors holds NaN/Inf", where,
                                     QString("download or export it again")})
                QVERIFY2(msg.contains(p), qPrintable(msg + "\n  lacks: " + p));
        }
    }

    // Issue 71: a checkpoint checked once in this process is not read again (the workbench checks
    // at open, its calibration checked again: 54 s on a 1B model); one whose file changed since is.
    void checkedOnceUnlessItChanged() {
        QTemporaryDir tmp;
        const QString dir = tmp.filePath("model");
        QVERIFY(latmix::test::writePoisonedModel(latmix::test::demoModelDir(), dir, "model.norm.weight", 0, 1.0)); // finite
        struct Messages : latmix::JobContext {
            std::vector<std::string> seen;
            void progress(double, const std::string& m) override { seen.push_back(m); }
        };
        Messages first, second;
        checkWeightsFinite(Checkpoint::load(dir.toStdString()), first);
        checkWeightsFinite(Checkpoint::load(dir.toStdString()), second);
        QVERIFY(first.seen.size() > 2); // tensor by tensor
        QCOMPARE(second.seen, (std::vector<std::string>{"the weights were checked already: no NaN/Inf"}));
        // The file rewritten with a NaN (the same size; its time set a second later, whatever the
        // file system's resolution): read again, and refused.
        const std::string file = (dir + "/model.safetensors").toStdString();
        const auto before = std::filesystem::last_write_time(file);
        QVERIFY(latmix::test::writePoisonedModel(latmix::test::demoModelDir(), dir, "model.norm.weight", 0,
                                                 std::numeric_limits<double>::quiet_NaN()));
        std::filesystem::last_write_time(file, before + std::chrono::seconds(1));
        QVERIFY_THROWS_EXCEPTION(std::runtime_error, checkWeightsFinite(Checkpoint::load(dir.toStdString())));
    }

    void unknownWeightNamesTensorAndFolder() {
        const QString src = modelDir("stories260K-hf");
        if (!QFile::exists(src + "/config.json")) LATMIX_DATA_SKIP(qPrintable("not found: " + src + " (set LATMIX_DATA_DIR)"));
        const Checkpoint ck = Checkpoint::load(src.toStdString());
        try {
            ck.weight("lm_head.weight");
            QFAIL("no error");
        } catch (const std::runtime_error& e) {
            const QString msg = e.what();
            QVERIFY2(msg.contains("lm_head.weight") && msg.contains(src), qPrintable(msg));
        }
    }
};

QTEST_APPLESS_MAIN(TestCheckpoint)
#include "tst_checkpoint.moc"
