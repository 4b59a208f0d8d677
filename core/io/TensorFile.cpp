#include "io/TensorFile.h"

#include "io/StoredTensors.h"
#include "util/AtomicFile.h"

#include <ATen/ATen.h>
#include <H5Cpp.h>

#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <unistd.h>

namespace latmix::io {
namespace {

const H5::PredType& h5Type(at::ScalarType t) {
    switch (t) {
    case at::kDouble: return H5::PredType::NATIVE_DOUBLE;
    case at::kFloat: return H5::PredType::NATIVE_FLOAT;
    case at::kLong: return H5::PredType::NATIVE_INT64;
    default: throw std::invalid_argument("tensor files hold float64, float32 or int64 tensors");
    }
}

H5::Group groupFor(H5::H5File& file, const std::string& path, std::string& leaf) {
    H5::Group g = file.openGroup("/");
    size_t start = 0, slash;
    while ((slash = path.find('/', start)) != std::string::npos) {
        const std::string part = path.substr(start, slash - start);
        g = g.nameExists(part) ? g.openGroup(part) : g.createGroup(part);
        start = slash + 1;
    }
    leaf = path.substr(start);
    return g;
}

} // namespace

void writeTensorFile(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                     const std::map<std::string, std::string>& attributes) {
    util::AtomicFile out(path); // removes the partial file on any exception
    try {
        // The HDF5 1.8 file format (superblock v2: checksummed metadata, readable by libhdf5 1.8
        // and later) behind a 512-byte user block that sealTensorFile fills with the file's size
        // and CRC-32 (io/StoredTensors reads nothing else).
        H5::FileAccPropList access;
        access.setLibverBounds(H5F_LIBVER_V18, H5F_LIBVER_LATEST);
        H5::FileCreatPropList create;
        create.setUserblock(kTensorFileSealBytes);
        H5::H5File file(out.tempPath(), H5F_ACC_TRUNC, create, access);
        for (const auto& [name, tensor] : tensors) {
            if (!tensor.defined()) continue;
            const at::Tensor t = tensor.detach().cpu().contiguous();
            std::string leaf;
            H5::Group g = groupFor(file, name, leaf);
            std::vector<hsize_t> dims(t.sizes().begin(), t.sizes().end());
            H5::DataSpace space(static_cast<int>(dims.size()), dims.empty() ? nullptr : dims.data());
            H5::DataSet ds = g.createDataSet(leaf, h5Type(t.scalar_type()), space);
            if (t.numel() > 0) ds.write(t.data_ptr(), h5Type(t.scalar_type()));
        }
        H5::Group root = file.openGroup("/");
        for (const auto& [k, v] : attributes) {
            H5::StrType type(H5::PredType::C_S1, v.empty() ? 1 : v.size());
            H5::Attribute a = root.createAttribute(k, type, H5::DataSpace(H5S_SCALAR));
            a.write(type, v.empty() ? std::string(" ") : v);
        }
        file.close();
    } catch (const H5::Exception& e) {
        throw std::runtime_error("cannot write '" + path + "': " + e.getDetailMsg());
    }
    sealTensorFile(out.tempPath());
    out.commit();
}

TensorFileContents readTensorFile(const std::string& path) {
    TensorFileContents out;
    out.attributes = readStoredTensors(path, [&](const StoredTensor& s) {
        const at::ScalarType type = s.type == StoredTensor::Type::F32   ? at::kFloat
                                    : s.type == StoredTensor::Type::I64 ? at::kLong
                                                                        : at::kDouble;
        at::Tensor t = at::empty(s.shape, at::TensorOptions().dtype(type));
        out.tensors[s.name] = t;
        return t.data_ptr();
    });
    return out;
}

} // namespace latmix::io
