// Streaming safetensors writer and pread() reader for exports (see RawSafeTensors.h). The file
// layout is the safetensors one: u64 little-endian header length, JSON header
// {name: {dtype, shape, data_offsets}, "__metadata__": {string: string}}, data section.
#include "export/RawSafeTensors.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>
#include <stdexcept>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace latmix::exporting {
namespace {

struct DtypeInfo {
    const char* name;
    std::size_t itemSize;
    bool torchType;       // libtorch 1.13 has the type
    at::ScalarType type;  // when torchType
};

// The safetensors dtypes (huggingface/safetensors). F8 types are stored as uint8 codes here.
const DtypeInfo kDtypes[] = {
    {"F64", 8, true, at::kDouble},   {"F32", 4, true, at::kFloat},       {"F16", 2, true, at::kHalf},
    {"BF16", 2, true, at::kBFloat16}, {"I64", 8, true, at::kLong},       {"I32", 4, true, at::kInt},
    {"I16", 2, true, at::kShort},    {"I8", 1, true, at::kChar},         {"U8", 1, true, at::kByte},
    {"BOOL", 1, true, at::kBool},    {"F8_E4M3", 1, false, at::kByte},   {"F8_E5M2", 1, false, at::kByte},
    {"U16", 2, false, at::kByte},    {"U32", 4, false, at::kByte},       {"U64", 8, false, at::kByte},
};

const DtypeInfo* dtypeByName(const std::string& n) {
    for (const auto& d : kDtypes)
        if (n == d.name) return &d;
    return nullptr;
}

const char* kCorrupt = "the file is corrupt or truncated; export it again";

std::string shapeText(const std::vector<std::int64_t>& s) {
    std::string t = "[";
    for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
    return t + "]";
}

// numel * itemSize with overflow checks; throws via fail().
template <class Fail>
std::uint64_t byteSize(const std::vector<std::int64_t>& shape, std::size_t itemSize, Fail&& fail) {
    std::uint64_t n = itemSize;
    for (auto d : shape) {
        if (d < 0) fail("negative dimension in shape " + shapeText(shape));
        const auto u = static_cast<std::uint64_t>(d);
        if (u != 0 && n > std::numeric_limits<std::uint64_t>::max() / u) fail("shape " + shapeText(shape) + " overflows");
        n *= u;
    }
    return n;
}

void writeAll(int fd, const void* data, std::size_t n, const std::string& path) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
        const ssize_t w = ::write(fd, p, std::min<std::size_t>(n, std::size_t(1) << 30));
        if (w < 0) {
            if (errno == EINTR) continue;
            throw std::runtime_error("cannot write '" + path + "': " + std::strerror(errno) +
                                     "; check free disk space and permissions");
        }
        p += w;
        n -= static_cast<std::size_t>(w);
    }
}

} // namespace

std::size_t safetensorsItemSize(const std::string& dtype) {
    const DtypeInfo* d = dtypeByName(dtype);
    return d ? d->itemSize : 0;
}

