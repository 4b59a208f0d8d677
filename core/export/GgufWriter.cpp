#include "export/GgufWriter.h"

#include "util/AtomicFile.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace latmix::exporting {
namespace {

// gguf_type (gguf.h)
enum : std::int32_t { kUint32 = 4, kInt32 = 5, kFloat32 = 6, kBool = 7, kString = 8, kArray = 9 };

template <class T>
void put(std::string& out, T v) { // little-endian hosts only (x86-64, aarch64)
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out.append(b, sizeof(T));
}
void putString(std::string& out, const std::string& s) {
    put<std::uint64_t>(out, s.size());
    out += s;
}
std::uint64_t padded(std::uint64_t n, std::uint64_t a) { return (n + a - 1) / a * a; }

} // namespace

std::uint64_t ggmlBytes(GgmlType type, std::uint64_t n) {
    switch (type) {
    case GgmlType::F32: return 4 * n;
    case GgmlType::F16:
    case GgmlType::BF16: return 2 * n;
    case GgmlType::Q8_0: return n / 32 * 34;
    case GgmlType::MXFP4: return n / 32 * 17;
    case GgmlType::NVFP4: return n / 64 * 36;
    }
    throw std::invalid_argument("ggmlBytes: unknown ggml type " + std::to_string(int(type)));
}

void GgufWriter::key(const std::string& k, std::int32_t type) {
    if (k.empty() || std::find(m_keys.begin(), m_keys.end(), k) != m_keys.end())
        throw std::invalid_argument("GGUF key '" + k + "' is empty or already set");
    m_keys.push_back(k);
    putString(m_kv, k);
    put<std::int32_t>(m_kv, type);
    ++m_kvCount;
}

void GgufWriter::addUint32(const std::string& k, std::uint32_t v) { key(k, kUint32), put(m_kv, v); }
void GgufWriter::addFloat32(const std::string& k, float v) { key(k, kFloat32), put(m_kv, v); }
void GgufWriter::addBool(const std::string& k, bool v) { key(k, kBool), put<std::uint8_t>(m_kv, v ? 1 : 0); }
void GgufWriter::addString(const std::string& k, const std::string& v) { key(k, kString), putString(m_kv, v); }

void GgufWriter::addStrings(const std::string& k, const std::vector<std::string>& v) {
    key(k, kArray);
    put<std::int32_t>(m_kv, kString);
    put<std::uint64_t>(m_kv, v.size());
    for (const auto& s : v) putString(m_kv, s);
}
void GgufWriter::addFloat32s(const std::string& k, const std::vector<float>& v) {
    key(k, kArray);
    put<std::int32_t>(m_kv, kFloat32);
    put<std::uint64_t>(m_kv, v.size());
    for (float x : v) put(m_kv, x);
}
void GgufWriter::addInt32s(const std::string& k, const std::vector<std::int32_t>& v) {
    key(k, kArray);
    put<std::int32_t>(m_kv, kInt32);
    put<std::uint64_t>(m_kv, v.size());
    for (std::int32_t x : v) put(m_kv, x);
}

void GgufWriter::addTensor(const std::string& name, const std::vector<std::int64_t>& ne, GgmlType type, std::string bytes) {
    const std::string what = "GGUF tensor '" + name + "'";
    if (name.empty() || name.size() >= 64) throw std::invalid_argument(what + ": a name of 1 to 63 bytes is needed");
    for (const auto& t : m_tensors)
        if (t.name == name) throw std::invalid_argument(what + " is added twice");
    if (ne.empty() || ne.size() > 4) throw std::invalid_argument(what + ": 1 to 4 dimensions, not " + std::to_string(ne.size()));
    std::uint64_t n = 1;
    for (auto d : ne) {
        if (d <= 0) throw std::invalid_argument(what + ": a dimension of " + std::to_string(d));
        n *= static_cast<std::uint64_t>(d);
    }
    const std::int64_t block = type == GgmlType::NVFP4 ? 64 : type == GgmlType::Q8_0 || type == GgmlType::MXFP4 ? 32 : 1;
    if (ne[0] % block != 0)
        throw std::invalid_argument(what + ": its rows of " + std::to_string(ne[0]) + " values are not whole blocks of " +
                                    std::to_string(block));
    if (bytes.size() != ggmlBytes(type, n))
        throw std::invalid_argument(what + ": " + std::to_string(bytes.size()) + " bytes for " + std::to_string(n) +
                                    " values, expected " + std::to_string(ggmlBytes(type, n)));
    m_tensors.push_back({name, ne, type, std::move(bytes)});
}

