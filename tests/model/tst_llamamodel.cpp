// The libtorch decoder against an independent float64 reference written here: explicit loops
// for norms, RoPE and attention, plain matrix products for the linear layers, nothing shared
// with core/model/LlamaModel.cpp. Real checkpoints from LATMIX_DATA_DIR, the built-in demo
// model, and synthetic Qwen2 (q/k/v bias), Qwen3 (q/k norm) and Llama-3 (rope scaling) models.
#include "DeviceRows.h" // before <QtTest>
#include "ReferenceLlama.h"
#include "TestSupport.h"

#include "io/SafeTensors.h"
#include "model/Checkpoint.h"
#include "import/DemoModel.h"
#include "model/LlamaModel.h"
#include "model/TensorNames.h"
#include "transforms/FixedTransforms.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <fstream>
#include <random>
#include "TestData.h" // after ATen: Qt's slots macro breaks ATen headers

using namespace latmix;
using model::Checkpoint;
using model::ModelConfig;

namespace {

using latmix::test::dataDir;

// A small synthetic checkpoint exercising the Qwen2/Qwen3/Llama-3 features.
void writeSyntheticModel(const QString& dir, const std::string& arch, bool qkvBias, bool qkNorm, bool ropeScaling) {
    QDir().mkpath(dir);
    const int d = 64, I = 96, H = 4, KV = 2, hd = 16, L = 2, V = 97;
    std::mt19937_64 rng(42);
    std::normal_distribution<double> n01;
    auto rnd = [&](std::vector<int64_t> shape, double scale) {
        int64_t count = 1;
        for (auto s : shape) count *= s;
        std::vector<float> v(static_cast<size_t>(count));
        for (auto& x : v) x = static_cast<float>(n01(rng) * scale);
        return at::tensor(v, at::kFloat).reshape(shape);
    };
    std::vector<std::pair<std::string, at::Tensor>> t;
    t.emplace_back("model.embed_tokens.weight", rnd({V, d}, 1.0));
    for (int l = 0; l < L; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        t.emplace_back(p + "input_layernorm.weight", 1 + rnd({d}, 0.1));
        t.emplace_back(p + "post_attention_layernorm.weight", 1 + rnd({d}, 0.1));
        t.emplace_back(p + "self_attn.q_proj.weight", rnd({H * hd, d}, 0.15));
        t.emplace_back(p + "self_attn.k_proj.weight", rnd({KV * hd, d}, 0.15));
        t.emplace_back(p + "self_attn.v_proj.weight", rnd({KV * hd, d}, 0.15));
        t.emplace_back(p + "self_attn.o_proj.weight", rnd({d, H * hd}, 0.1));
        if (qkvBias) {
            t.emplace_back(p + "self_attn.q_proj.bias", rnd({H * hd}, 0.5));
            t.emplace_back(p + "self_attn.k_proj.bias", rnd({KV * hd}, 0.5));
            t.emplace_back(p + "self_attn.v_proj.bias", rnd({KV * hd}, 0.5));
        }
        if (qkNorm) {
            t.emplace_back(p + "self_attn.q_norm.weight", 1 + rnd({hd}, 0.2));
            t.emplace_back(p + "self_attn.k_norm.weight", 1 + rnd({hd}, 0.2));
        }
        t.emplace_back(p + "mlp.gate_proj.weight", rnd({I, d}, 0.12));
        t.emplace_back(p + "mlp.up_proj.weight", rnd({I, d}, 0.12));
        t.emplace_back(p + "mlp.down_proj.weight", rnd({d, I}, 0.1));
    }
    t.emplace_back("model.norm.weight", 1 + rnd({d}, 0.1));
    t.emplace_back("lm_head.weight", rnd({V, d}, 0.1));
    io::writeSafeTensors((dir + "/model.safetensors").toStdString(), t);
    std::string cfg = "{\"architectures\": [\"" + arch + "\"], \"hidden_size\": 64, \"intermediate_size\": 96, "
                      "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
                      "\"head_dim\": 16, \"vocab_size\": 97, \"max_position_embeddings\": 4096, "
                      "\"rms_norm_eps\": 1e-6, \"rope_theta\": 500000.0, \"tie_word_embeddings\": false";
    if (ropeScaling)
        cfg += ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
               "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 64}";
    cfg += "}";
    std::ofstream((dir + "/config.json").toStdString()) << cfg;
}

double relativeError(const at::Tensor& got, const at::Tensor& want) {
    return (got.to(at::kDouble) - want).abs().max().item<double>() / want.abs().max().item<double>();
}

} // namespace

