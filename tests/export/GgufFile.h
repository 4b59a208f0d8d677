#pragma once
// A GGUF v3 reader for the tests, written from the format's description (docs/developer/gguf.md)
// and not from core/export/GgufWriter: the header, the key-value pairs (kept as their type and
// raw bytes, with accessors for the types the export writes), the tensor records and their data,
// and the decoding of F32 and MXFP4 tensors the way ggml's CPU code does it (MXFP4: an E8M0 byte
// e, then 16 bytes whose byte j holds element j in its low nibble and element j + 16 in its high
// one; value = kvalues[code] · 2^(e − 128), kvalues being E2M1 doubled as int8; NVFP4: per 64
// values four UE4M3 bytes, then per 16-value sub-block 8 bytes pairing element j with j + 8,
// value = kvalues[code] · UE4M3(d) / 2).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace latmix::test {

struct GgufFile {
    struct Value {
        std::int32_t type = -1;     // GGUF's value type (8: string, 9: array, ...)
        std::int32_t elemType = -1; // arrays: the elements' type
        std::vector<std::string> strings; // a string, or an array of strings
        std::vector<double> numbers;      // a number, or an array of numbers (bool as 0/1)
    };
    struct Tensor {
        std::vector<std::int64_t> ne; // innermost first
        std::int32_t type = -1;
        std::uint64_t offset = 0; // from the start of the data section
    };

    std::string bytes;
    std::uint32_t version = 0;
    std::map<std::string, Value> kv;
    std::vector<std::string> order; // tensor names in the file's order
    std::map<std::string, Tensor> tensors;
    std::size_t dataStart = 0;

    static GgufFile read(const std::string& path) {
        std::ifstream in(path, std::ios::binary);
        if (!in) throw std::runtime_error("cannot open " + path);
        std::ostringstream ss;
        ss << in.rdbuf();
        return parse(ss.str());
    }

    static GgufFile parse(std::string b) {
        GgufFile f;
        f.bytes = std::move(b);
        std::size_t at = 0;
        if (f.bytes.compare(0, 4, "GGUF") != 0) throw std::runtime_error("no GGUF magic");
        at = 4;
        f.version = f.get<std::uint32_t>(at);
        const auto nTensors = f.get<std::int64_t>(at), nKv = f.get<std::int64_t>(at);
        for (std::int64_t i = 0; i < nKv; ++i) {
            const std::string key = f.str(at);
            Value v;
            v.type = f.get<std::int32_t>(at);
            if (v.type == 9) {
                v.elemType = f.get<std::int32_t>(at);
                const auto n = f.get<std::uint64_t>(at);
                for (std::uint64_t k = 0; k < n; ++k) f.scalar(at, v.elemType, v);
            } else {
                f.scalar(at, v.type, v);
            }
            f.kv[key] = std::move(v);
        }
        for (std::int64_t i = 0; i < nTensors; ++i) {
            const std::string name = f.str(at);
            Tensor t;
            const auto dims = f.get<std::uint32_t>(at);
            for (std::uint32_t d = 0; d < dims; ++d) t.ne.push_back(f.get<std::int64_t>(at));
            t.type = f.get<std::int32_t>(at);
            t.offset = f.get<std::uint64_t>(at);
            f.order.push_back(name);
            f.tensors[name] = t;
        }
        std::uint64_t alignment = 32;
        if (auto it = f.kv.find("general.alignment"); it != f.kv.end()) alignment = std::uint64_t(it->second.numbers.at(0));
        f.dataStart = (at + alignment - 1) / alignment * alignment;
        return f;
    }

    double number(const std::string& key) const { return kv.at(key).numbers.at(0); }
    const std::string& string(const std::string& key) const { return kv.at(key).strings.at(0); }

    std::int64_t elements(const std::string& name) const {
        std::int64_t n = 1;
        for (auto d : tensors.at(name).ne) n *= d;
        return n;
    }
    const unsigned char* data(const std::string& name) const {
        return reinterpret_cast<const unsigned char*>(bytes.data()) + dataStart + tensors.at(name).offset;
    }

