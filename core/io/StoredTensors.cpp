#include "io/StoredTensors.h"

#include <H5Cpp.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>

namespace latmix::io {
namespace {

constexpr int kMaxDepth = 32; // our files nest 4 levels; a hard link to a parent group loops forever

[[noreturn]] void fail(const std::string& path, const std::string& what) {
    throw std::runtime_error("tensor file '" + path + "': " + what);
}

// Tensor files are written in the HDF5 1.8 format (io/TensorFile): superblock version 2 or later,
// whose metadata blocks all carry checksums that libhdf5 checks. Older superblocks (0 and 1, the
// library's default format, as LATMiX wrote before) have none, and Debian's libhdf5 1.10 crashes
// on some damaged ones (fuzz_tensorfile: a SEGV in H5A__close while opening an attribute), so
// they are refused before libhdf5 sees them. HDF5 looks for its signature at 0, 512, 1024, ...;
// ours is always at 0 (no user block).
void checkFormat(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    unsigned char head[9] = {};
    if (!in.read(reinterpret_cast<char*>(head), sizeof head) ||
        std::memcmp(head, "\x89HDF\r\n\x1a\n", 8) != 0)
        fail(path, "is not an HDF5 file (no HDF5 signature at its start); the file is damaged or not a LATMiX run "
                   "file: run again");
    if (head[8] < 2)
        fail(path, "uses HDF5 superblock version " + std::to_string(head[8]) +
                       ", a format without checksums that this version no longer reads (LATMiX wrote it so until "
                       "2026-11-25); convert it with `h5repack --latest FILE NEW` (Debian: hdf5-tools) or run again");
}

const H5::PredType& memoryType(StoredTensor::Type t) {
    switch (t) {
    case StoredTensor::Type::F32: return H5::PredType::NATIVE_FLOAT;
    case StoredTensor::Type::I64: return H5::PredType::NATIVE_INT64;
    case StoredTensor::Type::F64: break;
    }
    return H5::PredType::NATIVE_DOUBLE;
}

void collect(const H5::Group& g, const std::string& prefix, int depth, const std::string& path,
             const std::function<void*(const StoredTensor&)>& target) {
    if (depth > kMaxDepth)
        fail(path, "groups nest deeper than " + std::to_string(kMaxDepth) + " levels at '" + prefix +
                       "' (a link loop?); it is not a file written by LATMiX");
    for (hsize_t i = 0; i < g.getNumObjs(); ++i) {
        const std::string name = g.getObjnameByIdx(i);
        const std::string full = prefix.empty() ? name : prefix + "/" + name;
        const H5G_obj_t kind = g.getObjTypeByIdx(i);
        if (kind == H5G_GROUP) {
            collect(g.openGroup(name), full, depth + 1, path, target);
            continue;
        }
        if (kind != H5G_DATASET) continue; // named types and the like carry no tensor
        H5::DataSet ds = g.openDataSet(name);
        const auto bad = [&](const std::string& what) {
            fail(path, "dataset '" + full + "' " + what + "; the file is damaged or not written by LATMiX: run again");
        };
        const H5::DataSpace space = ds.getSpace();
        const int rank = space.getSimpleExtentNdims();
        if (rank < 0 || rank > 32) bad("has rank " + std::to_string(rank));
        std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
        if (rank > 0) space.getSimpleExtentDims(dims.data());
        StoredTensor t;
        t.name = full;
        const H5T_class_t cls = ds.getTypeClass();
        std::size_t fileItem = 0;
        if (cls == H5T_INTEGER) {
            t.type = StoredTensor::Type::I64;
            fileItem = ds.getIntType().getSize();
        } else if (cls == H5T_FLOAT) {
            fileItem = ds.getFloatType().getSize();
            t.type = fileItem == 4 ? StoredTensor::Type::F32 : StoredTensor::Type::F64;
        } else {
            bad("is not numeric");
        }
        std::uint64_t numel = 1;
        for (hsize_t d : dims) {
            if (d > static_cast<hsize_t>(std::numeric_limits<std::int64_t>::max()) ||
                (d != 0 && numel > std::numeric_limits<std::uint64_t>::max() / 8 / d))
                bad("has a shape too large to hold");
            numel *= d;
            t.shape.push_back(static_cast<std::int64_t>(d));
        }
        t.numel = numel;
        // Storage for every declared byte: HDF5 otherwise serves unwritten data as fill values.
        const std::uint64_t declared = numel * fileItem;
        const std::uint64_t stored = ds.getStorageSize();
        if (stored < declared)
            bad("declares " + std::to_string(declared) + " bytes but the file stores " + std::to_string(stored));
        void* buffer = target(t);
        if (numel > 0) ds.read(buffer, memoryType(t.type));
    }
}

} // namespace

std::map<std::string, std::string> readStoredTensors(const std::string& path,
                                                     const std::function<void*(const StoredTensor&)>& target) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) fail(path, "does not exist");
    checkFormat(path);
    std::map<std::string, std::string> attributes;
    // The message below says what went wrong; libhdf5's own print of its error stack to stderr
    // would only bury it.
    H5::Exception::dontPrint();
    try {
        H5::H5File file(path, H5F_ACC_RDONLY);
        H5::Group root = file.openGroup("/");
        collect(root, "", 0, path, target);
        for (int i = 0; i < root.getNumAttrs(); ++i) {
            H5::Attribute a = root.openAttribute(static_cast<unsigned>(i));
            if (a.getTypeClass() != H5T_STRING) continue;
            std::string v;
            a.read(a.getStrType(), v);
            attributes[a.getName()] = v == " " ? std::string() : v;
        }
    } catch (const H5::Exception& e) {
        fail(path, "cannot be read (not an HDF5 tensor file?): " + e.getDetailMsg());
    }
    return attributes;
}

} // namespace latmix::io
