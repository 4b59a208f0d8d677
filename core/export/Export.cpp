// Export of a quantization run into hf / compressed-tensors folders (Export.h, SPEC §8).
//
// One plan describes the output: the config.json object and, per tensor of model.safetensors,
// where its bytes come from (a run tensor in bf16, W_down · H in bf16, a zero bias, packed codes,
// scale bytes, a global scale). The writer streams the tensors from the plan; the verifier
// rebuilds the same plan from the run and compares every byte of the reloaded files with it, and
// additionally unpacks the packed weights and compares them with the run's float32 weights.
//
// Where SPEC is silent, the compressed-tensors side follows the compressed-tensors library
// (vllm-project/compressed-tensors) and the checkpoints llm-compressor writes:
//  - quantization_config = {quant_method "compressed-tensors", format, quantization_status
//    "compressed", config_groups {group_0: {targets ["Linear"], weights, input_activations,
//    output_activations, format}}, ignore ["lm_head"], kv_cache_scheme, sparsity_config {},
//    transform_config}; QuantizationArgs keys as its pydantic model serialises them
//    (num_bits, type, symmetric, group_size, strategy, block_structure, dynamic, actorder,
//    scale_dtype "torch.uint8" / "torch.float8_e4m3fn", zp_dtype, observer, observer_kwargs),
//    with the values of its MXFP4 / NVFP4 preset schemes;
//  - packing (fp4_quantized.py): two E2M1 codes per byte, even column in the low nibble, bit 3 the
//    sign: identical to SPEC §1, so weight_packed is the run's codes byte for byte;
//  - MXFP4 weight_scale: E8M0 bytes (2^(b-127)), uint8; NVFP4: weight_scale float8_e4m3fn and
//    weight_global_scale float32 [1] in the compressed-tensors convention global = 448·6/amax,
//    dequantized as q · scale / global; this workbench's g (SPEC §1) is amax/(448·6), so the file
//    holds float32(1/g);
//  - transform_config (compressed_tensors.transform): config_groups of TransformScheme {type,
//    apply [TransformArgs {targets, location, inverse, ignore}], randomize, requires_grad,
//    head_dim, precision}; the T3 is a "random-hadamard" with head_dim = block at location
//    "input" of every down_proj.
#include "export/Export.h"
#include "export/ExportPlan.h"

#include "io/SafeTensors.h"
#include "run/RunModel.h"
#include "model/Checkpoint.h"
#include "model/ConfigJson.h"
#include "model/TensorNames.h"
#include "tokenizer/Tokenizer.h"
#include "util/AtomicFile.h"
#include "util/FolderLock.h"
#include "util/BitCompare.h"
#include "util/Text.h"
#include "mx/MxPack.h"
#include "util/Runtime.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>

namespace fs = std::filesystem;

