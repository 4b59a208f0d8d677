// safetensors reader/writer (SPEC §8): round trips of every dtype, validation of corrupt files,
// atomic writes, and zero-copy mapping of a real checkpoint.
#include "TestSupport.h"

#include "io/SafeTensors.h"

#include <QDir>
#include <QFileInfo>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include <fstream>
#include <map>
#include <stdexcept>
#include <string>

#include <unistd.h> // sysconf
#include "TestData.h" // after ATen: Qt's slots macro breaks ATen headers

using namespace latmix::io;

namespace {

using latmix::test::dataDir;

at::ScalarType typeOf(const QString& name) {
    static const std::map<QString, at::ScalarType> m = {
        {"F64", at::kDouble}, {"F32", at::kFloat}, {"F16", at::kHalf},  {"BF16", at::kBFloat16}, {"I64", at::kLong},
        {"I32", at::kInt},    {"I16", at::kShort}, {"I8", at::kChar},   {"U8", at::kByte},       {"BOOL", at::kBool},
    };
    return m.at(name);
}

std::vector<int64_t> parseShape(const QString& s) {
    std::vector<int64_t> v;
    if (s.isEmpty()) return v; // 0-d
    for (const auto& part : s.split('x')) v.push_back(part.toLongLong());
    return v;
}

// Deterministic values that every dtype represents exactly (small integers, halves).
at::Tensor sample(at::ScalarType t, const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    auto base = at::arange(n, at::kDouble);
    at::Tensor v;
    if (t == at::kBool) v = base.remainder(3).eq(1);
    else if (t == at::kByte) v = base.remainder(251).to(t);
    else if (t == at::kChar) v = (base.remainder(200) - 100).to(t);
    else if (at::isFloatingType(t)) v = ((base.remainder(97) - 48) * 0.5).to(t);
    else v = (base * 7919 - 12345).to(t);
    return v.reshape(shape);
}

QByteArray readAll(const QString& path) {
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) return {};
    return f.readAll();
}

void writeBytes(const QString& path, const QByteArray& bytes) {
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
    QCOMPARE(f.write(bytes), qint64(bytes.size()));
}

// An 8-byte little-endian length (by default that of the header) + header + data bytes.
QByteArray blob(const QByteArray& header, int dataBytes, qint64 lengthOverride = -1) {
    QByteArray b(8, '\0');
    const quint64 len = lengthOverride >= 0 ? quint64(lengthOverride) : quint64(header.size());
    for (int i = 0; i < 8; ++i) b[i] = char((len >> (8 * i)) & 0xFF);
    b += header;
    b += QByteArray(dataBytes, '\x01');
    return b;
}

long vmRssKb() {
    std::ifstream in("/proc/self/status");
    std::string key;
    while (in >> key) {
        if (key == "VmRSS:") {
            long kb = 0;
            in >> kb;
            return kb;
        }
        std::string rest;
        std::getline(in, rest);
    }
    return -1;
}

// Address ranges of the mappings of `path` in /proc/self/maps.
std::vector<std::pair<std::uintptr_t, std::uintptr_t>> mappingsOf(const QString& path) {
    std::vector<std::pair<std::uintptr_t, std::uintptr_t>> r;
    const QString canonical = QFileInfo(path).canonicalFilePath();
    QFile maps("/proc/self/maps");
    if (!maps.open(QIODevice::ReadOnly | QIODevice::Text)) return r;
    for (const QByteArray& line : maps.readAll().split('\n')) {
        const QString l = QString::fromLocal8Bit(line);
        if (!l.endsWith(canonical)) continue;
        const QString range = l.section(' ', 0, 0);
        r.emplace_back(range.section('-', 0, 0).toULongLong(nullptr, 16), range.section('-', 1, 1).toULongLong(nullptr, 16));
    }
    return r;
}

