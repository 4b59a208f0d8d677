// HDF5 tensor files (io/TensorFile: transforms.h5, train.h5): exact round trips, and damaged or
// foreign files refused with a message that names the file and the dataset (io/StoredTensors),
// never served as fill values or followed around a link loop.
#include "TestSupport.h"
#include "io/StoredTensors.h"
#include "io/TensorFile.h"

#include <ATen/ATen.h>
#include <H5Cpp.h>

#include <QTemporaryDir>
#include <QtTest>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

using namespace latmix::io;

namespace {

std::string errorOf(const std::string& path) {
    return latmix::test::errorOf([&] { readTensorFile(path); }).toStdString();
}

// Damaged files: made with libhdf5 directly (as another program would leave them, sealed as
// io/TensorFile seals its files, so that the HDF5 checks behind the seal are reached), or a file
// io/TensorFile wrote, damaged afterwards.
void makeDamaged(const std::string& kind, const std::string& path) {
    if (kind == "garbage") {
        std::ofstream(path, std::ios::binary) << "definitely not HDF5, just text of some length";
        return;
    }
    if (kind == "bit flip" || kind == "truncated") {
        writeTensorFile(path, {{"T1/A", at::arange(64, at::kDouble)}}, {{"method", "rtn"}});
        std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
        f.seekg(0, std::ios::end);
        const auto size = static_cast<std::streamoff>(f.tellg());
        if (kind == "bit flip") {
            f.seekg(size - 40);
            char c = 0;
            f.read(&c, 1);
            c ^= 0x10;
            f.seekp(size - 40);
            f.write(&c, 1);
        } else {
            f.close();
            std::filesystem::resize_file(path, static_cast<std::uintmax_t>(size - 100));
        }
        return;
    }
    {
        // The checksummed 1.8 format with the seal's user block, but for the "unsealed" row
        // (libhdf5's defaults, as tensor files were written before the seal).
        const bool sealed = kind != "unsealed";
        H5::FileAccPropList access;
        H5::FileCreatPropList create;
        if (sealed) {
            access.setLibverBounds(H5F_LIBVER_V18, H5F_LIBVER_LATEST);
            create.setUserblock(latmix::io::kTensorFileSealBytes);
        }
        H5::H5File file(path, H5F_ACC_TRUNC, create, access);
        if (kind == "unsealed") {
            const hsize_t dims[1] = {2};
            const double v[2] = {1, 2};
            file.createDataSet("loss", H5::PredType::NATIVE_DOUBLE, H5::DataSpace(1, dims))
                .write(v, H5::PredType::NATIVE_DOUBLE);
        } else if (kind == "unwritten") {
            // A dataset of 10^6 x 10^6 doubles that was never written: no storage, only fill values.
            const hsize_t dims[2] = {1000000, 1000000};
            H5::DataSpace space(2, dims);
            file.createGroup("T1");
            file.createDataSet("T1/A", H5::PredType::NATIVE_DOUBLE, space);
        } else if (kind == "short") {
            // Storage for the first 4 of 16 floats only: a chunked dataset with one chunk written.
            const hsize_t dims[1] = {16}, chunk[1] = {4}, one[1] = {4}, at0[1] = {0};
            H5::DSetCreatPropList plist;
            plist.setChunk(1, chunk);
            H5::DataSpace space(1, dims);
            H5::DataSet ds = file.createDataSet("loss", H5::PredType::NATIVE_FLOAT, space, plist);
            const float v[4] = {1, 2, 3, 4};
            H5::DataSpace mem(1, one);
            H5::DataSpace sel = ds.getSpace();
            sel.selectHyperslab(H5S_SELECT_SET, one, at0);
            ds.write(v, H5::PredType::NATIVE_FLOAT, mem, sel);
        } else if (kind == "loop") {
            // layers/0/up is a hard link back to the root group: a walk that follows it never ends.
            file.createGroup("layers");
            file.createGroup("layers/0");
            H5Lcreate_hard(file.getId(), "/", file.getId(), "layers/0/up", H5P_DEFAULT, H5P_DEFAULT);
        } else if (kind == "text") {
            H5::StrType type(H5::PredType::C_S1, 8);
            const hsize_t dims[1] = {2};
            H5::DataSpace space(1, dims);
            H5::DataSet ds = file.createDataSet("names", type, space);
            const char v[16] = "abcdefghijklmno";
            ds.write(v, type);
        }
        file.close();
        if (!sealed) return;
    }
    latmix::io::sealTensorFile(path);
}

} // namespace

