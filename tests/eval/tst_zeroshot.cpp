// Zero-shot scoring as lm-evaluation-harness scores it. References: a bigram model whose
// log-probabilities are known in closed form (one-hot embeddings, zero decoder layers, lm_head
// holding a table L: log p(j | i) = L[i][j] - logsumexp(L[i])) with a one-byte-one-token
// tokenizer, worked by hand for each task type; a random model with real attention scored
// request by request with a plain forward (the harness's computation) against the packed rows;
// the task files' templates from rows written here; the real files' document counts.
#include "eval/ZeroShot.h"
#include "eval/ZeroShotTasks.h"
#include "model/Checkpoint.h"
#include "model/LlamaModel.h"
#include "tokenizer/Tokenizer.h"

#include <ATen/ATen.h>
// Qt after ATen: Qt's `slots` macro breaks ATen headers.
#include "TestData.h"
#include "TestSupport.h"

#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <fstream>

using namespace latmix;

namespace {

constexpr int kVocab = 128; // ASCII
constexpr double kEps = 1e-6;

// One byte, one token; BOS 1 and EOS 2 (control characters no text here uses).
class ByteTokenizer final : public tokenizer::Tokenizer {
public:
    std::vector<int> encode(const std::string& text, bool addBos) const override {
        std::vector<int> ids;
        if (addBos) ids.push_back(1);
        for (unsigned char c : text) ids.push_back(c);
        return ids;
    }
    std::string decode(const std::vector<int>& ids) const override {
        std::string s;
        for (int i : ids) s += static_cast<char>(i);
        return s;
    }
    int vocabSize() const override { return kVocab; }
    int bosId() const override { return 1; }
    int eosId() const override { return 2; }
    bool addsBosByDefault() const override { return false; }
    std::string kind() const override { return "byte"; }
};

// The bigram model of table L (float64 [128, 128], row: the current token). The decoder layer's
// output projections are zero, so the hidden state is the one-hot embedding; the final RMSNorm
// scales it by s = 1 / sqrt(1/128 + eps), and lm_head = L^T / s gives logits L[current].
model::LlamaModel bigramModel(const at::Tensor& L) {
    model::ModelConfig c;
    c.hiddenSize = kVocab;
    c.intermediateSize = 8;
    c.numLayers = 1;
    c.numHeads = 2;
    c.numKvHeads = 2;
    c.headDim = 64;
    c.vocabSize = kVocab;
    c.maxPositions = 64;
    c.rmsNormEps = kEps;
    const auto f = at::TensorOptions().dtype(at::kFloat);
    model::LlamaWeights w;
    w.embed = at::eye(kVocab, f);
    w.finalNorm = at::ones({kVocab}, f);
    const double s = 1.0 / std::sqrt(1.0 / kVocab + kEps);
    w.lmHead = (L.t() / s).to(at::kFloat).contiguous();
    model::LayerWeights y;
    y.inputNorm = at::ones({kVocab}, f);
    y.postNorm = at::ones({kVocab}, f);
    y.wq = at::zeros({128, kVocab}, f);
    y.wk = at::zeros({128, kVocab}, f);
    y.wv = at::zeros({128, kVocab}, f);
    y.wo = at::zeros({kVocab, 128}, f);
    y.wGate = at::zeros({8, kVocab}, f);
    y.wUp = at::zeros({8, kVocab}, f);
    y.wDown = at::zeros({kVocab, 8}, f);
    w.layers.push_back(y);
    return model::LlamaModel(c, w);
}

// log p(text[k] | text[k-1]) summed over the continuation's bytes (the first conditioned on the
// context's last byte), from the table in float64.
double bigramLogLikelihood(const at::Tensor& L, const std::string& context, const std::string& continuation) {
    const auto logp = at::log_softmax(L, 1);
    double ll = 0;
    unsigned char previous = static_cast<unsigned char>(context.back());
    for (unsigned char c : continuation) {
        ll += logp[previous][c].item<double>();
        previous = c;
    }
    return ll;
}

const double kLog128 = std::log(128.0);

eval::ZeroShotDoc choiceDoc(const std::string& context, const std::vector<std::string>& choices, int gold) {
    eval::ZeroShotDoc d;
    d.contexts = {context};
    for (const auto& c : choices) d.continuations.push_back(" " + c);
    d.choices = choices;
    d.gold = gold;
    return d;
}

QString writeFile(const QTemporaryDir& dir, const QString& name, const std::string& text) {
    const QString path = dir.filePath(name);
    std::ofstream(path.toStdString(), std::ios::binary) << text;
    return path;
}

} // namespace

