#include "io/ActivationStore.h"

#include "io/StoredActivations.h"
#include "io/StoredTensors.h"
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
        // Sealed like the tensor files (io/StoredTensors.h): the 1.8 format behind a 512-byte user
        // block that finish() fills with the file's size and CRC-32, which the reader checks first.
        H5::FileAccPropList access;
        access.setLibverBounds(H5F_LIBVER_V18, H5F_LIBVER_LATEST);
        H5::FileCreatPropList create;
        create.setUserblock(kTensorFileSealBytes);
        m->file = H5::H5File(m->partial, H5F_ACC_TRUNC, create, access);
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
    sealTensorFile(m->partial);
    m->out.commit();
    m->finished = true;
}

struct ActivationReader::Impl {
    explicit Impl(const std::string& path) : stored(path) {}
    StoredActivations stored; // checks the seal and every dataset's type and shape
};

ActivationReader::ActivationReader(const std::string& path) : m(std::make_unique<Impl>(path)) {}

ActivationReader::~ActivationReader() = default;

std::vector<std::string> ActivationReader::points() const {
    std::vector<std::string> names;
    for (const auto& p : m->stored.points()) names.push_back(p.name);
    return names;
}

std::map<std::string, std::string> ActivationReader::attributes() const { return m->stored.attributes(); }

std::int64_t ActivationReader::rows(const std::string& point) const {
    return static_cast<std::int64_t>(m->stored.point(point).rows);
}

at::Tensor ActivationReader::read(const std::string& point, std::int64_t maxRows) const {
    const StoredActivationPoint& p = m->stored.point(point);
    const std::uint64_t n = maxRows > 0 ? std::min<std::uint64_t>(p.rows, static_cast<std::uint64_t>(maxRows)) : p.rows;
    auto out = at::empty({static_cast<int64_t>(n), static_cast<int64_t>(p.width)}, p.bfloat16 ? at::kBFloat16 : at::kFloat);
    m->stored.readRows(point, n, out.data_ptr());
    return out.to(at::kFloat);
}

at::Tensor ActivationReader::tokens() const {
    auto out = at::empty({static_cast<int64_t>(m->stored.tokenRows()), static_cast<int64_t>(m->stored.tokenColumns())},
                         at::kInt);
    if (m->stored.hasTokens()) m->stored.readTokens(out.data_ptr<int32_t>());
    return out;
}

} // namespace latmix::io
