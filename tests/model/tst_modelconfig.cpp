// config.json parsing for the Llama family (SPEC §4): the real checkpoints, literal configs of
// the other supported architectures, defaults, errors and the toJsonText round trip.
#include "model/ModelConfig.h"

#include <QFile>
#include <QtTest>

#include <stdexcept>
#include "TestData.h" // after ATen: Qt's slots macro breaks ATen headers

using namespace latmix::model;

namespace {

using latmix::test::dataDir;

// Shortened but field-for-field real configs (values as published on the Hugging Face Hub).
const char* kQwen2 = R"({
  "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
  "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
  "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
  "max_position_embeddings": 32768, "max_window_layers": 21, "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0, "sliding_window": 32768, "use_sliding_window": false,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "bos_token_id": 151643,
  "eos_token_id": 151643, "rope_scaling": null})";
const char* kQwen3 = R"({
  "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "attention_bias": false,
  "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024, "intermediate_size": 3072,
  "max_position_embeddings": 40960, "num_attention_heads": 16, "num_hidden_layers": 28,
  "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000,
  "sliding_window": null, "use_sliding_window": false, "tie_word_embeddings": true,
  "torch_dtype": "bfloat16", "vocab_size": 151936, "bos_token_id": 151643, "eos_token_id": 151645})";
const char* kMistral = R"({
  "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_act": "silu",
  "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 32768,
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": null,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 32768,
  "bos_token_id": 1, "eos_token_id": 2})";
const char* kLlama3 = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": false,
  "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 8192, "head_dim": 64,
  "max_position_embeddings": 131072, "mlp_bias": false, "num_attention_heads": 32,
  "num_hidden_layers": 16, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "vocab_size": 128256, "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009]})";
const char* kLlamaBias = R"({
  "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
  "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100,
  "attention_bias": true, "mlp_bias": true})";

struct Expect {
    Architecture arch;
    int hidden, inter, layers, heads, kv, headDim, vocab, maxPos;
    double eps, theta;
    bool tied, qkvBias, oBias, mlpBias, qkNorm;
    int bos, eos;
};

} // namespace

Q_DECLARE_METATYPE(Expect)

