// llama.cpp runs what `latmix export --format gguf` writes (issue 36): real runs of real models
// (brownpy-13M and stories260K; rtn, mr-gptq, and latmix-lu with T1/T2 and their biases folded: T1's into
// q/k/v and gate/up, issue 71)
// exported, loaded by llama.cpp through node-llama-cpp 3.21.1 (llama.cpp's own CPU build,
// installed by npm: tests/export/gguf/), and llama.cpp's next-token distributions on WikiText-2
// compared with the float64 reference forward (tests/ReferenceLlama.h) of the run's own weights;
// then the other families and tokenizers (qwen2, qwen3, llama3 rope scaling, Llama 3's BPE).
//
// The tolerance comes from the one thing llama.cpp does to the weights' products that the run's
// evaluation does not: on the CPU, an activation that meets an MXFP4 weight is rounded to Q8_0
// (blocks of 32, int8 codes, scale amax/127 stored as float16). The reference run a second time
// with that rounding at exactly those inputs (`q8_0` below; which weights are MXFP4 is read from
// the file) says how far the rounding moves the distributions: D_q8 = mean KL(rounded ‖ exact).
// llama.cpp applies the same rounding, so its own distance from the exact run is of that size:
// the test asks for at most 3 D_q8 (measured: 0.97–1.15 D_q8), and for a perplexity within 3 times
// the mean size of the rounding's per-position shifts. A wrong weight, row order, bias or tokenizer
// moves the distributions by orders of magnitude more. llama.cpp is not held to the rounded
// reference itself: it tracks it to 1e-13 until one Q8_0 code lands on the other side of a
// rounding boundary (float32 activations there, float64 here), and from that position on attention
// carries the difference to every later token; KL(llama.cpp ‖ rounded) is reported.
// K and V are kept in float32 and flash attention is off (probabilities.mjs), so that attention
// adds no float16 rounding of its own. llama.cpp's tokenization of the text must equal the run's.
#include "CliRunner.h"
#include "GgufFile.h"
#include "ReferenceLlama.h"
#include "TestSupport.h"
#include "TestData.h"
#include "export/ExportTargets.h"
#include "io/SafeTensors.h"
#include "model/Checkpoint.h"
#include "model/TensorNames.h"
#include "run/RunModel.h"
#include "tokenizer/Tokenizer.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QtTest>

#include <algorithm>
#include <set>

using namespace latmix;

namespace {

constexpr int kPositions = 128; // token ids given to both (BOS first)
constexpr int kTextBytes = 1500; // WikiText-2 test text whose tokenization both must agree on

// llama.cpp's quantize_row_q8_0 as its CPU matmul applies it to the activations of an MXFP4
// product (float32 activations; AVX paths round half to even).
at::Tensor q8_0(const at::Tensor& x) {
    const at::Tensor b = x.to(at::kFloat).contiguous().view({-1, 32});
    const at::Tensor amax = b.abs().amax({1}, true);
    const at::Tensor d = (amax / 127).to(at::kHalf).to(at::kFloat);
    const at::Tensor id = at::where(amax > 0, 127 / amax, at::zeros_like(amax));
    return (at::round(b * id) * d).view(x.sizes()).to(at::kDouble);
}

// Mean over positions of KL(p ‖ q) for rows of probabilities p and log-probabilities logq.
double meanKl(const at::Tensor& p, const at::Tensor& logq) {
    return (at::xlogy(p, p) - p * logq).sum(1).mean().item<double>();
}

std::string readBytes(const QString& path, int n) {
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) return {};
    QByteArray b = f.read(n);
    while (!b.isEmpty() && b.back() != '\n') b.chop(1); // whole lines
    return b.toStdString();
}

} // namespace

class TestGgufRuntime : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;
    QString m_node, m_script, m_stories;

    QString modelDir(const QString& name) const {
        return name == QLatin1String("stories260K") ? m_stories : test::modelFolder(name);
    }

