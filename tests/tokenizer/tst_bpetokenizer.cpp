// BpeTokenizer on small tokenizer.json files written here, with the expected ids worked out by
// hand: byte-level BPE (GPT-2's ByteLevel regex pre-tokenizer, and Llama 3's Split regex +
// ByteLevel), both merge spellings, added tokens inside the text (special, lstrip, rstrip,
// single_word), non-ASCII text through the bytes-to-unicode alphabet; and a Metaspace
// (SentencePiece-style) tokenizer. Every expectation here was also checked against Hugging Face
// tokenizers 0.23 on the same JSON (outside the test suite, which does not depend on it).
#include "tokenizer/BpeTokenizer.h"

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <stdexcept>

using namespace latmix::tokenizer;

namespace {

// GPT-2's bytes_to_unicode, written out independently of the library: printable Latin-1 bytes
// keep their code point, the other 68 get 256, 257, ... in byte order.
QString byteChar(int b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    if (printable) return QString(QChar(b));
    int n = 0;
    for (int k = 0; k < b; ++k) {
        const bool p = (k >= 0x21 && k <= 0x7E) || (k >= 0xA1 && k <= 0xAC) || (k >= 0xAE && k <= 0xFF);
        if (!p) ++n;
    }
    return QString(QChar(256 + n));
}

QString show(const std::vector<int>& ids) {
    QStringList s;
    for (int id : ids) s << QString::number(id);
    return "[" + s.join(", ") + "]";
}

const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

void writeJson(const QString& path, const QJsonObject& o) {
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(QJsonDocument(o).toJson());
}

QJsonObject addedToken(int id, const QString& content, bool special, bool lstrip = false, bool rstrip = false,
                       bool singleWord = false) {
    return QJsonObject{{"id", id},         {"content", content},   {"single_word", singleWord}, {"lstrip", lstrip},
                       {"rstrip", rstrip}, {"normalized", false}, {"special", special}};
}

// The byte-level tokenizer: ids 0..255 are the byte symbols (id = byte value), then
//   rank  merge        -> id          rank  merge          -> id
//   0     h e          -> 256 he      6     Ġw or          -> 262 Ġwor
//   1     l l          -> 257 ll      7     l d            -> 263 ld
//   2     Ġ w          -> 258 Ġw      8     Ġwor ld        -> 264 Ġworld
//   3     he ll        -> 259 hell    9     Ã ©            -> 265 "é" as bytes C3 A9
//   4     hell o       -> 260 hello   10    r l            -> 266 rl
//   5     o r          -> 261 or      11    1 2            -> 267 12
// and added tokens outside model.vocab (as HF allows): <|endoftext|> = 268 (special),
// <mask> = 269 (special, lstrip), <|im_start|> = 270 (special, rstrip), "wor" = 271 (not
// special, single_word).
QJsonObject byteLevelTokenizer(const QString& style, bool arrayMerges) {
    QJsonObject vocab;
    for (int b = 0; b < 256; ++b) vocab.insert(byteChar(b), b);
    const QString sp = byteChar(' ');
    const QList<QPair<QString, QString>> merges = {
        {"h", "e"},       {"l", "l"}, {sp, "w"},  {"he", "ll"},  {"hell", "o"},  {"o", "r"},
        {sp + "w", "or"}, {"l", "d"}, {sp + "wor", "ld"}, {byteChar(0xC3), byteChar(0xA9)}, {"r", "l"}, {"1", "2"}};
    QJsonArray mergeList;
    int id = 256;
    for (const auto& [a, b] : merges) {
        vocab.insert(a + b, id++);
        if (arrayMerges) mergeList.append(QJsonArray{a, b});
        else mergeList.append(a + " " + b);
    }
    QJsonObject pre;
    if (style == "gpt2") {
        pre = QJsonObject{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
    } else {
        const QJsonObject split{{"type", "Split"},
                                {"pattern", QJsonObject{{"Regex", kLlama3Pattern}}},
                                {"behavior", "Isolated"},
                                {"invert", false}};
        const QJsonObject bl{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}};
        pre = QJsonObject{{"type", "Sequence"}, {"pretokenizers", QJsonArray{split, bl}}};
    }
    return QJsonObject{
        {"version", "1.0"},
        {"added_tokens", QJsonArray{addedToken(268, "<|endoftext|>", true), addedToken(269, "<mask>", true, true),
                                    addedToken(270, "<|im_start|>", true, false, true),
                                    addedToken(271, "wor", false, false, false, true)}},
        {"normalizer", QJsonValue::Null},
        {"pre_tokenizer", pre},
        {"post_processor", QJsonObject{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}},
        {"decoder", QJsonObject{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
        {"model", QJsonObject{{"type", "BPE"},
                              {"dropout", QJsonValue::Null},
                              {"unk_token", QJsonValue::Null},
                              {"continuing_subword_prefix", QJsonValue::Null},
                              {"end_of_word_suffix", QJsonValue::Null},
                              {"fuse_unk", false},
                              {"byte_fallback", false},
                              {"vocab", vocab},
                              {"merges", mergeList}}}};
}

} // namespace

class TestBpeTokenizer : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;

    QString write(const QString& name, const QJsonObject& o) {
        QDir().mkpath(m_tmp.filePath(name));
        const QString path = m_tmp.filePath(name + "/tokenizer.json");
        writeJson(path, o);
        return path;
    }

private slots:
    void byteLevel_data() {
        QTest::addColumn<QString>("style");
        QTest::addColumn<QString>("text");
        QTest::addColumn<QList<int>>("ids");
        QTest::addColumn<QString>("decoded"); // special tokens are skipped, the rest round-trips
        for (const QString style : {"gpt2", "llama3"}) {
            const auto row = [&](const char* name) -> QTestData& { return QTest::newRow(qPrintable(style + ": " + name)) << style; };
            // "hello": h+e (rank 0), l+l (1), he+ll (3), hell+o (4). " world" (Ġ w o r l d):
            // Ġ+w (2), o+r (5), Ġw+or (6), l+d (7), Ġwor+ld (8).
            row("words") << "hello world" << QList<int>{260, 264} << "hello world";
            // The special token is cut out before pre-tokenization; "café" is c a f + the
            // two byte symbols of é (Ã ©, bytes C3 A9), merged by rank 9.
            row("special token and accent") << QString::fromUtf8("hello<|endoftext|>café")
                                            << QList<int>{260, 268, 99, 97, 102, 265} << QString::fromUtf8("hellocafé");
            // U+1F642 is F0 9F 99 82: four byte symbols, no merges; the space is byte 32.
            row("emoji") << QString::fromUtf8(" 🙂") << QList<int>{32, 240, 159, 153, 130} << QString::fromUtf8(" 🙂");
            // Both regexes give "a", " ", " b", "\n": \s+(?!\S) leaves the last space to " b".
            row("whitespace") << "a  b\n" << QList<int>{97, 32, 32, 98, 10} << "a  b\n";
            // Two l+l pairs of equal rank: the leftmost merges first -> ll, l.
            row("leftmost on equal rank") << "lll" << QList<int>{257, 108} << "lll";
            // r+l (rank 10) is left of l+l (rank 1): the lower rank wins -> r, ll.
            row("rank before position") << "rll" << QList<int>{114, 257} << "rll";
            row("empty") << "" << QList<int>{} << "";
            // lstrip: <mask> takes the space before it.
            row("lstrip") << "a <mask>b" << QList<int>{97, 269, 98} << "ab";
            // rstrip: <|im_start|> takes the spaces after it.
            row("rstrip") << "<|im_start|>  hello" << QList<int>{270, 260} << "hello";
            // single_word: "wor" counts only between non-word characters, so not inside "world";
            // "world" is w, o+r (5), l+d (7); the non-special token decodes as its text.
            row("single word") << "wor world" << QList<int>{271, 264} << "wor world";
            row("single word inside a word") << "world wor" << QList<int>{119, 261, 263, 32, 271} << "world wor";
        }
        // GPT-2 keeps " ?\p{N}+" together: 1+2 twice. Llama 3 cuts digits in threes: "121", "2".
        QTest::newRow("gpt2: digits") << "gpt2" << "1212" << QList<int>{267, 267} << "1212";
        QTest::newRow("llama3: digits") << "llama3" << "1212" << QList<int>{267, 49, 50} << "1212";
    }
    void byteLevel() {
        QFETCH(QString, style);
        QFETCH(QString, text);
        QFETCH(QList<int>, ids);
        QFETCH(QString, decoded);
        const std::vector<int> want(ids.begin(), ids.end());
        for (const bool arrayMerges : {false, true}) { // "a b" (tokenizers < 0.20) and [a, b]
            const BpeTokenizer tok(write(style + (arrayMerges ? "-array" : "-string"), byteLevelTokenizer(style, arrayMerges)).toStdString());
            const auto got = tok.encode(text.toStdString(), false);
            QCOMPARE(show(got), show(want));
            QCOMPARE(QString::fromStdString(tok.decode(got)), decoded);
        }
    }

    void byteLevelProperties() {
        const QString path = write("props", byteLevelTokenizer("gpt2", false));
        BpeTokenizer tok(path.toStdString());
        QCOMPARE(QString::fromStdString(tok.kind()), QStringLiteral("bpe-bytelevel"));
        QCOMPARE(tok.vocabSize(), 272);
        QCOMPARE(tok.bosId(), -1); // GPT-2 style: no BOS in the template, none named
        QCOMPARE(tok.eosId(), 268);
        QVERIFY(!tok.addsBosByDefault());
        QCOMPARE(show(tok.encode("hello", true)), show({260})); // no BOS to add
        QCOMPARE(tok.mergeCount(), std::size_t(12));
        QCOMPARE(QString::fromStdString(tok.idToToken(258)), byteChar(' ') + "w");
        // Invalid UTF-8 is read as U+FFFD (EF BF BD) first, then byte-level encoded.
        QCOMPARE(show(tok.encode("h\xFF", false)), show({104, 239, 191, 189}));

        // tokenizer_config.json beside it names BOS and turns add_bos_token on.
        QFile cfg(QFileInfo(path).absolutePath() + "/tokenizer_config.json");
        QVERIFY(cfg.open(QIODevice::WriteOnly));
        cfg.write(R"({"add_bos_token": true, "bos_token": {"content": "<|endoftext|>"}, "eos_token": "<|endoftext|>"})");
        cfg.close();
        BpeTokenizer withCfg(path.toStdString());
        QCOMPARE(withCfg.bosId(), 268);
        QVERIFY(withCfg.addsBosByDefault());
        QCOMPARE(show(withCfg.encode("hello", true)), show({268, 260}));
    }

    // SentencePiece-style through a Metaspace pre-tokenizer (prepend_scheme "first", split) and
    // the Metaspace decoder. Vocab: <unk> 0, ▁ 1, a 2, b 3, ▁a 4, ab 5, ▁ab 6; merges in rank
    // order ▁ a, a b, ▁a b; added special token <s> 7; fuse_unk, no byte fallback.
    void metaspace_data() {
        QTest::addColumn<QString>("text");
        QTest::addColumn<QList<int>>("ids");
        QTest::addColumn<QString>("decoded");
        // "▁ab▁ab" split before each ▁; in "▁ab", ▁+a (rank 0) then ▁a+b (rank 2).
        QTest::newRow("two words") << "ab ab" << QList<int>{6, 6} << "ab ab";
        // No pair of "▁ba" is a merge.
        QTest::newRow("no merge") << "ba" << QList<int>{1, 3, 2} << "ba";
        // c is not in the vocab: one <unk> for the run of two (fuse_unk).
        QTest::newRow("fused unknown") << "cc" << QList<int>{1, 0} << "<unk>";
        // After <s> the text no longer starts the input: no "▁" is prepended (scheme "first"),
        // so "ab" is a+b (rank 1).
        QTest::newRow("after special token") << "<s>ab" << QList<int>{7, 5} << "ab";
    }
    void metaspace() {
        QFETCH(QString, text);
        QFETCH(QList<int>, ids);
        QFETCH(QString, decoded);
        const QString sp = QString::fromUtf8("▁");
        const QJsonObject vocab{{"<unk>", 0}, {sp, 1}, {"a", 2}, {"b", 3}, {sp + "a", 4}, {"ab", 5}, {sp + "ab", 6}};
        const QJsonObject meta{{"type", "Metaspace"}, {"replacement", sp}, {"prepend_scheme", "first"}, {"split", true}};
        const QJsonObject o{
            {"added_tokens", QJsonArray{addedToken(7, "<s>", true)}},
            {"pre_tokenizer", meta},
            {"decoder", meta},
            {"model", QJsonObject{{"type", "BPE"}, {"unk_token", "<unk>"}, {"fuse_unk", true}, {"byte_fallback", false},
                                  {"vocab", vocab}, {"merges", QJsonArray{sp + " a", "a b", sp + "a b"}}}}};
        const BpeTokenizer tok(write("metaspace", o).toStdString());
        QCOMPARE(QString::fromStdString(tok.kind()), QStringLiteral("bpe-sentencepiece"));
        const auto got = tok.encode(text.toStdString(), false);
        QCOMPARE(show(got), show(std::vector<int>(ids.begin(), ids.end())));
        QCOMPARE(QString::fromStdString(tok.decode(got)), decoded);
        QCOMPARE(tok.bosId(), 7); // named <s>, though no template adds it
        QVERIFY(!tok.addsBosByDefault());
    }

    // Token ids the file gets wrong are refused, naming the file and the field: a fraction (its
    // conversion to int was undefined behaviour, found by tests/fuzz/fuzz_tokenizer_json), an id
    // past int (it wrapped into another token), a negative one, and one far beyond a dense
    // numbering (the id table would take that many slots).
    void refusesBadIds_data() {
        QTest::addColumn<QString>("where"); // vocab | added
        QTest::addColumn<double>("id");
        QTest::addColumn<QString>("says");
        QTest::newRow("vocab fraction") << "vocab" << 2.5e89 << "is not a token id";
        QTest::newRow("vocab past int") << "vocab" << 4294967297.0 << "4294967297 is not a token id";
        QTest::newRow("vocab negative") << "vocab" << -3.0 << "-3 is not a token id";
        QTest::newRow("vocab sparse") << "vocab" << 2000000000.0 << "id 2000000000 is far beyond its 269 tokens";
        QTest::newRow("added fraction") << "added" << 12.5 << "added_tokens id: 12.5 is not a token id";
        QTest::newRow("added past int") << "added" << 1e12 << "added_tokens id: 1000000000000 is not a token id";
    }
    void refusesBadIds() {
        QFETCH(QString, where);
        QFETCH(double, id);
        QFETCH(QString, says);
        QJsonObject o = byteLevelTokenizer("gpt2", false);
        // Whole numbers go in as JSON integers, the others as floats.
        const QJsonValue v = std::floor(id) == id && std::abs(id) < 9e15 ? QJsonValue(qint64(id)) : QJsonValue(id);
        if (where == "vocab") {
            QJsonObject model = o["model"].toObject();
            QJsonObject vocab = model["vocab"].toObject();
            vocab.insert("zz", v);
            model["vocab"] = vocab;
            o["model"] = model;
        } else {
            QJsonArray added = o["added_tokens"].toArray();
            QJsonObject t = added[0].toObject();
            t["id"] = v;
            added[0] = t;
            o["added_tokens"] = added;
        }
        const QString path = write(QString("bad-ids-") + QTest::currentDataTag(), o);
        try {
            BpeTokenizer tok(path.toStdString());
            QFAIL("no error");
        } catch (const std::runtime_error& e) {
            const QString msg = QString::fromUtf8(e.what());
            QVERIFY2(msg.startsWith(path + ": "), qPrintable(msg));
            QVERIFY2(msg.contains(says), qPrintable(msg));
        }
    }
};

QTEST_APPLESS_MAIN(TestBpeTokenizer)
#include "tst_bpetokenizer.moc"
