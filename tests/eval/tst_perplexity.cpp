// WikiText-2 text building and perplexity (SPEC §7): hand-worked text cases, a model whose
// logits are all zero (perplexity = vocabulary size exactly), and real TinyStories models
// against the float64 reference forward pass.
#include "DeviceRows.h"
#include "ReferenceLlama.h"
#include "TestSupport.h"

#include "eval/Perplexity.h"
#include "io/SafeTensors.h"
#include "model/Checkpoint.h"
#include "import/Llama2cImport.h"
#include "model/LlamaModel.h"
#include "tokenizer/Tokenizer.h"

#include <ATen/ATen.h>
#include <QDir>
#include <QTemporaryDir>
#include <QtTest>

#include <fstream>
#include "TestData.h" // after ATen: Qt's slots macro breaks ATen headers

using namespace latmix;

namespace {

using latmix::test::dataDir;

void writeFile(const QString& path, const std::string& text) { std::ofstream(path.toStdString(), std::ios::binary) << text; }

// Perplexity over the same windows from float64 reference logits.
double referencePerplexity(const model::Checkpoint& ck, const std::vector<int>& ids, int seqLen, int windows) {
    const test::ReferenceLlama ref(ck);
    double nll = 0;
    long long count = 0;
    for (int w = 0; w < windows; ++w) {
        std::vector<int64_t> window(ids.begin() + w * seqLen, ids.begin() + (w + 1) * seqLen);
        auto logp = at::log_softmax(ref.logits(window), -1);
        for (int t = 0; t + 1 < seqLen; ++t, ++count) nll -= logp[t][window[t + 1]].item<double>();
    }
    return std::exp(nll / count);
}

} // namespace

class TestPerplexity : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;

    QString uniformDir() const { return m_tmp.filePath("uniform"); }
    // A one-layer model whose lm_head is all zero: every next-token distribution is uniform over
    // its 50 tokens. Written by initTestCase for the tests that need a model of known perplexity.
    static void writeUniformModel(const QString& dir) {
        QDir().mkpath(dir);
        const int d = 32, V = 50;
        std::vector<std::pair<std::string, at::Tensor>> t;
        t.emplace_back("model.embed_tokens.weight", at::randn({V, d}));
        const std::string p = "model.layers.0.";
        t.emplace_back(p + "input_layernorm.weight", at::ones({d}));
        t.emplace_back(p + "post_attention_layernorm.weight", at::ones({d}));
        for (const char* n : {"q_proj", "k_proj", "v_proj", "o_proj"}) t.emplace_back(p + "self_attn." + n + ".weight", at::randn({d, d}) * 0.1);
        t.emplace_back(p + "mlp.gate_proj.weight", at::randn({64, d}) * 0.1);
        t.emplace_back(p + "mlp.up_proj.weight", at::randn({64, d}) * 0.1);
        t.emplace_back(p + "mlp.down_proj.weight", at::randn({d, 64}) * 0.1);
        t.emplace_back("model.norm.weight", at::ones({d}));
        t.emplace_back("lm_head.weight", at::zeros({V, d}));
        io::writeSafeTensors((dir + "/model.safetensors").toStdString(), t);
        writeFile(dir + "/config.json",
                  R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 32, "intermediate_size": 64,
                      "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 50,
                      "max_position_embeddings": 64, "rms_norm_eps": 1e-5})");
    }

