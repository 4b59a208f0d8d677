#pragma once
// The HTML report of one run folder (`latmix report`, the workbench's File › Export report…):
// one self-contained page (inline CSS and SVG, no script, no external resource; it opens
// offline) with the run's configuration (latmix.json's format, transforms, training,
// weight_quantization and calibration sections), provenance (versions, date, command, model,
// device, seed), results (FP / folded FP / weights-only / W4A4 perplexity, recovery, zero-shot
// accuracies, seconds), the training curves of train.h5 (loss and KL, volume term, learning rate,
// folded FP perplexity, the tracked matrices' metrics; svgLinePlot) and the per-linear weight
// errors (a layer × linear table and a plot).
//
// For readers of the page: every number cell of the results and weight-error tables carries its
// exact value in data-value; results rows carry data-key (fp, folded_fp, weights_only, w4a4,
// recovery, zeroshot_average, zeroshot:<task>:<metric>); each plot states its axis mapping
// (report/SvgPlot.h).
#include "util/Job.h"

#include <string>

namespace latmix::report {

// The page. Throws what run::readRunSummary throws (naming RUN_DIR/latmix.json) when the run
// folder cannot be read; a train.h5 that cannot be read is said in the page, not thrown.
std::string runReportHtml(const std::string& runDir);

// Writes runReportHtml(runDir) to outHtml atomically (a temporary file renamed into place; the
// parent folder is created). Nothing is written when the run cannot be read.
void writeRunReport(const std::string& runDir, const std::string& outHtml, JobContext& job = silentJob());

} // namespace latmix::report
