#include "io/ActivationStore.h"

#include "util/AtomicFile.h"

#include <ATen/ATen.h>
#include <H5Cpp.h>

#include <cstdio>
#include <stdexcept>

namespace latmix::io {
namespace {

const char* kGroup = "/activations";

void writeStringAttribute(H5::H5Object& obj, const std::string& name, const std::string& value) {
    H5::StrType type(H5::PredType::C_S1, value.empty() ? 1 : value.size());
    H5::Attribute a = obj.createAttribute(name, type, H5::DataSpace(H5S_SCALAR));
    a.write(type, value.empty() ? std::string(1, '\0') : value);
}

std::string readStringAttribute(const H5::Attribute& a) {
    std::string v;
    a.read(a.getStrType(), v);
    return v;
}

// bfloat16 has no HDF5 type: store its bits as uint16 and say so in a "dtype" attribute.
bool isBfloat16(const H5::DataSet& ds) {
    if (!ds.attrExists("dtype")) return false;
    return readStringAttribute(ds.openAttribute("dtype")) == "bfloat16";
}

} // namespace

struct ActivationWriter::Impl {
    explicit Impl(const std::string& p) : out(p), path(p), partial(out.tempPath()) {}
    util::AtomicFile out; // removes the partial file unless finish() committed it
    std::string path, partial;
    bool bf16 = false;
    bool finished = false;
    H5::H5File file;
    H5::Group group;
};

ActivationWriter::ActivationWriter(const std::string& path, bool bfloat16,
                                   const std::map<std::string, std::string>& attributes)
    : m(std::make_unique<Impl>(path)) {
    m->bf16 = bfloat16;
    try {
        m->file = H5::H5File(m->partial, H5F_ACC_TRUNC);
        m->group = m->file.createGroup(kGroup);
        H5::Group root = m->file.openGroup("/");
        for (const auto& [k, v] : attributes) writeStringAttribute(root, k, v);
    } catch (const H5::Exception& e) {
        throw std::runtime_error("cannot create run file '" + m->partial + "': " + e.getDetailMsg());
    }
}

ActivationWriter::~ActivationWriter() {
    if (!m->finished) {
        try {
            m->group.close();
            m->file.close();
        } catch (...) {
        }
    }
}

void ActivationWriter::append(const std::string& point, const at::Tensor& rowsIn) {
    if (rowsIn.dim() != 2) throw std::invalid_argument("append: activations of '" + point + "' must be 2-D");
    auto rows = rowsIn.detach().to(at::kCPU).to(m->bf16 ? at::kBFloat16 : at::kFloat).contiguous();
    const hsize_t n = rows.size(0), width = rows.size(1);
    const H5::PredType& type = m->bf16 ? H5::PredType::NATIVE_UINT16 : H5::PredType::NATIVE_FLOAT;
    try {
        H5::DataSet ds;
        hsize_t oldRows = 0;
        if (!m->group.nameExists(point)) {
            hsize_t dims[2] = {0, width}, maxDims[2] = {H5S_UNLIMITED, width};
            hsize_t chunk[2] = {std::max<hsize_t>(1, std::min<hsize_t>(1024, (1u << 20) / std::max<hsize_t>(width, 1))), width};
            H5::DSetCreatPropList props;
            props.setChunk(2, chunk);
            ds = m->group.createDataSet(point, type, H5::DataSpace(2, dims, maxDims), props);
            writeStringAttribute(ds, "dtype", m->bf16 ? "bfloat16" : "float32");
        } else {
            ds = m->group.openDataSet(point);
            hsize_t dims[2];
            ds.getSpace().getSimpleExtentDims(dims);
            if (dims[1] != width)
                throw std::invalid_argument("activations of '" + point + "' changed width from " +
                                            std::to_string(dims[1]) + " to " + std::to_string(width));
            oldRows = dims[0];
        }
        hsize_t newDims[2] = {oldRows + n, width};
        ds.extend(newDims);
        H5::DataSpace fileSpace = ds.getSpace();
        hsize_t start[2] = {oldRows, 0}, count[2] = {n, width};
        fileSpace.selectHyperslab(H5S_SELECT_SET, count, start);
        H5::DataSpace memSpace(2, count);
        ds.write(rows.data_ptr(), type, memSpace, fileSpace);
    } catch (const H5::Exception& e) {
        throw std::runtime_error("writing activations of '" + point + "' to '" + m->partial + "': " + e.getDetailMsg());
    }
}

void ActivationWriter::writeTokens(const at::Tensor& tokens) {
    auto t = tokens.to(at::kCPU).to(at::kInt).contiguous();
    hsize_t dims[2] = {static_cast<hsize_t>(t.size(0)), static_cast<hsize_t>(t.size(1))};
    H5::DataSet ds = m->file.createDataSet("/tokens", H5::PredType::NATIVE_INT32, H5::DataSpace(2, dims));
    ds.write(t.data_ptr<int32_t>(), H5::PredType::NATIVE_INT32);
}

void ActivationWriter::finish() {
    m->group.close();
    m->file.close();
    m->out.commit();
    m->finished = true;
}

struct ActivationReader::Impl {
    std::string path;
    H5::H5File file;
};

ActivationReader::ActivationReader(const std::string& path) : m(std::make_unique<Impl>()) {
    m->path = path;
    try {
        m->file = H5::H5File(path, H5F_ACC_RDONLY);
        if (!m->file.nameExists(kGroup)) throw std::runtime_error("no /activations group");
    } catch (const H5::Exception& e) {
        throw std::runtime_error("cannot open run file '" + path + "': " + e.getDetailMsg());
    } catch (const std::runtime_error& e) {
        throw std::runtime_error("'" + path + "' is not an activation run file: " + e.what());
    }
}

ActivationReader::~ActivationReader() = default;

std::vector<std::string> ActivationReader::points() const {
    H5::Group g = m->file.openGroup(kGroup);
    std::vector<std::string> names;
    for (hsize_t i = 0; i < g.getNumObjs(); ++i) names.push_back(g.getObjnameByIdx(i));
    return names;
}

std::map<std::string, std::string> ActivationReader::attributes() const {
    std::map<std::string, std::string> out;
    H5::Group root = m->file.openGroup("/");
    for (int i = 0; i < root.getNumAttrs(); ++i) {
        H5::Attribute a = root.openAttribute(static_cast<unsigned>(i));
        out[a.getName()] = readStringAttribute(a);
    }
    return out;
}

std::int64_t ActivationReader::rows(const std::string& point) const {
    hsize_t dims[2];
    m->file.openGroup(kGroup).openDataSet(point).getSpace().getSimpleExtentDims(dims);
    return static_cast<std::int64_t>(dims[0]);
}

at::Tensor ActivationReader::read(const std::string& point, std::int64_t maxRows) const {
    H5::Group g = m->file.openGroup(kGroup);
    if (!g.nameExists(point)) throw std::runtime_error("no activations for point '" + point + "' in '" + m->path + "'");
    H5::DataSet ds = g.openDataSet(point);
    hsize_t dims[2];
    H5::DataSpace fileSpace = ds.getSpace();
    fileSpace.getSimpleExtentDims(dims);
    hsize_t n = maxRows > 0 ? std::min<hsize_t>(dims[0], static_cast<hsize_t>(maxRows)) : dims[0];
    hsize_t start[2] = {0, 0}, count[2] = {n, dims[1]};
    fileSpace.selectHyperslab(H5S_SELECT_SET, count, start);
    H5::DataSpace memSpace(2, count);
    const bool bf16 = isBfloat16(ds);
    auto out = at::empty({static_cast<int64_t>(n), static_cast<int64_t>(dims[1])}, bf16 ? at::kBFloat16 : at::kFloat);
    ds.read(out.data_ptr(), bf16 ? H5::PredType::NATIVE_UINT16 : H5::PredType::NATIVE_FLOAT, memSpace, fileSpace);
    return out.to(at::kFloat);
}

at::Tensor ActivationReader::tokens() const {
    H5::DataSet ds = m->file.openDataSet("/tokens");
    hsize_t dims[2];
    ds.getSpace().getSimpleExtentDims(dims);
    auto out = at::empty({static_cast<int64_t>(dims[0]), static_cast<int64_t>(dims[1])}, at::kInt);
    ds.read(out.data_ptr<int32_t>(), H5::PredType::NATIVE_INT32);
    return out;
}

} // namespace latmix::io
