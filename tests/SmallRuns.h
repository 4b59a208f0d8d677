#pragma once
// The options of the small end-to-end runs (a few training steps, four 32-token calibration
// windows, two 64-token evaluation windows on the CPU) that tst_families and tst_moe put every
// family through, and the perplexity a run model is evaluated with again.
#include "eval/Perplexity.h"
#include "model/LlamaModel.h"
#include "mx/MxFormat.h"
#include "run/quantize/QuantizeOptions.h"

#include <QString>

#include <vector>

namespace latmix::test {

inline run::QuantizeOptions smallRunOptions(const QString& method) {
    run::QuantizeOptions o;
    o.method = method.toStdString();
    o.format = mx::makeConfig(mx::Format::MxFp4);
    o.steps = 3;
    o.batch = 2;
    o.lr = 1e-2; // a few large steps: the learned transforms (and biases) move well away from their start
    o.warmupSteps = 0;
    o.metricsEvery = 0;
    o.calibSamples = 4;
    o.seqLen = 32;
    o.seed = 3;
    o.device = "cpu";
    o.evalSeqLen = 64;
    o.evalWindows = 2;
    return o;
}

// The WikiText-2-style perplexity of m on ids over o's evaluation windows (as the run measured it).
inline double runPerplexity(const model::LlamaModel& m, const std::vector<int>& ids, const run::QuantizeOptions& o) {
    eval::PerplexityOptions p;
    p.seqLen = o.evalSeqLen;
    p.maxWindows = o.evalWindows;
    return eval::evaluatePerplexity(m, ids, p).perplexity;
}

} // namespace latmix::test