class TestZeroShot : public QObject {
    Q_OBJECT

    QTemporaryDir m_tmp;
    ByteTokenizer m_tok;

private slots:
    // The harness's _encode_pair: the context's trailing spaces go to the continuation, whose
    // tokens are those of the whole text after the context's; an empty context is BOS alone.
    void encodePair_data() {
        QTest::addColumn<QString>("context");
        QTest::addColumn<QString>("continuation");
        QTest::addColumn<bool>("bos");
        QTest::addColumn<QString>("contextTokens");
        QTest::addColumn<QString>("continuationTokens");
        QTest::newRow("plain") << "Answer:" << " yes" << false << "Answer:" << " yes";
        QTest::newRow("trailing space moves") << "Answer: " << "yes" << false << "Answer:" << " yes";
        QTest::newRow("trailing newline and space") << "Q\n " << "a" << false << "Q" << "\n a";
        QTest::newRow("with BOS") << "Q:" << " a" << true << "\x01Q:" << " a";
        QTest::newRow("empty context") << "" << " a" << false << "\x01" << " a";
    }
    void encodePair() {
        QFETCH(QString, context);
        QFETCH(QString, continuation);
        QFETCH(bool, bos);
        QFETCH(QString, contextTokens);
        QFETCH(QString, continuationTokens);
        const auto [ctx, cont] = eval::encodePair(m_tok, context.toStdString(), continuation.toStdString(), bos);
        QCOMPARE(QString::fromStdString(m_tok.decode(ctx)), contextTokens);
        QCOMPARE(QString::fromStdString(m_tok.decode(cont)), continuationTokens);
    }

    // A uniform model (L = 0): every token costs log 128, so a choice's log-likelihood is minus
    // its byte count (the delimiter's included) times log 128. acc takes the shortest choice;
    // acc_norm divides by the choice's bytes (delimiter excluded): " a" -> -2 log128 / 1,
    // " bbbb" -> -5 log128 / 4, so it takes the longest. Gold is the longest: acc 0, acc_norm 1.
    void accVersusAccNorm() {
        const auto model = bigramModel(at::zeros({kVocab, kVocab}, at::kDouble));
        eval::ZeroShotTask t;
        t.name = "test";
        t.accNorm = true;
        t.docs = {choiceDoc("Question: q\nAnswer:", {"a", "bbbb", "cc"}, 1)};
        const auto scores = eval::scoreDocuments(model, m_tok, t.docs, {});
        QCOMPARE(int(scores[0].requests.size()), 3);
        const int bytes[] = {2, 5, 3};
        // The bigram model runs in float32: lm_head = L/s rounded, a log-softmax over 128 logits of
        // |L| ≤ 5, ~1e-6 per token over ≤ 8 tokens: 1e-4 (1e-3 for the random tables, |L| ≲ 8).
        for (int i = 0; i < 3; ++i) {
            QVERIFY(std::abs(scores[0].requests[size_t(i)].logLikelihood + bytes[i] * kLog128) < 1e-4);
            QCOMPARE(scores[0].requests[size_t(i)].tokens, bytes[i]);
        }
        const auto r = eval::taskMetrics(t, scores);
        QCOMPARE(r.metrics.size(), size_t(2));
        QCOMPARE(r.metrics[0].metric, std::string("acc"));
        QCOMPARE(r.metrics[0].value, 0.0);
        QCOMPARE(r.metrics[1].metric, std::string("acc_norm"));
        QCOMPARE(r.metrics[1].value, 1.0);
        QVERIFY(std::isnan(r.metrics[0].stderror)); // one document: no sample standard deviation
        QCOMPARE(r.headline(), 1.0);
    }

