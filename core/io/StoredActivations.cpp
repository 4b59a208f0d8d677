#include "io/StoredActivations.h"

#include "io/StoredTensors.h"

#include <H5Cpp.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <stdexcept>

namespace latmix::io {
namespace {

const char* kGroup = "/activations";

[[noreturn]] void fail(const std::string& path, const std::string& what) {
    throw std::runtime_error("activation run file '" + path + "': " + what);
}

std::string readString(const H5::Attribute& a) {
    if (a.getTypeClass() != H5T_STRING) return {};
    std::string v;
    a.read(a.getStrType(), v);
    return v;
}

// [rows, columns] of a 2-D dataset whose stored bytes cover that shape at `item` bytes a value.
void shapeOf(const H5::DataSet& ds, std::size_t item, const std::string& name, const std::string& path,
             std::uint64_t& rows, std::uint64_t& columns) {
    const auto bad = [&](const std::string& what) {
        fail(path, "dataset '" + name + "' " + what + "; the file is damaged or not written by `latmix capture`: capture again");
    };
    const H5::DataSpace space = ds.getSpace();
    if (space.getSimpleExtentNdims() != 2) bad("is not 2-D");
    hsize_t dims[2] = {0, 0};
    space.getSimpleExtentDims(dims);
    const std::uint64_t limit = std::numeric_limits<std::uint64_t>::max() / 8;
    if (dims[0] > limit || dims[1] > limit || (dims[1] != 0 && dims[0] > limit / dims[1])) bad("has a shape too large to hold");
    // Storage for every declared byte: HDF5 otherwise serves unwritten chunks as fill values.
    const std::uint64_t declared = dims[0] * dims[1] * item, stored = ds.getStorageSize();
    if (stored < declared)
        bad("declares " + std::to_string(declared) + " bytes but the file stores " + std::to_string(stored));
    rows = dims[0];
    columns = dims[1];
}

} // namespace

struct StoredActivations::Impl {
    H5::H5File file;
};

StoredActivations::StoredActivations(const std::string& path) : m(std::make_unique<Impl>()), m_path(path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) fail(path, "not found (written by `latmix capture --out`)");
    checkTensorFileSeal(path);
    H5::Exception::dontPrint(); // the messages below say what went wrong
    try {
        m->file = H5::H5File(path, H5F_ACC_RDONLY);
        if (!m->file.nameExists(kGroup) || m->file.childObjType(kGroup) != H5O_TYPE_GROUP)
            fail(path, "has no /activations group: not an activation run file; capture again (`latmix capture --out`)");
        const H5::Group g = m->file.openGroup(kGroup);
        for (hsize_t i = 0; i < g.getNumObjs(); ++i) {
            StoredActivationPoint p;
            p.name = g.getObjnameByIdx(i);
            if (g.getObjTypeByIdx(i) != H5G_DATASET)
                fail(path, "'" + p.name + "' under /activations is not a dataset; capture again");
            const H5::DataSet ds = g.openDataSet(p.name);
            const H5T_class_t cls = ds.getTypeClass();
            if (ds.attrExists("dtype") && readString(ds.openAttribute("dtype")) == "bfloat16") {
                if (cls != H5T_INTEGER || ds.getIntType().getSize() != 2)
                    fail(path, "dataset '" + p.name + "' says bfloat16 but does not hold 2-byte values; capture again");
                p.bfloat16 = true;
            } else if (cls != H5T_FLOAT) {
                fail(path, "dataset '" + p.name + "' does not hold floating-point values; capture again");
            }
            shapeOf(ds, p.bfloat16 ? 2 : ds.getFloatType().getSize(), p.name, path, p.rows, p.width);
            m_points.push_back(std::move(p));
        }
        if (m->file.nameExists("/tokens")) {
            if (m->file.childObjType("/tokens") != H5O_TYPE_DATASET) fail(path, "'/tokens' is not a dataset; capture again");
            const H5::DataSet ds = m->file.openDataSet("/tokens");
            if (ds.getTypeClass() != H5T_INTEGER) fail(path, "'/tokens' does not hold integers; capture again");
            shapeOf(ds, ds.getIntType().getSize(), "/tokens", path, m_tokenRows, m_tokenColumns);
            if (m_tokenColumns == 0) m_tokenRows = 0;
        }
        const H5::Group root = m->file.openGroup("/");
        for (int i = 0; i < root.getNumAttrs(); ++i) {
            const H5::Attribute a = root.openAttribute(static_cast<unsigned>(i));
            m_attributes[a.getName()] = readString(a);
        }
    } catch (const H5::Exception& e) {
        fail(path, "cannot be read (" + e.getDetailMsg() + "); the file is damaged: capture again");
    }
}

StoredActivations::~StoredActivations() = default;

const StoredActivationPoint& StoredActivations::point(const std::string& name) const {
    for (const auto& p : m_points)
        if (p.name == name) return p;
    fail(m_path, "holds no activations for point '" + name + "'");
}

void StoredActivations::readRows(const std::string& name, std::uint64_t rows, void* dst) const {
    const StoredActivationPoint& p = point(name);
    rows = std::min(rows, p.rows);
    if (rows == 0 || p.width == 0) return;
    try {
        const H5::DataSet ds = m->file.openGroup(kGroup).openDataSet(name);
        H5::DataSpace fileSpace = ds.getSpace();
        hsize_t start[2] = {0, 0}, count[2] = {rows, p.width};
        fileSpace.selectHyperslab(H5S_SELECT_SET, count, start);
        const H5::DataSpace memSpace(2, count);
        ds.read(dst, p.bfloat16 ? H5::PredType::NATIVE_UINT16 : H5::PredType::NATIVE_FLOAT, memSpace, fileSpace);
    } catch (const H5::Exception& e) {
        fail(m_path, "cannot read the activations of '" + name + "' (" + e.getDetailMsg() + "); capture again");
    }
}

void StoredActivations::readTokens(std::int32_t* dst) const {
    if (!hasTokens()) fail(m_path, "holds no /tokens");
    try {
        m->file.openDataSet("/tokens").read(dst, H5::PredType::NATIVE_INT32);
    } catch (const H5::Exception& e) {
        fail(m_path, "cannot read /tokens (" + e.getDetailMsg() + "); capture again");
    }
}

} // namespace latmix::io
