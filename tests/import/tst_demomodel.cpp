// The built-in demo model: deterministic, loadable, with the massive outlier channels of trained
// LLMs at every activation quantization point that reads the residual stream (SPEC §4), and a
// standard Hugging Face tokenizer.json.
#include "model/Checkpoint.h"
#include "import/DemoModel.h"

#include <ATen/ATen.h>
#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>

using namespace latmix::model;
using namespace latmix::importing;

namespace {

QByteArray readAll(const QString& path) {
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

const std::string kSp = "\xE2\x96\x81"; // ▁

// Inputs of the two RMSNorm-fed quantization points of every layer, in float64: q/k/v input
// (after input_layernorm) and gate/up input (after post_attention_layernorm). A plain Hugging
// Face Llama forward pass (rotate-half RoPE, GQA, causal softmax, SwiGLU), independent of
// core/model/LlamaModel.
struct Acts {
    std::vector<at::Tensor> qkvIn, gateUpIn;
    at::Tensor logits;
};

at::Tensor rmsNorm(const at::Tensor& x, const at::Tensor& g, double eps) {
    return x * at::rsqrt(x.pow(2).mean(-1, true) + eps) * g;
}

at::Tensor rotateHalf(const at::Tensor& x) {
    const int64_t h = x.size(-1) / 2;
    return at::cat({-x.slice(-1, h), x.slice(-1, 0, h)}, -1);
}

Acts forward(const Checkpoint& ck, const std::vector<int64_t>& ids) {
    const ModelConfig& c = ck.config();
    auto W = [&](const std::string& n) { return ck.weight(n).to(at::kDouble); };
    const int64_t T = static_cast<int64_t>(ids.size()), hd = c.headDim;
    auto idx = at::tensor(ids, at::kLong);
    at::Tensor x = W("model.embed_tokens.weight").index_select(0, idx);
    auto pos = at::arange(T, at::kDouble).unsqueeze(1);
    auto inv = at::pow(c.ropeTheta, at::arange(0, hd / 2, at::kDouble) * (-2.0 / double(hd))).unsqueeze(0);
    auto ang = at::cat({pos * inv, pos * inv}, -1); // [T, hd]
    auto cosA = at::cos(ang), sinA = at::sin(ang);
    auto mask = at::ones({T, T}, at::kBool).triu(1);
    Acts a;
    for (int l = 0; l < c.numLayers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        auto h = rmsNorm(x, W(p + "input_layernorm.weight"), c.rmsNormEps);
        a.qkvIn.push_back(h);
        auto q = h.matmul(W(p + "self_attn.q_proj.weight").t()).view({T, c.numHeads, hd}).transpose(0, 1);
        auto k = h.matmul(W(p + "self_attn.k_proj.weight").t()).view({T, c.numKvHeads, hd}).transpose(0, 1);
        auto v = h.matmul(W(p + "self_attn.v_proj.weight").t()).view({T, c.numKvHeads, hd}).transpose(0, 1);
        q = q * cosA + rotateHalf(q) * sinA;
        k = k * cosA + rotateHalf(k) * sinA;
        k = k.repeat_interleave(c.numHeads / c.numKvHeads, 0);
        v = v.repeat_interleave(c.numHeads / c.numKvHeads, 0);
        auto s = q.matmul(k.transpose(1, 2)) / std::sqrt(double(hd));
        s = s.masked_fill(mask, -INFINITY);
        auto o = at::softmax(s, -1).matmul(v).transpose(0, 1).reshape({T, c.numHeads * hd});
        x = x + o.matmul(W(p + "self_attn.o_proj.weight").t());
        auto h2 = rmsNorm(x, W(p + "post_attention_layernorm.weight"), c.rmsNormEps);
        a.gateUpIn.push_back(h2);
        auto m = at::silu(h2.matmul(W(p + "mlp.gate_proj.weight").t())) * h2.matmul(W(p + "mlp.up_proj.weight").t());
        x = x + m.matmul(W(p + "mlp.down_proj.weight").t());
    }
    a.logits = rmsNorm(x, W("model.norm.weight"), c.rmsNormEps).matmul(W("lm_head.weight").t());
    return a;
}

// Smallest per-channel max|x| over the outlier channels, divided by the median per-channel
// max|x| of all other channels. x: [tokens, channels].
double outlierRatio(const at::Tensor& x, const std::vector<int>& outliers) {
    auto colMax = x.abs().amax(0).to(at::kDouble).contiguous();
    const double* p = colMax.data_ptr<double>();
    double minOutlier = INFINITY;
    std::vector<double> others;
    for (int64_t ch = 0; ch < colMax.numel(); ++ch) {
        if (std::find(outliers.begin(), outliers.end(), int(ch)) != outliers.end()) minOutlier = std::min(minOutlier, p[ch]);
        else others.push_back(p[ch]);
    }
    std::nth_element(others.begin(), others.begin() + others.size() / 2, others.end());
    return minOutlier / others[others.size() / 2];
}

// Sentence-piece BPE as tokenizer.json specifies it: pieces of the normalized text's code
// points, then repeatedly the lowest-ranked adjacent merge (leftmost on ties).
std::vector<std::string> bpe(const nlohmann::json& tok, const std::string& text) {
    std::string norm = kSp;
    for (char ch : text) norm += ch == ' ' ? kSp : std::string(1, ch);
    std::vector<std::string> parts;
    for (size_t i = 0; i < norm.size();) {
        const unsigned char b = static_cast<unsigned char>(norm[i]);
        const size_t len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
        parts.push_back(norm.substr(i, len));
        i += len;
    }
    std::map<std::pair<std::string, std::string>, size_t> rank;
    const auto& merges = tok["model"]["merges"];
    for (size_t r = 0; r < merges.size(); ++r) {
        const std::string m = merges[r];
        const auto sp = m.find(' ');
        rank[{m.substr(0, sp), m.substr(sp + 1)}] = r;
    }
    for (;;) {
        size_t best = SIZE_MAX, at = 0;
        for (size_t i = 0; i + 1 < parts.size(); ++i) {
            auto it = rank.find({parts[i], parts[i + 1]});
            if (it != rank.end() && it->second < best) best = it->second, at = i;
        }
        if (best == SIZE_MAX) break;
        parts[at] += parts[at + 1];
        parts.erase(parts.begin() + static_cast<long>(at) + 1);
    }
    return parts;
}

} // namespace

class TestDemoModel : public QObject {
    Q_OBJECT
private slots:
    void deterministic_data() {
        QTest::addColumn<quint64>("seed");
        QTest::newRow("seed 0") << quint64(0);
        QTest::newRow("seed 42") << quint64(42);
    }
    void deterministic() {
        QFETCH(quint64, seed);
        QTemporaryDir tmp;
        writeDemoModel(tmp.filePath("a").toStdString(), seed);
        writeDemoModel(tmp.filePath("b").toStdString(), seed);
        const QStringList files = QDir(tmp.filePath("a")).entryList(QDir::Files);
        QCOMPARE(files, (QStringList{"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}));
        for (const auto& f : files) {
            const QByteArray a = readAll(tmp.filePath("a/" + f));
            QVERIFY(!a.isEmpty());
            QVERIFY2(a == readAll(tmp.filePath("b/" + f)), qPrintable(f));
        }
        // Rewriting into an existing folder replaces the files and leaves nothing else.
        writeDemoModel(tmp.filePath("a").toStdString(), seed);
        QCOMPARE(QDir(tmp.filePath("a")).entryList(QDir::Files | QDir::Hidden), files);
    }

    void seedsDiffer() {
        QTemporaryDir tmp;
        writeDemoModel(tmp.filePath("a").toStdString(), 1);
        writeDemoModel(tmp.filePath("b").toStdString(), 2);
        QVERIFY(readAll(tmp.filePath("a/model.safetensors")) != readAll(tmp.filePath("b/model.safetensors")));
        QCOMPARE(readAll(tmp.filePath("a/tokenizer.json")), readAll(tmp.filePath("b/tokenizer.json")));
    }

    void loadsAsCheckpoint() {
        QTemporaryDir tmp;
        writeDemoModel(tmp.path().toStdString());
        const Checkpoint ck = Checkpoint::load(tmp.path().toStdString());
        const ModelConfig& c = ck.config();
        QCOMPARE(c.architectureName, std::string("LlamaForCausalLM"));
        QCOMPARE(c.hiddenSize, 128);
        QCOMPARE(c.intermediateSize, 384);
        QCOMPARE(c.numLayers, 4);
        QCOMPARE(c.numHeads, 4);
        QCOMPARE(c.numKvHeads, 2);
        QCOMPARE(c.headDim, 32);
        QCOMPARE(c.vocabSize, 300);
        QCOMPARE(c.maxPositions, 512);
        QVERIFY(!c.tieWordEmbeddings);
        QVERIFY(ck.has("lm_head.weight"));
        // Every block linear's input dimension is a whole number of MX blocks of 32.
        QCOMPARE(c.hiddenSize % 32, 0);
        QCOMPARE(c.intermediateSize % 32, 0);
        const std::int64_t layer = 2 * 128 + 128 * 128 * 2 + 2 * 128 * 64 + 3 * 128 * 384;
        QCOMPARE(ck.parameterCount(), std::int64_t(2 * 300 * 128 + 4 * layer + 128));
        for (const auto& n : ck.names()) {
            const auto w = ck.weight(n);
            QVERIFY2(at::isfinite(w).all().item<bool>(), n.c_str());
        }
    }

    // The planted outliers: in the embedding (>= 20x the other columns), and after RMSNorm at the
    // q/k/v and gate/up inputs of every layer (two orders of magnitude), on random token ids.
    void outlierChannels_data() {
        QTest::addColumn<quint64>("seed");
        QTest::newRow("seed 0") << quint64(0);
        QTest::newRow("seed 7") << quint64(7);
    }
    void outlierChannels() {
        QFETCH(quint64, seed);
        QTemporaryDir tmp;
        writeDemoModel(tmp.path().toStdString(), seed);
        const Checkpoint ck = Checkpoint::load(tmp.path().toStdString());
        const auto& outliers = demoModelOutlierChannels();
        QCOMPARE(outliers.size(), size_t(3));
        const double embRatio = outlierRatio(ck.weight("model.embed_tokens.weight"), outliers);
        qInfo("embedding: outlier / median channel max %.1f", embRatio);
        QVERIFY2(embRatio >= 20, qPrintable(QString("embedding outlier ratio %1").arg(embRatio)));

        std::vector<int64_t> ids;
        std::uint64_t s = 12345;
        for (int i = 0; i < 64; ++i) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            ids.push_back(int64_t((s >> 33) % 300));
        }
        const Acts a = forward(ck, ids);
        double worst = INFINITY;
        for (int l = 0; l < ck.config().numLayers; ++l) {
            const double r1 = outlierRatio(a.qkvIn[size_t(l)], outliers), r2 = outlierRatio(a.gateUpIn[size_t(l)], outliers);
            qInfo("layer %d: outlier / median channel max at q/k/v input %.1f, gate/up input %.1f", l, r1, r2);
            worst = std::min({worst, r1, r2});
        }
        // effect: ~130-200x by construction (DemoModel.cpp); rounding cannot move it by a third
        QVERIFY2(worst >= 100, qPrintable(QString("smallest outlier ratio %1").arg(worst)));
        QVERIFY(at::isfinite(a.logits).all().item<bool>());
        // The logits depend on the token (the outliers are not all the model sees).
        QVERIFY((a.logits[5] - a.logits[6]).abs().max().item<double>() > 1e-3); // a real difference, not rounding
    }

    void tokenizerJson() {
        QTemporaryDir tmp;
        writeDemoModel(tmp.path().toStdString());
        const QByteArray text = readAll(tmp.filePath("tokenizer.json"));
        nlohmann::json t;
        try {
            t = nlohmann::json::parse(text.toStdString());
        } catch (const std::exception& e) {
            QFAIL(e.what());
        }
        const auto& m = t["model"];
        QCOMPARE(m["type"].get<std::string>(), std::string("BPE"));
        QVERIFY(m["byte_fallback"].get<bool>());
        QCOMPARE(m["unk_token"].get<std::string>(), std::string("<unk>"));
        const auto& vocab = m["vocab"];
        QCOMPARE(int(vocab.size()), 300);
        QCOMPARE(vocab["<unk>"].get<int>(), 0);
        QCOMPARE(vocab["<s>"].get<int>(), 1);
        QCOMPARE(vocab["</s>"].get<int>(), 2);
        QCOMPARE(vocab["<0x00>"].get<int>(), 3);
        QCOMPARE(vocab["<0x0A>"].get<int>(), 13);
        QCOMPARE(vocab["<0xFF>"].get<int>(), 258);
        for (const char* piece : {"\xE2\x96\x81t", "\xE2\x96\x81th", "\xE2\x96\x81the", "he", "in", "er", "\xE2\x96\x81" "a"})
            QVERIFY2(vocab.contains(piece), piece);
        std::vector<bool> used(300, false);
        for (auto it = vocab.begin(); it != vocab.end(); ++it) used[size_t(it.value().get<int>())] = true;
        QVERIFY(std::all_of(used.begin(), used.end(), [](bool u) { return u; })); // ids 0..299, each once
        const auto& merges = m["merges"];
        QVERIFY(merges.size() >= 20);
        QCOMPARE(merges[0].get<std::string>(), kSp + " t");
        for (const auto& mg : merges) {
            const std::string s = mg;
            const auto sp = s.find(' ');
            QVERIFY(sp != std::string::npos);
            QVERIFY2(vocab.contains(s.substr(0, sp)) && vocab.contains(s.substr(sp + 1)), s.c_str());
            QVERIFY2(vocab.contains(s.substr(0, sp) + s.substr(sp + 1)), s.c_str());
        }
        const auto& n = t["normalizer"];
        QCOMPARE(n["type"].get<std::string>(), std::string("Sequence"));
        QCOMPARE(n["normalizers"][0]["type"].get<std::string>(), std::string("Prepend"));
        QCOMPARE(n["normalizers"][0]["prepend"].get<std::string>(), kSp);
        QCOMPARE(n["normalizers"][1]["type"].get<std::string>(), std::string("Replace"));
        QCOMPARE(n["normalizers"][1]["pattern"]["String"].get<std::string>(), std::string(" "));
        QCOMPARE(n["normalizers"][1]["content"].get<std::string>(), kSp);
        const auto& d = t["decoder"]["decoders"];
        QCOMPARE(t["decoder"]["type"].get<std::string>(), std::string("Sequence"));
        QCOMPARE(d.size(), size_t(4));
        QCOMPARE(d[0]["type"].get<std::string>(), std::string("Replace"));
        QCOMPARE(d[0]["pattern"]["String"].get<std::string>(), kSp);
        QCOMPARE(d[0]["content"].get<std::string>(), std::string(" "));
        QCOMPARE(d[1]["type"].get<std::string>(), std::string("ByteFallback"));
        QCOMPARE(d[2]["type"].get<std::string>(), std::string("Fuse"));
        QCOMPARE(d[3]["type"].get<std::string>(), std::string("Strip"));
        QCOMPARE(d[3]["start"].get<int>(), 1);
        QCOMPARE(d[3]["stop"].get<int>(), 0);
        const auto& pp = t["post_processor"];
        QCOMPARE(pp["type"].get<std::string>(), std::string("TemplateProcessing"));
        QCOMPARE(pp["single"][0]["SpecialToken"]["id"].get<std::string>(), std::string("<s>"));
        QCOMPARE(pp["single"][1]["Sequence"]["id"].get<std::string>(), std::string("A"));
        QCOMPARE(pp["special_tokens"]["<s>"]["ids"][0].get<int>(), 1);
        QCOMPARE(t["added_tokens"].size(), size_t(3));
        QVERIFY(t["pre_tokenizer"].is_null());
    }

    // The merge ranks lead every word to its longest piece.
    void tokenizerMerges_data() {
        QTest::addColumn<QString>("text");
        QTest::addColumn<QStringList>("pieces");
        QTest::newRow("the") << "the" << QStringList{"▁the"};
        QTest::newRow("and") << "and" << QStringList{"▁and"};
        QTest::newRow("this") << "this" << QStringList{"▁th", "i", "s"};
        QTest::newRow("sing") << "sing" << QStringList{"▁s", "ing"};
        QTest::newRow("the end") << "the end" << QStringList{"▁the", "▁", "e", "nd"};
        QTest::newRow("hello") << "hello" << QStringList{"▁", "he", "ll", "o"};
    }
    void tokenizerMerges() {
        QFETCH(QString, text);
        QFETCH(QStringList, pieces);
        QTemporaryDir tmp;
        writeDemoModel(tmp.path().toStdString());
        const auto t = nlohmann::json::parse(readAll(tmp.filePath("tokenizer.json")).toStdString());
        QStringList got;
        for (const auto& p : bpe(t, text.toStdString())) {
            QVERIFY2(t["model"]["vocab"].contains(p), p.c_str());
            got << QString::fromStdString(p);
        }
        QCOMPARE(got, pieces);
    }
};

QTEST_APPLESS_MAIN(TestDemoModel)
#include "tst_demomodel.moc"
