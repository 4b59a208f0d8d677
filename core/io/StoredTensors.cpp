#include "io/StoredTensors.h"

#include <H5Cpp.h>
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <vector>

namespace latmix::io {
namespace {

constexpr int kMaxDepth = 32; // our files nest 4 levels; a hard link to a parent group loops forever

[[noreturn]] void fail(const std::string& path, const std::string& what) {
    throw std::runtime_error("tensor file '" + path + "': " + what);
}

constexpr const char* kSealTitle = "LATMiX tensor file 1";

std::uint64_t fileSize(const std::string& path) {
    std::error_code ec;
    const auto n = std::filesystem::file_size(path, ec);
    if (ec) fail(path, "cannot read its size: " + ec.message());
    return n;
}

// CRC-32 (zlib) of the bytes of path from offset on, read in 1 MiB pieces.
std::uint32_t crcFrom(const std::string& path, std::uint64_t offset) {
    std::ifstream in(path, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(offset));
    std::vector<char> buf(1 << 20);
    uLong crc = crc32(0L, Z_NULL, 0);
    while (in) {
        in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
        const auto got = in.gcount();
        if (got > 0) crc = crc32(crc, reinterpret_cast<const Bytef*>(buf.data()), static_cast<uInt>(got));
    }
    if (in.bad()) fail(path, "cannot be read");
    return static_cast<std::uint32_t>(crc);
}

} // namespace

// The seal (see the header), then the HDF5 format behind it: the 1.8 format (superblock 2 or
// later), whose metadata blocks carry checksums of their own.
void checkTensorFileSeal(const std::string& path) {
    const std::uint64_t size = fileSize(path);
    std::ifstream in(path, std::ios::binary);
    std::string seal(kTensorFileSealBytes, '\0');
    if (size < kTensorFileSealBytes + 9 || !in.read(seal.data(), static_cast<std::streamsize>(seal.size())) ||
        seal.compare(0, std::strlen(kSealTitle), kSealTitle) != 0)
        fail(path, "is not a sealed LATMiX tensor file (written by LATMiX before 2026-11-25, by another program, or "
                   "damaged at its start): run again to write it anew");
    unsigned long long declared = 0;
    unsigned long stored = 0;
    if (std::sscanf(seal.c_str() + std::strlen(kSealTitle), "\nbytes %llu\ncrc32 %lx\n", &declared, &stored) != 2)
        fail(path, "has a damaged seal; run again to write it anew");
    if (declared != size)
        fail(path, "is " + std::to_string(size) + " bytes but was written with " + std::to_string(declared) +
                       " (truncated or appended to); the file is damaged: run again");
    const std::uint32_t crc = crcFrom(path, kTensorFileSealBytes);
    if (crc != stored) {
        char text[64];
        std::snprintf(text, sizeof text, "(CRC-32 %08x, written %08lx)", crc, stored);
        fail(path, std::string("does not match its checksum ") + text + "; the file is damaged: run again");
    }
    unsigned char head[9] = {};
    in.seekg(static_cast<std::streamoff>(kTensorFileSealBytes));
    if (!in.read(reinterpret_cast<char*>(head), sizeof head) || std::memcmp(head, "\x89HDF\r\n\x1a\n", 8) != 0)
        fail(path, "holds no HDF5 file behind its seal; the file is damaged: run again");
    if (head[8] < 2)
        fail(path, "uses HDF5 superblock version " + std::to_string(head[8]) +
                       ", a format without checksums, which tensor files are never written in; run again");
}

namespace {

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
    checkTensorFileSeal(path);
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

void sealTensorFile(const std::string& path) {
    const std::uint64_t size = fileSize(path);
    char seal[kTensorFileSealBytes];
    std::memset(seal, ' ', sizeof seal);
    const int n = std::snprintf(seal, sizeof seal, "%s\nbytes %llu\ncrc32 %08lx\n", kSealTitle,
                                static_cast<unsigned long long>(size),
                                static_cast<unsigned long>(crcFrom(path, kTensorFileSealBytes)));
    seal[n] = '\n'; // snprintf's terminating NUL: the rest stays spaces
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    if (!f || !f.write(seal, sizeof seal) || !f.flush())
        throw std::runtime_error("cannot write '" + path + "'; check free disk space and permissions");
}

} // namespace latmix::io
