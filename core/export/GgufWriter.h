#pragma once
// A GGUF v3 file (llama.cpp's model format) written from metadata and tensor bytes
// (docs/developer/gguf.md has the layout, in the project's words, with the llama.cpp sources it
// was read from). Little-endian; every tensor's bytes follow the tensor records in the order the
// tensors were added, each padded to the alignment, as llama.cpp's reader requires. The file is
// written under a temporary name, read back and renamed when complete (util::AtomicFile).
#include <cstdint>
#include <string>
#include <vector>

namespace latmix::exporting {

// ggml's tensor types that the export writes (ggml.h's enum ggml_type).
enum class GgmlType : std::int32_t { F32 = 0, F16 = 1, Q8_0 = 8, BF16 = 30, MXFP4 = 39, NVFP4 = 40 };

// Bytes of n values of a type (n a multiple of the type's block for the block types).
std::uint64_t ggmlBytes(GgmlType type, std::uint64_t n);

class GgufWriter {
public:
    static constexpr std::uint32_t kAlignment = 32; // llama.cpp's default (general.alignment absent)

    void addUint32(const std::string& key, std::uint32_t value);
    void addFloat32(const std::string& key, float value);
    void addBool(const std::string& key, bool value);
    void addString(const std::string& key, const std::string& value);
    void addStrings(const std::string& key, const std::vector<std::string>& values);
    void addFloat32s(const std::string& key, const std::vector<float>& values);
    void addInt32s(const std::string& key, const std::vector<std::int32_t>& values);

    // ne: ggml's dimension order, innermost first (a row-major [out, in] weight is {in, out}).
    // Throws std::invalid_argument naming the tensor when bytes do not match ne and type, when
    // ne[0] is not a multiple of the type's block, or when the name is taken or 64 bytes or longer.
    void addTensor(const std::string& name, const std::vector<std::int64_t>& ne, GgmlType type, std::string bytes);

    // Writes the file under a temporary name, reads it back, then renames it; throws
    // std::runtime_error naming it (disk full, permissions, a read-back that differs).
    void write(const std::string& path) const;
    int tensorCount() const { return static_cast<int>(m_tensors.size()); }
    // The file's bytes (what write puts on disk).
    std::string bytes() const;

private:
    struct Tensor {
        std::string name;
        std::vector<std::int64_t> ne;
        GgmlType type;
        std::string bytes;
    };
    void key(const std::string& key, std::int32_t type);
    std::string m_kv;      // the encoded key-value pairs
    std::int64_t m_kvCount = 0;
    std::vector<std::string> m_keys;
    std::vector<Tensor> m_tensors;
};

// MXFP4 blocks in ggml's layout from OCP codes packed two per byte (element 2i in the low
// nibble, 2i+1 in the high: mx::packNibbles, compressed-tensors) and their E8M0 scale bytes:
// per 32 values, the scale byte, then 16 bytes whose byte j holds element j (low nibble) and
// element j + 16 (high). The 4-bit codes themselves are the same (ggml's table is E2M1 doubled
// with the scale halved). rows × cols values, cols a multiple of 32.
std::string mxfp4Blocks(const std::uint8_t* packedCodes, const std::uint8_t* scales, std::int64_t rows, std::int64_t cols);

// NVFP4 blocks in ggml's layout from the same packed E2M1 codes and their E4M3 scale bytes (one
// per 16 values, positive, so read unchanged as ggml's UE4M3): per 64 values, the four scale
// bytes, then for each 16-value sub-block 8 bytes whose byte j holds element j (low nibble) and
// element j + 8 (high). ggml halves the scale against its doubled E2M1 table, so the values are
// E2M1 · E4M3; the tensor's global scale goes to a separate "<name>.scale" tensor. cols a
// multiple of 64.
std::string nvfp4Blocks(const std::uint8_t* packedCodes, const std::uint8_t* scales, std::int64_t rows, std::int64_t cols);

} // namespace latmix::exporting