std::string GgufWriter::bytes() const {
    std::string out = "GGUF";
    put<std::uint32_t>(out, 3);
    put<std::int64_t>(out, static_cast<std::int64_t>(m_tensors.size()));
    put<std::int64_t>(out, m_kvCount);
    out += m_kv;
    std::uint64_t offset = 0; // from the start of the data section; each tensor padded
    for (const auto& t : m_tensors) {
        putString(out, t.name);
        put<std::uint32_t>(out, static_cast<std::uint32_t>(t.ne.size()));
        for (auto d : t.ne) put<std::int64_t>(out, d);
        put<std::int32_t>(out, static_cast<std::int32_t>(t.type));
        put<std::uint64_t>(out, offset);
        offset += padded(t.bytes.size(), kAlignment);
    }
    out.resize(padded(out.size(), kAlignment), '\0');
    for (const auto& t : m_tensors) {
        out += t.bytes;
        out.resize(padded(out.size(), kAlignment), '\0');
    }
    return out;
}

void GgufWriter::write(const std::string& path) const {
    const std::string b = bytes();
    util::AtomicFile file(path);
    util::writeTextFile(file.tempPath(), b);
    // Read back before the rename: a file that does not hold what was written (a full disk that
    // the stream did not report, a network folder) never takes the final name.
    std::ifstream in(file.tempPath(), std::ios::binary);
    std::string chunk(std::size_t(64) << 20, '\0');
    std::size_t at = 0;
    while (in && at < b.size()) {
        in.read(&chunk[0], static_cast<std::streamsize>(std::min(chunk.size(), b.size() - at)));
        const auto n = static_cast<std::size_t>(in.gcount());
        if (n == 0 || std::memcmp(chunk.data(), b.data() + at, n) != 0) break;
        at += n;
    }
    if (at != b.size() || in.peek() != std::char_traits<char>::eof())
        throw std::runtime_error("GGUF file '" + file.tempPath() + "' does not read back as written (byte " + std::to_string(at) +
                                 "); check the disk and write it again");
    file.commit();
}

std::string mxfp4Blocks(const std::uint8_t* packedCodes, const std::uint8_t* scales, std::int64_t rows, std::int64_t cols) {
    if (cols % 32 != 0) throw std::invalid_argument("mxfp4Blocks: rows of " + std::to_string(cols) + " values are not whole blocks of 32");
    const std::int64_t blocks = cols / 32;
    std::string out(static_cast<std::size_t>(rows * blocks * 17), '\0');
    auto code = [&](std::int64_t r, std::int64_t j) { // OCP code of element j of row r
        const std::uint8_t b = packedCodes[r * (cols / 2) + j / 2];
        return static_cast<std::uint8_t>(j % 2 == 0 ? b & 0x0F : b >> 4);
    };
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t b = 0; b < blocks; ++b) {
            char* dst = &out[static_cast<std::size_t>((r * blocks + b) * 17)];
            dst[0] = static_cast<char>(scales[r * blocks + b]);
            for (int j = 0; j < 16; ++j)
                dst[1 + j] = static_cast<char>(code(r, b * 32 + j) | code(r, b * 32 + j + 16) << 4);
        }
    return out;
}

std::string nvfp4Blocks(const std::uint8_t* packedCodes, const std::uint8_t* scales, std::int64_t rows, std::int64_t cols) {
    if (cols % 64 != 0) throw std::invalid_argument("nvfp4Blocks: rows of " + std::to_string(cols) + " values are not whole blocks of 64");
    const std::int64_t blocks = cols / 64;
    std::string out(static_cast<std::size_t>(rows * blocks * 36), '\0');
    auto code = [&](std::int64_t r, std::int64_t j) {
        const std::uint8_t b = packedCodes[r * (cols / 2) + j / 2];
        return static_cast<std::uint8_t>(j % 2 == 0 ? b & 0x0F : b >> 4);
    };
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t b = 0; b < blocks; ++b) {
            char* dst = &out[static_cast<std::size_t>((r * blocks + b) * 36)];
            for (int s = 0; s < 4; ++s) dst[s] = static_cast<char>(scales[r * (cols / 16) + b * 4 + s]);
            for (int s = 0; s < 4; ++s)
                for (int j = 0; j < 8; ++j) {
                    const std::int64_t e = b * 64 + s * 16 + j;
                    dst[4 + s * 8 + j] = static_cast<char>(code(r, e) | code(r, e + 8) << 4);
                }
        }
    return out;
}

} // namespace latmix::exporting