    // Multiple choice with a non-uniform table, the log-likelihoods worked by hand: after
    // "Q:", " xy" costs log p(' '|':') + log p(x|' ') + log p(y|x) with p(y|x) = e^5 / (127 + e^5)
    // and the rest 1/128; " yx" gets 1/128 for each of its three tokens.
    void multipleChoiceByHand() {
        auto L = at::zeros({kVocab, kVocab}, at::kDouble);
        L['x']['y'] = 5;
        const auto model = bigramModel(L);
        const std::vector<eval::ZeroShotDoc> docs = {choiceDoc("Q:", {"xy", "yx"}, 0)};
        const auto s = eval::scoreDocuments(model, m_tok, docs, {});
        const double xy = -2 * kLog128 + std::log(std::exp(5.0) / (127 + std::exp(5.0)));
        QVERIFY2(std::abs(s[0].requests[0].logLikelihood - xy) < 1e-4, qPrintable(QString::number(s[0].requests[0].logLikelihood)));
        QVERIFY(std::abs(s[0].requests[1].logLikelihood + 3 * kLog128) < 1e-4);
        // The same against the float64 chain of the table for random tables and several documents
        // in one batch (rows of different lengths padded together).
        at::manual_seed(7);
        const auto R = at::randn({kVocab, kVocab}, at::TensorOptions().dtype(at::kDouble)).mul(2);
        const auto random = bigramModel(R);
        const std::vector<eval::ZeroShotDoc> many = {choiceDoc("Question: why?\nAnswer:", {"because", "no", "it is"}, 0),
                                                     choiceDoc("ab", {"c", "dd"}, 1),
                                                     choiceDoc("Long context here.", {"x y z w", "v"}, 0)};
        eval::ZeroShotOptions o;
        for (int batchTokens : {1, 4096}) { // one document a forward, then all in one
            o.batchTokens = batchTokens;
            const auto got = eval::scoreDocuments(random, m_tok, many, o);
            for (size_t d = 0; d < many.size(); ++d)
                for (size_t i = 0; i < many[d].continuations.size(); ++i) {
                    const double want = bigramLogLikelihood(R, many[d].contexts[0], many[d].continuations[i]);
                    QVERIFY2(std::abs(got[d].requests[i].logLikelihood - want) < 1e-3,
                             qPrintable(QString("doc %1 choice %2: %3 vs %4").arg(d).arg(i).arg(got[d].requests[i].logLikelihood).arg(want)));
                }
        }
    }

    // WinoGrande's partial scoring: each option completes the context, the shared continuation is
    // scored. L[x][' '] = 3 makes " cd." likelier after "ab x": ll = log(e^3 / (127 + e^3)) -
    // 3 log128 vs -4 log128 after "ab y"; option 1 wins, gold "1" -> acc 1, gold "2" -> acc 0.
    void winograndePartialScoring() {
        const QString path = writeFile(m_tmp, "winogrande.jsonl",
                                       "{\"sentence\": \"ab _ cd.\", \"option1\": \"x\", \"option2\": \"y\", \"answer\": \"1\"}\n"
                                       "{\"sentence\": \"ab _ cd.\", \"option1\": \"x\", \"option2\": \"y\", \"answer\": \"2\"}\n");
        const auto t = eval::readZeroShotTask("winogrande", path.toStdString());
        QCOMPARE(t.docs.size(), size_t(2));
        QCOMPARE(t.docs[0].contexts, (std::vector<std::string>{"ab x", "ab y"}));
        QCOMPARE(t.docs[0].continuations, (std::vector<std::string>{" cd."}));
        QCOMPARE(t.docs[1].gold, 1);
        auto L = at::zeros({kVocab, kVocab}, at::kDouble);
        L['x'][' '] = 3;
        const auto s = eval::scoreDocuments(bigramModel(L), m_tok, t.docs, {});
        const double x = std::log(std::exp(3.0) / (127 + std::exp(3.0))) - 3 * kLog128;
        QVERIFY(std::abs(s[0].requests[0].logLikelihood - x) < 1e-4);
        QVERIFY(std::abs(s[0].requests[1].logLikelihood + 4 * kLog128) < 1e-4);
        const auto r = eval::taskMetrics(t, s);
        QCOMPARE(r.metrics.size(), size_t(1)); // acc only
        QCOMPARE(r.metrics[0].value, 0.5);
        QCOMPARE(r.metrics[0].stderror, 0.5); // sample std sqrt(0.5) / sqrt(2); QCOMPARE on doubles: 1e-12 relative
    }

