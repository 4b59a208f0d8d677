#pragma once
// Results of a transform analysis (train/TransformAnalysis) on disk, SPEC §8 run files:
//
// HDF5  /                                   string attributes: run settings (model, format, ...)
//       /points/<point>/                    attributes rows, dim
//       /points/<point>/<kind>/             attributes: transform, error, mse, per_block_mean,
//                                           per_block_max, bound, inverse_norm_sq, sigma_min,
//                                           sigma_max, condition_number, orthogonality_deviation,
//                                           off_block_norm, remainder_note, seconds
//           per_block_error [N_B], block_max_sq [N_B], sweep_block_size [k], sweep_mse [k]
//           learned kinds: A [d, d], v [d] (with bias), log_abs_s [d] (with scales),
//                          history/{step, loss, mse, vol, lr, condition_number,
//                          orthogonality_deviation, off_block_norm} [steps]
// JSON  the same without the matrices (A, v, log|s|).
//
// Both are written to "<path>.partial" and renamed, so an interrupted run leaves no file that
// looks complete.
#include <map>
#include <string>
#include <vector>

namespace latmix::train {
struct AnalysisResult;
}

namespace latmix::analysis {

using Attributes = std::map<std::string, std::string>;

void writeAnalysisHdf5(const std::string& path, const train::AnalysisResult& result, const Attributes& attributes);
void writeAnalysisJson(const std::string& path, const train::AnalysisResult& result, const Attributes& attributes);
std::string analysisJson(const train::AnalysisResult& result, const Attributes& attributes);

// The "<point>/<kind>" groups of an analysis file, for checks and viewers.
std::vector<std::string> analysisFileEntries(const std::string& path);

} // namespace latmix::analysis
