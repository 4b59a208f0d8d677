#pragma once
// RUN_DIR/train.h5 (docs/run-folder.md), the distillation's own file: written at each
// checkpoint, read back to resume. Internal to train/ (readDistillSeries and
// readFoldedPerplexityStart, for the readers elsewhere, are in train/Distillation.h).
#include "train/AdamW.h"
#include "train/Distillation.h"

#include <string>
#include <vector>

namespace latmix::train {

// The series of history, the optimizer's state after stepsDone steps, the latest T1 and tracked
// T2 matrices and the training's configuration; status "running" or "finished".
void writeTrainFile(const std::string& path, const std::vector<DistillStep>& history, double foldedStart,
                    const fold::ModelTransforms& transforms, const AdamW& opt, const DistillOptions& options, int stepsDone,
                    const std::string& status);

// The parameters and AdamW's state from runFile, and the history up to its last checkpoint
// (result.startStep, result.history, result.foldedPerplexityStart). Throws naming the file and
// the tensor when it is not a training file of these transforms.
void restoreTrainFile(const std::string& runFile, const std::vector<at::Tensor>& params, AdamW& opt, DistillResult& result);

} // namespace latmix::train
