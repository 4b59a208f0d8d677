// util/AtomicFile's folder helpers: removeTreeQuietly removes a whole tree (nested folders, files,
// links) and nothing outside it (a link to an outside folder is removed, not followed), and is
// quiet on a missing path; replaceDirectory puts a complete folder in place of an existing one.
// removeTreeQuietly walks with libc's nftw since PyTorch's wheels carry a broken twin of
// std::filesystem::remove_all (core/util/AtomicFile.cpp).
#include "util/AtomicFile.h"

#include <QTemporaryDir>
#include <QtTest>

#include <filesystem>
#include <fstream>
#include <string>

namespace fs = std::filesystem;
using namespace latmix::util;

namespace {

void writeFile(const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
}

// Builds the tree named by `shape` under root/tree; `outside` is a folder beside it with one file.
void makeTree(const fs::path& root, const QString& shape) {
    const fs::path tree = root / "tree";
    const fs::path outside = root / "outside";
    writeFile(outside / "keep.txt", "must survive");
    fs::create_directories(tree);
    if (shape == "empty folder") return;
    writeFile(tree / "a.txt", "a");
    if (shape == "one file") return;
    writeFile(tree / "sub" / "deeper" / "b.bin", std::string(10000, 'x'));
    writeFile(tree / "sub" / "c.txt", "c");
    fs::create_directories(tree / "empty");
    if (shape == "nested folders") return;
    // links: to the outside folder, to an outside file, and one that dangles
    fs::create_directory_symlink(outside, tree / "sub" / "link-to-outside");
    fs::create_symlink(outside / "keep.txt", tree / "file-link");
    fs::create_symlink(root / "nowhere", tree / "dangling");
}

} // namespace

class TestAtomicFile : public QObject {
    Q_OBJECT

private slots:
    void removeTree_data() {
        QTest::addColumn<QString>("shape");
        for (const char* s : {"empty folder", "one file", "nested folders", "links out of the tree"})
            QTest::newRow(s) << QString(s);
    }
    void removeTree() {
        QFETCH(QString, shape);
        QTemporaryDir tmp;
        QVERIFY(tmp.isValid());
        const fs::path root = tmp.path().toStdString();
        makeTree(root, shape);
        QVERIFY(fs::exists(root / "tree"));
        removeTreeQuietly((root / "tree").string());
        QVERIFY2(!fs::exists(fs::symlink_status(root / "tree")), "the tree is still there");
        // nothing outside the tree was touched, through a link or otherwise
        QVERIFY(fs::is_regular_file(root / "outside" / "keep.txt"));
        std::ifstream in(root / "outside" / "keep.txt");
        std::string text;
        std::getline(in, text);
        QCOMPARE(QString::fromStdString(text), QString("must survive"));
    }

    void removeTreeQuietOnMissingOrEmpty() {
        QTemporaryDir tmp;
        removeTreeQuietly((fs::path(tmp.path().toStdString()) / "never-made").string());
        removeTreeQuietly("");
        QVERIFY(fs::exists(tmp.path().toStdString())); // "" is not the current folder
    }

    void replaceExistingFolder() {
        QTemporaryDir tmp;
        const fs::path root = tmp.path().toStdString();
        writeFile(root / "model" / "old.txt", "old");
        writeFile(root / "model" / "sub" / "old2.txt", "old");
        const std::string fresh = makeTempSibling((root / "model").string());
        writeFile(fs::path(fresh) / "new.txt", "new");
        replaceDirectory(fresh, (root / "model").string());
        QVERIFY(fs::is_regular_file(root / "model" / "new.txt"));
        QVERIFY(!fs::exists(root / "model" / "old.txt"));
        QVERIFY(!fs::exists(fresh));
        // no hidden leftovers of the exchange beside the folder
        int entries = 0;
        for (const auto& e : fs::directory_iterator(root)) {
            ++entries;
            QVERIFY2(e.path().filename() == "model", e.path().c_str());
        }
        QCOMPARE(entries, 1);
    }
};

QTEST_GUILESS_MAIN(TestAtomicFile)
#include "tst_atomicfile.moc"