private slots:
    void initTestCase() {
        m_node = qEnvironmentVariable("LATMIX_NODE");
        m_script = qEnvironmentVariable("LATMIX_GGUF_RUNTIME") + "/probabilities.mjs";
        if (m_node.isEmpty())
            LATMIX_PREREQUISITE_SKIP(qPrintable(
                "no llama.cpp runtime: this test needs Node.js >= 20 and npm when CMake configures (" +
                qEnvironmentVariable("LATMIX_NO_NODE", QStringLiteral("run it through ctest")) +
                "). Debian 13: apt install nodejs npm (packaging/install-deps.sh does); Debian 12's Node.js is 18: "
                "install Node.js 20 from nodejs.org or NodeSource. Then configure again (cmake build)."));
        if (!QFileInfo::exists(m_script))
            LATMIX_PREREQUISITE_SKIP(qPrintable("no " + m_script + ": ctest's fixture gguf_runtime_setup installs "
                                                "node-llama-cpp there (ctest -R gguf_runtime runs both)"));
        const QString stories = test::dataDir() + "/models/stories260K";
        for (const QString& f : {test::modelFolder("brownpy-13M") + "/model.safetensors", stories + "/stories260K.bin",
                                 test::dataDir() + "/wikitext-2/wiki.test.raw"})
            if (!QFileInfo::exists(f)) LATMIX_DATA_SKIP(qPrintable("no " + f));
        m_stories = m_tmp.path() + "/stories260K-hf";
        const auto r = test::runLatmix({"import-llama2c", stories + "/stories260K.bin", stories + "/tok512.bin", m_stories}, 60000);
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
    }

    void llamaCppAgreesWithTheRun_data() {
        QTest::addColumn<QString>("model");
        QTest::addColumn<QString>("method");
        for (const char* m : {"brownpy-13M", "stories260K"})
            for (const char* method : {"rtn", "mr-gptq", "latmix-lu"})
                QTest::newRow(qPrintable(QString("%1 %2").arg(m, method))) << QString(m) << QString(method);
    }
    void llamaCppAgreesWithTheRun() {
        QFETCH(QString, model);
        QFETCH(QString, method);
        compare(modelDir(model), model + "-" + method, method, kPositions);
    }

    // NVFP4: GGUF type 40 (64-value blocks, four E4M3 scales) and the per-tensor scale as
    // "<name>.scale", which llama.cpp multiplies into each product; its activations meet the
    // weights as Q8_0 too.
    void llamaCppRunsNvfp4() {
        const QString model = test::modelFolder("brownpy-13M");
        compare(model, "brownpy-13M-rtn-nvfp4", "rtn", kPositions, "nvfp4");
    }

    // The exact file (gguf-f32): the embedding, lm_head and W_down · H in F32, as the run holds
    // them; the default file's BF16 for them moves llama.cpp's perplexity by what this row and
    // "brownpy-13M latmix-lu" print (docs/developer/gguf.md).
    void llamaCppRunsTheExactFile() {
        compare(test::modelFolder("brownpy-13M"), "brownpy-13M-latmix-lu-f32", "latmix-lu", kPositions, "mxfp4", {},
                "gguf-f32");
    }

    // --keep: layer 0 and every down_proj stay in full precision, written as BF16 tensors (a kept
    // down_proj with T3 folded back as every down_proj); the other linears MXFP4. ggml meets BF16
    // weights with BF16 activations, which the reference rounds as it rounds Q8_0's.
    void llamaCppRunsKeptLinears() {
        compare(test::modelFolder("brownpy-13M"), "brownpy-13M-mr-gptq-keep", "mr-gptq", kPositions, "mxfp4",
                {"--keep", "layers\\.0\\.|down_proj"});
    }

    // A mixed-precision scheme (--scheme): layer 0 in MXFP8, written as BF16 (GGUF has no MXFP8
    // type; BF16 holds its values exactly: checked value by value against the run), layer 1's MLP in
    // NVFP4 (type 40 with its tensor scale) beside the run's MXFP4, and layer 5's q/k/v kept.
    void llamaCppRunsAScheme() {
        const QString name = "brownpy-13M-rtn-scheme";
        compare(test::modelFolder("brownpy-13M"), name, "rtn", kPositions, "mxfp4",
                {"--scheme", "layers\\.0\\. = mxfp8; layers\\.1\\.mlp = nvfp4; layers\\.5\\.self_attn\\.qkv = bf16"});
        const QString dir = m_tmp.path() + "/" + name;
        const auto file = test::GgufFile::read((dir + "/model.gguf").toStdString());
        const run::RunModel rm = run::readRunModel((dir + "/run/model").toStdString());
        QCOMPARE(file.tensors.at("blk.0.attn_output.weight").type, 30); // BF16
        QCOMPARE(file.tensors.at("blk.1.ffn_gate.weight").type, 40);    // NVFP4
        QCOMPARE(file.tensors.at("blk.2.ffn_gate.weight").type, 39);    // MXFP4
        QCOMPARE(file.tensors.at("blk.5.attn_v.weight").type, 30);      // kept
        // The export dialog's size from the config alone: each group's tensors in its own type.
        const double data = double(file.bytes.size() - file.dataStart),
                     announced = double(exporting::describeExportTarget((dir + "/run").toStdString(), "gguf").bytes);
        QVERIFY2(std::abs(announced - data) <= 0.01 * data, qPrintable(QString("%1 vs %2").arg(announced).arg(data)));
        for (const auto& [gguf, hf] : {std::pair{"blk.0.attn_output.weight", "model.layers.0.self_attn.o_proj.weight"},
                                       {"blk.0.ffn_down.weight", "model.layers.0.mlp.down_proj.weight"},
                                       {"blk.0.attn_v.weight", "model.layers.0.self_attn.v_proj.weight"}}) {
            const auto values = file.values(gguf);
            QVERIFY2(test::firstMismatch(values, test::toVector(rm.tensors.at(hf).contiguous())) < 0, gguf);
        }
    }

    // The other architectures and tokenizers. brownpy-13M's trained weights under Qwen2's config
    // (q/k/v biases, zero here; NEOX rope, which Hugging Face's Llama computes too, so that the
    // model is brownpy itself), under Qwen3's (per-head q/k RMSNorm with unit weights: another
    // function, the same on both sides) and with llama3 rope scaling (rope_freqs; an original
    // context of 64 so that most frequencies are scaled); and a random checkpoint (latmix
    // demo-model) with Llama 3's byte-level BPE tokenizer, whose 128k vocabulary gets fewer
    // positions (node-llama-cpp hands each position's distribution over as a Map).
    void llamaCppRunsEachFamily_data() {
        QTest::addColumn<QString>("variant");
        QTest::addColumn<int>("positions");
        QTest::newRow("qwen2") << "qwen2" << kPositions;
        QTest::newRow("qwen3") << "qwen3" << kPositions;
        QTest::newRow("llama3 rope scaling") << "llama3-rope" << kPositions;
        QTest::newRow("Llama 3 tokenizer") << "llama3-tokenizer" << 32;
    }
    void llamaCppRunsEachFamily() {
        QFETCH(QString, variant);
        QFETCH(int, positions);
        const QString dir = m_tmp.path() + "/family-" + variant + "-model";
        QVERIFY(QDir().mkpath(dir));
        if (variant == "llama3-tokenizer") {
            const QString config = dir + "-config.json";
            QFile cfg(config);
            QVERIFY(cfg.open(QIODevice::WriteOnly));
            cfg.write(R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256,
                "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 2, "max_position_embeddings": 2048, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
                "hidden_act": "silu", "tie_word_embeddings": false, "bos_token_id": 128000, "eos_token_id": 128001})");
            cfg.close();
            QDir().rmdir(dir);
            const auto r = test::runLatmix({"demo-model", dir, "--config", config, "--dtype", "float32", "--tokenizer",
                                            test::dataDir() + "/tokenizers/llama3"},
                                           120000);
            QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        } else {
            writeBrownpyAs(variant, dir);
        }
        compare(dir, "family-" + variant, "rtn", positions);
    }

    // Mixtures of experts: llama.cpp's qwen3moe and llama-with-experts (Mixtral) on brownpy-13M
    // made into a mixture of 4 experts, top 2: expert e is brownpy's MLP with W_down scaled by
    // 0.7 + 0.2 e (so that which expert a token reaches, and the order of the stacked experts,
    // change the output) behind a fixed router of decisive logits. rtn keeps the experts' FP4
    // codes; mr-gptq also folds T3 into every expert's down_proj (stored in float32).
    void llamaCppRunsMixturesOfExperts_data() {
        QTest::addColumn<QString>("variant");
        QTest::addColumn<QString>("method");
        for (const char* v : {"qwen3moe", "mixtral"})
            for (const char* m : {"rtn", "mr-gptq"}) QTest::newRow(qPrintable(QString("%1 %2").arg(v, m))) << v << m;
    }
    void llamaCppRunsMixturesOfExperts() {
        QFETCH(QString, variant);
        QFETCH(QString, method);
        const QString dir = m_tmp.path() + "/moe-" + variant + "-model";
        if (!QFileInfo::exists(dir + "/config.json")) {
            QVERIFY(QDir().mkpath(dir));
            writeBrownpyAs(variant, dir);
        }
        compare(dir, "moe-" + variant + "-" + method, method, kPositions);
    }