QStringList tmpLeftovers(const QString& dir) {
    // util::AtomicFile's temporary name ("<file>.partial").
    return QDir(dir).entryList(QStringList() << "*.partial" << "*.tmp-*", QDir::Files | QDir::Hidden);
}

} // namespace

class TestSafeTensors : public QObject {
    Q_OBJECT
private slots:
    void roundTrip_data() {
        QTest::addColumn<QString>("dtype");
        QTest::addColumn<QString>("shape");
        for (const char* d : {"F32", "F16", "BF16", "F64", "I8", "U8", "I16", "I32", "I64", "BOOL"}) {
            QTest::addRow("%s 3x5", d) << d << "3x5";
            QTest::addRow("%s 0-d", d) << d << "";
            QTest::addRow("%s empty", d) << d << "0";
            QTest::addRow("%s 4x0x2", d) << d << "4x0x2";
        }
        QTest::addRow("F32 large 257x33") << "F32" << "257x33";
    }
    void roundTrip() {
        QFETCH(QString, dtype);
        QFETCH(QString, shape);
        QTemporaryDir tmp;
        QVERIFY(tmp.isValid());
        const std::string path = tmp.filePath("t.safetensors").toStdString();
        const auto t = sample(typeOf(dtype), parseShape(shape));
        const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "round trip \xE2\x96\x81"}};
        writeSafeTensors(path, {{"before", at::ones({2}, at::kFloat)}, {"x", t}, {"after", at::ones({1}, at::kLong)}},
                         meta);
        QVERIFY(tmpLeftovers(tmp.path()).isEmpty());

        const QByteArray bytes = readAll(tmp.filePath("t.safetensors"));
        quint64 n = 0;
        for (int i = 7; i >= 0; --i) n = (n << 8) | quint8(bytes[i]);
        QCOMPARE((8 + n) % 8, quint64(0)); // data section aligned
        QVERIFY(bytes.mid(8, int(n)).startsWith("{"));

        auto f = SafeTensorsFile::open(path);
        QCOMPARE(f->entries().size(), size_t(3));
        QCOMPARE(f->metadata(), meta);
        const auto& e = f->entry("x");
        QCOMPARE(QString::fromStdString(e.dtype), dtype);
        QCOMPARE(e.shape, t.sizes().vec());
        auto back = f->tensor("x");
        QCOMPARE(back.scalar_type(), t.scalar_type());
        QCOMPARE(back.sizes().vec(), t.sizes().vec());
        QVERIFY(at::equal(back, t));
        QVERIFY(at::equal(f->tensor("after"), at::ones({1}, at::kLong)));
        QVERIFY(f->contains("before"));
        QVERIFY(!f->contains("missing"));
    }

    // Several dtypes in one file: an F32 after 3 BF16 values sits at a 6-byte offset and must be
    // copied (unaligned); aligned ones are views into the mapping. Both read correctly, and a
    // view keeps the mapping alive after the file object is gone.
    void mixedAlignment() {
        QTemporaryDir tmp;
        const std::string path = tmp.filePath("m.safetensors").toStdString();
        const auto a = sample(at::kBFloat16, {3}), b = sample(at::kFloat, {4, 3}), c = sample(at::kDouble, {5});
        writeSafeTensors(path, {{"a", a}, {"b", b}, {"c", c}});
        auto f = SafeTensorsFile::open(path);
        QCOMPARE(f->entry("b").begin, std::uint64_t(6));
        auto tb = f->tensor("b"), tc = f->tensor("c"), ta = f->tensor("a");
        QVERIFY(at::equal(ta, a));
        QVERIFY(at::equal(tb, b));
        QVERIFY(at::equal(tc, c));
        const auto maps = mappingsOf(tmp.filePath("m.safetensors"));
        QVERIFY(!maps.empty());
        auto inside = [&](const at::Tensor& t) {
            const auto p = reinterpret_cast<std::uintptr_t>(t.data_ptr());
            for (const auto& [lo, hi] : maps)
                if (p >= lo && p < hi) return true;
            return false;
        };
        QVERIFY(inside(ta));
        QVERIFY(!inside(tb)); // unaligned: copied
        f.reset();
        QVERIFY(at::equal(ta, a)); // the mapping outlives the file object
        QVERIFY(!mappingsOf(tmp.filePath("m.safetensors")).empty());
        ta = at::Tensor();
        tc = at::Tensor();
        QVERIFY(mappingsOf(tmp.filePath("m.safetensors")).empty()); // last view gone: unmapped
    }

    void corruptFiles_data() {
        QTest::addColumn<QByteArray>("bytes");
        QTest::addColumn<QString>("tensor"); // empty: the error is about the whole file
        QTest::addColumn<QString>("phrase");
        const QByteArray ok = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
        QTest::newRow("empty file") << QByteArray() << "" << "shorter than the 8-byte header length";
        QTest::newRow("truncated length") << QByteArray("\x10\0\0", 3) << "" << "shorter than the 8-byte header length";
        QTest::newRow("header length too big") << blob(ok, 8, 4096) << "" << "goes beyond the end of the file";
        QTest::newRow("header length huge") << blob(ok, 8, qint64(1) << 62) << "" << "goes beyond the end of the file";
        QTest::newRow("truncated data") << blob(ok, 5) << "w" << "outside the data section";
        QTest::newRow("bad json") << blob("{\"w\": {\"dtype\": ", 0) << "" << "not valid JSON";
        QTest::newRow("not an object") << blob("[1, 2, 3]", 0) << "" << "not a JSON object";
        QTest::newRow("entry not an object") << blob(R"({"w": 3})", 0) << "w" << "not a JSON object";
        QTest::newRow("missing dtype") << blob(R"({"w":{"shape":[2],"data_offsets":[0,8]}})", 8) << "w"
                                       << "has no 'dtype'";
        QTest::newRow("missing shape") << blob(R"({"w":{"dtype":"F32","data_offsets":[0,8]}})", 8) << "w"
                                       << "has no 'shape'";
        QTest::newRow("missing offsets") << blob(R"({"w":{"dtype":"F32","shape":[2]}})", 8) << "w"
                                         << "has no 'data_offsets'";
        QTest::newRow("unknown dtype") << blob(R"({"w":{"dtype":"F7_E3M3","shape":[2],"data_offsets":[0,2]}})", 2)
                                       << "w" << "unknown dtype 'F7_E3M3'";
        QTest::newRow("offsets decreasing") << blob(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[8,4]}})", 8)
                                            << "w" << "decreasing";
        QTest::newRow("offsets outside") << blob(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8)
                                         << "w" << "outside the data section of 8 bytes";
        QTest::newRow("negative offset") << blob(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[-4,0]}})", 8)
                                         << "w" << "non-negative integers";
        QTest::newRow("offsets not a pair") << blob(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[0]}})", 8)
                                            << "w" << "must be [begin, end]";
        QTest::newRow("overlap")
            << blob(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                    12)
            << "b" << "overlap tensor 'a'";
        QTest::newRow("shape size mismatch") << blob(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8)
                                             << "w" << "does not match shape [3]";
        QTest::newRow("negative dim") << blob(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8) << "w"
                                      << "non-negative integers";
        QTest::newRow("shape overflow")
            << blob(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})", 8) << "w"
            << "overflows";
        QTest::newRow("metadata not strings") << blob(R"({"__metadata__":{"n":3}})", 0) << ""
                                              << "'__metadata__' entry 'n' is not a string";
    }
    void corruptFiles() {
        QFETCH(QByteArray, bytes);
        QFETCH(QString, tensor);
        QFETCH(QString, phrase);
        QTemporaryDir tmp;
        const QString path = tmp.filePath("corrupt-file.safetensors");
        writeBytes(path, bytes);
        try {
            SafeTensorsFile::open(path.toStdString());
            QFAIL("no error for a corrupt file");
        } catch (const std::runtime_error& e) {
            const QString msg = QString::fromStdString(e.what());
            QVERIFY2(msg.contains(path), qPrintable(msg));
            QVERIFY2(msg.contains(phrase), qPrintable(msg));
            if (!tensor.isEmpty()) QVERIFY2(msg.contains("tensor '" + tensor + "'"), qPrintable(msg));
        }
    }

    // The safetensors dtypes libtorch lacks (one table, io/SafeTensors): F8 block scales of an
    // NVFP4 export come back as their uint8 codes; U16/U32/U64 only as bytes. Written through the
    // streaming writer, read back byte for byte.
    void dtypesWithoutLibtorchType_data() {
        QTest::addColumn<QString>("dtype");
        QTest::addColumn<int>("itemSize");
        QTest::addColumn<bool>("asCodes"); // tensor() gives uint8 codes of the stored shape
        QTest::newRow("F8_E4M3") << "F8_E4M3" << 1 << true;
        QTest::newRow("F8_E5M2") << "F8_E5M2" << 1 << true;
        QTest::newRow("U16") << "U16" << 2 << false;
        QTest::newRow("U32") << "U32" << 4 << false;
        QTest::newRow("U64") << "U64" << 8 << false;
    }
    void dtypesWithoutLibtorchType() {
        QFETCH(QString, dtype);
        QFETCH(int, itemSize);
        QFETCH(bool, asCodes);
        const SafeTensorsDtype* d = safeTensorsDtype(dtype.toStdString());
        QVERIFY(d != nullptr);
        QCOMPARE(int(d->itemSize), itemSize);
        QVERIFY(!d->inLibtorch);
        QTemporaryDir tmp;
        const std::string path = tmp.filePath("raw.safetensors").toStdString();
        const std::vector<std::int64_t> shape{3, 5};
        const at::Tensor raw = at::arange(3 * 5 * itemSize, at::kInt).remainder(251).to(at::kByte);
        writeSafeTensorsStreamed(path, {{"a", "F32", {2}}, {"x", dtype.toStdString(), shape}},
                                 [&](std::size_t i) { return i == 0 ? at::ones({2}) : raw; }, {{"k", "v"}});
        QVERIFY(tmpLeftovers(tmp.path()).isEmpty());
        const auto f = SafeTensorsFile::open(path);
        QCOMPARE(f->entry("x").dtype, dtype.toStdString());
        QCOMPARE(f->entry("x").shape, shape);
        QCOMPARE(f->metadata().at("k"), std::string("v"));
        QVERIFY(at::equal(f->bytes("x"), raw));
        QVERIFY(at::equal(f->bytes("a"), at::ones({2}).view(at::kByte)));
        if (asCodes) {
            const at::Tensor codes = f->tensor("x");
            QCOMPARE(codes.scalar_type(), at::kByte);
            QCOMPARE(codes.sizes().vec(), shape);
            QVERIFY(at::equal(codes.reshape({-1}), raw));
        } else {
            try {
                f->tensor("x");
                QFAIL("no error for a dtype without a libtorch type");
            } catch (const std::runtime_error& e) {
                QVERIFY2(QString(e.what()).contains("bytes()") && QString(e.what()).contains("'x'"), e.what());
            }
        }
    }

    // The streaming writer checks each produced tensor against its header entry; a mismatch
    // leaves no file.
    void streamedSizeMismatchLeavesNothing() {
        QTemporaryDir tmp;
        const std::string path = tmp.filePath("s.safetensors").toStdString();
        try {
            writeSafeTensorsStreamed(path, {{"x", "F8_E4M3", {4}}}, [](std::size_t) { return at::zeros({3}, at::kByte); });
            QFAIL("no error for a tensor of the wrong size");
        } catch (const std::runtime_error& e) {
            QVERIFY2(QString(e.what()).contains("tensor 'x' has 3 bytes"), e.what());
        }
        QVERIFY(QDir(tmp.path()).entryList(QDir::Files | QDir::Hidden).isEmpty());
    }

    // Two writers open at once, their tensors interleaved (a run model and its packed weights):
    // each file equals, byte for byte, the one writeSafeTensors makes of the same tensors. A
    // writer stopped early (too few tensors, destroyed before finish) leaves no file; one more
    // tensor than the header is an error naming the file.
    void interleavedWriters_data() {
        QTest::addColumn<int>("stopAfter"); // tensors written before the writers are dropped; -1 = all + finish
        QTest::newRow("complete") << -1;
        QTest::newRow("nothing written") << 0;
        QTest::newRow("stopped midway") << 3;
    }
    void interleavedWriters() {
        QFETCH(int, stopAfter);
        QTemporaryDir tmp;
        const std::string pa = tmp.filePath("a.safetensors").toStdString();
        const std::string pb = tmp.filePath("b.safetensors").toStdString();
        std::vector<std::pair<std::string, at::Tensor>> a, b;
        for (int i = 0; i < 4; ++i) {
            a.emplace_back("w" + std::to_string(i), at::randn({3, 5 + i}));
            b.emplace_back("w" + std::to_string(i) + "_codes", at::randint(0, 255, {3, i + 1}, at::kLong).to(at::kByte));
        }
        auto specsOf = [](const std::vector<std::pair<std::string, at::Tensor>>& v) {
            std::vector<TensorSpec> s;
            for (const auto& [n, t] : v) s.push_back({n, safeTensorsDtype(t.scalar_type())->name, t.sizes().vec()});
            return s;
        };
        {
            SafeTensorsWriter wa(pa, specsOf(a), {{"format", "pt"}});
            SafeTensorsWriter wb(pb, specsOf(b));
            for (int i = 0; i < 4 && (stopAfter < 0 || i < stopAfter); ++i) {
                QCOMPARE(int(wa.next()), i);
                wa.write(a[i].second);
                wb.write(b[i].second);
            }
            if (stopAfter < 0) {
                try {
                    wb.write(b[0].second);
                    QFAIL("no error for one tensor more than the header");
                } catch (const std::runtime_error& e) {
                    QVERIFY2(QString(e.what()).contains("b.safetensors") && QString(e.what()).contains("one tensor more"),
                             e.what());
                }
                wa.finish();
                wb.finish();
            } else if (stopAfter > 0) {
                try {
                    wa.finish();
                    QFAIL("no error for finishing with tensors missing");
                } catch (const std::runtime_error& e) {
                    QVERIFY2(QString(e.what()).contains("next: 'w" + QString::number(stopAfter) + "'"), e.what());
                }
            }
        }
        if (stopAfter >= 0) {
            QVERIFY(QDir(tmp.path()).entryList(QDir::Files | QDir::Hidden).isEmpty());
            return;
        }
        const std::string ra = tmp.filePath("ref_a.safetensors").toStdString();
        const std::string rb = tmp.filePath("ref_b.safetensors").toStdString();
        writeSafeTensors(ra, a, {{"format", "pt"}});
        writeSafeTensors(rb, b);
        auto bytesOf = [](const std::string& p) {
            QFile f(QString::fromStdString(p));
            return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
        };
        QVERIFY(!bytesOf(pa).isEmpty());
        QCOMPARE(bytesOf(pa), bytesOf(ra));
        QCOMPARE(bytesOf(pb), bytesOf(rb));
        QVERIFY(tmpLeftovers(tmp.path()).isEmpty());
    }

    void missingFileAndTensor() {
        QTemporaryDir tmp;
        const std::string path = tmp.filePath("nothing.safetensors").toStdString();
        QVERIFY_THROWS_EXCEPTION(std::runtime_error, SafeTensorsFile::open(path));
        writeSafeTensors(path, {{"w", at::zeros({2})}});
        auto f = SafeTensorsFile::open(path);
        try {
            f->tensor("v");
            QFAIL("no error for a missing tensor");
        } catch (const std::runtime_error& e) {
            const QString msg = e.what();
            QVERIFY2(msg.contains("nothing.safetensors") && msg.contains("'v'") && msg.contains("no such tensor"),
                     qPrintable(msg));
        }
    }

    // A failed write leaves neither a temporary file nor a damaged target.
    void failedWriteKeepsOldFile_data() {
        QTest::addColumn<QString>("problem");
        QTest::addColumn<QString>("phrase");
        QTest::newRow("complex dtype") << "complex" << "cannot hold";
        QTest::newRow("duplicate name") << "duplicate" << "appears twice";
        QTest::newRow("reserved name") << "metadata" << "invalid tensor name";
        QTest::newRow("undefined tensor") << "undefined" << "undefined";
    }
    void failedWriteKeepsOldFile() {
        QFETCH(QString, problem);
        QFETCH(QString, phrase);
        QTemporaryDir tmp;
        const QString qpath = tmp.filePath("keep.safetensors");
        const std::string path = qpath.toStdString();
        writeSafeTensors(path, {{"old", at::arange(10, at::kFloat)}});
        const QByteArray before = readAll(qpath);
        std::vector<std::pair<std::string, at::Tensor>> bad = {{"fine", at::ones({3})}};
        if (problem == "complex") bad.emplace_back("z", at::zeros({2}, at::kComplexFloat));
        if (problem == "duplicate") bad.emplace_back("fine", at::ones({1}));
        if (problem == "metadata") bad.emplace_back("__metadata__", at::ones({1}));
        if (problem == "undefined") bad.emplace_back("u", at::Tensor());
        try {
            writeSafeTensors(path, bad);
            QFAIL("no error");
        } catch (const std::runtime_error& e) {
            QVERIFY2(QString(e.what()).contains(phrase), e.what());
        }
        QCOMPARE(readAll(qpath), before);
        QVERIFY(tmpLeftovers(tmp.path()).isEmpty());
        QCOMPARE(QDir(tmp.path()).entryList(QDir::Files | QDir::Hidden).size(), 1);
    }

    void writeIntoMissingFolderFails() {
        QTemporaryDir tmp;
        const std::string path = tmp.filePath("no/such/folder/x.safetensors").toStdString();
        QVERIFY_THROWS_EXCEPTION(std::runtime_error, writeSafeTensors(path, {{"w", at::ones({1})}}));
        QVERIFY(QDir(tmp.path()).entryList(QDir::AllEntries | QDir::NoDotAndDotDot).isEmpty());
    }

    // releaseMappedPages drops the pages of a mapped tensor from this process (the model passes
    // keep one layer resident), and only those: a neighbour keeps its pages except the one page
    // each end may share, a heap tensor is left alone, and the released tensor reads the file's
    // values again.
    void releasedPagesLeaveTheProcess_data() {
        QTest::addColumn<QString>("released"); // "a", "b", "c" or "heap"
        for (const char* t : {"a", "b", "c", "heap"}) QTest::newRow(t) << t;
    }
    void releasedPagesLeaveTheProcess() {
        QFETCH(QString, released);
        if (latmix::test::residentKbOf("/proc/self/exe") < 0) QSKIP("no /proc/self/smaps here");
        QTemporaryDir tmp;
        QVERIFY(tmp.isValid());
        const QString path = tmp.filePath("three.safetensors");
        const int64_t n = 1 << 20; // 4 MiB of float32 each
        const auto values = [&](int k) { return at::arange(n, at::kFloat) + float(k * n); };
        writeSafeTensors(path.toStdString(), {{"a", values(0)}, {"b", values(1)}, {"c", values(2)}});
        auto f = SafeTensorsFile::open(path.toStdString());
        std::map<QString, at::Tensor> t{{"a", f->tensor("a")}, {"b", f->tensor("b")}, {"c", f->tensor("c")},
                                        {"heap", values(3)}};
        for (const auto& [name, x] : t) (void)x.sum().item<double>(); // every page touched
        const long tensorKb = long(n * 4 / 1024), pageKb = long(::sysconf(_SC_PAGESIZE) / 1024);
        const long before = latmix::test::residentKbOf(path);
        QVERIFY2(before >= 3 * tensorKb, qPrintable(QString("%1 kB resident after reading 3 x %2 kB").arg(before).arg(tensorKb)));
        releaseMappedPages(t.at(released));
        const long after = latmix::test::residentKbOf(path);
        const long dropped = released == "heap" ? 0 : tensorKb;
        QVERIFY2(after <= before - dropped + 2 * pageKb && after >= before - dropped - 2 * pageKb,
                 qPrintable(QString("%1 kB resident before, %2 kB after releasing %3").arg(before).arg(after).arg(released)));
        // Read again: the file's values (an exact sum of integers below 2^24 in float64).
        double again = 0;
        for (const auto& [name, x] : t) again += x.to(at::kDouble).sum().item<double>();
        const double whole = double(4 * n) * double(4 * n - 1) / 2;
        QCOMPARE(again, whole);
    }

    // SPEC §8: real checkpoints are mapped, never copied whole. Every tensor of the file is a
    // view into the file's mapping and taking them all barely changes the resident set.
    void realCheckpointIsMapped_data() {
        QTest::addColumn<QString>("file");
        QTest::newRow("brownpy-13M") << "models/brownpy-13M/model.safetensors";
        QTest::newRow("stories260K-hf") << "models/stories260K-hf/model.safetensors";
    }
    void realCheckpointIsMapped() {
        QFETCH(QString, file);
        const QString path = dataDir() + "/" + file;
        if (!QFile::exists(path)) LATMIX_DATA_SKIP(qPrintable("not found: " + path + " (set LATMIX_DATA_DIR to shared/data)"));
        const long rssBefore = vmRssKb();
        auto f = SafeTensorsFile::open(path.toStdString());
        std::vector<at::Tensor> all;
        std::uint64_t bytes = 0;
        for (const auto& e : f->entries()) {
            all.push_back(f->tensor(e.name));
            bytes += e.end - e.begin;
            QCOMPARE(QString::fromStdString(e.dtype), QString("F32"));
        }
        const long rssAfter = vmRssKb();
        const auto maps = mappingsOf(path);
        QVERIFY2(!maps.empty(), "the file is not memory-mapped");
        for (const auto& t : all) {
            const auto p = reinterpret_cast<std::uintptr_t>(t.data_ptr());
            bool inside = false;
            for (const auto& [lo, hi] : maps) inside = inside || (p >= lo && p + t.nbytes() <= hi);
            QVERIFY2(inside, "a tensor was copied out of the mapping");
        }
        QVERIFY(bytes > QFileInfo(path).size() * 0.99);
        // Less than a tenth of the weights became resident (the header page and allocator noise).
        QVERIFY2(rssAfter - rssBefore < long(bytes / 1024 / 10) + 2048,
                 qPrintable(QString("VmRSS grew by %1 kB for %2 kB of weights").arg(rssAfter - rssBefore).arg(bytes / 1024)));
        // And the values are the file's bytes: the first tensor against a plain read.
        const auto& e0 = f->entries().front();
        const QByteArray whole = readAll(path);
        quint64 n = 0;
        for (int i = 7; i >= 0; --i) n = (n << 8) | quint8(whole[i]);
        const QByteArray firstBytes = whole.mid(int(8 + n + e0.begin), int(e0.end - e0.begin));
        QCOMPARE(std::memcmp(firstBytes.constData(), all.front().data_ptr(), size_t(firstBytes.size())), 0);
    }
};

QTEST_APPLESS_MAIN(TestSafeTensors)
#include "tst_safetensors.moc"
