// The plan of an export (ExportPlan.h); Export.cpp's header comment says where the
// compressed-tensors side follows the compressed-tensors library.
#include "export/ExportPlan.h"

#include "model/ConfigJson.h"
#include "model/QuantizationPoints.h"
#include "model/TensorNames.h"
#include "mx/MxPack.h"
#include "transforms/Hadamard.h"
#include "util/Text.h"

#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>

namespace latmix::exporting {
namespace names = model::names;
using namespace latmix::run; // the run model an export reads
namespace {

using json = nlohmann::ordered_json;

std::vector<std::int64_t> sizesOf(const at::Tensor& t) { return t.sizes().vec(); }

} // namespace

// W · H for the block-diagonal H, in float64, rounded once to float32: block by block so that a
// large intermediate size never needs the dense n×n product.
at::Tensor foldBackT3(const at::Tensor& w, const std::vector<at::Tensor>& blocks) {
    auto wd = w.to(at::kDouble);
    auto out = at::empty_like(wd);
    std::int64_t s = 0;
    for (const auto& b : blocks) {
        const std::int64_t e = s + b.size(0);
        out.slice(1, s, e).copy_(wd.slice(1, s, e).mm(b));
        s = e;
    }
    return out.to(at::kFloat);
}

void refuseOnlineInputTransforms(const model::ModelConfig& c, const std::string& target, const std::string& runDir) {
    if (!c.latmix || c.latmix->inputTransforms.empty()) return;
    throw std::runtime_error("cannot export " + runDir + " as " + target + ": its method (" + c.latmix->method +
                             ") transforms every block linear's input online with WUSH's own matrices (one per layer and "
                             "input, from calibration data), and " + target +
                             "'s runtimes apply only the Hadamard transforms they build themselves; export it as hf "
                             "(the transforms folded back into bf16 weights, activations unquantized)");
}

void requireRunFolder(const std::string& runDir) {
    std::error_code ec;
    if (runDir.empty() || !std::filesystem::is_directory(runDir, ec))
        throw std::runtime_error("run folder '" + runDir +
                                 "' does not exist; give the folder a `latmix quantize` run wrote (with model/ and "
                                 "latmix.json)");
}

void refuseLmHeadBias(const model::ModelConfig& c, const std::string& runDir) {
    if (!c.lmHeadBias) return;
    throw std::runtime_error("cannot export " + runDir +
                             ": its lm_head has a bias (T1's bias, folded there by versions before issue 71), which "
                             "no runtime's Llama-family head loads (transformers, vLLM, llama.cpp), so no export would "
                             "compute the run's function; quantize the model again with this version, which keeps "
                             "T1's bias out of lm_head");
}

namespace {

// The block linears vLLM loads as one fused weight: qkv_proj, gate_up_proj, each expert's w13.
std::vector<std::vector<std::string>> vllmFusedLinears(const model::ModelConfig& c) {
    using E = names::ExpertLinear;
    std::vector<std::vector<std::string>> groups;
    for (int l = 0; l < c.numLayers; ++l) {
        const std::string p = names::layerPrefix(l);
        groups.push_back({p + names::kQProj, p + names::kKProj, p + names::kVProj});
        if (!c.isSparseLayer(l)) {
            groups.push_back({p + names::kGateProj, p + names::kUpProj});
            continue;
        }
        for (int e = 0; e < c.moe->numExperts; ++e)
            groups.push_back({p + names::expertModule(c, e, E::Gate), p + names::expertModule(c, e, E::Up)});
    }
    return groups;
}

} // namespace

void refuseSplitFusedLinears(const RunModel& run, const std::string& runDir) {
    const std::string what = "cannot export " + runDir + " as compressed-tensors: vLLM loads ";
    for (const auto& group : vllmFusedLinears(runModelConfig(run))) {
        std::vector<std::string> kept, packed;
        for (const auto& linear : group) (run.packed.count(linear) ? packed : kept).push_back(linear);
        if (!kept.empty() && !packed.empty())
            throw std::runtime_error(what + util::joinList(group) + " as one fused layer with one scheme, and --keep kept " +
                                     util::joinList(kept) + " in bf16 but quantized " + util::joinList(packed) +
                                     ": keep all of them or none (e.g. --keep 'layers\\.0\\.self_attn\\.[qkv]_proj'), "
                                     "or export this run as hf or gguf");
        if (packed.size() < 2 || !run.packed.at(packed.front()).config.isNvfp4()) continue;
        const auto& first = run.packed.at(packed.front());
        for (const auto& linear : packed) {
            const auto& p = run.packed.at(linear);
            if (p.globalScale == first.globalScale) continue;
            throw std::runtime_error(what + util::joinList(group) + " as one fused weight with one NVFP4 global scale, and this "
                                     "run's " + packed.front() + " and " + linear + " have their own (" +
                                     util::exactNumber(first.globalScale) + " and " + util::exactNumber(p.globalScale) +
                                     "): vLLM would scale one by the other's. The run comes from a latmix that gave "
                                     "every weight its own; quantize it again (fused weights now share one, SPEC §6), "
                                     "or export it as hf");
        }
    }
}

namespace {

// How compressed-tensors runtimes quantize the inputs, per kind of format the run's linears have:
// MX formats' power-of-two scales by a rule no field names; NVFP4's E4M3 block scales under a
// per-tensor scale, static from the calibration windows where the run measured them.
void addActivationNotes(Plan& plan, const RunModel& run) {
    bool mx = false, nvfp4 = false;
    for (const auto& [linear, p] : run.packed)
        if (!plan.bf16Linears.count(linear)) (p.config.isNvfp4() ? nvfp4 : mx) = true;
    const mx::MxConfig& af = *run.quant.activationFormat;
    if (mx)
        plan.notes.push_back("MX activations are declared as dynamic quantization of the input of every block linear in "
                             "its format; compressed-tensors names no scale rule: the run used '" +
                             mx::scaleModeName(af.isNvfp4() ? mx::ScaleMode::Floor : af.scaleMode) +
                             "', compressed-tensors' own rounds amax up to a power of two from a mantissa of 1.75 "
                             "(torchao's 'even'), and vLLM on GPUs before SM100 runs MXFP4 weights-only (Marlin)");
    if (!nvfp4) return;
    if (nvfp4InputsCalibrated(run, plan.bf16Linears))
        plan.notes.push_back("NVFP4 activations: each block of 16 gets its E4M3 scale on the fly (amax/6 over the "
                             "per-tensor scale, rounded to nearest, as the run did); the per-tensor scale is static: "
                             "input_global_scale = 448·6/amax, amax the largest input of the linear over the calibration "
                             "windows (as llm-compressor calibrates it; q/k/v and gate/up read one input and share it), "
                             "where the run took it from each batch, so inputs beyond the calibration's largest are "
                             "clipped by the runtime");
    else
        plan.notes.push_back("NVFP4 activations are declared dynamic without input_global_scale: this run predates the "
                             "calibrated input scale (issue 72), and vLLM's W4A4 NVFP4 path needs one; quantize the model "
                             "again to get it, or serve the weights only (W4A16)");
}

// What the user should know about the files of this format: what runtimes do with them.
void addFormatNotes(Plan& plan, const RunModel& run, bool ct) {
    const auto& q = run.quant;
    const model::ModelConfig rc = runModelConfig(run);
    auto has = [&](const std::string& n) { return run.tensors.count(n) != 0; };
    if (ct) {
        const mx::MxConfig& wf = *q.weightFormat;

        if (wf.format == mx::Format::MxInt4)
            plan.notes.push_back("compressed-tensors has no MX integer format: the weights are declared as 4-bit "
                                 "int groups with E8M0 scales under the format name 'mxint4-pack-quantized' "
                                 "(sign-magnitude codes, step 0.25, SPEC §1); compressed-tensors runtimes do not "
                                 "load it, LATMiX does");
        if (wf.fourOverSix())
            plan.notes.push_back("weights were quantized with four-over-six (each block of 16 scaled to 4 or to 6, "
                                 "whichever erred less); the stored E4M3 scales load as any NVFP4 scales, but a runtime "
                                 "quantizing activations scales every block to 6");
        else if (wf.scaleMode != mx::ScaleMode::Floor && !wf.isNvfp4())
            plan.notes.push_back("weights were quantized with scale mode '" + mx::scaleModeName(wf.scaleMode) +
                                 "'; the stored scales are exact, but a runtime quantizing activations uses the "
                                 "OCP floor rule");
        if (wf.isNvfp4())
            plan.notes.push_back("weight_global_scale holds 1/g (compressed-tensors convention: dequantized "
                                 "value = q · weight_scale / weight_global_scale); LATMiX's own g = amax/2688 is "
                                 "in the run's quantized.safetensors");
        if (q.activationFormat) {
            const auto af = q.activationFormat->format;
            if (af != mx::Format::MxFp4 && af != mx::Format::NvFp4 && af != mx::Format::MxFp8E4M3)
                plan.notes.push_back("activation format " + q.activationFormat->describe() +
                                     " has no compressed-tensors preset; it is declared by num_bits/type/group_size "
                                     "only (latmix.json has the exact format)");
        }
        std::set<std::int64_t> partial;
        for (const auto& p : model::names::blockLinearPrefixes(rc)) {
            const std::int64_t in = run.tensors.at(p + ".weight").size(1);
            if (in % wf.blockSize) partial.insert(in);
        }
        for (auto in : partial)
            plan.notes.push_back("input dimension " + std::to_string(in) + " is not a multiple of the group size " +
                                 std::to_string(wf.blockSize) + ": its last group has " +
                                 std::to_string(in % wf.blockSize) +
                                 " columns (SPEC §1); compressed-tensors runtimes expect divisible shapes");
        if (q.t3Block > 0 && plan.t3Signs.defined())
            plan.notes.push_back("T3 is declared as compressed-tensors' \"hadamard\" (Sylvester, head_dim " +
                                 std::to_string(q.t3Block) +
                                 ") on the down_proj input, stored ±1 as <layer>.mlp.down_proj.latmix_t3_input.weight "
                                 "(runtimes divide by √" + std::to_string(q.t3Block) +
                                 "); its random signs are folded into up_proj's rows (negated codes), so the "
                                 "declared transform is exactly the run's");
        else if (q.t3Block > 0)
            plan.notes.push_back("down_proj weights stay in the online-Hadamard basis: a runtime must apply x ↦ x·Hᵀ "
                                 "to the down_proj input. H (block " + std::to_string(q.t3Block) + ", seed " +
                                 std::to_string(q.t3Seed) +
                                 ") ends in a smaller block or is not a Sylvester matrix, which compressed-tensors "
                                 "cannot declare: no compressed-tensors runtime computes this model; its exact blocks "
                                 "are in " + kT3File + " for LATMiX");
        if (q.activationFormat) addActivationNotes(plan, run);
    } else {
        if (q.activationFormat)
            plan.notes.push_back("activations are unquantized in this format (the run quantizes them as " +
                                 q.activationFormat->describe() + "); it is the weight-only model");
        else
            plan.notes.push_back("activations are unquantized, as in the run");
        if (q.t3Block > 0)
            plan.notes.push_back("the online Hadamard T3 (block " + std::to_string(q.t3Block) + ", seed " +
                                 std::to_string(q.t3Seed) +
                                 ") is folded back into down_proj (W_down · H): any runtime computes the run's "
                                 "function without it, up to bf16 rounding");
        if (q.weightFormat)
            plan.notes.push_back("weights are the dequantized " + q.weightFormat->describe() +
                                 (q.groupFormats.empty() ? std::string()
                                                         : " (and, for " + std::to_string(q.groupFormats.size()) +
                                                               " fusion group(s) of the scheme, their own formats')") +
                                 " values rounded to bf16" +
                                 (q.t3Block > 0 ? " (down_proj after the T3 fold-back)" : ""));
    }
}

bool isUpProj(const std::string& name) { return name.find("mlp.up_proj") != std::string::npos; }

// The tensors of model.safetensors in the decoder's order, each with where its bytes come from.
void addPlanItems(Plan& plan, const RunModel& run, const std::string& runDir, bool ct,
                  const std::vector<std::pair<std::string, std::vector<std::int64_t>>>& zeroBiases) {
    auto has = [&](const std::string& n) { return run.tensors.count(n) != 0; };
    const std::vector<at::Tensor>& blocks = plan.t3Blocks;
    const json& j = plan.config;
    const auto& fix = zeroBiases;
    // Tensors in the decoder's order.
    const model::ModelConfig oc = model::ModelConfig::fromJsonText(j.dump(), "export config.json");
    std::map<std::string, std::vector<std::int64_t>> zeros(fix.begin(), fix.end());
    auto names = model::requiredTensors(oc);
    for (const auto& [name, shape] : names) {
        const std::string linear = model::names::blockLinearOfWeight(name);
        const bool signedUp = plan.t3Signs.defined() && isUpProj(name); // its weight or its bias
        // --keep: bf16 in every format; in compressed-tensors also a scheme's format it has no name for
        const bool kept = !linear.empty() && (!run.packed.count(linear) || (ct && plan.bf16Linears.count(linear)));
        if (ct && !linear.empty() && !kept) {
            const auto& pk = run.packed.at(linear);
            // 4-bit formats: nibbles as weight_packed; MXFP8: the E4M3 bytes as the float8 weight
            // (compressed-tensors' mxfp8-quantized, its naive compressor's names).
            const bool fp8 = mx::elementSpec(pk.config.element()).bits == 8;
            plan.items.push_back({{linear + (fp8 ? ".weight" : ".weight_packed"), fp8 ? "F8_E4M3" : "U8", sizesOf(pk.codes)},
                                  signedUp ? Source::CodesSigned : Source::Codes, linear});
            plan.items.push_back({{linear + ".weight_scale", pk.config.isNvfp4() ? "F8_E4M3" : "U8", sizesOf(pk.scales)},
                                  Source::Scales, linear});
            if (pk.config.isNvfp4())
                plan.items.push_back({{linear + ".weight_global_scale", "F32", {1}}, Source::GlobalScale, linear});
            if (pk.config.isNvfp4() && nvfp4InputsCalibrated(run, plan.bf16Linears))
                plan.items.push_back({{linear + ".input_global_scale", "F32", {1}}, Source::InputGlobalScale, linear});
            if (plan.t3Signs.defined() && model::names::isDownProj(linear))
                plan.items.push_back({{t3MatrixName(linear), "F32", {plan.t3Block, plan.t3Block}}, Source::T3Matrix, linear});
            ++plan.packedLinears;
            continue;
        }
        const std::string kWeight = ".weight";
        const bool down = name.size() > kWeight.size() && name.compare(name.size() - kWeight.size(), kWeight.size(), kWeight) == 0 &&
                          model::names::isDownProj(name.substr(0, name.size() - kWeight.size()));
        Source s = Source::Bf16;
        if (!has(name)) {
            if (!zeros.count(name))
                throw std::runtime_error("run '" + runDir + "' lacks tensor '" + name + "' that the export needs");
            s = Source::ZeroBf16;
        } else if (down && !blocks.empty() && (!ct || kept)) {
            // compressed-tensors applies no transform to a kept down_proj (its transform_config
            // ignores it): T3 goes into the weight, without its signs where up_proj carries them.
            s = ct && plan.t3Signs.defined() ? Source::Bf16FoldT3Plain : Source::Bf16FoldT3;
        } else if (plan.inputTransforms.count(name)) {
            s = Source::Bf16FoldInput;
        }
        if (s == Source::Bf16 && signedUp) s = kept ? Source::Bf16SignedRows : Source::Bf16Signed; // a kept weight, or the bias
        plan.items.push_back({{name, "BF16", shape}, s, name});
    }
}

} // namespace

Plan buildPlan(const RunModel& run, ExportFormat format, const std::string& runDir) {
    Plan plan;
    plan.format = format;
    const model::ModelConfig rc = runModelConfig(run);
    const auto& q = run.quant;
    const bool ct = format == ExportFormat::CompressedTensors;
    if (ct) compressionFormat(q.weightFormat, runDir); // refuses a run compressed-tensors cannot hold

    // config.json: the run's, without "latmix", bias flags for Hugging Face runtimes, bf16.
    json j = json::parse(run.configJson);
    j.erase("latmix");
    auto has = [&](const std::string& n) { return run.tensors.count(n) != 0; };
    const auto fix = model::fixBiasFlags(j, has, model::BiasTarget::HfRuntime, "run '" + runDir + "' config.json");
    j["torch_dtype"] = "bfloat16";
    if (!fix.relabeledFrom.empty())
        plan.notes.push_back(fix.relabeledFrom + " cannot hold the biases the folding created; the model is written "
                             "as the equivalent LlamaForCausalLM with attention_bias / mlp_bias");
    if (!fix.zeroBiases.empty())
        plan.notes.push_back("Hugging Face has one bias flag for q,k,v,o and one for gate,up,down: " +
                             std::to_string(fix.zeroBiases.size()) + " zero biases were added (e.g. '" +
                             fix.zeroBiases.front().first + "')");

    // T3.
    std::vector<at::Tensor> blocks;
    if (q.t3Block > 0) {
        const auto t3 = t3Transform(q, rc.downProjWidth());
        blocks = t3.diagonalBlocks();
        plan.t3Blocks = blocks;
        plan.t3Block = q.t3Block;
        if (ct && t3.hadamardSigns().defined()) plan.t3Signs = t3.hadamardSigns().to(at::kFloat);
    }

    refuseLmHeadBias(rc, runDir);
    if (ct) refuseOnlineInputTransforms(rc, "compressed-tensors", runDir);
    if (ct) plan.bf16Linears = ctBf16Linears(run);
    // WUSH (hf): each linear's weight W T⁻¹ goes back to W's basis with its point's T.
    for (int l = 0; l < static_cast<int>(run.inputTransforms.size()); ++l)
        for (int k = 0; k < 4; ++k) {
            const auto& t = run.inputTransforms[static_cast<std::size_t>(l)][static_cast<std::size_t>(k)];
            if (!t.defined()) continue;
            const std::string p = names::layerPrefix(l);
            using K = model::PointKind;
            std::vector<const char*> readers;
            switch (static_cast<K>(k)) {
            case K::QkvInput: readers = {names::kQProj, names::kKProj, names::kVProj}; break;
            case K::OProjInput: readers = {names::kOProj}; break;
            case K::GateUpInput: readers = {names::kGateProj, names::kUpProj}; break;
            case K::DownProjInput: readers = {names::kDownProj}; break;
            }
            for (const char* r : readers)
                if (run.packed.count(p + r)) plan.inputTransforms[p + r + ".weight"] = t;
        }
    if (!plan.inputTransforms.empty())
        plan.notes.push_back("WUSH's input transforms folded back into " + std::to_string(plan.inputTransforms.size()) +
                             " weights (W T⁻¹ · T, in float64): the bf16 model needs no online transform");
    if (!q.keptLinears.empty())
        plan.notes.push_back(std::to_string(q.keptLinears.size()) + " linear(s) kept in full precision (--keep) stored as bf16" +
                             std::string(ct ? " and listed in quantization_config.ignore" : ""));
    if (ct && plan.bf16Linears.size() > q.keptLinears.size())
        plan.notes.push_back(std::to_string(plan.bf16Linears.size() - q.keptLinears.size()) +
                             " linear(s) of the scheme in a format compressed-tensors has no name for (MXINT8) stored as "
                             "their exact values in bf16 and listed in quantization_config.ignore: runtimes compute "
                             "them unquantized");
    if (ct) j["quantization_config"] = compressedTensorsConfig(rc, run, plan.bf16Linears, plan.t3Signs.defined());
    addFormatNotes(plan, run, ct);
    plan.config = j;
    addPlanItems(plan, run, runDir, ct, fix.zeroBiases);
    return plan;
}

at::Tensor produce(const Item& it, const RunModel& run, const Plan& plan) {
    switch (it.source) {
    case Source::Bf16: return run.tensors.at(it.from).to(at::kBFloat16);
    case Source::Bf16FoldT3: return foldBackT3(run.tensors.at(it.from), plan.t3Blocks).to(at::kBFloat16);
    case Source::Bf16FoldT3Plain: {
        std::vector<at::Tensor> plain;
        for (const auto& b : plan.t3Blocks) plain.push_back(transforms::hadamardMatrix(b.size(0)) / std::sqrt(double(b.size(0))));
        return foldBackT3(run.tensors.at(it.from), plain).to(at::kBFloat16);
    }
    case Source::Bf16SignedRows: return (run.tensors.at(it.from) * plan.t3Signs.unsqueeze(1)).to(at::kBFloat16);
    case Source::Bf16FoldInput: {
        // rows w' ↦ w' T: T applied as rows of Tᵀ (BlockDiagonal::apply gives row ↦ M row).
        const auto& t = plan.inputTransforms.at(it.from);
        return t.transposed().to(at::TensorOptions().dtype(at::kDouble)).apply(run.tensors.at(it.from).to(at::kDouble)).to(at::kBFloat16);
    }
    case Source::ZeroBf16: return at::zeros(it.spec.shape, at::kBFloat16);
    case Source::Codes: return run.packed.at(it.from).codes;
    case Source::Scales: return run.packed.at(it.from).scales;
    case Source::GlobalScale: return at::full({1}, 1.0f / run.packed.at(it.from).globalScale, at::kFloat);
    case Source::CodesSigned: {
        const auto& p = run.packed.at(it.from);
        return negateRows(p.codes, plan.t3Signs, mx::elementSpec(p.config.element()).bits);
    }
    case Source::Bf16Signed: return (run.tensors.at(it.from) * plan.t3Signs).to(at::kBFloat16);
    case Source::InputGlobalScale: return at::full({1}, inputGlobalScale(run.inputAmax.at(it.from)), at::kFloat);
    case Source::T3Matrix: return transforms::hadamardMatrix(plan.t3Block).to(at::kFloat); // ±1, Sylvester for 2^k
    }
    return {};
}

float inputGlobalScale(float amax) { return amax > 0.0f ? mx::kNvfp4GlobalDivisor / amax : 1.0f; }

at::Tensor negateRows(const at::Tensor& packedCodes, const at::Tensor& signs, int bits) {
    // the sign bit of both nibbles, or of the byte
    const at::Tensor flip = (signs < 0).to(at::kByte).mul(bits == 4 ? 0x88 : 0x80).unsqueeze(1);
    return at::bitwise_xor(packedCodes, flip.expand_as(packedCodes)).contiguous();
}

std::string t3MatrixName(const std::string& downProjPrefix) { return downProjPrefix + ".latmix_t3_input.weight"; }

} // namespace latmix::exporting
