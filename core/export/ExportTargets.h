#pragma once
// What each export target of a run is (File › Export quantized model… shows it before the
// export; `latmix export` prints the same in its notes): the runtimes that load it, what runs
// online there and what was folded into the weights, and its size on disk, computed from the
// run's config.json alone (no weights read).
#include <cstdint>
#include <string>

namespace latmix::exporting {

struct ExportTarget {
    std::string runtimes; // who loads it
    std::string online;   // what a runtime computes at run time
    std::string folded;   // what the stored weights already hold
    std::uint64_t bytes = 0; // tensor data on disk (metadata, tokenizer and copies of the run's files aside)
};

// format: "hf", "compressed-tensors" or "gguf". Throws std::runtime_error naming RUN_DIR/model/config.json
// when it is missing or not a run's, std::invalid_argument for an unknown format.
ExportTarget describeExportTarget(const std::string& runDir, const std::string& format);

} // namespace latmix::exporting
