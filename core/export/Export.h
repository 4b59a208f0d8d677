#pragma once
// Export of a quantization run (SPEC §8) into a folder other runtimes load:
//
//   hf                  standard Hugging Face folder, bf16, dequantized weights, the biases the
//                       folding created (attention_bias / mlp_bias), T3 folded back into W_down
//                       (W_down · H) so a runtime without the online Hadamard computes the same
//                       function. Activations are not quantized there.
//   compressed-tensors  block linears as weight_packed uint8 [out, ceil(in/2)] + weight_scale
//                       [out, ceil(in/B)] (E8M0 bytes; NVFP4: F8_E4M3 + weight_global_scale),
//                       everything else bf16; config.json with quantization_config (format
//                       mxfp4-pack-quantized / nvfp4-pack-quantized / mxint4-pack-quantized) and
//                       a transform_config declaring the online block Hadamard on the down_proj
//                       input as compressed-tensors' "hadamard" with T3's signs folded into
//                       up_proj (docs/developer/compressed-tensors.md); W_down stays in the
//                       Hadamard basis. An H it cannot declare goes to latmix_t3.safetensors.
//
// Both carry the run's latmix.json (with an "export" entry) and transforms.h5 when present, and
// the tokenizer files. The folder is built under a temporary sibling name, verified, and only
// then renamed to the output name.
#include "util/Job.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace latmix::exporting {

enum class ExportFormat { Hf, CompressedTensors };

// The folder formats "hf" | "compressed-tensors" (every target by name: export/ExportTargets.h);
// parse throws std::invalid_argument naming the two.
ExportFormat parseExportFormat(std::string_view name);
std::string exportFormatName(ExportFormat f);

struct ExportOptions {
    bool overwrite = false; // replace a non-empty output folder (only after the export succeeded)
};

struct ExportReport {
    std::string runDir, outDir;
    ExportFormat format = ExportFormat::Hf;
    std::vector<std::string> files;  // names written into outDir
    int tensors = 0;                 // tensors in model.safetensors
    int packedLinears = 0;           // block linears stored packed (compressed-tensors)
    std::uint64_t bytes = 0;         // size of all files
    double seconds = 0;
    std::vector<std::string> notes;  // what a user of the folder must know (activations, lm_head bias, ...)
};

// Exports RUN_DIR (its model/ is read with readRunModel; latmix.json is required) into outDir.
// Errors (std::runtime_error, naming the file and what to do): missing or damaged run, an
// existing non-empty outDir without overwrite, outDir containing the run, a weight format the
// chosen export format cannot hold (compressed-tensors: mxfp4, nvfp4, mxint4 only). Progress and
// cancel through job: a cancel (JobCancelled) or any error removes the temporary folder and
// leaves outDir as it was.
ExportReport exportRun(const std::string& runDir, ExportFormat format, const std::string& outDir, JobContext& job,
                       const ExportOptions& options = {});

// Reloads the export in outDir and compares it with the run in runDir: compressed-tensors: every
// packed weight unpacks to the run's dequantized weight bit for bit (NVFP4 with the run's
// per-tensor scale g; weight_global_scale must be float32(1/g), the compressed-tensors
// convention) and every other tensor is the bf16 conversion of the run's; hf: every tensor equals
// the bf16 conversion of the run's tensor (W_down · H for down_proj). Also checks config.json
// (hf: no "latmix" object), latmix.json and the copied files. Throws std::runtime_error naming
// the first mismatching tensor or file.
void verifyExport(const std::string& outDir, const std::string& runDir);

} // namespace latmix::exporting