void writeSafeTensorsStreamed(const std::string& path, const std::vector<RawTensorSpec>& specs,
                              const std::function<at::Tensor(std::size_t)>& produce,
                              const std::map<std::string, std::string>& metadata) {
    auto fail = [&](const std::string& what) -> void {
        throw std::runtime_error("writing safetensors file '" + path + "': " + what);
    };
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!metadata.empty()) {
        nlohmann::ordered_json m = nlohmann::ordered_json::object();
        for (const auto& [k, v] : metadata) m[k] = v;
        header["__metadata__"] = m;
    }
    std::vector<std::uint64_t> sizes;
    std::set<std::string> seen;
    std::uint64_t offset = 0;
    for (const auto& s : specs) {
        if (s.name.empty() || s.name == "__metadata__") fail("invalid tensor name '" + s.name + "'");
        if (!seen.insert(s.name).second) fail("tensor '" + s.name + "' appears twice");
        const DtypeInfo* d = dtypeByName(s.dtype);
        if (!d) fail("tensor '" + s.name + "': unknown dtype '" + s.dtype + "'");
        const std::uint64_t bytes = byteSize(s.shape, d->itemSize, [&](const std::string& w) { fail("tensor '" + s.name + "': " + w); });
        nlohmann::ordered_json e;
        e["dtype"] = s.dtype;
        e["shape"] = s.shape;
        e["data_offsets"] = {offset, offset + bytes};
        header[s.name] = e;
        sizes.push_back(bytes);
        offset += bytes;
    }
    std::string text = header.dump();
    text.append((8 - (8 + text.size()) % 8) % 8, ' '); // data section 8-byte aligned

    std::string tmp = path + ".tmp-XXXXXX";
    const int fd = ::mkstemp(tmp.data());
    if (fd < 0)
        throw std::runtime_error("cannot create a temporary file next to '" + path + "': " + std::strerror(errno) +
                                 "; check that the folder exists and is writable");
    bool open = true;
    try {
        ::fchmod(fd, 0644);
        unsigned char len[8];
        const std::uint64_t n = text.size();
        for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
        writeAll(fd, len, 8, tmp);
        writeAll(fd, text.data(), text.size(), tmp);
        for (std::size_t i = 0; i < specs.size(); ++i) {
            at::Tensor t = produce(i);
            if (!t.defined()) fail("tensor '" + specs[i].name + "' was not produced");
            t = t.detach().to(at::kCPU).contiguous();
            const auto bytes = static_cast<std::uint64_t>(t.numel()) * t.element_size();
            if (bytes != sizes[i])
                fail("tensor '" + specs[i].name + "' has " + std::to_string(bytes) + " bytes, its header entry (" +
                     specs[i].dtype + " " + shapeText(specs[i].shape) + ") says " + std::to_string(sizes[i]));
            if (bytes) writeAll(fd, t.data_ptr(), static_cast<std::size_t>(bytes), tmp);
        }
        if (::fsync(fd) != 0) throw std::runtime_error("cannot flush '" + tmp + "' to disk: " + std::strerror(errno));
        open = false;
        if (::close(fd) != 0) throw std::runtime_error("cannot close '" + tmp + "': " + std::strerror(errno));
        if (::rename(tmp.c_str(), path.c_str()) != 0)
            throw std::runtime_error("cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(errno));
    } catch (...) {
        if (open) ::close(fd);
        ::unlink(tmp.c_str());
        throw;
    }
}