class TestModelConfig : public QObject {
    Q_OBJECT
private slots:
    void parse_data() {
        QTest::addColumn<QString>("source"); // "file:<path under data>" or literal JSON
        QTest::addColumn<Expect>("want");
        QTest::newRow("stories260K-hf") << "file:models/stories260K-hf/config.json"
                                        << Expect{Architecture::Llama, 64, 172, 5, 8, 4, 8, 512, 512, 1e-5, 10000.0,
                                                  true, false, false, false, false, 1, 2};
        // brownpy has no head_dim: 256 / 8 = 32.
        QTest::newRow("brownpy-13M") << "file:models/brownpy-13M/config.json"
                                     << Expect{Architecture::Llama, 256, 768, 6, 8, 4, 32, 32000, 1024, 1e-5, 10000.0,
                                               true, false, false, false, false, 1, 2};
        QTest::newRow("qwen2") << kQwen2
                               << Expect{Architecture::Qwen2, 896, 4864, 24, 14, 2, 64, 151936, 32768, 1e-6, 1e6,
                                         true, true, false, false, false, 151643, 151643};
        QTest::newRow("qwen3") << kQwen3
                               << Expect{Architecture::Qwen3, 1024, 3072, 28, 16, 8, 128, 151936, 40960, 1e-6, 1e6,
                                         true, false, false, false, true, 151643, 151645};
        QTest::newRow("mistral") << kMistral
                                 << Expect{Architecture::Mistral, 4096, 14336, 32, 32, 8, 128, 32768, 32768, 1e-5, 1e6,
                                           false, false, false, false, false, 1, 2};
        QTest::newRow("llama3.2 rope_scaling") << kLlama3
                                               << Expect{Architecture::Llama, 2048, 8192, 16, 32, 8, 64, 128256, 131072,
                                                         1e-5, 500000.0, true, false, false, false, false, 128000,
                                                         128001};
        // Defaults: kv heads = heads, head_dim = hidden / heads, max positions 2048, eps 1e-6,
        // untied; attention_bias sets q/k/v and o biases.
        QTest::newRow("llama defaults + biases") << kLlamaBias
                                                 << Expect{Architecture::Llama, 64, 96, 2, 4, 4, 16, 100, 2048, 1e-6,
                                                           10000.0, false, true, true, true, false, -1, -1};
    }
    void parse() {
        QFETCH(QString, source);
        QFETCH(Expect, want);
        ModelConfig c;
        if (source.startsWith("file:")) {
            const QString path = dataDir() + "/" + source.mid(5);
            if (!QFile::exists(path)) LATMIX_DATA_SKIP(qPrintable("not found: " + path + " (set LATMIX_DATA_DIR)"));
            c = ModelConfig::fromFile(path.toStdString());
        } else {
            c = ModelConfig::fromJsonText(source.toStdString());
        }
        QCOMPARE(int(c.architecture), int(want.arch));
        QCOMPARE(c.hiddenSize, want.hidden);
        QCOMPARE(c.intermediateSize, want.inter);
        QCOMPARE(c.numLayers, want.layers);
        QCOMPARE(c.numHeads, want.heads);
        QCOMPARE(c.numKvHeads, want.kv);
        QCOMPARE(c.headDim, want.headDim);
        QCOMPARE(c.vocabSize, want.vocab);
        QCOMPARE(c.maxPositions, want.maxPos);
        QCOMPARE(c.rmsNormEps, want.eps);
        QCOMPARE(c.ropeTheta, want.theta);
        QCOMPARE(c.tieWordEmbeddings, want.tied);
        QCOMPARE(c.qkvBias, want.qkvBias);
        QCOMPARE(c.oProjBias, want.oBias);
        QCOMPARE(c.mlpBias, want.mlpBias);
        QCOMPARE(c.qkNorm, want.qkNorm);
        QCOMPARE(c.bosTokenId, want.bos);
        QCOMPARE(c.eosTokenId, want.eos);

        // toJsonText reads back to the same values.
        const ModelConfig back = ModelConfig::fromJsonText(c.toJsonText(), "round trip");
        QCOMPARE(int(back.architecture), int(c.architecture));
        QCOMPARE(back.architectureName, c.architectureName);
        QCOMPARE(back.hiddenSize, c.hiddenSize);
        QCOMPARE(back.intermediateSize, c.intermediateSize);
        QCOMPARE(back.numLayers, c.numLayers);
        QCOMPARE(back.numHeads, c.numHeads);
        QCOMPARE(back.numKvHeads, c.numKvHeads);
        QCOMPARE(back.headDim, c.headDim);
        QCOMPARE(back.vocabSize, c.vocabSize);
        QCOMPARE(back.maxPositions, c.maxPositions);
        QCOMPARE(back.rmsNormEps, c.rmsNormEps);
        QCOMPARE(back.ropeTheta, c.ropeTheta);
        QCOMPARE(back.ropeScaling.has_value(), c.ropeScaling.has_value());
        if (c.ropeScaling) {
            QCOMPARE(back.ropeScaling->type, c.ropeScaling->type);
            QCOMPARE(back.ropeScaling->factor, c.ropeScaling->factor);
            QCOMPARE(back.ropeScaling->lowFreqFactor, c.ropeScaling->lowFreqFactor);
            QCOMPARE(back.ropeScaling->highFreqFactor, c.ropeScaling->highFreqFactor);
            QCOMPARE(back.ropeScaling->originalMaxPositions, c.ropeScaling->originalMaxPositions);
        }
        QCOMPARE(back.tieWordEmbeddings, c.tieWordEmbeddings);
        QCOMPARE(back.qkvBias, c.qkvBias);
        QCOMPARE(back.oProjBias, c.oProjBias);
        QCOMPARE(back.mlpBias, c.mlpBias);
        QCOMPARE(back.qkNorm, c.qkNorm);
        QCOMPARE(back.bosTokenId, c.bosTokenId);
        QCOMPARE(back.eosTokenId, c.eosTokenId);
        QCOMPARE(back.torchDtype, c.torchDtype);
        QCOMPARE(back.toJsonText(), c.toJsonText());
    }

    void llama3RopeScaling() {
        const auto c = ModelConfig::fromJsonText(kLlama3);
        QVERIFY(c.ropeScaling.has_value());
        QCOMPARE(c.ropeScaling->type, std::string("llama3"));
        QCOMPARE(c.ropeScaling->factor, 32.0);
        QCOMPARE(c.ropeScaling->lowFreqFactor, 1.0);
        QCOMPARE(c.ropeScaling->highFreqFactor, 4.0);
        QCOMPARE(c.ropeScaling->originalMaxPositions, 8192);
        QCOMPARE(c.torchDtype, std::string("bfloat16"));
    }