    // The tensor's values in ggml's order (row after row of ne[0] values), F32, BF16, MXFP4 or NVFP4.
    std::vector<float> values(const std::string& name) const {
        const Tensor& t = tensors.at(name);
        const std::int64_t n = elements(name);
        std::vector<float> out(static_cast<std::size_t>(n));
        const unsigned char* p = data(name);
        if (t.type == 0) {
            std::memcpy(out.data(), p, out.size() * sizeof(float));
        } else if (t.type == 30) { // BF16: the upper half of the float32 bits
            for (std::int64_t i = 0; i < n; ++i) {
                const std::uint32_t bits = std::uint32_t(p[2 * i]) << 16 | std::uint32_t(p[2 * i + 1]) << 24;
                std::memcpy(&out[std::size_t(i)], &bits, sizeof(float));
            }
        } else if (t.type == 39) {
            static const int kvalues[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
            for (std::int64_t b = 0; b < n / 32; ++b) {
                const unsigned char* blk = p + b * 17;
                const float half = static_cast<float>(std::ldexp(1.0, int(blk[0]) - 128)); // E8M0, halved
                for (int j = 0; j < 16; ++j) {
                    out[std::size_t(b * 32 + j)] = static_cast<float>(kvalues[blk[1 + j] & 15]) * half;
                    out[std::size_t(b * 32 + j + 16)] = static_cast<float>(kvalues[blk[1 + j] >> 4]) * half;
                }
            }
        } else if (t.type == 40) {
            static const int kvalues[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
            auto ue4m3 = [](unsigned x) { // ggml_ue4m3_to_fp32
                if (x == 0 || x == 0x7F) return 0.0;
                const int exp = (x >> 3) & 15, man = x & 7;
                return exp == 0 ? std::ldexp(double(man), -9) : std::ldexp(1.0 + man / 8.0, exp - 7);
            };
            for (std::int64_t b = 0; b < n / 64; ++b) {
                const unsigned char* blk = p + b * 36;
                for (int s = 0; s < 4; ++s) {
                    const double d = ue4m3(blk[s]) * 0.5;
                    for (int j = 0; j < 8; ++j) {
                        const unsigned char q = blk[4 + s * 8 + j];
                        out[std::size_t(b * 64 + s * 16 + j)] = static_cast<float>(kvalues[q & 15] * d);
                        out[std::size_t(b * 64 + s * 16 + j + 8)] = static_cast<float>(kvalues[q >> 4] * d);
                    }
                }
            }
        } else {
            throw std::runtime_error(name + ": type " + std::to_string(t.type) + " is not decoded here");
        }
        return out;
    }

private:
    template <class T>
    T get(std::size_t& at) const {
        T v;
        if (at + sizeof(T) > bytes.size()) throw std::runtime_error("GGUF ends early");
        std::memcpy(&v, bytes.data() + at, sizeof(T));
        at += sizeof(T);
        return v;
    }
    std::string str(std::size_t& at) const {
        const auto n = get<std::uint64_t>(at);
        if (at + n > bytes.size()) throw std::runtime_error("GGUF ends early");
        std::string s = bytes.substr(at, n);
        at += n;
        return s;
    }
    void scalar(std::size_t& at, std::int32_t type, Value& v) const {
        switch (type) {
        case 0: v.numbers.push_back(get<std::uint8_t>(at)); break;
        case 1: v.numbers.push_back(get<std::int8_t>(at)); break;
        case 2: v.numbers.push_back(get<std::uint16_t>(at)); break;
        case 3: v.numbers.push_back(get<std::int16_t>(at)); break;
        case 4: v.numbers.push_back(get<std::uint32_t>(at)); break;
        case 5: v.numbers.push_back(get<std::int32_t>(at)); break;
        case 6: v.numbers.push_back(get<float>(at)); break;
        case 7: v.numbers.push_back(get<std::uint8_t>(at)); break;
        case 8: v.strings.push_back(str(at)); break;
        case 10: v.numbers.push_back(double(get<std::uint64_t>(at))); break;
        case 11: v.numbers.push_back(double(get<std::int64_t>(at))); break;
        case 12: v.numbers.push_back(get<double>(at)); break;
        default: throw std::runtime_error("GGUF value type " + std::to_string(type) + " unknown");
        }
    }
};

} // namespace latmix::test