    // LAMBADA: the whole last word must be the greedy prediction, token by token. "aa bcd": the
    // table makes ' ' after 'a', 'b' after ' ', 'c' after 'b' and 'd' after 'c' the argmax (4 vs
    // 0), so the 4-token word is greedy; "aa bce" misses at its last token. Perplexity =
    // exp(-mean ll) with ll = 4 log q (q = e^4 / (127 + e^4)) and 3 log q + log(1 / (127 + e^4)).
    void lambadaMultiTokenWord() {
        const QString path = writeFile(m_tmp, "lambada.jsonl", "{\"text\": \"aa bcd\"}\n{\"text\": \"aa bce\"}\n");
        const auto t = eval::readZeroShotTask("lambada_openai", path.toStdString());
        QCOMPARE(t.docs[0].contexts[0], std::string("aa"));
        QCOMPARE(t.docs[0].continuations[0], std::string(" bcd"));
        auto L = at::zeros({kVocab, kVocab}, at::kDouble);
        L['a'][' '] = 4, L[' ']['b'] = 4, L['b']['c'] = 4, L['c']['d'] = 4;
        const auto s = eval::scoreDocuments(bigramModel(L), m_tok, t.docs, {});
        QCOMPARE(s[0].requests[0].tokens, 4);
        QVERIFY(s[0].requests[0].greedy);
        QVERIFY(!s[1].requests[0].greedy);
        const double logq = std::log(std::exp(4.0) / (127 + std::exp(4.0)));
        const double ll0 = 4 * logq, ll1 = 3 * logq + std::log(1 / (127 + std::exp(4.0)));
        QVERIFY(std::abs(s[0].requests[0].logLikelihood - ll0) < 1e-4);
        QVERIFY(std::abs(s[1].requests[0].logLikelihood - ll1) < 1e-4);
        const auto r = eval::taskMetrics(t, s);
        QCOMPARE(r.metrics[0].metric, std::string("acc"));
        QCOMPARE(r.metrics[0].value, 0.5);
        QCOMPARE(r.metrics[1].metric, std::string("perplexity"));
        // exp(−mean ll): its relative error is the ll error, ≤ 1e-4 as above
        const double ppl = std::exp(-(ll0 + ll1) / 2);
        QVERIFY(std::abs(r.metrics[1].value / ppl - 1) < 1e-4);
        QVERIFY(std::abs(r.metrics[1].stderror / (ppl * std::abs(ll0 - ll1) / 2) - 1) < 1e-4); // delta method
    }

    // A context longer than the model: cut on the left as the harness cuts, and counted. The
    // bigram's log-likelihoods do not change (the context's last byte stays).
    void longContextIsCutOnTheLeft() {
        at::manual_seed(8);
        const auto R = at::randn({kVocab, kVocab}, at::TensorOptions().dtype(at::kDouble));
        const std::vector<eval::ZeroShotDoc> docs = {choiceDoc(std::string(100, 'k') + ":", {"ab", "cde"}, 0),
                                                     choiceDoc("short:", {"ab", "cde"}, 0)};
        const auto s = eval::scoreDocuments(bigramModel(R), m_tok, docs, {});
        QVERIFY(s[0].truncated);
        QVERIFY(!s[1].truncated);
        for (size_t i = 0; i < 2; ++i)
            QVERIFY(std::abs(s[0].requests[i].logLikelihood - bigramLogLikelihood(R, docs[0].contexts[0], docs[0].continuations[i])) <
                    1e-3);
        eval::ZeroShotTask t;
        t.name = "test";
        t.docs = docs;
        QCOMPARE(eval::taskMetrics(t, s).truncated, 1);
    }