    void errors_data() {
        QTest::addColumn<QString>("json");
        QTest::addColumn<QStringList>("phrases");
        const QString base = R"("hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
                                "num_attention_heads": 4, "vocab_size": 100)";
        QTest::newRow("unsupported architecture")
            << R"({"architectures": ["GPT2LMHeadModel"], )" + base + "}"
            << QStringList{"unsupported architecture 'GPT2LMHeadModel' in test-config.json", "supported:",
                           "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"};
        QTest::newRow("no architecture") << "{" + base + "}" << QStringList{"test-config.json", "architectures"};
        QTest::newRow("model_type fallback unknown")
            << R"({"model_type": "phi3", )" + base + "}" << QStringList{"unsupported architecture 'phi3'"};
        QTest::newRow("not json") << "{hidden_size: 3" << QStringList{"test-config.json", "not valid JSON"};
        QTest::newRow("missing hidden_size")
            << R"({"architectures": ["LlamaForCausalLM"], "intermediate_size": 96, "num_hidden_layers": 2,
                   "num_attention_heads": 4, "vocab_size": 100})"
            << QStringList{"test-config.json", "'hidden_size' is missing"};
        QTest::newRow("hidden_size not integer")
            << R"({"architectures": ["LlamaForCausalLM"], "hidden_size": "64", "intermediate_size": 96,
                   "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100})"
            << QStringList{"'hidden_size' must be an integer"};
        QTest::newRow("rope_scaling yarn")
            << R"({"architectures": ["LlamaForCausalLM"], "rope_scaling": {"rope_type": "yarn", "factor": 4.0}, )" +
                   base + "}"
            << QStringList{"test-config.json", "rope_scaling type 'yarn' is not supported", "llama3"};
        QTest::newRow("rope_scaling linear (old key)")
            << R"({"architectures": ["LlamaForCausalLM"], "rope_scaling": {"type": "linear", "factor": 2.0}, )" + base +
                   "}"
            << QStringList{"rope_scaling type 'linear' is not supported"};
        QTest::newRow("mistral sliding window")
            << R"({"architectures": ["MistralForCausalLM"], "sliding_window": 4096,
                   "max_position_embeddings": 32768, )" +
                   base + "}"
            << QStringList{"test-config.json", "sliding_window 4096", "unsupported"};
        QTest::newRow("qwen2 sliding window in use")
            << R"({"architectures": ["Qwen2ForCausalLM"], "use_sliding_window": true, "sliding_window": 1024,
                   "max_position_embeddings": 4096, )" +
                   base + "}"
            << QStringList{"sliding_window 1024", "unsupported"};
        QTest::newRow("kv heads do not divide")
            << R"({"architectures": ["LlamaForCausalLM"], "num_key_value_heads": 3, )" + base + "}"
            << QStringList{"num_key_value_heads 3 must divide num_attention_heads 4"};
        QTest::newRow("gelu") << R"({"architectures": ["LlamaForCausalLM"], "hidden_act": "gelu", )" + base + "}"
                              << QStringList{"hidden_act \"gelu\" is not supported"};
        // An id past int would wrap into another token (get<int>), a fraction is none at all.
        QTest::newRow("bos id past int")
            << R"({"architectures": ["LlamaForCausalLM"], "bos_token_id": 4294967297, )" + base + "}"
            << QStringList{"test-config.json", "'bos_token_id' must be a token id or a list of ids, got 4294967297"};
        QTest::newRow("eos ids fraction")
            << R"({"architectures": ["LlamaForCausalLM"], "eos_token_id": [2.5, 3], )" + base + "}"
            << QStringList{"'eos_token_id' must be a token id or a list of ids, got [2.5,3]"};
    }
    void errors() {
        QFETCH(QString, json);
        QFETCH(QStringList, phrases);
        try {
            ModelConfig::fromJsonText(json.toStdString(), "test-config.json");
            QFAIL("no error");
        } catch (const std::runtime_error& e) {
            const QString msg = QString::fromStdString(e.what());
            for (const auto& p : phrases) QVERIFY2(msg.contains(p), qPrintable(msg + "\n  lacks: " + p));
        }
    }

    // Sliding windows that cannot take effect are accepted (Mistral v0.2+ and Qwen ship them).
    void harmlessSlidingWindow_data() {
        QTest::addColumn<QString>("json");
        QTest::addColumn<int>("hidden");
        QTest::addColumn<int>("maxPositions");
        QTest::newRow("mistral window = context")
            << R"({"architectures": ["MistralForCausalLM"], "sliding_window": 4096, "max_position_embeddings": 4096,
                   "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
                   "vocab_size": 100})" << 64 << 4096;
        QTest::newRow("qwen2 window off") << kQwen2 << 896 << 32768;
    }
    void harmlessSlidingWindow() {
        QFETCH(QString, json);
        QFETCH(int, hidden);
        QFETCH(int, maxPositions);
        const auto c = ModelConfig::fromJsonText(json.toStdString());
        QCOMPARE(c.hiddenSize, hidden);
        QCOMPARE(c.maxPositions, maxPositions); // full attention over the whole context
    }

    void supportedList() {
        const auto s = ModelConfig::supportedArchitectures();
        const std::vector<std::string> want = {"LlamaForCausalLM",   "MistralForCausalLM",  "Qwen2ForCausalLM",
                                               "Qwen3ForCausalLM",   "Qwen3MoeForCausalLM", "MixtralForCausalLM"};
        QCOMPARE(s, want);
    }

    void missingFile() {
        try {
            ModelConfig::fromFile("/nonexistent/folder/config.json");
            QFAIL("no error");
        } catch (const std::runtime_error& e) {
            QVERIFY2(QString(e.what()).contains("/nonexistent/folder/config.json"), e.what());
        }
    }
};

QTEST_APPLESS_MAIN(TestModelConfig)
#include "tst_modelconfig.moc"
