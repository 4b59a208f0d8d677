#include "run/quantize/Method.h"

#include "transforms/LearnedTransforms.h"
#include "train/Distillation.h"
#include "util/Text.h"

#include <algorithm>
#include <stdexcept>

namespace latmix::run {

const std::vector<MethodSpec>& methods() {
    // SPEC §6. QuaRot and MR-GPTQ also rotate the value/o_proj head space (QuaRot's head-wise
    // Hadamard on W_v / W_o): T2 is the Hadamard of head_dim for them, as T1 is for d_model.
    // SpinQuant-like learns rotations (QR, rotation-only) from a Hadamard start as SpinQuant
    // does, with this workbench's KL objective instead of SpinQuant's Cayley-SGD on CE.
    static const std::vector<MethodSpec> m = {
        {"rtn", "none", "none", "default", false, false, false, "round-to-nearest weights, no transform"},
        {"quarot-rtn", "hadamard", "hadamard", "default", false, false, true, "full Hadamard T1/T2 + T3, RTN"},
        {"gptq", "none", "none", "default", false, true, false, "MX-aware GPTQ, no transform"},
        {"quarot", "hadamard", "hadamard", "default", false, true, true, "full Hadamard T1/T2 + T3, GPTQ"},
        {"mr-gptq", "block-hadamard", "block-hadamard", "default", false, true, true, "block Hadamard (B) T1/T2 + T3, GPTQ"},
        {"spinquant", "learned-rotation", "learned-rotation", "hadamard", true, true, true,
         "learned rotations (Hadamard start) + T3, GPTQ"},
        {"latmix-lu", "learned-affine-lu", "learned-affine-lu", "default", true, true, true,
         "learned affine T1/T2 (LU) + T3, GPTQ"},
        {"latmix-qr", "learned-affine-qr", "learned-affine-qr", "default", true, true, true,
         "learned affine T1/T2 (QR) + T3, GPTQ"},
        // WUSH (SPEC §2): no T1/T2/T3; each point's input gets its closed-form block transform
        // online, T⁻¹ folded into the weights that read it.
        {"wush-rtn", "none", "none", "default", false, false, false, "WUSH block transforms (online, per point), RTN", 0,
         1e-3, "full", true, true},
        {"wush-gptq", "none", "none", "default", false, true, false, "WUSH block transforms (online, per point), GPTQ", 0,
         1e-3, "full", true, true},
    };
    return m;
}

MethodSpec runMethod(const RunConfig& o) {
    MethodSpec m = methodSpec(o.method);
    m.t1Bias = o.t1Bias.value_or(true); // auto until preflight knows the model's family
    train::objectiveOf(o.loss); // throws naming the valid losses
    train::precisionOf(o.precision, false); // throws naming the valid precisions
    const bool ablation = !o.t1Kind.empty() || !o.t2Kind.empty() || !o.init.empty() || o.t3Block >= 0 || o.initNoise >= 0 ||
                          !o.granularity.empty();
    if (!ablation) return m;
    auto oneOf = [](const std::string& what, const std::string& value, const std::vector<std::string>& valid) {
        if (std::find(valid.begin(), valid.end(), value) != valid.end()) return;
        throw std::invalid_argument("unknown " + what + " '" + value + "'; use one of " + util::joinList(valid));
    };
    std::string changed;
    auto note = [&](const std::string& s) { changed += (changed.empty() ? "" : ", ") + s; };
    if (!o.t1Kind.empty()) {
        oneOf("--t1 transform kind", o.t1Kind, transforms::transformKinds());
        m.t1Kind = o.t1Kind;
        note("T1 " + o.t1Kind);
    }
    if (!o.t2Kind.empty()) {
        oneOf("--t2 transform kind", o.t2Kind, transforms::transformKinds());
        m.t2Kind = o.t2Kind;
        note("T2 " + o.t2Kind);
    }
    if (!o.init.empty()) {
        oneOf("--init initialisation", o.init, transforms::initKinds());
        m.init = o.init;
        note("init " + o.init);
    }
    if (o.t3Block >= 0) {
        m.t3Block = o.t3Block;
        note(o.t3Block == 0 ? std::string("no T3") : "T3 block " + std::to_string(o.t3Block));
    }
    if (o.initNoise >= 0) {
        m.initNoise = o.initNoise;
        note("init noise " + std::to_string(o.initNoise));
    }
    m.learned = transforms::isLearnedKind(m.t1Kind) || transforms::isLearnedKind(m.t2Kind);
    m.transformed = m.t1Kind != "none" || m.t2Kind != "none" || m.t3Block > 0;
    if (!o.granularity.empty()) {
        oneOf("--granularity", o.granularity, {"full", "block"});
        if (o.granularity == "block" && !m.learned)
            throw std::invalid_argument("--granularity block applies to learned T1/T2 and " + o.method +
                                        " learns none here; for fixed transforms pick block-hadamard or block-orthogonal with --t1/--t2");
        // Checked here, before the run folder exists, not when the masked matrix is built.
        if (o.granularity == "block" && (m.init == "hadamard" || m.init == "orthogonal"))
            throw std::invalid_argument("--granularity block keeps T1/T2 block-diagonal and --init " + m.init +
                                        " is a full matrix; use --init block-hadamard, block-orthogonal or identity, or --granularity full");
        m.granularity = o.granularity;
        note("granularity " + o.granularity);
    }
    m.description += " (ablation: " + changed + ")";
    return m;
}

std::string methodNameList() {
    std::string s;
    for (const auto& m : methods()) s += (s.empty() ? "" : ", ") + m.name;
    return s;
}

const MethodSpec& methodSpec(const std::string& name) {
    for (const auto& m : methods())
        if (m.name == name) return m;
    throw std::invalid_argument("unknown method '" + name + "'; use one of " + methodNameList());
}

int weightQuantizationWindows(const MethodSpec& m, const RunConfig& o) {
    // WUSH's transforms come from the calibration activations, RTN or not.
    return m.gptq || m.wush ? o.calibSamples : std::min(o.calibSamples, std::max(0, o.rtnErrorWindows));
}

fold::TransformSpec transformSpecOf(const MethodSpec& m, const RunConfig& o) {
    fold::TransformSpec spec;
    spec.t1Kind = m.t1Kind;
    spec.t2Kind = m.t2Kind;
    spec.init = m.init;
    spec.noiseStd = m.initNoise;
    spec.blockSize = o.format.blockSize;
    spec.blockDiagonal = m.granularity == "block";
    spec.seed = o.seed;
    spec.t3Block = m.t3Block; // SPEC §4: online block Hadamard of 32 on the down_proj input
    spec.t3Seed = o.seed + 7919;
    spec.t1Bias = m.t1Bias;
    spec.t2Bias = o.t2Bias;
    return spec;
}

} // namespace latmix::run
