#pragma once
// The plan of an export (export/Export.h): the config.json object and, per tensor of
// model.safetensors, where its bytes come from. exportRun writes the files from it;
// verifyExport rebuilds it from the run and compares every byte of the written files with it.
// Internal to export/.
#include "export/Export.h"
#include "io/SafeTensors.h"
#include "run/RunModel.h"

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace latmix::exporting {

inline constexpr const char* kT3File = "latmix_t3.safetensors";

// Where one output tensor comes from.
// CodesSigned / Bf16Signed: up_proj's rows times T3's signs (compressed-tensors with a plain
// Hadamard T3); T3Matrix: compressed-tensors' ±1 Sylvester matrix of the online transform.
// Bf16FoldT3Plain: W_down · blockdiag(S/√b), T3 without its signs (a kept down_proj beside the
// signed up_proj of compressed-tensors); Bf16SignedRows: a kept up_proj's rows times T3's signs;
// Bf16FoldInput: W · T, WUSH's input transform of the linear's point folded back (hf);
// InputGlobalScale: compressed-tensors' static NVFP4 input scale 448·6 / RunModel::inputAmax.
enum class Source {
    Bf16, Bf16FoldT3, Bf16FoldT3Plain, ZeroBf16, Codes, Scales, GlobalScale, CodesSigned, Bf16Signed, Bf16SignedRows,
    Bf16FoldInput, T3Matrix, InputGlobalScale
};

struct Item {
    io::TensorSpec spec;
    Source source = Source::Bf16;
    std::string from; // run tensor name (Bf16, Bf16FoldT3) or linear prefix (Codes, Scales, GlobalScale)
};

struct Plan {
    ExportFormat format = ExportFormat::Hf;
    nlohmann::ordered_json config;
    std::vector<Item> items;
    std::vector<at::Tensor> t3Blocks; // diagonal blocks of H (float64), empty without T3
    std::int64_t t3Block = 0;
    // compressed-tensors only, where every block of H is (S/√b)·diag(s) with Sylvester S: the
    // signs s (float32 [intermediate], ±1). The export then declares T3 as compressed-tensors'
    // plain "hadamard" and moves the signs into up_proj's rows: x = SiLU(gate)·up feeds T3, so
    // (x ⊙ s)·blockdiag(S/√b)ᵀ = x·Hᵀ, and negating a 4-bit code's sign bit is exact.
    at::Tensor t3Signs;
    // hf of a WUSH run: each block linear's weight name → its point's input transform T (float32).
    std::map<std::string, transforms::BlockDiagonal> inputTransforms;
    std::vector<std::string> notes;
    int packedLinears = 0;
    // compressed-tensors: the block linears written as bf16 in `ignore` (ctBf16Linears).
    std::set<std::string> bf16Linears;
};

// compressed-tensors' input_global_scale of an NVFP4 linear whose input's largest magnitude over
// the calibration windows is amax: 448·6/amax in float32, 1 where amax is 0 (an expert no
// calibration token reached; compressed-tensors' generate_gparam turns that inf into 1).
float inputGlobalScale(float amax);
// compressed-tensors' name of a weight format ("mxfp4-pack-quantized", "mxfp8-quantized", ...), or
// nullopt where it has none (MXINT8, other blocks of MXFP8): such a scheme group is written as
// bf16 weights in `ignore`, as --keep's linears (CompressedTensorsConfig.cpp).
std::optional<std::string> ctFormatName(const mx::MxConfig& format);
// The run's own format's name. Throws std::runtime_error naming the run and the way out for
// unquantized weights or a format ctFormatName has no name for.
std::string compressionFormat(const std::optional<mx::MxConfig>& weights, const std::string& runDir);
// The block linears a compressed-tensors export writes as bf16 `.weight` in `ignore`: --keep's and
// those of a scheme's format compressed-tensors has no name for.
std::set<std::string> ctBf16Linears(const run::RunModel& run);
// Whether every NVFP4 linear written packed has its input maximum (RunModel::inputAmax; runs
// since issue 72): the export then declares NVFP4 inputs with a static input_global_scale each,
// else dynamic, as older runs computed them.
bool nvfp4InputsCalibrated(const run::RunModel& run, const std::set<std::string>& bf16Linears);
// compressed-tensors' quantization_config (config groups per weight format, ignore, T3 as a
// transform) for a run whose format compressionFormat accepted; plainT3: T3's signs are in up_proj.
nlohmann::ordered_json compressedTensorsConfig(const model::ModelConfig& runConfig, const run::RunModel& run,
                                               const std::set<std::string>& bf16Linears, bool plainT3);
// Throws std::runtime_error naming the run and the way out (compressionFormat's refusals, a
// tensor the export needs and the run lacks).
Plan buildPlan(const run::RunModel& run, ExportFormat format, const std::string& runDir);
// W · H for T3's block-diagonal H (its diagonal blocks), in float64, rounded once to float32.
at::Tensor foldBackT3(const at::Tensor& w, const std::vector<at::Tensor>& blocks);
// A run with WUSH's online input transforms (SPEC §2) exports to hf only, the transforms folded
// back into the weights: compressed-tensors' and GGUF's runtimes apply Hadamard-type transforms
// they build themselves, never a run's own per-block matrices. Throws std::runtime_error naming the
// run, the target and the way out.
void refuseOnlineInputTransforms(const model::ModelConfig& runConfig, const std::string& target, const std::string& runDir);
// Throws std::runtime_error naming runDir when it is no folder (the first check of every export).
void requireRunFolder(const std::string& runDir);
// Runs of versions before issue 71 folded T1's bias into an lm_head bias, which no runtime's
// Llama-family head loads (transformers' LlamaForCausalLM, vLLM, llama.cpp): no target computes
// such a run's function. Throws std::runtime_error naming the run and the way out (quantize again:
// runs now keep T1's bias out of lm_head, docs/spec.md §4). The same words for every target, so
// the export dialog's refusal before Export is the export's own.
void refuseLmHeadBias(const model::ModelConfig& runConfig, const std::string& runDir);
// vLLM loads q/k/v, gate/up and each expert's gate/up as one fused weight, with one scheme and
// (NVFP4) one global scale, the largest, warning and mis-scaling the others when they differ.
// Throws std::runtime_error naming the group and the way out when --keep kept part of a group, or
// when a group's NVFP4 global scales differ (runs quantized before fused weights shared one).
void refuseSplitFusedLinears(const run::RunModel& run, const std::string& runDir);

// The bytes of one item, as the plan says.
at::Tensor produce(const Item& item, const run::RunModel& run, const Plan& plan);
// Codes of a sign-magnitude format with the rows where signs < 0 negated: 4-bit (two per byte,
// sign in bit 3 of each nibble: E2M1, MX INT4) or 8-bit (sign in bit 7: E4M3).
at::Tensor negateRows(const at::Tensor& packedCodes, const at::Tensor& signs, int bits);
// The name compressed-tensors (and vLLM) give T3's matrix on a down_proj: "<prefix>.latmix_t3_input.weight".
std::string t3MatrixName(const std::string& downProjPrefix);

} // namespace latmix::exporting