private slots:
    void initTestCase() {
        QVERIFY(m_tmp.isValid());
        writeUniformModel(uniformDir());
    }

    void wikiTextJoin_data() {
        QTest::addColumn<QString>("raw");
        QTest::addColumn<QString>("expected");
        // rows keep their "\n"; blank rows become ""; rows joined with "\n\n":
        // " = T = \n" + "\n\n" + "" + "\n\n" + "word .\n"
        QTest::newRow("title, blank, text") << " = T = \n \nword .\n" << " = T = \n\n\n\n\nword .\n";
        QTest::newRow("no final newline") << "a\nb" << "a\n\n\nb";
        QTest::newRow("tabs are blank") << "a\n\t \nb\n" << "a\n\n\n\n\nb\n";
        QTest::newRow("single row") << "x\n" << "x\n";
    }
    void wikiTextJoin() {
        QFETCH(QString, raw);
        QFETCH(QString, expected);
        const QString path = m_tmp.filePath("raw.txt");
        writeFile(path, raw.toStdString());
        QCOMPARE(QString::fromStdString(eval::wikiText2TestText(path.toStdString())), expected);
    }

    void uniformModelHasVocabularyPerplexity() {
        // lm_head all zero: every next-token distribution is uniform, so ppl = V exactly.
        const QString dir = uniformDir();
        const int V = 50;
        const model::LlamaModel m(model::Checkpoint::load(dir.toStdString()));
        std::vector<int> ids(200);
        for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int>(i * 7 % V);
        const auto r = eval::evaluatePerplexity(m, ids, {32, 0});
        QCOMPARE(r.windows, 6);        // 200 / 32, tail dropped
        QCOMPARE(r.tokens, 6LL * 31);  // first token of each window is not predicted
        // Zero logits give log-probabilities -log V in float32 (one rounding, ~1e-7 relative): 2e-6
        // relative leaves a wide margin; a softmax over the wrong axis or size would miss V by far.
        QVERIFY(std::abs(r.perplexity - V) < 1e-4);
        // maxWindows and the cap at the model's positions
        QCOMPARE(eval::evaluatePerplexity(m, ids, {32, 2}).windows, 2);
        QCOMPARE(eval::evaluatePerplexity(m, ids, {1000, 0}).seqLen, 64);
    }

    void cancelStopsBetweenWindows() {
        test::CancelAfter job(1);
        const QString dir = uniformDir();
        const model::LlamaModel m(model::Checkpoint::load(dir.toStdString()));
        std::vector<int> ids(200, 3);
        QVERIFY_THROWS_EXCEPTION(JobCancelled, eval::evaluatePerplexity(m, ids, {32, 0}, job));
        QCOMPARE(job.reports(), 1);
    }

    void realModelsMatchFloat64Reference_data() {
        QTest::addColumn<QString>("model");
        QTest::addColumn<int>("seqLen");
        QTest::addColumn<int>("windows");
        QTest::newRow("stories260K") << "stories260K" << 256 << 4;
        QTest::newRow("brownpy-13M") << "brownpy-13M" << 128 << 3;
    }
    void realModelsMatchFloat64Reference() {
        QFETCH(QString, model);
        QFETCH(int, seqLen);
        QFETCH(int, windows);
        const QString raw = dataDir() + "/wikitext-2/wiki.test.raw";
        if (!QFile::exists(raw)) LATMIX_DATA_SKIP(qPrintable("WikiText-2 not found at " + raw + " (set LATMIX_DATA_DIR)"));
        QString dir = dataDir() + "/models/" + model;
        if (model == "stories260K") { // llama2.c original: import it with its tokenizer first
            const QString out = m_tmp.filePath("stories260K-imported");
            if (!QDir(out).exists()) {
                importing::importLlama2cWeights((dir + "/stories260K.bin").toStdString(), out.toStdString());
                tokenizer::convertLlama2cTokenizer((dir + "/tok512.bin").toStdString(), (out + "/tokenizer.json").toStdString());
            }
            dir = out;
        }
        const auto ck = model::Checkpoint::load(dir.toStdString());
        const auto tok = tokenizer::Tokenizer::loadFromDir(dir.toStdString());
        const auto ids = eval::tokenizeForEvaluation(*tok, eval::wikiText2TestText(raw.toStdString()));
        QVERIFY(ids.size() > 100000); // the whole test split was read
        QCOMPARE(ids[0], tok->bosId()); // Llama tokenizers add BOS by default, once
        const auto r = eval::evaluatePerplexity(model::LlamaModel(ck), ids, {seqLen, windows});
        const double want = referencePerplexity(ck, ids, seqLen, windows);
        qInfo("%s: perplexity %.6f, float64 reference %.6f", qPrintable(model), r.perplexity, want);
        QVERIFY(std::abs(r.perplexity - want) / want < 1e-5);
    }

    // The same evaluation with the model on cuda:0 (LlamaModel's device constructor; the windows
    // go to the model's device) equals the CPU's within 1e-4 relative: both are float32 forwards
    // within 1e-5 of the float64 reference above.
    void perplexityOnDeviceMatchesCpu_data() {
        QTest::addColumn<QString>("model");
        QTest::addColumn<int>("seqLen");
        QTest::addColumn<int>("windows");
        test::addDeviceColumn();
        for (const QString& dev : test::acceleratorDevices())
            QTest::addRow("brownpy-13M %s", qPrintable(dev)) << "brownpy-13M" << 128 << 3 << dev;
    }
    void perplexityOnDeviceMatchesCpu() {
        QFETCH(QString, model);
        QFETCH(int, seqLen);
        QFETCH(int, windows);
        QFETCH(QString, device);
        LATMIX_REQUIRE_DEVICE(dev, device);
        const QString raw = dataDir() + "/wikitext-2/wiki.test.raw";
        if (!QFile::exists(raw)) LATMIX_DATA_SKIP(qPrintable("WikiText-2 not found at " + raw + " (set LATMIX_DATA_DIR)"));
        const QString dir = dataDir() + "/models/" + model;
        if (!QFile::exists(dir + "/config.json")) LATMIX_DATA_SKIP(qPrintable("no model at " + dir + " (set LATMIX_DATA_DIR)"));
        const auto ck = model::Checkpoint::load(dir.toStdString());
        const auto tok = tokenizer::Tokenizer::loadFromDir(dir.toStdString());
        // The windows come from the start of the text: tokenizing 64 KB of it is plenty.
        const auto ids = eval::tokenizeForEvaluation(*tok, eval::wikiText2TestText(raw.toStdString()).substr(0, 65536));
        QVERIFY(ids.size() >= size_t(seqLen) * windows);
        const auto cpu = eval::evaluatePerplexity(model::LlamaModel(ck), ids, {seqLen, windows});
        const model::LlamaModel onDevice(ck, at::kFloat, dev);
        QVERIFY(onDevice.device() == dev);
        const auto got = eval::evaluatePerplexity(onDevice, ids, {seqLen, windows});
        qInfo("%s on %s: perplexity %.6f, CPU %.6f", qPrintable(model), qPrintable(device), got.perplexity, cpu.perplexity);
        QCOMPARE(got.tokens, cpu.tokens);
        QVERIFY(std::abs(got.perplexity - cpu.perplexity) / cpu.perplexity < 1e-4);
    }
};

QTEST_APPLESS_MAIN(TestPerplexity)
#include "tst_perplexity.moc"
