#pragma once
// Weight quantization of linear layers with MX groups (SPEC §6): round-to-nearest (RTN) and
// GPTQ (Frantar et al. 2022) with static group scales, as FP-Quant/MR-GPTQ do for MXFP4/NVFP4.
// Weights are [out, in]; groups are B consecutive inputs of one output row (the MX blocks of
// the row), a trailing partial group included.
#include "mx/MxFormat.h"
#include "mx/MxPack.h"
#include "mx/MxQuantizer.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace latmix::quant {

struct QuantizedWeight {
    at::Tensor dequantized;   // float32 [out, in], CPU: the quantized values
    mx::PackedTensor packed;  // codes + scale bytes; mx::unpack(packed) equals dequantized bit for bit
    at::Tensor scales;        // float32 [out, ceil(in/B)], CPU: group scales used (NVFP4: block scale * global)
    // tr((W-Q) H (W-Q)^T) / tr(W H W^T); RTN without a Hessian: H = I. Float32 on w's device,
    // over 512 evenly spaced output rows when W has more (an estimate of the whole, the same rows
    // on every device, so that a CPU and a GPU run report the same measure).
    double relativeError = 0;
    std::int64_t deadInputs = 0; // GPTQ: inputs with H_ii == 0 (their weights are set to 0)
};

// Static group scales (SPEC §6) of a weight: exactly what mx::blockScales gives for its rows.
struct GroupScales {
    at::Tensor scales;        // float32 [..., ceil(in/B)] on w's device
    float globalScale = 1.0f; // NVFP4 per-tensor scale g (scales already include it); 1 for MX
};
// nvfp4Global > 0 (NVFP4 only; other formats ignore it) is the tensor scale g to use instead of
// w's own: the one a group of fused weights shares (sharedGlobalScale).
GroupScales staticScales(const at::Tensor& w, const mx::MxConfig& c, float nvfp4Global = 0);

// NVFP4's tensor scale g of several weights taken as one: their largest finite |w| / (448·6), 1 when
// every value is zero; what staticScales gives for their rows stacked. The weights a runtime
// fuses into one matrix share it (SPEC §6: vLLM's q/k/v, gate/up and each expert's gate/up).
float sharedGlobalScale(const std::vector<at::Tensor>& weights);

// x [..., n] quantized with given per-group scales [..., ceil(n/B)]: s * Qe(x / s) with the
// element rounding of core/mx (half to even, subnormals kept, saturation to +-max), in float32.
// With scales = mx::blockScales(x) this equals mx::fakeQuantize(x) bit for bit. Any device.
at::Tensor quantizeWithScales(const at::Tensor& x, const at::Tensor& scales, const mx::MxConfig& c);

// Packs values already on the grid of the given scales into element codes and scale bytes
// (E8M0; NVFP4: E4M3 bytes of scale / globalScale). Throws std::invalid_argument when a scale
// or a value is not representable. INT8 has no -0 code: a -0 there unpacks as +0.
mx::PackedTensor packWithScales(const at::Tensor& dequantized, const at::Tensor& scales, const mx::MxConfig& c,
                                float globalScale = 1.0f);

// Round to nearest with the static scales: dequantized equals mx::fakeQuantize(w) bit for bit.
// w: 2-D [out, in], finite. hessian (optional, [in, in]) is used for relativeError only.
// nvfp4Global: as staticScales.
QuantizedWeight quantizeRtn(const at::Tensor& w, const mx::MxConfig& c, const at::Tensor& hessian = {},
                            float nvfp4Global = 0);

struct GptqOptions {
    double damping = 1e-2; // lambda: lambda * mean(diag H) is added to the diagonal
    int columnBlock = 128; // lazy batch update width
    bool actOrder = false; // process inputs by decreasing H_ii (scales stay static)
    // The sequential column loop within a block: Auto (or CpuKernel) runs it in the fused CPU
    // kernel (quant/GptqKernelCpu), on host copies of each block when w is on a GPU (the
    // factorizations and lazy updates stay there); TensorOps runs it as tensor operations on
    // w's device, ten per column (to compare the two; launch-bound on a GPU).
    mx::Backend backend = mx::Backend::Auto;
};

// GPTQ with MX groups. Scales are fixed from the full W (dead inputs zeroed) before the column
// loop, so act-order keeps every weight in its own group. Runs in float64 on w's device (the
// column loop: see GptqOptions::backend); the element rounding itself is float32 (the working
// weight is rounded to float32 first), exactly as quantizeWithScales. Results come back on the
// CPU. nvfp4Global: as staticScales (the scales come from the dead-zeroed W and that g).
QuantizedWeight quantizeGptq(const at::Tensor& w, const at::Tensor& hessian, const mx::MxConfig& c,
                             const GptqOptions& o = {}, float nvfp4Global = 0);

// H = (2/n) sum x x^T over the n rows of activations x [..., in] (GPTQ's convention), float64.
class HessianAccumulator {
public:
    explicit HessianAccumulator(std::int64_t in);
    void add(const at::Tensor& x);  // throws std::invalid_argument on a width mismatch or NaN/Inf
    at::Tensor hessian() const;     // float64 [in, in]; throws std::logic_error before any row
    at::Tensor take();              // the same without a copy: the accumulator is left empty
    std::int64_t rows() const { return m_rows; }
    std::int64_t in() const { return m_in; }
    void reset();
    // Data-parallel calibration (each process holds the sums of its own windows): `inPlace` is
    // called on the running sum of x x^T (float64 [in, in]), then on the row count (float64 [1]),
    // and may replace their values in place, e.g. with an all-reduce that sums them over the
    // processes; hessian() and take() then give the Hessian of all processes' rows.
    void reduce(const std::function<void(const at::Tensor&)>& inPlace);

private:
    std::int64_t m_in;
    std::int64_t m_rows = 0;
    at::Tensor m_sum; // sum of x x^T, float64
};

} // namespace latmix::quant
