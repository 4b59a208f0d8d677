#pragma once
// The paper's methods (SPEC §6) and how a run's options resolve one: the transform kinds at T1,
// T2 and T3, whether they are learned, GPTQ or RTN, and the ablations that replace them.
#include "run/quantize/QuantizeOptions.h"
#include "fold/ModelTransforms.h"

#include <string>
#include <vector>

namespace latmix::run {

// The methods of the paper (SPEC §6) and what each does.
struct MethodSpec {
    std::string name;
    std::string t1Kind, t2Kind, init; // "none": no transform
    bool learned = false;             // T1/T2 trained by distillation
    bool gptq = false;                // GPTQ (else RTN)
    bool transformed = false;         // γ folded, T1/T2/T3 in place (RTN and GPTQ: nothing folded)
    std::string description;
    int t3Block = 32;                 // the online block Hadamard on the down_proj input (0: none)
    double initNoise = 1e-3;          // "+noise" initialisations
    std::string granularity = "full"; // learned T1/T2 as full matrices or "block"-diagonal (Table 1)
    bool t1Bias = true; // the learned T1 bias; --t1-bias auto resolved by preflight (resolveT1Bias)
    // WUSH (SPEC §2): each point's input gets its closed-form block transform online, computed per
    // layer from the calibration activations and the weights reading it (LayerQuantizer).
    bool wush = false;
};
const std::vector<MethodSpec>& methods();
const MethodSpec& methodSpec(const std::string& name); // throws std::invalid_argument listing the names
// The method a run uses: methodSpec(options.method) with the ablation options applied
// (RunConfig::t1Kind ...; the paper's Tables 7 and 14). learned: a learned kind at T1 or
// T2; transformed: any of T1, T2, T3. Throws std::invalid_argument naming an unknown kind or
// initialisation (listing the valid ones) or an unknown loss.
MethodSpec runMethod(const RunConfig& options);
// The calibration windows the weight quantization runs through the layers: all of them for GPTQ
// (its Hessians), for RTN the first --rtn-error-windows (0: none; its error is then in weight
// space). What LayerQuantizer runs, latmix.json's weight_quantization.relative_error names and
// the memory estimate counts.
int weightQuantizationWindows(const MethodSpec& m, const RunConfig& options);
// The transforms of a run of method m with these options (fold::ModelTransforms' spec): kinds,
// initialisation, MX block, T3 and the seeds. What `latmix quantize` and `latmix bench train` build.
fold::TransformSpec transformSpecOf(const MethodSpec& m, const RunConfig& options);
std::string methodNameList();

} // namespace latmix::run
