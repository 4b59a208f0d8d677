// The safetensors header: 8 bytes little-endian u64 N, N bytes of JSON mapping tensor names to
// {dtype, shape, data_offsets: [begin, end]} (offsets relative to the data section that follows)
// plus an optional "__metadata__" string map. Everything is validated here, before a single
// tensor byte is touched, so that a corrupt or truncated download fails with a message instead
// of a crash or garbage weights later. tests/fuzz/fuzz_safetensors.cpp feeds it arbitrary bytes.
#include "io/SafeTensorsHeader.h"

#include "util/Text.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace latmix::io {

using util::shapeText;

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
    throw std::runtime_error("safetensors file '" + path + "': " + what);
}

[[noreturn]] void failTensor(const std::string& path, const std::string& tensor, const std::string& what) {
    fail(path, "tensor '" + tensor + "': " + what);
}

const char* kRedownload = "the file is corrupt or truncated; download or export it again";

std::string dtypeNames() {
    std::string s;
    for (const auto& d : safeTensorsDtypeSpecs()) s += (s.empty() ? "" : ", ") + std::string(d.name);
    return s;
}

std::uint64_t readU64(const nlohmann::json& v, const std::string& path, const std::string& tensor,
                      const char* field) {
    if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0))
        failTensor(path, tensor, std::string("'") + field + "' must hold non-negative integers, got " + v.dump() +
                                     "; " + kRedownload);
    return v.get<std::uint64_t>();
}

SafeTensorEntry parseEntry(const std::string& path, const std::string& name, const nlohmann::json& v,
                           std::uint64_t dataSize) {
    if (!v.is_object()) failTensor(path, name, "header entry is not a JSON object; " + std::string(kRedownload));
    for (const char* field : {"dtype", "shape", "data_offsets"})
        if (!v.contains(field))
            failTensor(path, name, std::string("header entry has no '") + field + "'; " + kRedownload);
    SafeTensorEntry e;
    e.name = name;
    if (!v["dtype"].is_string()) failTensor(path, name, "'dtype' is not a string; " + std::string(kRedownload));
    e.dtype = v["dtype"].get<std::string>();
    const SafeTensorsDtypeSpec* dt = safeTensorsDtypeSpec(e.dtype);
    if (!dt)
        failTensor(path, name, "unknown dtype '" + e.dtype + "' (safetensors defines " + dtypeNames() + "); " +
                                   kRedownload);
    const auto& shape = v["shape"];
    if (!shape.is_array()) failTensor(path, name, "'shape' is not an array; " + std::string(kRedownload));
    // Element count with overflow check: a hostile header must not wrap around to a small size.
    std::uint64_t numel = 1;
    for (const auto& d : shape) {
        const std::uint64_t n = readU64(d, path, name, "shape");
        if (n > static_cast<std::uint64_t>(std::numeric_limits<int64_t>::max()))
            failTensor(path, name, "dimension " + d.dump() + " is too large; " + kRedownload);
        e.shape.push_back(static_cast<int64_t>(n));
        if (n != 0 && numel > std::numeric_limits<std::uint64_t>::max() / n)
            failTensor(path, name, "shape " + shape.dump() + " overflows; " + kRedownload);
        numel *= n;
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2)
        failTensor(path, name, "'data_offsets' must be [begin, end], got " + off.dump() + "; " + kRedownload);
    e.begin = readU64(off[0], path, name, "data_offsets");
    e.end = readU64(off[1], path, name, "data_offsets");
    if (e.end < e.begin)
        failTensor(path, name, "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                                   "] are decreasing; " + kRedownload);
    if (e.end > dataSize)
        failTensor(path, name, "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                                   "] lie outside the data section of " + std::to_string(dataSize) + " bytes; " +
                                   kRedownload);
    if (numel > std::numeric_limits<std::uint64_t>::max() / dt->itemSize || numel * dt->itemSize != e.end - e.begin)
        failTensor(path, name, "byte size " + std::to_string(e.end - e.begin) + " does not match shape " +
                                   shapeText(e.shape) + " of " + e.dtype + " (" + std::to_string(numel) + " x " +
                                   std::to_string(dt->itemSize) + " bytes); " + kRedownload);
    return e;
}

} // namespace

const std::vector<SafeTensorsDtypeSpec>& safeTensorsDtypeSpecs() {
    static const std::vector<SafeTensorsDtypeSpec> specs = {
        {"F64", 8}, {"F32", 4},     {"F16", 2},     {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1},
        {"U8", 1},  {"BOOL", 1},    {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"U16", 2}, {"U32", 4}, {"U64", 8},
    };
    return specs;
}

const SafeTensorsDtypeSpec* safeTensorsDtypeSpec(const std::string& name) {
    for (const auto& d : safeTensorsDtypeSpecs())
        if (name == d.name) return &d;
    return nullptr;
}

SafeTensorsHeader parseSafeTensorsHeader(const std::string& path, const unsigned char* bytes, std::uint64_t fileSize) {
    if (fileSize < 8)
        fail(path, "file is " + std::to_string(fileSize) + " bytes, shorter than the 8-byte header length; " +
                       kRedownload);
    // safetensors is little-endian by definition (as are all targets we build for).
    std::uint64_t headerLen = 0;
    for (int i = 7; i >= 0; --i) headerLen = (headerLen << 8) | bytes[i];
    if (headerLen > fileSize - 8)
        fail(path, "header length " + std::to_string(headerLen) + " goes beyond the end of the file (" +
                       std::to_string(fileSize) + " bytes); " + kRedownload);

    const char* hbegin = reinterpret_cast<const char*>(bytes + 8);
    nlohmann::json header;
    try {
        header = nlohmann::json::parse(hbegin, hbegin + headerLen);
    } catch (const nlohmann::json::exception& e) {
        fail(path, std::string("header is not valid JSON (") + e.what() + "); " + kRedownload);
    }
    if (!header.is_object()) fail(path, std::string("header is not a JSON object; ") + kRedownload);

    SafeTensorsHeader h;
    h.dataStart = 8 + headerLen;
    const std::uint64_t dataSize = fileSize - h.dataStart;
    for (auto it = header.begin(); it != header.end(); ++it) {
        if (it.key() == "__metadata__") {
            if (!it.value().is_object()) fail(path, std::string("'__metadata__' is not a JSON object; ") + kRedownload);
            for (auto m = it.value().begin(); m != it.value().end(); ++m) {
                if (!m.value().is_string())
                    fail(path, "'__metadata__' entry '" + m.key() + "' is not a string; " + kRedownload);
                h.metadata[m.key()] = m.value().get<std::string>();
            }
            continue;
        }
        h.entries.push_back(parseEntry(path, it.key(), it.value(), dataSize));
    }
    // File order (by offset) is the natural order for the entries; it also makes the overlap
    // check a single pass. Empty tensors occupy no bytes and cannot overlap anything.
    std::sort(h.entries.begin(), h.entries.end(), [](const SafeTensorEntry& a, const SafeTensorEntry& b) {
        if (a.begin != b.begin) return a.begin < b.begin;
        if (a.end != b.end) return a.end < b.end;
        return a.name < b.name;
    });
    const SafeTensorEntry* prev = nullptr;
    for (const auto& e : h.entries) {
        if (e.begin == e.end) continue;
        if (prev && e.begin < prev->end)
            failTensor(path, e.name, "bytes [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                                         ") overlap tensor '" + prev->name + "' [" + std::to_string(prev->begin) +
                                         ", " + std::to_string(prev->end) + "); " + kRedownload);
        prev = &e;
    }
    return h;
}

} // namespace latmix::io