RawSafeTensorsReader::RawSafeTensorsReader(const std::string& path) : m_path(path) {
    auto fail = [&](const std::string& what) -> void {
        throw std::runtime_error("safetensors file '" + path + "': " + what);
    };
    m_fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (m_fd < 0) fail(std::string("cannot open: ") + std::strerror(errno) + "; check that the file exists");
    try {
        struct stat st {};
        if (::fstat(m_fd, &st) != 0 || !S_ISREG(st.st_mode)) fail("is not a readable regular file");
        const auto fileSize = static_cast<std::uint64_t>(st.st_size);
        unsigned char len[8];
        if (fileSize < 8 || ::pread(m_fd, len, 8, 0) != 8)
            fail("shorter than the 8-byte header length; " + std::string(kCorrupt));
        std::uint64_t headerLen = 0;
        for (int i = 7; i >= 0; --i) headerLen = (headerLen << 8) | len[i];
        if (headerLen > fileSize - 8)
            fail("header length " + std::to_string(headerLen) + " goes beyond the end of the file; " + kCorrupt);
        std::string text(static_cast<std::size_t>(headerLen), '\0');
        if (headerLen && ::pread(m_fd, text.data(), text.size(), 8) != static_cast<ssize_t>(text.size()))
            fail("cannot read the header; " + std::string(kCorrupt));
        nlohmann::ordered_json h;
        try {
            h = nlohmann::ordered_json::parse(text);
        } catch (const nlohmann::json::exception& e) {
            fail(std::string("header is not valid JSON (") + e.what() + "); " + kCorrupt);
        }
        if (!h.is_object()) fail("header is not a JSON object; " + std::string(kCorrupt));
        m_dataStart = 8 + headerLen;
        const std::uint64_t dataSize = fileSize - m_dataStart;
        for (auto it = h.begin(); it != h.end(); ++it) {
            const std::string& name = it.key();
            const auto& v = it.value();
            if (name == "__metadata__") {
                if (!v.is_object()) fail("'__metadata__' is not an object; " + std::string(kCorrupt));
                for (auto m = v.begin(); m != v.end(); ++m)
                    if (m.value().is_string()) m_metadata[m.key()] = m.value().get<std::string>();
                continue;
            }
            auto bad = [&](const std::string& what) { fail("tensor '" + name + "': " + what + "; " + kCorrupt); };
            if (!v.is_object() || !v.contains("dtype") || !v["dtype"].is_string() || !v.contains("shape") ||
                !v["shape"].is_array() || !v.contains("data_offsets") || !v["data_offsets"].is_array() ||
                v["data_offsets"].size() != 2)
                bad("header entry needs dtype, shape and data_offsets [begin, end]");
            io::SafeTensorEntry e;
            e.name = name;
            e.dtype = v["dtype"].get<std::string>();
            const DtypeInfo* d = dtypeByName(e.dtype);
            if (!d) bad("unknown dtype '" + e.dtype + "'");
            for (const auto& x : v["shape"]) {
                if (!x.is_number_unsigned()) bad("shape " + v["shape"].dump() + " is not a list of sizes");
                const auto u = x.get<std::uint64_t>();
                if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) bad("dimension too large");
                e.shape.push_back(static_cast<std::int64_t>(u));
            }
            for (int k = 0; k < 2; ++k)
                if (!v["data_offsets"][k].is_number_unsigned()) bad("data_offsets must be non-negative integers");
            e.begin = v["data_offsets"][0].get<std::uint64_t>();
            e.end = v["data_offsets"][1].get<std::uint64_t>();
            if (e.end < e.begin || e.end > dataSize) bad("data_offsets lie outside the data section");
            if (byteSize(e.shape, d->itemSize, bad) != e.end - e.begin)
                bad("byte size " + std::to_string(e.end - e.begin) + " does not match " + e.dtype + " " +
                    shapeText(e.shape));
            m_index[name] = m_entries.size();
            m_entries.push_back(std::move(e));
        }
        std::vector<const io::SafeTensorEntry*> byOffset;
        for (const auto& e : m_entries) byOffset.push_back(&e);
        std::sort(byOffset.begin(), byOffset.end(),
                  [](const auto* a, const auto* b) { return a->begin != b->begin ? a->begin < b->begin : a->end < b->end; });
        const io::SafeTensorEntry* prev = nullptr;
        for (const auto* e : byOffset) {
            if (e->begin == e->end) continue;
            if (prev && e->begin < prev->end)
                fail("tensor '" + e->name + "' overlaps tensor '" + prev->name + "'; " + kCorrupt);
            prev = e;
        }
    } catch (...) {
        ::close(m_fd);
        throw;
    }
}

RawSafeTensorsReader::~RawSafeTensorsReader() {
    if (m_fd >= 0) ::close(m_fd);
}

const io::SafeTensorEntry& RawSafeTensorsReader::entry(const std::string& name) const {
    auto it = m_index.find(name);
    if (it == m_index.end())
        throw std::runtime_error("safetensors file '" + m_path + "' has no tensor '" + name + "'");
    return m_entries[it->second];
}

at::Tensor RawSafeTensorsReader::bytes(const std::string& name) const {
    const auto& e = entry(name);
    const auto n = static_cast<std::int64_t>(e.end - e.begin);
    auto out = at::empty({n}, at::TensorOptions().dtype(at::kByte));
    auto* p = static_cast<char*>(out.data_ptr());
    std::uint64_t done = 0;
    while (done < static_cast<std::uint64_t>(n)) {
        const ssize_t r = ::pread(m_fd, p + done, std::min<std::uint64_t>(n - done, std::uint64_t(1) << 30),
                                  static_cast<off_t>(m_dataStart + e.begin + done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            throw std::runtime_error("safetensors file '" + m_path + "': cannot read tensor '" + name + "'; " + kCorrupt);
        done += static_cast<std::uint64_t>(r);
    }
    return out;
}

at::Tensor RawSafeTensorsReader::tensor(const std::string& name) const {
    const auto& e = entry(name);
    const DtypeInfo* d = dtypeByName(e.dtype);
    auto raw = bytes(name);
    if (!d->torchType && d->itemSize != 1)
        throw std::runtime_error("safetensors file '" + m_path + "': tensor '" + name + "' has dtype " + e.dtype +
                                 ", which libtorch 1.13 cannot represent; read its bytes instead");
    return raw.view(d->type).reshape(e.shape);
}

} // namespace latmix::exporting