class TestTensorFile : public QObject {
    Q_OBJECT
private slots:
    void roundTrip_data() {
        QTest::addColumn<QString>("dtype");
        QTest::addColumn<QString>("name");
        QTest::addColumn<QList<int>>("shape");
        QTest::newRow("f64 matrix") << "f64" << "T1/A" << QList<int>{5, 3};
        QTest::newRow("f32 nested") << "f32" << "layers/3/T2/v" << QList<int>{7};
        QTest::newRow("i64 scalar") << "i64" << "step" << QList<int>{};
        QTest::newRow("f32 empty") << "f32" << "layers/0/empty" << QList<int>{0, 4};
        QTest::newRow("f64 3-d") << "f64" << "a/b/c/d" << QList<int>{2, 3, 4};
    }
    void roundTrip() {
        QFETCH(QString, dtype);
        QFETCH(QString, name);
        QFETCH(QList<int>, shape);
        QTemporaryDir dir;
        const std::string path = (dir.path() + "/run.h5").toStdString();
        std::vector<int64_t> s(shape.begin(), shape.end());
        const at::ScalarType type = dtype == "f64" ? at::kDouble : dtype == "f32" ? at::kFloat : at::kLong;
        int64_t n = 1;
        for (auto d : s) n *= d;
        // Values each type holds exactly, signs and fractions included.
        const at::Tensor t = ((at::arange(n, at::kDouble) - 3) * (type == at::kLong ? 7.0 : 0.375)).to(type).reshape(s);
        writeTensorFile(path, {{name.toStdString(), t}, {"other", at::ones({2}, at::kDouble)}},
                        {{"method", "latmix-lu"}, {"empty", ""}});
        const TensorFileContents back = readTensorFile(path);
        QCOMPARE(back.tensors.size(), std::size_t(2));
        const at::Tensor r = back.tensors.at(name.toStdString());
        QCOMPARE(r.scalar_type(), type);
        QCOMPARE(r.sizes().vec(), s);
        QVERIFY(at::equal(r, t));
        QCOMPARE(back.attributes.at("method"), std::string("latmix-lu"));
        QCOMPARE(back.attributes.at("empty"), std::string());
    }

    void damagedFiles_data() {
        QTest::addColumn<QString>("kind");
        QTest::addColumn<QString>("expected"); // in the message, besides the file's path
        QTest::newRow("not HDF5") << "garbage" << "is not a sealed LATMiX tensor file";
        QTest::newRow("unsealed") << "unsealed" << "is not a sealed LATMiX tensor file (written by LATMiX before";
        QTest::newRow("bit flip") << "bit flip" << "does not match its checksum (CRC-32 ";
        QTest::newRow("truncated") << "truncated" << "(truncated or appended to); the file is damaged";
        QTest::newRow("never written") << "unwritten"
                                       << "dataset 'T1/A' declares 8000000000000 bytes but the file stores 0";
        QTest::newRow("partly written") << "short" << "dataset 'loss' declares 64 bytes but the file stores 16";
        QTest::newRow("link loop") << "loop" << "groups nest deeper than 32 levels at 'layers/0/up/layers/0/up";
        QTest::newRow("strings") << "text" << "dataset 'names' is not numeric";
        QTest::newRow("missing") << "none" << "does not exist";
    }
    void damagedFiles() {
        QFETCH(QString, kind);
        QFETCH(QString, expected);
        QTemporaryDir dir;
        const std::string path = (dir.path() + "/train.h5").toStdString();
        if (kind != "none") makeDamaged(kind.toStdString(), path);
        const std::string message = errorOf(path);
        QVERIFY2(message.rfind("tensor file '" + path + "': ", 0) == 0, message.c_str());
        QVERIFY2(message.find(expected.toStdString()) != std::string::npos, message.c_str());
    }
};

QTEST_GUILESS_MAIN(TestTensorFile)
#include "tst_tensorfile.moc"
