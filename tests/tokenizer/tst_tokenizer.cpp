// Tokenizers on the real vocabularies in LATMIX_DATA_DIR: the tokenizer.json that
// convertSentencePieceModel writes from Llama 2's tokenizer.model must give libsentencepiece's
// ids (the reference) on every string; tok512.bin converted by convertLlama2cTokenizer must give
// the ids worked out by hand from its vocabulary and the reference numbers in PROVENANCE.md;
// loading picks the right implementation and fails with messages that name the file.
#include "tokenizer/BpeTokenizer.h"
#include "tokenizer/SentencePieceBpeJson.h"
#include "tokenizer/SentencePieceTokenizer.h"
#include "tokenizer/Tokenizer.h"

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include "TestData.h" // after ATen: Qt's slots macro breaks ATen headers

using namespace latmix::tokenizer;

namespace {

using latmix::test::dataDir;
QString llama2Model() { return dataDir() + "/models/llama2-tokenizer-32k/tokenizer.model"; }
QString tok512Bin() { return dataDir() + "/models/stories260K/tok512.bin"; }
QString wikiRaw() { return dataDir() + "/wikitext-2/wiki.test.raw"; }

std::string readAll(const QString& path) {
    std::ifstream in(path.toStdString(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

QString show(const std::vector<int>& ids) {
    QStringList s;
    for (int id : ids) s << QString::number(id);
    return "[" + s.join(", ") + "]";
}

// First index where the two id lists differ, with some context, or an empty string.
QString firstDifference(const std::vector<int>& got, const std::vector<int>& want) {
    std::size_t i = 0;
    while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
    if (i == got.size() && i == want.size()) return {};
    const auto slice = [i](const std::vector<int>& v) {
        const std::size_t b = i > 3 ? i - 3 : 0;
        return show(std::vector<int>(v.begin() + static_cast<long>(std::min(b, v.size())),
                                     v.begin() + static_cast<long>(std::min(i + 5, v.size()))));
    };
    return QString("first difference at %1 (sizes %2 vs %3): got %4 want %5")
        .arg(i).arg(got.size()).arg(want.size()).arg(slice(got), slice(want));
}

} // namespace

class TestTokenizer : public QObject {
    Q_OBJECT

    QTemporaryDir m_tmp;
    std::unique_ptr<SentencePieceTokenizer> m_sp; // reference
    std::unique_ptr<BpeTokenizer> m_llama2;       // converted from the same tokenizer.model
    std::unique_ptr<BpeTokenizer> m_tok512;       // converted from tok512.bin

    // Converted once, on first use; skips the calling test when the data is absent.
    bool llama2() {
        if (m_llama2) return true;
        if (!QFile::exists(llama2Model())) return false;
        const QString dir = m_tmp.filePath("llama2");
        QDir().mkpath(dir);
        convertSentencePieceModel(llama2Model().toStdString(), (dir + "/tokenizer.json").toStdString());
        m_sp = std::make_unique<SentencePieceTokenizer>(llama2Model().toStdString());
        m_llama2 = std::make_unique<BpeTokenizer>((dir + "/tokenizer.json").toStdString());
        return true;
    }
    bool tok512() {
        if (m_tok512) return true;
        if (!QFile::exists(tok512Bin())) return false;
        const QString dir = m_tmp.filePath("tok512");
        QDir().mkpath(dir);
        convertLlama2cTokenizer(tok512Bin().toStdString(), (dir + "/tokenizer.json").toStdString());
        m_tok512 = std::make_unique<BpeTokenizer>((dir + "/tokenizer.json").toStdString());
        return true;
    }

private slots:
    void initTestCase() { QVERIFY(m_tmp.isValid()); }

    // The converted tokenizer.json against libsentencepiece on tokenizer.model.
    void llama2MatchesSentencePiece_data() {
        QTest::addColumn<QString>("text");
        QTest::newRow("ascii sentence") << "The quick brown fox jumps over the lazy dog.";
        QTest::newRow("accents") << QString::fromUtf8("café naïve résumé");
        QTest::newRow("japanese") << QString::fromUtf8("日本語のテキスト");
        QTest::newRow("chinese") << QString::fromUtf8("中文");
        QTest::newRow("emoji") << QString::fromUtf8("🙂👍🏽");
        QTest::newRow("whitespace runs") << "a  b   c\t\td\n\n";
        QTest::newRow("digits") << "3.14159 2024 1,000,000";
        QTest::newRow("leading space") << " leading space";
        QTest::newRow("empty") << "";
        QTest::newRow("wikitext line")
            << QString::fromUtf8(" Robert Boulter is an English film , television and theatre actor . He had a guest "
                                 "@-@ starring role on the television series The Bill in 2000 . \n");
        // Runs of more than 16 spaces: Llama 2's whitespace pieces "▁▁".."▁×16" all score -1e9,
        // so SentencePiece's leftmost tie-break decides how the run is cut.
        QTest::newRow("long space run") << "x" + QString(37, QLatin1Char(' ')) + "y" + QString(17, QLatin1Char(' '));
        // Not added tokens, so plain text for both ("<s>" would be BOS for the tokenizer.json).
        QTest::newRow("piece-like text") << QString::fromUtf8("<0x41> \xE2\x96\x81 ▁▁x tab\tend");
        QTest::newRow("mixed scripts") << QString::fromUtf8("Привет, мир! Γειά σου κόσμε — ½ € ∑ x² ﬁ");
    }
    void llama2MatchesSentencePiece() {
        QFETCH(QString, text);
        if (!llama2()) LATMIX_DATA_SKIP(qPrintable("Llama 2 tokenizer.model not found at " + llama2Model() + " (set LATMIX_DATA_DIR)"));
        const std::string s = text.toStdString();
        const auto want = m_sp->encode(s, false);
        const auto got = m_llama2->encode(s, false);
        const QString diff = firstDifference(got, want);
        QVERIFY2(diff.isEmpty(), qPrintable(diff));
        // The visible Llama-2 BPE-with-byte-fallback round trip; "▁" itself decodes to a space.
        if (s.find("\xE2\x96\x81") == std::string::npos) {
            QCOMPARE(QString::fromStdString(m_llama2->decode(got)), text);
            QCOMPARE(QString::fromStdString(m_sp->decode(want)), text);
        } else {
            QCOMPARE(m_llama2->decode(got), m_sp->decode(want));
        }
        // BOS once, first, from both.
        const auto withBos = m_llama2->encode(s, true);
        QCOMPARE(withBos.size(), got.size() + 1);
        QCOMPARE(withBos.front(), 1);
        QCOMPARE(show(m_sp->encode(s, true)), show(withBos));
    }

    void llama2MatchesSentencePieceOnWikiTextLines() {
        if (!llama2()) LATMIX_DATA_SKIP(qPrintable("Llama 2 tokenizer.model not found at " + llama2Model() + " (set LATMIX_DATA_DIR)"));
        if (!QFile::exists(wikiRaw())) LATMIX_DATA_SKIP(qPrintable("WikiText-2 not found at " + wikiRaw() + " (set LATMIX_DATA_DIR)"));
        std::istringstream in(readAll(wikiRaw()));
        std::string line;
        int compared = 0;
        std::size_t tokens = 0;
        while (compared < 300 && std::getline(in, line)) {
            if (line.find_first_not_of(' ') == std::string::npos) continue; // blank lines are " "
            line += '\n';
            const auto want = m_sp->encode(line, false);
            const auto got = m_llama2->encode(line, false);
            const QString diff = firstDifference(got, want);
            QVERIFY2(diff.isEmpty(), qPrintable(QString("line %1: %2").arg(compared).arg(diff)));
            QCOMPARE(m_llama2->decode(got), line);
            ++compared;
            tokens += got.size();
        }
        QCOMPARE(compared, 300);
        qInfo("300 WikiText-2 lines, %zu tokens: identical ids", tokens);
    }

    // The whole test split in one call (one 1.3 MB "word": no pre-tokenizer splits it).
    void llama2MatchesSentencePieceOnWholeWikiText() {
        if (!llama2()) LATMIX_DATA_SKIP(qPrintable("Llama 2 tokenizer.model not found at " + llama2Model() + " (set LATMIX_DATA_DIR)"));
        if (!QFile::exists(wikiRaw())) LATMIX_DATA_SKIP(qPrintable("WikiText-2 not found at " + wikiRaw() + " (set LATMIX_DATA_DIR)"));
        const std::string text = readAll(wikiRaw());
        QElapsedTimer t;
        t.start();
        const auto got = m_llama2->encode(text, false);
        const qint64 bpeMs = t.restart();
        const auto want = m_sp->encode(text, false);
        const qint64 spMs = t.elapsed();
        const QString diff = firstDifference(got, want);
        QVERIFY2(diff.isEmpty(), qPrintable(diff));
        QVERIFY(m_llama2->decode(got) == text);
        qInfo("wiki.test.raw: %zu tokens, identical; BpeTokenizer %lld ms, libsentencepiece %lld ms", got.size(),
              static_cast<long long>(bpeMs), static_cast<long long>(spMs));
    }

    void llama2Properties() {
        if (!llama2()) LATMIX_DATA_SKIP(qPrintable("Llama 2 tokenizer.model not found at " + llama2Model() + " (set LATMIX_DATA_DIR)"));
        QCOMPARE(m_llama2->vocabSize(), 32000);
        QCOMPARE(m_sp->vocabSize(), 32000);
        QCOMPARE(m_llama2->bosId(), 1);
        QCOMPARE(m_llama2->eosId(), 2);
        QCOMPARE(m_sp->bosId(), 1);
        QCOMPARE(m_sp->eosId(), 2);
        QVERIFY(m_llama2->addsBosByDefault());
        QVERIFY(m_sp->addsBosByDefault());
        QCOMPARE(QString::fromStdString(m_llama2->kind()), QStringLiteral("bpe-sentencepiece"));
        QCOMPARE(QString::fromStdString(m_sp->kind()), QStringLiteral("sentencepiece"));
        // Control tokens are not text: decode drops them, as SentencePiece does.
        QCOMPARE(m_llama2->decode({1, 15043, 2}), m_sp->decode({1, 15043, 2}));
        // Added special tokens in text are single ids (HF); SentencePiece reads "<s>" as text.
        QCOMPARE(show(m_llama2->encode("<s>Hello</s>", false)), show({1, 15043, 2}));
    }

    // tok512.bin (llama2.c format): ids worked out by hand from its vocabulary, where
    // ids 3..258 are <0x00>..<0xFF> and the BPE pieces from 259 on score -(id - 259).
    void tok512HandWorked_data() {
        QTest::addColumn<QString>("text");
        QTest::addColumn<QList<int>>("ids");
        // "▁the▁ö": pairs ▁t (259, score 0), he (260, -1) merge, then ▁t+he = ▁the (265, -6);
        // "▁ö" is no piece, "▁" (410) stays; ö (C3 B6) has no piece: bytes 0xC3+3, 0xB6+3.
        QTest::newRow("byte fallback") << QString::fromUtf8("the ö") << QList<int>{265, 410, 198, 185};
        // "▁Lily": il (290, -31) beats ▁L (307, -48); then ▁L; then il+y = ily (310, -51);
        // then ▁L+ily = ▁Lily (317, -58).
        QTest::newRow("one piece") << "Lily" << QList<int>{317};
        // "\t" has no piece: <0x09> = 9 + 3; the dummy prefix "▁" stays alone.
        QTest::newRow("tab") << "\t" << QList<int>{410, 12};
        QTest::newRow("empty") << "" << QList<int>{};
    }
    void tok512HandWorked() {
        QFETCH(QString, text);
        QFETCH(QList<int>, ids);
        if (!tok512()) LATMIX_DATA_SKIP(qPrintable("tok512.bin not found at " + tok512Bin() + " (set LATMIX_DATA_DIR)"));
        const auto got = m_tok512->encode(text.toStdString(), false);
        QCOMPARE(show(got), show(std::vector<int>(ids.begin(), ids.end())));
        QCOMPARE(QString::fromStdString(m_tok512->decode(got)), text);
    }

    void tok512RoundTrip() {
        if (!tok512()) LATMIX_DATA_SKIP(qPrintable("tok512.bin not found at " + tok512Bin() + " (set LATMIX_DATA_DIR)"));
        const std::string s = "Once upon a time, there was a little girl named Lily.";
        const auto ids = m_tok512->encode(s, true);
        QCOMPARE(ids.front(), 1);
        QCOMPARE(m_tok512->decode(ids), s);
        // " Once" (403), " upon" (407), " a" (261) and " time" (378) are whole pieces.
        QCOMPARE(show(std::vector<int>(ids.begin() + 1, ids.begin() + 5)), show({403, 407, 261, 378}));
        QCOMPARE(m_tok512->vocabSize(), 512);
        QCOMPARE(m_tok512->bosId(), 1);
        QCOMPARE(m_tok512->eosId(), 2);
        QVERIFY(m_tok512->addsBosByDefault());
    }

    // PROVENANCE.md's reference tokenisation of the whole wiki.test.raw with tok512 (a NumPy
    // llama2.c-style encoder): 809,289 ids, dummy prefix, no BOS, these first 24.
    void tok512WholeWikiText() {
        if (!tok512()) LATMIX_DATA_SKIP(qPrintable("tok512.bin not found at " + tok512Bin() + " (set LATMIX_DATA_DIR)"));
        if (!QFile::exists(wikiRaw())) LATMIX_DATA_SKIP(qPrintable("WikiText-2 not found at " + wikiRaw() + " (set LATMIX_DATA_DIR)"));
        const auto ids = m_tok512->encode(readAll(wikiRaw()), false);
        QCOMPARE(ids.size(), std::size_t(809289));
        const std::vector<int> first = {410, 410, 13, 410, 64, 410, 461, 414, 430, 285, 413, 368,
                                        277, 421, 413, 285, 410, 64, 410, 13, 410, 13, 410, 461};
        QCOMPARE(show(std::vector<int>(ids.begin(), ids.begin() + 24)), show(first));
    }

    void loadFromDirPicksImplementation() {
        if (!llama2()) LATMIX_DATA_SKIP(qPrintable("Llama 2 tokenizer.model not found at " + llama2Model() + " (set LATMIX_DATA_DIR)"));
        // Only tokenizer.model: libsentencepiece.
        auto sp = Tokenizer::loadFromDir(QFileInfo(llama2Model()).absolutePath().toStdString());
        QCOMPARE(QString::fromStdString(sp->kind()), QStringLiteral("sentencepiece"));
        // tokenizer.json wins over tokenizer.model.
        const QString both = m_tmp.filePath("both");
        QDir().mkpath(both);
        QVERIFY(QFile::copy(m_tmp.filePath("llama2/tokenizer.json"), both + "/tokenizer.json"));
        QVERIFY(QFile::copy(llama2Model(), both + "/tokenizer.model"));
        auto bpe = Tokenizer::loadFromDir(both.toStdString());
        QCOMPARE(QString::fromStdString(bpe->kind()), QStringLiteral("bpe-sentencepiece"));
        QCOMPARE(show(bpe->encode("Hello world", true)), show(sp->encode("Hello world", true)));
        auto file = Tokenizer::loadFile(llama2Model().toStdString());
        QCOMPARE(QString::fromStdString(file->kind()), QStringLiteral("sentencepiece"));
    }

    // GGUF's SentencePiece vocabulary read back from the converted tokenizer.json (the export of
    // a run whose folder has only tokenizer.json): libsentencepiece's pieces, types, BOS/EOS and
    // dummy prefix, and scores in the same order wherever a merge makes the piece.
    void sentencePieceVocabularyFromJson() {
        if (!llama2()) LATMIX_DATA_SKIP(qPrintable("Llama 2 tokenizer.model not found at " + llama2Model() + " (set LATMIX_DATA_DIR)"));
        const SpmVocabulary want = readSentencePieceVocabulary(llama2Model().toStdString());
        const SpmVocabulary got = readSentencePieceBpeJson(m_tmp.filePath("llama2/tokenizer.json").toStdString());
        QCOMPARE(got.pieces.size(), want.pieces.size());
        QCOMPARE(got.bosId, want.bosId);
        QCOMPARE(got.eosId, want.eosId);
        QCOMPARE(got.addDummyPrefix, want.addDummyPrefix);
        std::vector<std::size_t> merged;
        const float lowest = std::min_element(got.pieces.begin(), got.pieces.end(),
                                              [](const auto& a, const auto& b) { return a.score < b.score; })->score;
        for (std::size_t i = 0; i < got.pieces.size(); ++i) {
            QCOMPARE(got.pieces[i].piece, want.pieces[i].piece);
            QCOMPARE(int(got.pieces[i].type), int(want.pieces[i].type));
            if (got.pieces[i].type == SpmPiece::Type::Normal && got.pieces[i].score > lowest) merged.push_back(i);
        }
        QVERIFY2(merged.size() > want.pieces.size() * 9 / 10, qPrintable(QString::number(merged.size()))); // Llama 2: 29,612
        std::stable_sort(merged.begin(), merged.end(), [&](auto a, auto b) { return got.pieces[a].score > got.pieces[b].score; });
        for (std::size_t k = 1; k < merged.size(); ++k)
            QVERIFY2(want.pieces[merged[k - 1]].score >= want.pieces[merged[k]].score, want.pieces[merged[k]].piece.c_str());
        // A byte-level BPE tokenizer has no SentencePiece vocabulary: refused, naming the file.
        const QString llama3 = dataDir() + "/tokenizers/llama3/tokenizer.json";
        if (!QFile::exists(llama3)) LATMIX_DATA_SKIP(qPrintable("no " + llama3));
        try {
            readSentencePieceBpeJson(llama3.toStdString());
            QFAIL("a byte-level BPE tokenizer.json was read as a SentencePiece vocabulary");
        } catch (const std::runtime_error& e) {
            QVERIFY2(QString(e.what()).contains(llama3), e.what());
        }
    }

    void errorsNameTheFile_data() {
        QTest::addColumn<QString>("what");
        QTest::addColumn<QString>("content"); // written to the file first unless empty
        QTest::addColumn<QString>("fileName");
        QTest::addColumn<QString>("expected"); // substring of the message besides the path
        QTest::newRow("missing file") << "loadFile" << "" << "absent/tokenizer.json" << "not found";
        QTest::newRow("missing folder") << "loadFromDir" << "" << "absent-dir" << "not found";
        QTest::newRow("empty folder") << "loadFromDir" << "" << "" << "no tokenizer.json";
        QTest::newRow("malformed json") << "loadFile" << R"({"model": {"type": "BPE", "vocab": {)" << "bad.json"
                                        << "malformed JSON";
        QTest::newRow("wordpiece") << "loadFile"
                                   << R"({"model": {"type": "WordPiece", "vocab": {"a": 0}, "unk_token": "a"}})"
                                   << "wp.json" << "WordPiece";
        QTest::newRow("unknown pre-tokenizer")
            << "loadFile" << R"({"pre_tokenizer": {"type": "Whitespace"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})"
            << "ws.json" << "pre_tokenizer";
        QTest::newRow("merge of unknown token")
            << "loadFile" << R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})" << "merge.json"
            << "model.merges[0]";
        QTest::newRow("not a sentencepiece model") << "loadFile" << "garbage" << "bad.model" << "SentencePiece";
        QTest::newRow("llama2.c bin is converted, not loaded") << "loadFile" << "x" << "tokenizer.bin"
                                                               << "convertLlama2cTokenizer";
        QTest::newRow("convert missing bin") << "convertLlama2c" << "" << "absent.bin" << "not found";
        QTest::newRow("convert truncated bin") << "convertLlama2c" << "\x07" << "short.bin" << "llama2.c";
        QTest::newRow("convert missing model") << "convertSentencePiece" << "" << "absent.model" << "not found";
    }
    void errorsNameTheFile() {
        QFETCH(QString, what);
        QFETCH(QString, content);
        QFETCH(QString, fileName);
        QFETCH(QString, expected);
        const QString dir = m_tmp.filePath("errors-" + QString::number(qHash(QString(QTest::currentDataTag()))));
        QDir().mkpath(dir);
        const QString path = fileName.isEmpty() ? dir : dir + "/" + fileName;
        if (!content.isEmpty()) {
            QFile f(path);
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write(content.toUtf8());
        }
        QString message;
        try {
            if (what == "loadFile") Tokenizer::loadFile(path.toStdString());
            else if (what == "loadFromDir") Tokenizer::loadFromDir(path.toStdString());
            else if (what == "convertLlama2c") convertLlama2cTokenizer(path.toStdString(), (dir + "/out.json").toStdString());
            else convertSentencePieceModel(path.toStdString(), (dir + "/out.json").toStdString());
            QFAIL("no exception");
        } catch (const std::runtime_error& e) {
            message = QString::fromStdString(e.what());
        }
        QVERIFY2(message.contains(path), qPrintable(message));
        QVERIFY2(message.contains(expected), qPrintable(message));
    }
};

QTEST_APPLESS_MAIN(TestTokenizer)
#include "tst_tokenizer.moc"
