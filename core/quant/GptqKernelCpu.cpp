#include "quant/GptqKernelCpu.h"

#include "mx/MxKernelCpu.h"

#include <ATen/Parallel.h>

#include <algorithm>

namespace latmix::quant::cpu {
namespace {

// One row through the block. The inner update is a contiguous axpy the compiler vectorizes;
// this file is built without floating-point contraction, so w_j − e·u_ij rounds twice, as
// ATen's addr_ does (the tensor-ops loop), on every instruction set.
void blockRow(const GptqBlock& b, const mx::cpu::ElementGrid& grid, std::int64_t r) {
    double* __restrict w = b.w + r * b.wStride;
    const float* s = b.scale + r * b.scaleStride;
    float* q = b.q + r * b.qStride;
    double* err = b.err + r * b.errStride;
    for (std::int64_t i = 0; i < b.count; ++i) {
        const float si = s[i];
        const float qi = grid.quantize(static_cast<float>(w[i]) / si) * si;
        q[i] = qi;
        const double* __restrict ui = b.u + i * b.uStride;
        const double e = (w[i] - static_cast<double>(qi)) / ui[i];
        err[i] = e;
        for (std::int64_t j = i + 1; j < b.count; ++j) w[j] -= e * ui[j];
    }
}

} // namespace

void gptqBlock(const GptqBlock& b, mx::ElementFormat element) {
    const mx::cpu::ElementGrid grid(element);
    // A row costs about count²/2 multiply-adds: chunks of some 32k of them per task.
    const std::int64_t perRow = std::max<std::int64_t>(1, b.count * b.count / 2);
    const std::int64_t grain = std::max<std::int64_t>(1, 32768 / perRow);
    at::parallel_for(0, b.rows, grain, [&](std::int64_t r0, std::int64_t r1) {
        for (std::int64_t r = r0; r < r1; ++r) blockRow(b, grid, r);
    });
}

} // namespace latmix::quant::cpu