    // Real attention: the packed rows (context once, choices seeing only it and themselves, own
    // positions) against each request through a plain forward, log_softmax in float64, the
    // continuation's positions summed (the harness's computation); short windows force the
    // harness's left truncation for some requests.
    void packedRowsMatchPlainForward_data() {
        QTest::addColumn<int>("maxLength");
        QTest::newRow("packed") << 0;
        QTest::newRow("cut on the left") << 24;
    }
    void packedRowsMatchPlainForward() {
        QFETCH(int, maxLength);
        const QString dir = test::demoModelDir();
        const auto ck = model::Checkpoint::load(dir.toStdString());
        const model::LlamaModel m(ck);
        const auto tok = tokenizer::Tokenizer::loadFromDir(dir.toStdString());
        std::vector<eval::ZeroShotDoc> docs = {
            choiceDoc("Question: Which way is the river flowing?\nAnswer:", {"north", "to the south", "east, then west"}, 0),
            choiceDoc("The cat sat", {"on the mat.", "down", "quietly by the door"}, 0)};
        eval::ZeroShotDoc wino; // two contexts, one continuation
        wino.contexts = {"The box did not fit in the bag because the box", "The box did not fit in the bag because the bag"};
        wino.continuations = {" was too big."};
        wino.choices = {"box", "bag"};
        docs.push_back(wino);
        eval::ZeroShotOptions o;
        o.maxLength = maxLength;
        const auto s = eval::scoreDocuments(m, *tok, docs, o);
        const int limit = maxLength > 0 ? maxLength : ck.config().maxPositions;
        int cut = 0;
        for (size_t d = 0; d < docs.size(); ++d) {
            const bool many = docs[d].contexts.size() > 1;
            const size_t n = many ? docs[d].contexts.size() : docs[d].continuations.size();
            for (size_t i = 0; i < n; ++i) {
                const auto [ctx, cont] = eval::encodePair(*tok, docs[d].contexts[many ? i : 0],
                                                          docs[d].continuations[many ? 0 : i], false);
                std::vector<int64_t> all(ctx.begin(), ctx.end());
                all.insert(all.end(), cont.begin(), cont.end());
                const int64_t keep = std::min<int64_t>(int64_t(all.size()), limit + 1);
                cut += keep < int64_t(all.size()) ? 1 : 0;
                const auto ids = at::tensor(std::vector<int64_t>(all.end() - keep, all.end() - 1), at::kLong).unsqueeze(0);
                const auto logp = at::log_softmax(m.forward(ids)[0].to(at::kDouble), -1);
                double want = 0;
                const int64_t T = ids.size(1), C = int64_t(cont.size());
                for (int64_t j = 0; j < C; ++j) want += logp[T - C + j][cont[size_t(j)]].item<double>();
                // Two float32 forwards of other shapes (packed rows vs one request): each log-prob off
                // by ~1e-6 of the largest logit (tst_llamamodel's measured size), summed over C tokens.
                QVERIFY2(std::abs(s[d].requests[i].logLikelihood - want) < 2e-4,
                         qPrintable(QString("doc %1 request %2: %3 vs %4").arg(d).arg(i).arg(s[d].requests[i].logLikelihood).arg(want)));
            }
        }
        QCOMPARE(cut > 0, maxLength > 0); // the short window did cut some
    }

