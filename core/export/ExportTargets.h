#pragma once
// The export targets of a run by name, "hf", "compressed-tensors" and "gguf": what each is (File ›
// Export quantized model… shows it before the export; `latmix export` prints the same in its
// notes): the runtimes that load it, what runs online there and what was folded into the
// weights, and its size on disk, computed from the run's config.json alone (no weights read);
// and the export to one of them, which both front ends call.
#include "util/Job.h"

#include <cstdint>
#include <string>
#include <vector>

namespace latmix::exporting {

// An export target's name and how it is offered and written, one row per target in
// ExportTargets.cpp's table: `latmix export --format`, File › Export quantized model… and the
// functions below all read that table, so a new target is one row there
// (docs/developer/changing.md).
struct ExportTargetKind {
    std::string name;      // "hf", "compressed-tensors", "gguf"
    std::string choice;    // how the export dialog offers it
    std::string extension; // a one-file target's file name ending (".gguf"); empty for a folder
};
const std::vector<ExportTargetKind>& exportTargetKinds();
// The target named; throws std::invalid_argument listing the names.
const ExportTargetKind& exportTargetKind(const std::string& name);

struct ExportTarget {
    std::string runtimes; // who loads it
    std::string online;   // what a runtime computes at run time
    std::string folded;   // what the stored weights already hold
    std::uint64_t bytes = 0; // tensor data on disk (metadata, tokenizer and copies of the run's files aside)
};

// format: a target's name (exportTargetKinds()). Throws std::runtime_error naming
// RUN_DIR/model/config.json when it is missing or not a run's, std::invalid_argument for an
// unknown format.
ExportTarget describeExportTarget(const std::string& runDir, const std::string& format);

// Throws what the export to format would refuse for what the run's config.json says (weights of a
// format the target has no type for, an architecture or layout its runtime does not load), before
// any weight is read: a face shows it beside the target. The export itself checks the rest.
void checkExportTarget(const std::string& runDir, const std::string& format);

// What an export wrote, whichever the target.
struct ExportSummary {
    std::string target;             // the target's name (exportTargetKinds())
    std::string out;                // the folder, or the GGUF file
    int tensors = 0;
    int packedLinears = 0;          // block linears kept in the run's codes (compressed-tensors, gguf)
    std::string packedType;         // gguf: "MXFP4" or "NVFP4"; "" for the folders
    std::uint64_t bytes = 0;        // all files written
    double seconds = 0;
    std::vector<std::string> files; // a folder's files; empty for gguf
    std::vector<std::string> notes; // what a user of the export must know
};

// Exports runDir to the target named (exportTargetKinds()): gguf through exportGguf
// (export/GgufExport.h), the folders through exportRun (export/Export.h). Either verifies what it
// wrote before the output takes its name; progress and cancel through job. Throws what those
// throw; std::invalid_argument for an unknown target, listing the choices.
ExportSummary exportTo(const std::string& runDir, const std::string& target, const std::string& out, JobContext& job,
                       bool overwrite = false);

} // namespace latmix::exporting