private:
    // brownpy-13M's weights as another family's checkpoint (llamaCppRunsEachFamily), or as a
    // mixture of experts (llamaCppRunsMixturesOfExperts).
    void writeBrownpyAs(const QString& variant, const QString& dir) {
        const QString source = test::modelFolder("brownpy-13M");
        QFile in(source + "/config.json");
        QVERIFY(in.open(QIODevice::ReadOnly));
        QJsonObject cfg = QJsonDocument::fromJson(in.readAll()).object();
        const auto ck = model::Checkpoint::load(source.toStdString());
        const auto& c = ck.config();
        std::vector<std::pair<std::string, at::Tensor>> tensors;
        for (const auto& n : ck.names()) tensors.emplace_back(n, ck.weight(n).to(at::kFloat));
        const bool moe = variant == "qwen3moe" || variant == "mixtral";
        constexpr int kExperts = 4;
        for (int l = 0; l < c.numLayers && moe; ++l) {
            const std::string p = model::names::layerPrefix(l);
            const bool mixtral = variant == "mixtral";
            const std::string block = p + (mixtral ? "block_sparse_moe." : "mlp.");
            const auto take = [&](const char* name) {
                const auto it = std::find_if(tensors.begin(), tensors.end(), [&](const auto& t) { return t.first == p + name; });
                const at::Tensor w = it->second;
                tensors.erase(it);
                return w;
            };
            const at::Tensor gate = take("mlp.gate_proj.weight"), up = take("mlp.up_proj.weight"), down = take("mlp.down_proj.weight");
            // Router logits of size ~5 on normed inputs: sin of a fixed phase per expert and column.
            const at::Tensor phase = at::arange(kExperts, at::kFloat).unsqueeze(1) * 1.3 + at::arange(c.hiddenSize, at::kFloat) * 0.7;
            tensors.emplace_back(block + "gate.weight", (phase.sin() * 0.5).contiguous());
            for (int e = 0; e < kExperts; ++e) {
                const std::string x = block + "experts." + std::to_string(e) + ".";
                tensors.emplace_back(x + (mixtral ? "w1" : "gate_proj") + ".weight", gate.clone());
                tensors.emplace_back(x + (mixtral ? "w3" : "up_proj") + ".weight", up.clone());
                tensors.emplace_back(x + (mixtral ? "w2" : "down_proj") + ".weight", (down * (0.7 + 0.2 * e)).contiguous());
            }
            if (!mixtral) {
                tensors.emplace_back(p + model::names::kQNorm + ".weight", at::ones({c.headDim}));
                tensors.emplace_back(p + model::names::kKNorm + ".weight", at::ones({c.headDim}));
            }
        }
        if (moe) {
            const bool mixtral = variant == "mixtral";
            cfg["architectures"] = QJsonArray{mixtral ? "MixtralForCausalLM" : "Qwen3MoeForCausalLM"};
            cfg["model_type"] = mixtral ? "mixtral" : "qwen3_moe";
            cfg[mixtral ? "num_local_experts" : "num_experts"] = kExperts;
            cfg["num_experts_per_tok"] = 2;
            if (!mixtral) {
                cfg["moe_intermediate_size"] = c.intermediateSize;
                cfg["norm_topk_prob"] = true;
                cfg["head_dim"] = c.headDim;
            }
            cfg.remove("mlp_bias");
            cfg.remove("attention_bias");
        }
        for (int l = 0; l < c.numLayers && !moe; ++l) {
            const std::string p = model::names::layerPrefix(l);
            if (variant == "qwen2") {
                tensors.emplace_back(p + model::names::kQProj + ".bias", at::zeros({std::int64_t(c.numHeads) * c.headDim}));
                tensors.emplace_back(p + model::names::kKProj + ".bias", at::zeros({std::int64_t(c.numKvHeads) * c.headDim}));
                tensors.emplace_back(p + model::names::kVProj + ".bias", at::zeros({std::int64_t(c.numKvHeads) * c.headDim}));
            } else if (variant == "qwen3") {
                tensors.emplace_back(p + model::names::kQNorm + ".weight", at::ones({c.headDim}));
                tensors.emplace_back(p + model::names::kKNorm + ".weight", at::ones({c.headDim}));
            }
        }
        if (variant == "qwen2" || variant == "qwen3") {
            const QString arch = variant == "qwen2" ? "Qwen2ForCausalLM" : "Qwen3ForCausalLM";
            cfg["architectures"] = QJsonArray{arch};
            cfg["model_type"] = variant;
            cfg["head_dim"] = c.headDim;
        } else if (variant == "llama3-rope") {
            cfg["rope_scaling"] = QJsonObject{{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                                              {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 64}};
        }
        io::writeSafeTensors((dir + "/model.safetensors").toStdString(), tensors);
        QFile out(dir + "/config.json");
        QVERIFY(out.open(QIODevice::WriteOnly));
        out.write(QJsonDocument(cfg).toJson());
        out.close();
        QVERIFY(QFile::copy(source + "/tokenizer.model", dir + "/tokenizer.model"));
    }

    // Quantizes `model` with `method`, exports the run as GGUF, and holds llama.cpp's
    // distributions to the reference's (the file's comment has the tolerance).
    void compare(const QString& model, const QString& name, const QString& method, int positions,
                 const QString& format = "mxfp4", const QStringList& extra = {}, const QString& target = "gguf") {
        const QString dir = m_tmp.path() + "/" + name, run = dir + "/run", gguf = dir + "/model.gguf";
        auto r = test::runLatmix(QStringList{"quantize", "--model", model, "--method", method, "--format", format, "--out", run,
                                             "--calib-samples", "8", "--seqlen", "128", "--steps", "20", "--batch", "2"} +
                                     extra,
                                 300000);
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        r = test::runLatmix({"export", run, "--format", target, "--out", gguf}, 120000);
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));

        // The same ids for both: the run's tokenizer on WikiText-2's test text.
        const std::string modelPath = (run + "/model").toStdString();
        const auto tok = tokenizer::Tokenizer::loadFromDir(modelPath);
        const std::string text = readBytes(test::dataDir() + "/wikitext-2/wiki.test.raw", kTextBytes);
        const std::vector<int> textIds = tok->encode(text, false);
        std::vector<std::int64_t> ids;
        if (tok->bosId() >= 0) ids.push_back(tok->bosId());
        ids.insert(ids.end(), textIds.begin(), textIds.begin() + std::min<std::size_t>(textIds.size(), positions - 1));
        QStringList idText;
        for (auto t : ids) idText << QString::number(t);
        QFile idsFile(dir + "/ids.txt"), textFile(dir + "/text.txt");
        QVERIFY(idsFile.open(QIODevice::WriteOnly) && textFile.open(QIODevice::WriteOnly));
        idsFile.write(idText.join(',').toUtf8());
        textFile.write(QByteArray::fromStdString(text));
        idsFile.close(), textFile.close();

        QProcess node;
        node.start(m_node, {m_script, gguf, dir + "/ids.txt", dir + "/probs.f32", dir + "/text.txt"});
        QVERIFY2(node.waitForFinished(180000) && node.exitCode() == 0,
                 qPrintable(node.readAllStandardError().right(2000) + node.errorString()));
        const QJsonObject said = QJsonDocument::fromJson(node.readAllStandardOutput().trimmed().split('\n').last()).object();

        const auto ck = model::Checkpoint::load(modelPath);
        const auto& c = ck.config();
        const std::int64_t T = std::int64_t(ids.size()), V = c.vocabSize;
        QCOMPARE(said["vocab"].toInt(), int(V));
        QCOMPARE(said["positions"].toInt(), int(T));
        std::vector<int> theirs;
        for (const auto& v : said["text_ids"].toArray()) theirs.push_back(v.toInt());
        QCOMPARE(theirs, textIds); // the exported vocabulary tokenizes as the run's tokenizer does

        QFile probs(dir + "/probs.f32");
        QVERIFY(probs.open(QIODevice::ReadOnly));
        const QByteArray raw = probs.readAll();
        QCOMPARE(std::int64_t(raw.size()), T * V * 4);
        at::Tensor pLlama = at::from_blob(const_cast<char*>(raw.data()), {T, V}, at::kFloat).to(at::kDouble);
        pLlama = pLlama / pLlama.sum(1, true); // float32 probabilities sum to 1 within ~1e-4

        // The run's weights; W_down · H where the run has T3 (the file holds it folded back).
        const run::RunModel rm = run::readRunModel(modelPath);
        test::ReferenceLlama ref(ck);
        if (rm.quant.t3Block > 0) {
            const at::Tensor h = run::t3Transform(rm.quant, c.downProjWidth()).dense().to(at::kDouble);
            for (const auto& p : model::names::blockLinearPrefixes(c))
                if (model::names::isDownProj(p)) ref.replaced[p + ".weight"] = rm.tensors.at(p + ".weight").to(at::kDouble).mm(h);
        }
        // The weights llama.cpp multiplies as MXFP4 or NVFP4 (ggml types 39, 40), by their Hugging
        // Face names.
        const auto file = test::GgufFile::read(gguf.toStdString());
        const std::map<std::string, std::string> hfName{
            {"attn_q", "self_attn.q_proj"}, {"attn_k", "self_attn.k_proj"}, {"attn_v", "self_attn.v_proj"},
            {"attn_output", "self_attn.o_proj"}, {"ffn_gate", "mlp.gate_proj"}, {"ffn_up", "mlp.up_proj"},
            {"ffn_down", "mlp.down_proj"}};
        // Stacked experts (ffn_{gate,up,down}_exps): every expert's linear of that kind.
        const std::map<std::string, model::names::ExpertLinear> expertKind{
            {"ffn_gate_exps", model::names::ExpertLinear::Gate}, {"ffn_up_exps", model::names::ExpertLinear::Up},
            {"ffn_down_exps", model::names::ExpertLinear::Down}};
        std::set<std::string> mxfp4;
        for (const auto& [name, t] : file.tensors) {
            const auto dot = name.find('.', 4); // blk.N.<name>.weight
            if ((t.type != 39 && t.type != 40) || name.compare(0, 4, "blk.") != 0 || dot == std::string::npos) continue;
            const std::string layer = name.substr(4, dot - 4), kind = name.substr(dot + 1, name.rfind('.') - dot - 1);
            const std::string p = "model.layers." + layer + ".";
            if (expertKind.count(kind))
                for (int e = 0; e < c.moe->numExperts; ++e)
                    mxfp4.insert(p + model::names::expertModule(c, e, expertKind.at(kind)) + ".weight");
            else
                mxfp4.insert(p + hfName.at(kind) + ".weight");
        }
        QVERIFY2(!mxfp4.empty(), "the file has no MXFP4 or NVFP4 tensor");
        // The matrices the file holds in BF16 (token_embd, output, a folded-back W_down · H: issue
        // 71): the reference takes the file's values, and llama.cpp's CPU rounds the activations
        // that meet a BF16 weight to BF16 (ggml's vec_dot_type of BF16), as it rounds those meeting
        // MXFP4 to Q8_0; a lookup (token_embd) rounds nothing.
        // Kept linears (--keep) are BF16 values in the run already: only their inputs round.
        std::set<std::string> bf16;
        for (const auto& [name, t] : file.tensors) {
            if (t.type != 30) continue;
            const bool layer = name.compare(0, 4, "blk.") == 0;
            const std::string kind = layer ? name.substr(name.find('.', 4) + 1, name.rfind('.') - name.find('.', 4) - 1) : "";
            if (layer && expertKind.count(kind)) { // stacked experts, ne = {in, out, experts}: one matrix each
                const std::string p = "model.layers." + name.substr(4, name.find('.', 4) - 4) + ".";
                const at::Tensor all = at::tensor(file.values(name), at::kFloat).reshape({t.ne[2], t.ne[1], t.ne[0]}).to(at::kDouble);
                for (int e = 0; e < c.moe->numExperts; ++e) {
                    const std::string hf = p + model::names::expertModule(c, e, expertKind.at(kind)) + ".weight";
                    ref.replaced[hf] = all[e].clone();
                    bf16.insert(hf);
                }
                continue;
            }
            const std::string hf = name == "token_embd.weight" ? "model.embed_tokens.weight"
                                   : name == "output.weight"   ? "lm_head.weight"
                                   : layer && hfName.count(kind)
                                       ? "model.layers." + name.substr(4, name.find('.', 4) - 4) + "." + hfName.at(kind) + ".weight"
                                       : "";
            QVERIFY2(!hf.empty(), qPrintable(QString("a BF16 tensor this test does not map: ") + name.c_str()));
            if (!layer || kind == "ffn_down") { // the file's values (ffn_down's rows are in Hugging Face's order)
                const std::vector<float> v = file.values(name);
                ref.replaced[hf] = at::tensor(v, at::kFloat).reshape({t.ne[1], t.ne[0]}).to(at::kDouble);
            }
            if (name != "token_embd.weight") bf16.insert(hf);
        }
        // Tied embeddings: llama.cpp's output product is with token_embd, BF16 too.
        if (!file.tensors.count("output.weight") && file.tensors.at("token_embd.weight").type == 30) bf16.insert("lm_head.weight");
        const at::Tensor exact = at::log_softmax(ref.logits(ids), 1);
        ref.linearInput = [&](const at::Tensor& x, const std::string& w) {
            return mxfp4.count(w) ? q8_0(x) : bf16.count(w) ? x.to(at::kBFloat16).to(at::kDouble) : x;
        };
        const at::Tensor rounded = at::log_softmax(ref.logits(ids), 1);

        const double dQ8 = meanKl(rounded.exp(), exact), dLlama = meanKl(pLlama, exact), dLeft = meanKl(pLlama, rounded);
        // Each position's negative log-likelihood of the next id.
        const at::Tensor next = at::tensor(std::vector<std::int64_t>(ids.begin() + 1, ids.end()), at::kLong).unsqueeze(1);
        auto nll = [&](const at::Tensor& logp) { return -logp.slice(0, 0, T - 1).gather(1, next).squeeze(1); };
        const at::Tensor nllExactT = nll(exact), shiftQ8 = nll(rounded) - nllExactT;
        const double nllExact = nllExactT.mean().item<double>(), nllRounded = nll(rounded).mean().item<double>(),
                     nllLlama = nll(pLlama.log()).mean().item<double>();
        qInfo("%s: %lld positions; perplexity exact %.4f, Q8_0-rounded reference %.4f, llama.cpp %.4f; "
              "mean KL: rounded‖exact %.3g, llama.cpp‖exact %.3g, llama.cpp‖rounded %.3g",
              qPrintable(name), static_cast<long long>(T), std::exp(nllExact), std::exp(nllRounded),
              std::exp(nllLlama), dQ8, dLlama, dLeft);
        QVERIFY2(dQ8 > 0, "the Q8_0 rounding changed nothing: the model has no FP4 product");
        QVERIFY2(dLlama <= 3 * dQ8, "llama.cpp is farther from the run than its activation rounding explains");
        // The rounding's shifts of single positions can cancel in the mean; their mean size cannot.
        QVERIFY2(std::abs(nllLlama - nllExact) <= 3 * shiftQ8.abs().mean().item<double>(),
                 "llama.cpp's perplexity is farther from the run's than the rounding explains");
    }
};

QTEST_GUILESS_MAIN(TestGgufRuntime)
#include "tst_gguf_runtime.moc"
