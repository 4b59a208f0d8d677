#pragma once
// A small quantization run built the way `latmix quantize` lays it out (core/export/RunModel.h),
// for the export tests: every tensor of a Hugging Face model, W_down moved into the
// online-Hadamard basis (W_down · Hᵀ, block 32, seed 1234), every block linear RTN-quantized with
// mx::pack (NVFP4's fused groups with their shared g) and its unpacked values used as the weight; RUN_DIR/latmix.json and a stand-in
// RUN_DIR/transforms.h5 beside model/. No Qt here (include it before Qt headers).
#include "model/TensorNames.h"
#include "run/RunModel.h"
#include "model/Checkpoint.h"
#include "mx/MxPack.h"
#include "quant/WeightQuantizer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace latmix::test {

inline std::string readFile(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

inline void writeFile(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
}

// The name of the fused weight a block linear belongs to in vLLM ("…self_attn.qkv",
// "…mlp.gate_up", "…experts.3.gate_up"), or the linear itself when it is loaded alone.
inline std::string fusedGroupOf(const std::string& linear) {
    const auto dot = linear.rfind('.');
    const std::string parent = linear.substr(0, dot), last = linear.substr(dot + 1);
    if (last == "q_proj" || last == "k_proj" || last == "v_proj") return parent + ".qkv";
    if (last == "gate_proj" || last == "up_proj" || last == "w1" || last == "w3") return parent + ".gate_up";
    return linear;
}

struct RunVariant {
    mx::MxConfig weights;
    bool extraBiases = false; // untied lm_head and one q_proj bias (what folding creates)
    // An lm_head bias: what runs of versions before issue 71 folded T1's bias into, which no
    // runtime loads (every target refuses such a run).
    bool headBias = false;
    bool t3 = true;           // W_down in the online-Hadamard basis (else as the source has it)
    // Block linears kept in full precision (--keep): weights rounded to bf16, no packed weight.
    std::vector<std::string> keep;
};

// Writes runDir/{model/, latmix.json, transforms.h5} from the model folder `source`; returns the
// RunModel handed to writeRunModel.
inline run::RunModel buildRun(const std::string& source, const std::string& runDir, const RunVariant& v,
                                    const std::string& tokenizerDir) {
    const model::Checkpoint ck = model::Checkpoint::load(source);
    run::RunModel run;
    run.configJson = readFile(source + "/config.json");
    run.quant.method = "rtn";
    run.quant.weightFormat = v.weights;
    run.quant.activationFormat = v.weights;
    run.quant.t3Block = v.t3 ? 32 : 0;
    run.quant.t3Seed = v.t3 ? 1234 : 0;
    run.quant.keptLinears = v.keep;
    for (const auto& n : ck.names()) run.tensors[n] = ck.weight(n).to(at::kFloat).clone();
    const auto& c = ck.config();
    if (v.extraBiases || v.headBias) run.tensors["lm_head.weight"] = run.tensors.at("model.embed_tokens.weight").clone();
    if (v.headBias) run.tensors["lm_head.bias"] = at::linspace(-0.5, 0.5, c.vocabSize, at::kFloat);
    if (v.extraBiases) {
        run.tensors["model.layers.1.self_attn.q_proj.bias"] =
            at::linspace(-0.1, 0.1, std::int64_t(c.numHeads) * c.headDim, at::kFloat);
    }
    const at::Tensor h = v.t3 ? run::t3Transform(run.quant, c.intermediateSize).dense() : at::Tensor();
    auto kept = [&](const std::string& p) { return std::find(v.keep.begin(), v.keep.end(), p) != v.keep.end(); };
    // NVFP4: the quantized weights a runtime fuses (q/k/v, gate/up; SPEC §6) share the g of their
    // largest finite |w|, worked out here by name.
    std::map<std::string, float> groupAmax;
    for (const auto& p : model::names::blockLinearPrefixes(c))
        if (!kept(p)) {
            const auto a = run.tensors.at(p + ".weight").abs().nan_to_num(0, 0, 0).amax().item<float>();
            groupAmax[fusedGroupOf(p)] = std::max(groupAmax[fusedGroupOf(p)], a);
        }
    for (const auto& p : model::names::blockLinearPrefixes(c)) {
        at::Tensor w = run.tensors.at(p + ".weight");
        if (v.t3 && p.find("down_proj") != std::string::npos) w = w.to(at::kDouble).mm(h.t()).to(at::kFloat);
        if (kept(p)) {
            run.tensors[p + ".weight"] = w.to(at::kBFloat16).to(at::kFloat);
            continue;
        }
        const bool fused = fusedGroupOf(p) != p && v.weights.isNvfp4();
        const float g = fused ? groupAmax.at(fusedGroupOf(p)) / mx::kNvfp4GlobalDivisor : 0.0f;
        mx::PackedTensor pk = fused ? quant::quantizeRtn(w, v.weights, {}, g > 0 ? g : 1.0f).packed : mx::pack(w, v.weights);
        run.tensors[p + ".weight"] = mx::unpack(pk);
        run.packed[p] = std::move(pk);
    }
    std::filesystem::create_directories(runDir);
    run::writeRunModel(runDir + "/model", run, tokenizerDir);
    writeFile(runDir + "/latmix.json", R"({"method": "rtn", "seeds": {"t3": 1234}, "versions": {"latmix": "test"}})");
    writeFile(runDir + "/transforms.h5", std::string("\x89HDF\r\n\x1a\n fake transforms", 24));
    return run;
}

} // namespace latmix::test
