#include "io/TensorFile.h"

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

void collect(const H5::Group& g, const std::string& prefix, TensorFileContents& out, const std::string& file) {
    for (hsize_t i = 0; i < g.getNumObjs(); ++i) {
        const std::string name = g.getObjnameByIdx(i);
        const std::string full = prefix.empty() ? name : prefix + "/" + name;
        if (g.getObjTypeByIdx(i) == H5G_GROUP) {
            collect(g.openGroup(name), full, out, file);
            continue;
        }
        H5::DataSet ds = g.openDataSet(name);
        const H5::DataSpace space = ds.getSpace();
        std::vector<hsize_t> dims(static_cast<size_t>(space.getSimpleExtentNdims()));
        if (!dims.empty()) space.getSimpleExtentDims(dims.data());
        std::vector<int64_t> shape(dims.begin(), dims.end());
        const H5T_class_t cls = ds.getTypeClass();
        at::ScalarType st = at::kDouble;
        if (cls == H5T_INTEGER) st = at::kLong;
        else if (cls == H5T_FLOAT && ds.getFloatType().getSize() == 4) st = at::kFloat;
        else if (cls != H5T_FLOAT) throw std::runtime_error("'" + file + "': dataset '" + full + "' is not numeric");
        at::Tensor t = at::empty(shape, at::TensorOptions().dtype(st));
        if (t.numel() > 0) ds.read(t.data_ptr(), h5Type(st));
        out.tensors[full] = t;
    }
}

} // namespace

void writeTensorFile(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                     const std::map<std::string, std::string>& attributes) {
    util::AtomicFile out(path); // removes the partial file on any exception
    try {
        H5::H5File file(out.tempPath(), H5F_ACC_TRUNC);
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
    out.commit();
}

TensorFileContents readTensorFile(const std::string& path) {
    if (!std::filesystem::exists(path)) throw std::runtime_error("'" + path + "' does not exist");
    TensorFileContents out;
    try {
        H5::H5File file(path, H5F_ACC_RDONLY);
        H5::Group root = file.openGroup("/");
        collect(root, "", out, path);
        for (int i = 0; i < root.getNumAttrs(); ++i) {
            H5::Attribute a = root.openAttribute(static_cast<unsigned>(i));
            std::string v;
            a.read(a.getStrType(), v);
            out.attributes[a.getName()] = v == " " ? std::string() : v;
        }
    } catch (const H5::Exception& e) {
        throw std::runtime_error("cannot read '" + path + "' (not an HDF5 tensor file?): " + e.getDetailMsg());
    }
    return out;
}

} // namespace latmix::io