    // The harness's default templates, from rows written here in each file's format.
    void templates_data() {
        QTest::addColumn<QString>("task");
        QTest::addColumn<QString>("file");
        QTest::addColumn<QString>("text");
        QTest::addColumn<QString>("context");
        QTest::addColumn<QStringList>("continuations");
        QTest::addColumn<int>("gold");
        QTest::newRow("arc") << "arc_easy" << "arc.jsonl"
                             << R"({"id":"x","question":{"stem":"What is hot?","choices":[{"text":"ice","label":"1"},{"text":"the sun","label":"2"}]},"answerKey":"2"})"
                             << "Question: What is hot?\nAnswer:" << QStringList{" ice", " the sun"} << 1;
        QTest::newRow("boolq") << "boolq" << "boolq.jsonl"
                               << R"({"question":"is water wet","passage":"Water -- It is wet.","idx":0,"label":"true"})"
                               << "Water -- It is wet.\nQuestion: is water wet?\nAnswer:" << QStringList{" no", " yes"} << 1;
        QTest::newRow("boolq, JSON boolean") << "boolq" << "boolq2.jsonl"
                                             << R"({"question":"q","passage":"p","label":false})"
                                             << "p\nQuestion: q?\nAnswer:" << QStringList{" no", " yes"} << 0;
        QTest::newRow("hellaswag") << "hellaswag" << "hellaswag.txt"
                                   << "Cooking: A man cuts an onion. he\n2\nsings.\ncries.\n  slices  it [step] thin.\ndances.\n"
                                   << "Cooking: A man cuts an onion. he" << QStringList{" sings.", " cries.", " slices it thin.", " dances."} << 2;
        QTest::newRow("piqa") << "piqa" << "valid.jsonl" << R"({"goal":"Open a jar","sol1":"twist the lid","sol2":"shout"})"
                              << "Question: Open a jar\nAnswer:" << QStringList{" twist the lid", " shout"} << 1;
    }
    void templates() {
        QFETCH(QString, task);
        QFETCH(QString, file);
        QFETCH(QString, text);
        QFETCH(QString, context);
        QFETCH(QStringList, continuations);
        QFETCH(int, gold);
        QTemporaryDir dir;
        const QString path = writeFile(dir, file, text.toStdString() + "\n");
        if (task == "piqa") writeFile(dir, "valid-labels.lst", "1\n");
        const auto t = eval::readZeroShotTask(task.toStdString(), path.toStdString());
        QCOMPARE(t.docs.size(), size_t(1));
        QCOMPARE(QString::fromStdString(t.docs[0].contexts.at(0)), context);
        QStringList got;
        for (const auto& c : t.docs[0].continuations) got << QString::fromStdString(c);
        QCOMPARE(got, continuations);
        QCOMPARE(t.docs[0].gold, gold);
    }

