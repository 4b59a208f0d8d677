#pragma once
// The read side of activation run files (io/ActivationStore: `latmix capture`), without libtorch:
// the part that reads untrusted bytes, kept apart from tensor creation so that it builds alone
// into the fuzz harness (tests/fuzz/fuzz_activations.cpp). The files are sealed like the tensor
// files (io/StoredTensors.h: size and CRC-32 checked before libhdf5 reads anything) and every
// dataset is checked before it is read: a 2-D float32 (or bfloat16 bits) dataset per point
// under /activations, an int32 [windows, tokens] /tokens, the stored bytes covering the shape.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace latmix::io {

struct StoredActivationPoint {
    std::string name;                 // "layers.3.mlp.down_proj.input"
    std::uint64_t rows = 0, width = 0;
    bool bfloat16 = false;            // stored as bfloat16 bits (2 bytes a value), else float
};

class StoredActivations {
public:
    // Opens and checks the file. Throws std::runtime_error naming the file (and the dataset) and
    // what to do when it is missing, damaged or not an activation run file.
    explicit StoredActivations(const std::string& path);
    ~StoredActivations();
    StoredActivations(const StoredActivations&) = delete;
    StoredActivations& operator=(const StoredActivations&) = delete;

    const std::string& path() const { return m_path; }
    const std::vector<StoredActivationPoint>& points() const { return m_points; }
    const std::map<std::string, std::string>& attributes() const { return m_attributes; }
    // Throws naming the point and the file when it has none of that name.
    const StoredActivationPoint& point(const std::string& name) const;
    // The first `rows` rows (at most the point's) into dst: rows * width values of 4 bytes
    // (float32) or 2 (bfloat16 bits, as stored).
    void readRows(const std::string& name, std::uint64_t rows, void* dst) const;

    bool hasTokens() const { return m_tokenRows > 0; }
    std::uint64_t tokenRows() const { return m_tokenRows; }
    std::uint64_t tokenColumns() const { return m_tokenColumns; }
    void readTokens(std::int32_t* dst) const; // tokenRows * tokenColumns values

private:
    struct Impl;
    std::unique_ptr<Impl> m;
    std::string m_path;
    std::vector<StoredActivationPoint> m_points;
    std::map<std::string, std::string> m_attributes;
    std::uint64_t m_tokenRows = 0, m_tokenColumns = 0;
};

} // namespace latmix::io
