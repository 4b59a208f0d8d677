// llama2.c legacy import (SPEC §8): stories260K.bin against the independently converted
// stories260K-hf folder, tensor for tensor and bit for bit; malformed files fail cleanly.
#include "io/SafeTensors.h"
#include "model/Checkpoint.h"
#include "import/Llama2cImport.h"

#include <ATen/ATen.h>
#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include <cstring>
#include <stdexcept>
#include "TestData.h" // after ATen: Qt's slots macro breaks ATen headers

using namespace latmix;
using namespace latmix::model;
using namespace latmix::importing;

namespace {

using latmix::test::dataDir;

QByteArray readAll(const QString& path) {
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

void writeBytes(const QString& path, const QByteArray& b) {
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
    QCOMPARE(f.write(b), qint64(b.size()));
}

void putInt(QByteArray& b, int index, std::int32_t v) { std::memcpy(b.data() + 4 * index, &v, 4); }

// A tiny legacy file built by the test: dim 8, hidden 12, 2 layers, 2 heads, 1 kv head,
// vocab 10 (negated when untied), seq 4; values are their float index.
QByteArray tinyLegacy(bool untied) {
    const int d = 8, f = 12, L = 2, nh = 2, nkv = 1, V = 10, S = 4, hd = d / nh, kv = hd * nkv;
    const qint64 floats = qint64(V) * d + L * d + L * d * d + 2 * L * kv * d + L * d * d + L * d + 3 * L * f * d + d +
                          2 * S * (hd / 2) + (untied ? V * d : 0);
    QByteArray b(int(28 + 4 * floats), '\0');
    const std::int32_t h[7] = {d, f, L, nh, nkv, untied ? -V : V, S};
    for (int i = 0; i < 7; ++i) putInt(b, i, h[i]);
    for (qint64 i = 0; i < floats; ++i) {
        const float x = float(i);
        std::memcpy(b.data() + 28 + 4 * i, &x, 4);
    }
    return b;
}

} // namespace

class TestLlama2cImport : public QObject {
    Q_OBJECT
private slots:
    // Every tensor of the import equals the independently derived stories260K-hf file exactly
    // (q/k permuted to rotate-half, PROVENANCE.md), and config.json carries the same values.
    void stories260KMatchesHfFolder() {
        const QString bin = dataDir() + "/models/stories260K/stories260K.bin";
        const QString hf = dataDir() + "/models/stories260K-hf";
        if (!QFile::exists(bin) || !QFile::exists(hf + "/model.safetensors"))
            LATMIX_DATA_SKIP(qPrintable("stories260K not found under " + dataDir() + " (set LATMIX_DATA_DIR)"));
        QTemporaryDir tmp;
        const QString out = tmp.filePath("imported/stories260K");
        importLlama2cWeights(bin.toStdString(), out.toStdString());
        QVERIFY(QFile::exists(out + "/config.json"));
        QCOMPARE(QDir(tmp.filePath("imported")).entryList(QDir::AllEntries | QDir::NoDotAndDotDot),
                 QStringList{"stories260K"});

        auto got = io::SafeTensorsFile::open((out + "/model.safetensors").toStdString());
        auto want = io::SafeTensorsFile::open((hf + "/model.safetensors").toStdString());
        QCOMPARE(got->entries().size(), want->entries().size());
        for (const auto& e : want->entries()) {
            QVERIFY2(got->contains(e.name), e.name.c_str());
            const auto a = got->tensor(e.name), b = want->tensor(e.name);
            QCOMPARE(QString::fromStdString(got->entry(e.name).dtype), QString("F32"));
            QCOMPARE(a.sizes().vec(), b.sizes().vec());
            QVERIFY2(std::memcmp(a.data_ptr(), b.data_ptr(), size_t(a.nbytes())) == 0, e.name.c_str());
        }

        const Checkpoint mine = Checkpoint::load(out.toStdString());
        const ModelConfig& c = mine.config();
        const ModelConfig r = ModelConfig::fromFile((hf + "/config.json").toStdString());
        QCOMPARE(c.architectureName, r.architectureName);
        QCOMPARE(c.hiddenSize, r.hiddenSize);
        QCOMPARE(c.intermediateSize, r.intermediateSize);
        QCOMPARE(c.numLayers, r.numLayers);
        QCOMPARE(c.numHeads, r.numHeads);
        QCOMPARE(c.numKvHeads, r.numKvHeads);
        QCOMPARE(c.headDim, r.headDim);
        QCOMPARE(c.vocabSize, r.vocabSize);
        QCOMPARE(c.maxPositions, r.maxPositions);
        QCOMPARE(c.rmsNormEps, r.rmsNormEps);
        QCOMPARE(c.ropeTheta, r.ropeTheta);
        QCOMPARE(c.tieWordEmbeddings, r.tieWordEmbeddings);
        QCOMPARE(c.qkvBias, r.qkvBias);
        QCOMPARE(c.mlpBias, r.mlpBias);
        QCOMPARE(c.bosTokenId, r.bosTokenId);
        QCOMPARE(c.eosTokenId, r.eosTokenId);
        QCOMPARE(c.torchDtype, r.torchDtype);
        QCOMPARE(mine.parameterCount(), std::int64_t(260032));
    }