namespace latmix::exporting {
namespace names = model::names;
using namespace latmix::run; // the run model an export reads
namespace {

using json = nlohmann::ordered_json;
using util::shapeText;

constexpr const char* kLatmixJson = "latmix.json";
constexpr const char* kTransformsH5 = "transforms.h5";
constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kConfigFile = "config.json";

void writeT3File(const std::string& path, const Plan& plan, const RunModel& run, std::int64_t dim) {
    std::vector<io::TensorSpec> specs;
    std::vector<at::Tensor> data;
    const std::int64_t B = plan.t3Block;
    std::vector<at::Tensor> full;
    for (const auto& b : plan.t3Blocks)
        if (b.size(0) == B) full.push_back(b);
    if (!full.empty()) {
        specs.push_back({"blocks", "F64", {static_cast<std::int64_t>(full.size()), B, B}});
        data.push_back(at::stack(full));
    }
    if (plan.t3Blocks.back().size(0) != B) {
        const auto& last = plan.t3Blocks.back();
        specs.push_back({"last_block", "F64", last.sizes().vec()});
        data.push_back(last);
    }
    io::writeSafeTensorsStreamed(path, specs, [&](std::size_t i) { return data[i]; },
                             {{"point", "mlp.down_proj.input"},
                              {"dim", std::to_string(dim)},
                              {"block", std::to_string(B)},
                              {"seed", std::to_string(run.quant.t3Seed)},
                              {"layers", "all"},
                              {"apply", "rows x of the down_proj input become x·Hᵀ, H = blockdiag(blocks[0], ..., "
                                        "blocks[k-1], last_block); W_down is stored as W_down,orig·Hᵀ"}});
}

bool sameFileBytes(const std::string& a, const std::string& b) {
    std::error_code ec1, ec2;
    if (fs::file_size(a, ec1) != fs::file_size(b, ec2) || ec1 || ec2) return false;
    std::ifstream fa(a, std::ios::binary), fb(b, std::ios::binary);
    if (!fa || !fb) return false;
    std::vector<char> ba(1 << 20), bb(1 << 20);
    while (true) {
        fa.read(ba.data(), static_cast<std::streamsize>(ba.size()));
        fb.read(bb.data(), static_cast<std::streamsize>(bb.size()));
        const auto n = fa.gcount();
        if (n != fb.gcount()) return false;
        if (n == 0) return true;
        if (!std::equal(ba.begin(), ba.begin() + n, bb.begin())) return false;
    }
}

ExportFormat detectFormat(const json& config) {
    if (config.contains("quantization_config") && config["quantization_config"].is_object() &&
        config["quantization_config"].value("quant_method", "") == "compressed-tensors")
        return ExportFormat::CompressedTensors;
    return ExportFormat::Hf;
}

// Compares the folder `dir` with the plan built from `run`. progress from..to on job.
void verifyAgainst(const std::string& dir, const std::string& runModelDir, const RunModel& run, const Plan& plan,
                   JobContext& job, double from, double to) {
    const fs::path root(dir);
    const std::string what = "export '" + dir + "'";
    auto fail = [&](const std::string& m) -> void { throw std::runtime_error("verifying " + what + ": " + m); };

    // config.json
    const std::string configPath = (root / kConfigFile).string();
    json config;
    try {
        config = json::parse(util::readTextFile(configPath, "export config"));
    } catch (const nlohmann::json::exception& e) {
        fail(configPath + " is not valid JSON (" + e.what() + ")");
    }
    if (plan.format == ExportFormat::Hf && config.contains("latmix"))
        fail(configPath + " has a \"latmix\" object; an hf export must be a plain Hugging Face config");
    if (config != plan.config) fail(configPath + " differs from the config the run implies");
    model::ModelConfig::fromJsonText(config.dump(), configPath); // loadable by this workbench

    // model.safetensors
    const auto st = io::SafeTensorsFile::open((root / kModelFile).string());
    std::set<std::string> planned;
    for (const auto& it : plan.items) planned.insert(it.spec.name);
    for (const auto& e : st->entries())
        if (!planned.count(e.name)) fail(st->path() + " has an unexpected tensor '" + e.name + "'");
    std::map<std::string, at::Tensor> codes; // linear → codes read back, waiting for the scales
    std::set<std::string> signedLinears;     // linears written with T3's signs in their rows
    for (std::size_t i = 0; i < plan.items.size(); ++i) {
        job.checkCancelled();
        const Item& it = plan.items[i];
        job.progress(from + (to - from) * double(i) / double(plan.items.size()), "verifying " + it.spec.name);
        if (!st->contains(it.spec.name)) fail(st->path() + " lacks tensor '" + it.spec.name + "'");
        const auto& e = st->entry(it.spec.name);
        if (e.dtype != it.spec.dtype || e.shape != it.spec.shape)
            fail("tensor '" + it.spec.name + "' is " + e.dtype + " " + shapeText(e.shape) + ", expected " +
                 it.spec.dtype + " " + shapeText(it.spec.shape));
        const at::Tensor got = st->tensor(it.spec.name);
        const at::Tensor want = produce(it, run, plan).contiguous();
        if (util::firstBitMismatch(got.view(want.scalar_type()), want).index >= 0)
            fail("tensor '" + it.spec.name + "' differs from the run's " +
                 (it.source == Source::Bf16FoldT3 ? std::string("W_down · H in bf16")
                  : it.source == Source::Bf16     ? std::string("tensor in bf16")
                                                  : std::string("data")));
        if (it.source == Source::Codes || it.source == Source::CodesSigned) codes[it.from] = got;
        if (it.source == Source::CodesSigned) signedLinears.insert(it.from);
        if (it.source == Source::Scales) {
            // The statement that matters: unpacking the export gives the run's weights bit for bit.
            mx::PackedTensor pk;
            pk.config = run.packed.at(it.from).config; // a scheme's group may have another than the run's
            pk.codes = codes.at(it.from);
            pk.scales = got;
            pk.globalScale = run.packed.at(it.from).globalScale;
            at::Tensor w = run.tensors.at(it.from + ".weight");
            pk.lastDim = w.size(1);
            // A linear with T3's signs moved into it (up_proj): the run's rows negated, exactly.
            if (signedLinears.count(it.from)) w = w * plan.t3Signs.unsqueeze(1);
            const auto m = util::firstBitMismatch(mx::unpack(pk), w);
            if (m.index >= 0) {
                char buf[128];
                std::snprintf(buf, sizeof buf, " (element %lld: %.9g vs %.9g)", static_cast<long long>(m.index), m.a, m.b);
                fail("'" + it.from + ".weight_packed' / '.weight_scale' do not unpack to the run's '" + it.from +
                     ".weight' bit for bit" + buf);
            }
        }
    }

    // latmix_t3.safetensors
    if (plan.format == ExportFormat::CompressedTensors && !plan.t3Blocks.empty() && !plan.t3Signs.defined()) {
        const auto t3 = io::SafeTensorsFile::open((root / kT3File).string());
        std::int64_t k = 0;
        if (t3->contains("blocks")) {
            const auto b = t3->tensor("blocks");
            for (std::int64_t i = 0; i < b.size(0); ++i, ++k)
                if (!at::equal(b[i], plan.t3Blocks.at(k))) fail(t3->path() + ": block " + std::to_string(k) + " differs from H");
        }
        if (t3->contains("last_block")) {
            if (!at::equal(t3->tensor("last_block"), plan.t3Blocks.at(k))) fail(t3->path() + ": last_block differs from H");
            ++k;
        }
        if (k != static_cast<std::int64_t>(plan.t3Blocks.size())) fail(t3->path() + " does not hold every block of H");
    }

    // latmix.json, transforms.h5, tokenizer files
    json lj;
    try {
        lj = json::parse(util::readTextFile((root / kLatmixJson).string(), "export run record"));
    } catch (const nlohmann::json::exception& e) {
        fail(std::string(kLatmixJson) + " is not valid JSON (" + e.what() + ")");
    }
    if (!lj.contains("export") || !lj["export"].is_object() ||
        lj["export"].value("format", "") != exportFormatName(plan.format))
        fail(std::string(kLatmixJson) + " has no \"export\" entry for format " + exportFormatName(plan.format));
    const fs::path runRoot = fs::path(runModelDir).parent_path();
    std::error_code ec;
    if (fs::is_regular_file(runRoot / kTransformsH5, ec) &&
        !sameFileBytes((runRoot / kTransformsH5).string(), (root / kTransformsH5).string()))
        fail(std::string(kTransformsH5) + " is missing or differs from the run's");
    for (const auto& name : tokenizer::tokenizerFileNames())
        if (fs::is_regular_file(fs::path(runModelDir) / name, ec) &&
            !sameFileBytes((fs::path(runModelDir) / name).string(), (root / name).string()))
            fail("tokenizer file '" + name + "' is missing or differs from the run's");
    job.progress(to, "verified");
}

// Refuses output folders that would destroy the run.
void checkOutDir(const std::string& runDir, const std::string& outDir, bool overwrite) {
    if (outDir.empty()) throw std::runtime_error("no output folder given; pass --out DIR");
    std::error_code ec;
    const fs::path run = fs::weakly_canonical(runDir, ec);
    const fs::path out = fs::weakly_canonical(outDir, ec);
    auto inside = [](const fs::path& a, const fs::path& b) { // a == b or a under b
        auto ai = a.begin(), bi = b.begin();
        for (; bi != b.end() && !bi->empty(); ++ai, ++bi)
            if (ai == a.end() || *ai != *bi) return false;
        return true;
    };
    if (inside(run, out) || inside(out, run / "model"))
        throw std::runtime_error("output folder '" + outDir + "' would replace the run '" + runDir +
                                 "' or its model; choose a folder outside them");
    if (fs::exists(fs::symlink_status(outDir, ec))) {
        if (!fs::is_directory(outDir, ec))
            throw std::runtime_error("output path '" + outDir + "' exists and is not a folder; choose another path");
        if (!fs::is_empty(outDir, ec) && !overwrite)
            throw std::runtime_error("output folder '" + outDir +
                                     "' exists and is not empty; choose a new folder or pass --overwrite (it is "
                                     "replaced only after the export succeeded)");
    }
}

std::uint64_t folderBytes(const std::string& dir, std::vector<std::string>* files) {
    std::uint64_t total = 0;
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) {
        if (!e.is_regular_file()) continue;
        total += e.file_size();
        names.push_back(e.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    if (files) *files = names;
    return total;
}

} // namespace

ExportFormat parseExportFormat(std::string_view name) {
    if (name == "hf") return ExportFormat::Hf;
    if (name == "compressed-tensors") return ExportFormat::CompressedTensors;
    if (name == "gguf") throw std::invalid_argument("gguf is one file, not a folder: export it with exporting::exportGguf");
    throw std::invalid_argument("unknown folder export format '" + std::string(name) +
                                "' (hf or compressed-tensors; the targets by name: exporting::exportTargetKinds)");
}

std::string exportFormatName(ExportFormat f) { return f == ExportFormat::Hf ? "hf" : "compressed-tensors"; }

ExportReport exportRun(const std::string& runDir, ExportFormat format, const std::string& outDir, JobContext& job,
                       const ExportOptions& options) {
    const auto t0 = std::chrono::steady_clock::now();
    std::error_code ec;
    requireRunFolder(runDir);
    // One writer per target: a second export into the same folder stops here, naming the first.
    const util::FolderLock lock(outDir, "export folder", "latmix export " + runDir + " --out " + outDir);
    checkOutDir(runDir, outDir, options.overwrite);
    const std::string modelDir = (fs::path(runDir) / "model").string();
    job.progress(0.0, "reading run");
    const RunModel run = readRunModel(modelDir);
    // vLLM's fused MoE layers take compressed-tensors' quantization but apply no transform_config
    // (only Linear layers get transforms): an online T3 on the experts would be left out silently.
    if (format == ExportFormat::CompressedTensors && runModelConfig(run).moe && run.quant.t3Block > 0)
        throw std::runtime_error("run '" + runDir + "' is a mixture-of-experts model with the online T3 on its experts' "
                                 "down_proj, which vLLM's fused MoE layers do not apply (compressed-tensors transforms "
                                 "reach Linear layers only); export it with --format hf or gguf (T3 folded back), or "
                                 "quantize with --method gptq or rtn (no T3) for a compressed-tensors export");
    if (format == ExportFormat::CompressedTensors) refuseSplitFusedLinears(run, runDir);
    const std::string latmixPath = (fs::path(runDir) / kLatmixJson).string();
    if (!fs::is_regular_file(latmixPath, ec))
        throw std::runtime_error("run record '" + latmixPath +
                                 "' is missing; every export carries the run's latmix.json (SPEC §8): is '" + runDir +
                                 "' a complete `latmix quantize` run folder?");
    json record;
    try {
        record = json::parse(util::readTextFile(latmixPath, "run record"));
    } catch (const nlohmann::json::exception& e) {
        throw std::runtime_error("run record '" + latmixPath + "' is not valid JSON (" + e.what() + ")");
    }
    if (!record.is_object()) throw std::runtime_error("run record '" + latmixPath + "' is not a JSON object");
    job.checkCancelled();
    const Plan plan = buildPlan(run, format, runDir);
    const model::ModelConfig rc = runModelConfig(run);

    ExportReport report;
    report.runDir = runDir;
    report.outDir = outDir;
    report.format = format;
    report.notes = plan.notes;
    if (!lock.staleNote().empty()) report.notes.push_back(lock.staleNote());
    report.packedLinears = plan.packedLinears;
    report.tensors = static_cast<int>(plan.items.size());

    const std::string tmp = util::makeTempSibling(outDir);
    try {
        const fs::path root(tmp);
        util::writeTextFile((root / kConfigFile).string(), plan.config.dump(2) + "\n");
        std::vector<io::TensorSpec> specs;
        for (const auto& it : plan.items) specs.push_back(it.spec);
        const double writeEnd = 0.6;
        io::writeSafeTensorsStreamed(
            (root / kModelFile).string(), specs,
            [&](std::size_t i) {
                job.checkCancelled();
                job.progress(0.05 + (writeEnd - 0.05) * double(i) / double(specs.size()),
                             "tensor " + std::to_string(i + 1) + "/" + std::to_string(specs.size()) + " " +
                                 specs[i].name);
                return produce(plan.items[i], run, plan);
            },
            {{"format", "pt"}});
        if (format == ExportFormat::CompressedTensors && !plan.t3Blocks.empty() && !plan.t3Signs.defined())
            writeT3File((root / kT3File).string(), plan, run, rc.downProjWidth()); // H that the config cannot declare
        tokenizer::copyTokenizerFiles(modelDir, tmp);
        json exp;
        exp["format"] = exportFormatName(format);
        exp["time"] = util::utcTimestamp();
        exp["latmix_version"] = latmixVersion();
        exp["run_dir"] = fs::absolute(runDir).lexically_normal().string();
        exp["notes"] = plan.notes;
        record["export"] = exp;
        util::writeTextFile((root / kLatmixJson).string(), record.dump(2) + "\n");
        const fs::path h5 = fs::path(runDir) / kTransformsH5;
        if (fs::is_regular_file(h5, ec)) {
            fs::copy_file(h5, root / kTransformsH5, fs::copy_options::overwrite_existing, ec);
            if (ec) throw std::runtime_error("cannot copy '" + h5.string() + "': " + ec.message());
        }
        job.checkCancelled();
        verifyAgainst(tmp, modelDir, run, plan, job, writeEnd, 0.99);
        report.bytes = folderBytes(tmp, &report.files);
        job.checkCancelled();
        checkOutDir(runDir, outDir, options.overwrite); // still true after the work
        util::replaceDirectory(tmp, outDir);
    } catch (...) {
        util::removeTreeQuietly(tmp);
        throw;
    }
    report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    job.progress(1.0, "done");
    return report;
}

void verifyExport(const std::string& outDir, const std::string& runDir) {
    const std::string modelDir = (fs::path(runDir) / "model").string();
    const RunModel run = readRunModel(modelDir);
    std::error_code ec;
    if (!fs::is_directory(outDir, ec))
        throw std::runtime_error("export folder '" + outDir + "' does not exist");
    json config;
    try {
        config = json::parse(util::readTextFile((fs::path(outDir) / kConfigFile).string(), "export config"));
    } catch (const nlohmann::json::exception& e) {
        throw std::runtime_error("export config '" + (fs::path(outDir) / kConfigFile).string() +
                                 "' is not valid JSON (" + e.what() + ")");
    }
    const Plan plan = buildPlan(run, detectFormat(config), runDir);
    verifyAgainst(outDir, modelDir, run, plan, silentJob(), 0.0, 1.0);
}

} // namespace latmix::exporting
