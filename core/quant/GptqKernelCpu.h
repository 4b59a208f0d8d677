#pragma once
// GPTQ's column loop within one lazy block (SPEC §6), fused for the CPU: one pass per output row,
// parallel over rows, in place of ~20 tensor operations per column. Rows are independent in
// GPTQ (they share the Hessian, not their errors), so each row runs the block's columns in
// order by itself. Same float64 arithmetic and float32 rounding as the tensor-ops loop in
// WeightQuantizer.cpp, operation for operation. No ATen here beyond its thread pool.
#include "mx/MxFormat.h"

#include <cstdint>

namespace latmix::quant::cpu {

// Row-major matrices; each stride is the elements from one row to the next.
struct GptqBlock {
    std::int64_t rows = 0, count = 0; // output rows; columns in this block
    double* w = nullptr;              // [rows, count]: the working weights, updated in place
    const double* u = nullptr;        // [count, count]: the block's diagonal part of the upper Cholesky
                                      //   factor of H^-1 (row i: the OBS update after column i)
    const float* scale = nullptr;     // [rows, count]: each weight's static group scale
    float* q = nullptr;               // out [rows, count]: the values on the grid
    double* err = nullptr;            // out [rows, count]: (w - q) / u_ii, for the lazy update
    std::int64_t wStride = 0, uStride = 0, scaleStride = 0, qStride = 0, errStride = 0;
};

// For each row r and column i = 0 … count-1 in order: q = Qe(fl32(w_i) / s_i) · s_i (the element
// rounding of mx::roundToElement), e = (w_i − q) / u_ii, w_j −= e · u_ij for j > i.
void gptqBlock(const GptqBlock& b, mx::ElementFormat element);

} // namespace latmix::quant::cpu