    // A file that does not match its format: the file, line and field named; nothing scored.
    void badTaskFiles_data() {
        QTest::addColumn<QString>("task");
        QTest::addColumn<QString>("text");
        QTest::addColumn<QString>("message");
        const QString arcOk = R"({"question":{"stem":"s","choices":[{"text":"a","label":"A"}]},"answerKey":"A"})";
        QTest::newRow("arc: missing stem") << "arc_easy" << arcOk + "\n" + R"({"question":{"choices":[]},"answerKey":"A"})"
                                           << ":2: field 'stem' is missing";
        QTest::newRow("arc: answer not a label") << "arc_challenge" << R"({"question":{"stem":"s","choices":[{"text":"a","label":"A"}]},"answerKey":"B"})"
                                                 << ":1: answerKey 'B' is not among";
        QTest::newRow("arc: empty choices") << "arc_easy" << R"({"question":{"stem":"s","choices":[]},"answerKey":"A"})"
                                            << ":1: empty choice list";
        QTest::newRow("boolq: label") << "boolq" << R"({"question":"q","passage":"p","label":"maybe"})" << ":1: field 'label' is not true/false";
        QTest::newRow("lambada: one word") << "lambada_openai" << R"({"text":"word"})" << ":1: field 'text' has no last word";
        QTest::newRow("lambada: not JSON") << "lambada_openai" << "{\"text\": " << ":1: not a JSON object";
        QTest::newRow("winogrande: answer") << "winogrande" << R"({"sentence":"a _ b","option1":"x","option2":"y","answer":"3"})"
                                            << ":1: field 'answer' is '3', not 1 or 2";
        QTest::newRow("winogrande: no blank") << "winogrande" << R"({"sentence":"a b","option1":"x","option2":"y","answer":"1"})"
                                              << ":1: field 'sentence' has no '_'";
        QTest::newRow("hellaswag: label") << "hellaswag" << "ctx\n7\na\nb\nc\nd" << ":2: label '7' is not 0-3";
        QTest::newRow("hellaswag: empty ending") << "hellaswag" << "ctx\n1\na\n \nc\nd" << ":4: ending 1 is empty";
        QTest::newRow("hellaswag: lines") << "hellaswag" << "ctx\n1\na\nb" << "not 6 a document";
        QTest::newRow("piqa: label") << "piqa" << R"({"goal":"g","sol1":"a","sol2":"b"})" << "label '5' is not 0 or 1";
        QTest::newRow("unknown task") << "mmlu" << "" << "unknown zero-shot task 'mmlu'";
    }
    void badTaskFiles() {
        QFETCH(QString, task);
        QFETCH(QString, text);
        QFETCH(QString, message);
        QTemporaryDir dir;
        const QString path = writeFile(dir, task == "piqa" ? "valid.jsonl" : "task.jsonl", text.toStdString() + "\n");
        if (task == "piqa") writeFile(dir, "valid-labels.lst", "5\n");
        const QString e = test::errorOf([&] { eval::readZeroShotTask(task.toStdString(), path.toStdString()); });
        QVERIFY2(e.contains(message), qPrintable(e));
        if (task != "mmlu" && task != "piqa") QVERIFY2(e.startsWith(path), qPrintable(e)); // the file first
    }

    void taskList() {
        QCOMPARE(eval::parseTaskList("arc_easy, piqa,arc_easy"), (std::vector<std::string>{"arc_easy", "piqa"}));
        QVERIFY(test::errorOf([] { eval::parseTaskList("arc_easy,copa"); }).contains("known: arc_easy"));
        QVERIFY(test::errorOf([] { eval::parseTaskList(""); }).contains("no zero-shot task"));
    }

    // The real files (../shared/data/zeroshot): every document read, the counts their
    // PROVENANCE.txt states (the published split sizes).
    void realFiles_data() {
        QTest::addColumn<QString>("task");
        QTest::addColumn<int>("docs");
        QTest::addColumn<int>("choices");
        QTest::newRow("arc_easy") << "arc_easy" << 2376 << 0;
        QTest::newRow("arc_challenge") << "arc_challenge" << 1172 << 0;
        QTest::newRow("piqa") << "piqa" << 1838 << 2;
        QTest::newRow("boolq") << "boolq" << 3270 << 2;
        QTest::newRow("hellaswag") << "hellaswag" << 10042 << 4;
        QTest::newRow("lambada_openai") << "lambada_openai" << 5153 << 1;
    }
    void realFiles() {
        QFETCH(QString, task);
        QFETCH(int, docs);
        QFETCH(int, choices);
        if (!QFile::exists(test::dataDir() + "/zeroshot")) LATMIX_DATA_SKIP("zero-shot data not found (LATMIX_DATA_DIR)");
        const auto t = eval::loadZeroShotTask(task.toStdString(), test::dataDir().toStdString());
        QCOMPARE(int(t.docs.size()), docs);
        for (const auto& d : t.docs) {
            if (choices > 0) QCOMPARE(int(d.continuations.size()), choices);
            QVERIFY(d.gold >= 0 && d.gold < int(d.continuations.size()));
        }
        QCOMPARE(int(eval::loadZeroShotTask(task.toStdString(), test::dataDir().toStdString(), 7).docs.size()), 7);
        if (task == "boolq") { // 2033 true / 1237 false (PROVENANCE.txt)
            int yes = 0;
            for (const auto& d : t.docs) yes += d.gold;
            QCOMPARE(yes, 2033);
        }
    }
};

QTEST_GUILESS_MAIN(TestZeroShot)
#include "tst_zeroshot.moc"
