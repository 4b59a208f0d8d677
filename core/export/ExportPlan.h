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
#include <string>
#include <vector>

namespace latmix::exporting {

inline constexpr const char* kT3File = "latmix_t3.safetensors";

// Where one output tensor comes from.
enum class Source { Bf16, Bf16FoldT3, ZeroBf16, Codes, Scales, GlobalScale };

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
    std::vector<std::string> notes;
    int packedLinears = 0;
};

// Throws std::runtime_error naming the run and the way out (a compressed-tensors export of
// unquantized or non-4-bit weights, a tensor the export needs and the run lacks).
Plan buildPlan(const run::RunModel& run, ExportFormat format, const std::string& runDir);
// W · H for T3's block-diagonal H (its diagonal blocks), in float64, rounded once to float32.
at::Tensor foldBackT3(const at::Tensor& w, const std::vector<at::Tensor>& blocks);
// The bytes of one item, as the plan says.
at::Tensor produce(const Item& item, const run::RunModel& run, const Plan& plan);

} // namespace latmix::exporting