    // Tied and untied classifiers on a synthetic file: layout, permutation and wcls placement.
    void tinySyntheticFile_data() {
        QTest::addColumn<bool>("untied");
        QTest::newRow("shared classifier") << false;
        QTest::newRow("separate wcls") << true;
    }
    void tinySyntheticFile() {
        QFETCH(bool, untied);
        QTemporaryDir tmp;
        const QString bin = tmp.filePath("tiny.bin");
        writeBytes(bin, tinyLegacy(untied));
        const QString out = tmp.filePath("tiny-hf");
        importLlama2cWeights(bin.toStdString(), out.toStdString());
        const Checkpoint ck = Checkpoint::load(out.toStdString());
        QCOMPARE(ck.config().tieWordEmbeddings, !untied);
        QCOMPARE(ck.has("lm_head.weight"), untied);
        // Offsets in floats: embedding 0..79, rms_att 80..95, wq from 96 (layer 0 rows of 8).
        QCOMPARE(ck.weight("model.embed_tokens.weight")[1][0].item<float>(), 8.0f);
        QCOMPARE(ck.weight("model.layers.1.input_layernorm.weight")[0].item<float>(), 88.0f);
        // Head size 4: new row order per head is (0, 2, 1, 3) -> row 1 of q is old row 2.
        const auto q = ck.weight("model.layers.0.self_attn.q_proj.weight");
        QCOMPARE(q[0][0].item<float>(), 96.0f);
        QCOMPARE(q[1][0].item<float>(), 96.0f + 2 * 8);
        QCOMPARE(q[2][0].item<float>(), 96.0f + 1 * 8);
        QCOMPARE(q[5][0].item<float>(), 96.0f + 6 * 8);
        if (untied) {
            // wcls is the last V*d floats, after the RoPE tables.
            const auto h = ck.weight("lm_head.weight");
            const qint64 total = (tinyLegacy(true).size() - 28) / 4;
            QCOMPARE(h[0][0].item<float>(), float(total - 80));
        }
    }

    void malformedFiles_data() {
        QTest::addColumn<QString>("damage");
        QTest::addColumn<QStringList>("phrases");
        QTest::newRow("truncated") << "truncate" << QStringList{"requires exactly", "truncated"};
        QTest::newRow("trailing data") << "append" << QStringList{"trailing data"};
        QTest::newRow("header only partly there") << "short" << QStringList{"shorter than the 28-byte header"};
        QTest::newRow("version 1 export") << "magic" << QStringList{"magic 'ak42'", "legacy v0"};
        QTest::newRow("heads do not divide dim") << "heads" << QStringList{"inconsistent"};
        QTest::newRow("not a checkpoint") << "garbage" << QStringList{"impossible sizes"};
        // vocab_size -2^31 (untied, |v| not an int): negated it was undefined behaviour (fuzz_llama2c).
        QTest::newRow("vocab size -2^31") << "vocab-min" << QStringList{"impossible sizes"};
    }
    void malformedFiles() {
        QFETCH(QString, damage);
        QFETCH(QStringList, phrases);
        QTemporaryDir tmp;
        const QString realBin = dataDir() + "/models/stories260K/stories260K.bin";
        QByteArray b = QFile::exists(realBin) ? readAll(realBin) : tinyLegacy(false);
        if (damage == "truncate") b.chop(1000);
        if (damage == "append") b.append(QByteArray(16, '\0'));
        if (damage == "short") b.truncate(20);
        if (damage == "magic") putInt(b, 0, 0x616b3432), putInt(b, 1, 1);
        if (damage == "heads") putInt(b, 3, 3);
        if (damage == "vocab-min") putInt(b, 5, INT32_MIN);
        if (damage == "garbage") b = QByteArray(4096, '\x7f');
        const QString bin = tmp.filePath("broken.bin");
        writeBytes(bin, b);
        const QString out = tmp.filePath("out");
        try {
            importLlama2cWeights(bin.toStdString(), out.toStdString());
            QFAIL("no error");
        } catch (const std::runtime_error& e) {
            const QString msg = QString::fromStdString(e.what());
            QVERIFY2(msg.contains(bin), qPrintable(msg));
            for (const auto& p : phrases) QVERIFY2(msg.contains(p), qPrintable(msg + "\n  lacks: " + p));
        }
        // Nothing left behind: no output folder, no temporary folder.
        QCOMPARE(QDir(tmp.path()).entryList(QDir::AllEntries | QDir::NoDotAndDotDot), QStringList{"broken.bin"});
    }

    // An existing non-empty output folder is never overwritten; an empty one is filled.
    void existingOutputFolder() {
        QTemporaryDir tmp;
        const QString bin = tmp.filePath("tiny.bin");
        writeBytes(bin, tinyLegacy(false));
        const QString full = tmp.filePath("full"), empty = tmp.filePath("empty");
        QVERIFY(QDir().mkpath(full));
        QVERIFY(QDir().mkpath(empty));
        writeBytes(full + "/keep.txt", "mine");
        try {
            importLlama2cWeights(bin.toStdString(), full.toStdString());
            QFAIL("no error");
        } catch (const std::runtime_error& e) {
            QVERIFY2(QString(e.what()).contains("not empty"), e.what());
        }
        QCOMPARE(QDir(full).entryList(QDir::Files), QStringList{"keep.txt"});
        importLlama2cWeights(bin.toStdString(), empty.toStdString());
        QVERIFY(QFile::exists(empty + "/model.safetensors"));
        QCOMPARE(QDir(tmp.path()).entryList(QDir::AllEntries | QDir::NoDotAndDotDot),
                 (QStringList{"empty", "full", "tiny.bin"}));
    }
};

QTEST_APPLESS_MAIN(TestLlama2cImport)
#include "tst_llama2cimport.moc"
