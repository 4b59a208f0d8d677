#pragma once
// Captured activations in a run file (HDF5, SPEC §8): one chunked, extendible dataset per
// quantization point under /activations, rows = tokens, columns = channels; the calibration
// tokens under /tokens; the run's settings as string attributes of the root group.
#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace latmix::io {

class ActivationWriter {
public:
    // Writes to "<path>.partial" and renames to path in finish(); a writer destroyed without
    // finish() (error, cancel) removes the partial file, so no half run looks complete.
    ActivationWriter(const std::string& path, bool bfloat16, const std::map<std::string, std::string>& attributes);
    ~ActivationWriter();
    ActivationWriter(const ActivationWriter&) = delete;
    ActivationWriter& operator=(const ActivationWriter&) = delete;

    // Appends rows [n, width] (any float dtype, any device) to the point's dataset.
    void append(const std::string& point, const at::Tensor& rows);
    void writeTokens(const at::Tensor& tokens); // int64/int32 [samples, seqlen]
    void finish();

private:
    struct Impl;
    std::unique_ptr<Impl> m;
};

class ActivationReader {
public:
    explicit ActivationReader(const std::string& path); // throws naming the file
    ~ActivationReader();
    std::vector<std::string> points() const;
    std::map<std::string, std::string> attributes() const;
    std::int64_t rows(const std::string& point) const;
    // float32 [rows, width]; maxRows <= 0: all rows. Throws naming the point and file.
    at::Tensor read(const std::string& point, std::int64_t maxRows = 0) const;
    at::Tensor tokens() const;

private:
    struct Impl;
    std::unique_ptr<Impl> m;
};

} // namespace latmix::io