class TestLlamaModel : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;

    QString modelDir(const QString& name) {
        if (name == "demo") {
            const QString dir = m_tmp.filePath("demo");
            if (!QDir(dir).exists()) importing::writeDemoModel(dir.toStdString());
            return dir;
        }
        if (name.startsWith("synthetic-")) {
            const QString dir = m_tmp.filePath(name);
            if (!QDir(dir).exists()) {
                if (name == "synthetic-qwen2") writeSyntheticModel(dir, "Qwen2ForCausalLM", true, false, false);
                if (name == "synthetic-qwen3") writeSyntheticModel(dir, "Qwen3ForCausalLM", false, true, false);
                if (name == "synthetic-llama3") writeSyntheticModel(dir, "LlamaForCausalLM", false, false, true);
            }
            return dir;
        }
        return dataDir() + "/models/" + name;
    }

private slots:
    void matchesFloat64Reference_data() {
        QTest::addColumn<QString>("model");
        QTest::addColumn<int>("tokens");
        QTest::newRow("stories260K") << "stories260K-hf" << 200;
        QTest::newRow("brownpy-13M") << "brownpy-13M" << 128;
        QTest::newRow("demo") << "demo" << 64;
        QTest::newRow("qwen2 q/k/v bias") << "synthetic-qwen2" << 80;
        QTest::newRow("qwen3 q/k norm") << "synthetic-qwen3" << 80;
        QTest::newRow("llama3 rope scaling") << "synthetic-llama3" << 300;
        // Longer than 512 tokens: attention runs over blocks of 256 queries (the last one partial).
        QTest::newRow("qwen2 blocked attention") << "synthetic-qwen2" << 700;
        QTest::newRow("qwen3 blocked attention") << "synthetic-qwen3" << 1100;
    }
    void matchesFloat64Reference() {
        QFETCH(QString, model);
        QFETCH(int, tokens);
        const QString dir = modelDir(model);
        if (!model.startsWith("synthetic") && model != "demo" && !QDir(dir).exists())
            LATMIX_DATA_SKIP(qPrintable("model folder not found: " + dir + " (set LATMIX_DATA_DIR)"));
        const Checkpoint ck = Checkpoint::load(dir.toStdString());
        std::mt19937_64 rng(7);
        std::vector<int64_t> ids(static_cast<size_t>(tokens));
        for (auto& t : ids) t = static_cast<int64_t>(rng() % ck.config().vocabSize);
        const model::LlamaModel m(ck);
        auto got = m.forward(at::tensor(ids, at::kLong).unsqueeze(0)).squeeze(0);
        auto want = test::ReferenceLlama(ck).logits(ids);
        const double err = relativeError(got, want);
        qInfo("%s: max |logit error| / max |logit| = %.3g", qPrintable(model), err);
        // float32 forward vs float64: ~1e-6 when this test was written, set by the size of float32
        // rounding over the layers, not by one summation order: 1e-5 (84·2^-23) leaves ~10×.
        QVERIFY2(err < 1e-5, qPrintable(QString("relative error %1").arg(err)));
    }

    // The perplexity path never forms [T, vocab] logits: nextTokenNll over vocabulary chunks (a
    // running log-sum-exp) against log_softmax of the float64 reference's logits, for chunks
    // that divide the vocabulary unevenly, one row and the whole vocabulary; sequenceNll sums it.
    void chunkedNllMatchesFullSoftmax_data() {
        QTest::addColumn<int>("chunk");
        QTest::newRow("1 row") << 1;
        QTest::newRow("10 rows (uneven)") << 10;
        QTest::newRow("whole vocabulary") << 97;
    }
    void chunkedNllMatchesFullSoftmax() {
        QFETCH(int, chunk);
        const Checkpoint ck = Checkpoint::load(modelDir("synthetic-qwen2").toStdString());
        const model::LlamaModel m(ck);
        std::mt19937_64 rng(3);
        std::vector<int64_t> ids(120);
        for (auto& t : ids) t = static_cast<int64_t>(rng() % ck.config().vocabSize);
        const auto tokens = at::tensor(ids, at::kLong).unsqueeze(0);
        const auto want = -test::ReferenceLlama(ck).logits(ids).log_softmax(-1).narrow(0, 0, 119).gather(
                              1, tokens.squeeze(0).narrow(0, 1, 119).unsqueeze(1)).squeeze(1); // float64
        at::NoGradGuard g;
        const auto h = model::forwardHidden(ck.config(), m.weights(), m.options(), tokens).squeeze(0).narrow(0, 0, 119);
        const auto got = model::nextTokenNll(ck.config(), m.weights(), h, tokens.squeeze(0).narrow(0, 1, 119), chunk);
        // The float32 logits' own error (≲ 1e-5 of max|z|, above) dominates the float32 running
        // log-sum-exp's: 1e-4 absolute per token. The sum of 119 NLLs (~4.6 each, summed in
        // float64) to 1e-6 relative allows ~5e-6 per token even if all errors had one sign.
        const double err = (got.to(at::kDouble) - want).abs().max().item<double>();
        QVERIFY2(err < 1e-4, qPrintable(QString("max |nll error| %1").arg(err)));
        QVERIFY(std::abs(m.sequenceNll(tokens) / want.sum().item<double>() - 1) < 1e-6);
    }

    // A bf16 checkpoint evaluated in float32 keeps its weights in bf16 (on the CPU mapped, on a
    // GPU copied as stored: half the memory) and converts a layer at a time; the logits equal
    // those of the model converted up front on the same device, bit for bit (bf16 -> float32 is
    // exact either way, and the products are the same).
    void storedWeightsConvertPerLayer_data() {
        test::addDeviceColumn();
        for (const QString& dev : test::testDevices()) QTest::newRow(qPrintable(dev)) << dev;
    }
    void storedWeightsConvertPerLayer() {
        QFETCH(QString, device);
        LATMIX_REQUIRE_DEVICE(dev, device);
        const QString src = modelDir("synthetic-qwen3");
        const Checkpoint f32 = Checkpoint::load(src.toStdString());
        const QString dir = m_tmp.filePath("qwen3-bf16");
        if (!QFile::exists(dir + "/config.json")) {
            QDir().mkpath(dir);
            std::vector<std::pair<std::string, at::Tensor>> t;
            for (const auto& n : f32.names()) t.emplace_back(n, f32.weight(n).to(at::kBFloat16));
            io::writeSafeTensors((dir + "/model.safetensors").toStdString(), t);
            QFile::copy(src + "/config.json", dir + "/config.json");
        }
        const Checkpoint ck = Checkpoint::load(dir.toStdString());
        const model::LlamaModel stored(ck, at::kFloat, dev);
        const at::Tensor& wUp = stored.weights().layers[1].wUp;
        QCOMPARE(wUp.scalar_type(), at::kBFloat16); // still the file's
        QVERIFY(wUp.device() == dev);
        QCOMPARE(stored.weights().finalNorm.scalar_type(), at::kFloat);
        const model::LlamaModel converted(ck.config(), model::loadWeights(ck, at::kFloat, dev), stored.options());
        QVERIFY(converted.device() == dev);
        const auto ids = at::arange(40, at::kLong).remainder(ck.config().vocabSize).unsqueeze(0);
        QVERIFY(at::equal(stored.forward(ids).cpu(), converted.forward(ids).cpu()));
    }

    // Looking rows up in a table mapped from a file copies them and leaves none of the table
    // resident: the kernel reads around every looked-up row, which for scattered tokens is most
    // of the table, and that used to stay mapped through every later stage of a run. Float32
    // and bf16 tables; the rows equal the file's.
    void embeddingLookupLeavesTableUnmapped_data() {
        QTest::addColumn<QString>("dtype");
        QTest::newRow("float32") << "float32";
        QTest::newRow("bfloat16") << "bfloat16";
    }
    void embeddingLookupLeavesTableUnmapped() {
        QFETCH(QString, dtype);
        if (test::residentKbOf("/proc/self/exe") < 0) QSKIP("no /proc/self/smaps here");
        const auto type = dtype == "float32" ? at::kFloat : at::kBFloat16;
        ModelConfig c;
        c.vocabSize = 8192, c.hiddenSize = 512, c.maxPositions = 4096; // a 16 MiB table in float32
        const QString path = m_tmp.filePath("embedding-" + dtype + ".safetensors");
        const at::Tensor table = at::randn({c.vocabSize, c.hiddenSize}, at::kFloat).to(type);
        io::writeSafeTensors(path.toStdString(), {{"model.embed_tokens.weight", table}});
        auto file = io::SafeTensorsFile::open(path.toStdString());
        model::LlamaWeights w;
        w.embed = file->tensor("model.embed_tokens.weight");
        const auto ids = at::tensor(test::randomIds(1024, c.vocabSize, 7), at::kInt).to(at::kLong).reshape({2, 512});
        const at::Tensor rows = model::embedTokens(c, w, ids);
        QVERIFY(at::equal(rows, table.index_select(0, ids.reshape({-1})).view({2, 512, c.hiddenSize})));
        const long tableKb = long(table.nbytes() / 1024), resident = test::residentKbOf(path);
        QVERIFY2(resident >= 0 && resident <= 64,
                 qPrintable(QString("%1 kB of a %2 kB table stay resident after the lookup").arg(resident).arg(tableKb)));
    }

    void bfloat16StaysClose() {
        const QString dir = modelDir("demo");
        const Checkpoint ck = Checkpoint::load(dir.toStdString());
        auto ids = at::arange(48, at::kLong).remainder(ck.config().vocabSize).unsqueeze(0);
        auto f32 = model::LlamaModel(ck).forward(ids);
        auto bf16 = model::LlamaModel(ck, at::kBFloat16).forward(ids);
        // bf16 rounds to 2^-9 ≈ 2e-3 relative at every step of the forward; 5e-2 bounds its growth
        // over 4 layers and is still far below a wrong model's O(1).
        const double err = relativeError(bf16, f32.to(at::kDouble));
        QVERIFY2(err < 5e-2, qPrintable(QString("bf16 relative error %1").arg(err)));
        QVERIFY(err > 0); // really computed in bfloat16
    }

    // Layer-wise offload: layers held elsewhere (here: float64 in host memory, a stand-in for
    // host RAM when the pass runs on a GPU) are converted as the pass reaches them. float32 →
    // float64 → float32 is exact, so the logits are bit-identical; offloadLayers keeps the
    // embeddings in the compute dtype and the layers on the CPU.
    void offloadedLayersGiveTheSameLogits() {
        const Checkpoint ck = Checkpoint::load(modelDir("synthetic-qwen2").toStdString());
        const model::LlamaModel plain(ck);
        auto ids = at::arange(24, at::kLong).remainder(ck.config().vocabSize).unsqueeze(0);
        auto w = model::loadWeights(ck);
        for (auto& y : w.layers) y = model::convertLayer(y, at::TensorOptions().dtype(at::kDouble));
        const model::LlamaModel held(ck.config(), w);
        QCOMPARE(held.weights().layers[0].wq.scalar_type(), at::kDouble);
        QVERIFY(at::equal(held.forward(ids), plain.forward(ids)));
        const model::LlamaModel offloaded(ck, at::kFloat, c10::kCPU, true, /*offload=*/true);
        QVERIFY(offloaded.weights().layers[0].wq.device().is_cpu());
        QVERIFY(at::equal(offloaded.forward(ids), plain.forward(ids)));
    }

    void hooksSeeEveryPoint() {
        const Checkpoint ck = Checkpoint::load(modelDir("synthetic-qwen2").toStdString());
        const model::LlamaModel m(ck);
        const auto names = model::quantizationPointNames(ck.config());
        QCOMPARE(int(names.size()), 4 * ck.config().numLayers);
        QCOMPARE(QString::fromStdString(names[3]), QString("layers.0.mlp.down_proj.input"));
        std::vector<std::string> seen;
        auto ids = at::arange(10, at::kLong).unsqueeze(0);
        auto plain = m.forward(ids);
        auto hooked = m.forward(ids, [&](const std::string& p, const at::Tensor& x) {
            seen.push_back(p);
            const auto kind = static_cast<model::PointKind>(seen.size() % 4 == 0 ? 3 : seen.size() % 4 - 1);
            if (x.size(-1) != model::pointWidth(ck.config(), kind)) qFatal("width mismatch at %s", p.c_str());
            return x;
        });
        QCOMPARE(seen, names);
        QVERIFY(at::equal(plain, hooked)); // exact: identity hooks, the same code on the same inputs
        // A hook that changes the activation changes the output.
        auto zeroed = m.forward(ids, [](const std::string& p, const at::Tensor& x) {
            return p == "layers.1.mlp.down_proj.input" ? at::zeros_like(x) : x;
        });
        QVERIFY(!at::equal(plain, zeroed));
    }

    // Kept linears (SPEC §4) read their point's input unquantized: keeping every linear is the
    // model without activation quantization exactly, keeping none the quantized one, and keeping
    // one linear differs from both; T3 stays on a kept down_proj (its inverse is in W_down).
    void keptLinearsReadUnquantizedInputs_data() {
        QTest::addColumn<QString>("model");
        QTest::newRow("qwen2 (q/k/v biases)") << "synthetic-qwen2";
        QTest::newRow("qwen3 (q/k norms)") << "synthetic-qwen3";
    }
    void keptLinearsReadUnquantizedInputs() {
        QFETCH(QString, model);
        const Checkpoint ck = Checkpoint::load(modelDir(model).toStdString());
        const auto& c = ck.config();
        const auto w = model::loadWeights(ck);
        auto ids = at::arange(20, at::kLong).remainder(c.vocabSize).unsqueeze(0);
        model::ForwardOptions fp, q;
        q.activationQuant = latmix::mx::makeConfig(latmix::mx::Format::MxFp4);
        q.activationQuant->blockSize = 8; // the synthetic widths are small
        auto all = q;
        for (int l = 0; l < c.numLayers; ++l)
            for (const char* linear : model::names::kBlockLinears) all.keptLinears.insert(model::names::layerPrefix(l) + linear);
        auto one = q;
        one.keptLinears = {model::names::layerPrefix(0) + model::names::kKProj};
        const auto yFp = model::forwardWith(c, w, fp, ids), yQ = model::forwardWith(c, w, q, ids);
        QVERIFY(at::equal(model::forwardWith(c, w, all, ids), yFp));
        QVERIFY(!at::equal(yQ, yFp));
        const auto yOne = model::forwardWith(c, w, one, ids);
        QVERIFY(!at::equal(yOne, yQ) && !at::equal(yOne, yFp));
        // With T3 on every down_proj input, kept down_projs still see T3 (unquantized).
        auto t3 = fp;
        t3.t3 = latmix::transforms::blockHadamard(c.intermediateSize, 8, 3).to(at::TensorOptions().dtype(at::kFloat));
        auto t3q = t3;
        t3q.activationQuant = q.activationQuant;
        t3q.keptLinears = all.keptLinears;
        QVERIFY(at::equal(model::forwardWith(c, w, t3q, ids), model::forwardWith(c, w, t3, ids)));
    }

    void rejectsBadInput() {
        const Checkpoint ck = Checkpoint::load(modelDir("synthetic-qwen3").toStdString());
        const model::LlamaModel m(ck);
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, m.forward(at::full({1, 3}, 97, at::kLong)));
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, m.forward(at::zeros({1, 5000}, at::kLong)));
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, model::parseDevice("tpu"));
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, model::parseDtype("float16"));
    }
};

QTEST_APPLESS_MAIN(TestLlamaModel)
#include "tst_llamamodel.moc"
