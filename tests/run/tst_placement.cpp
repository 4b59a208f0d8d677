// `--devices`: the decoder layers split over several devices for training, balanced by the bytes
// each device holds (embedding with the first, lm_head with the last). Splits of the real
// Llama-3.2-1B shape worked by hand, and the optimum checked against every contiguous split
// (brute force) for Llama-3.1-8B and Qwen3-32B.
#include "model/LlamaModel.h"
#include "model/ModelConfig.h"
#include "run/quantize/MemoryEstimate.h"
#include "run/quantize/Method.h"
#include "run/quantize/Stages.h"

#include <ATen/ATen.h>
#include <torch/cuda.h>
// Qt after ATen: Qt's `slots` macro breaks ATen headers.
#include "TestSupport.h"

#include <QFile>
#include <QtTest>

#include <algorithm>
#include <array>
#include <functional>
#include <limits>

using namespace latmix;

namespace {

std::vector<std::string> devicesOf(int n) {
    std::vector<std::string> d;
    for (int i = 0; i < n; ++i) d.push_back("cuda:" + std::to_string(i));
    return d;
}

} // namespace

class TestPlacement : public QObject {
    Q_OBJECT

private slots:
    // Llama-3.2-1B: a layer is 60,817,408 matrix elements and 2 x 2048 norm weights, the
    // embedding and the (tied) lm_head 128256 x 2048 each, 4.32 layers' worth in float32 and in
    // bf16 alike (the float32 norms are 0.007% of a layer). 2 devices: 8 + 8 layers (9 + 7 would
    // put 9 layers and the embedding on the first). 4 devices: the ideal is 24.64 / 4 = 6.16
    // layers' worth each; 2 + table, 6, 6, 2 + table gives 6.32 at most, and every other split
    // puts 7 layers on a middle device or 3 + table on an end. One device holds the tied table once.
    void splitsWorkedByHand_data() {
        QTest::addColumn<QString>("config");
        QTest::addColumn<int>("stored");
        QTest::addColumn<int>("devices");
        QTest::addColumn<QList<int>>("layers");
        for (int stored : {4, 2}) {
            const char* dt = stored == 4 ? "float32" : "bf16";
            QTest::addRow("1B %s on 1 device", dt) << "llama-3.2-1b" << stored << 1 << QList<int>{16};
            QTest::addRow("1B %s on 2 devices", dt) << "llama-3.2-1b" << stored << 2 << QList<int>{8, 8};
            QTest::addRow("1B %s on 4 devices", dt) << "llama-3.2-1b" << stored << 4 << QList<int>{2, 6, 6, 2};
            QTest::addRow("1B %s on 16 devices (one layer each)", dt) << "llama-3.2-1b" << stored << 16 << QList<int>(16, 1);
        }
    }
    void splitsWorkedByHand() {
        QFETCH(QString, config);
        QFETCH(int, stored);
        QFETCH(int, devices);
        QFETCH(QList<int>, layers);
        const auto c = test::realConfig(config);
        const auto plan = run::planLayerPlacement(c, stored, devicesOf(devices), run::QuantizeOptions{});
        QCOMPARE(int(plan.size()), devices);
        QList<int> got;
        int next = 0;
        for (const auto& p : plan) {
            got << p.layers;
            QCOMPARE(p.firstLayer, next); // contiguous, in order, every layer once
            next += p.layers;
        }
        QCOMPARE(got, layers);
        QVERIFY(plan.front().embedding);
        QVERIFY(plan.back().lmHead);
        // The bytes held, by hand: the layers, the table (once) and, on the last device, the final norm
        // and a copy of the tied table when that is not the first device.
        const std::int64_t layer = 60817408LL * stored + 4096 * 4, table = 128256LL * 2048 * stored;
        QCOMPARE(plan.front().weightBytes, layers.front() * layer + table + (devices == 1 ? 2048 * 4 : 0));
        QCOMPARE(plan.back().weightBytes, layers.back() * layer + table + 2048 * 4); // lm_head: the table or its copy
        QVERIFY(plan.front().peakBytes > plan.front().weightBytes);
    }

    // One GPU (quantize --device cuda): the training's peak is the one-device plan's, the frozen
    // weights stay bf16 on the device (a 1B: 16 layers as above + the tied table once + the norm),
    // and whether it fits follows from the estimate plus the CUDA context: an 8B fits an 80 GiB
    // card; a Qwen3-32B's training (by hand: 61.5 GiB of bf16 weights, 10 GiB of checkpointed
    // layer inputs at 4 x 2048 tokens, 22 GiB for one layer's graph: 94 GiB) fits 141 GiB but
    // not 80, and the refusal names --offload and --devices.
    // The estimate beside the peaks PyTorch's allocator measured on an NVIDIA H200 (docs/research/results.md,
    // "GPU: NVIDIA H200 ... fourth visit"): at least the measured peak, and not so far above it
    // that a run which fits would be refused (within 25%). Llama-3.2-1B shape, bf16 weights,
    // 2048-token windows; latmix-lu's peak is its training step (batch 4), mr-gptq's its quantize
    // stage (16 calibration windows).
    void gpuEstimateCoversMeasuredPeak_data() {
        QTest::addColumn<QString>("method");
        QTest::addColumn<int>("calibSamples");
        QTest::addColumn<QString>("stage");
        QTest::addColumn<double>("measuredMiB");
        QTest::newRow("latmix-lu train") << "latmix-lu" << 8 << "train" << 9760.0;
        QTest::newRow("mr-gptq quantize") << "mr-gptq" << 16 << "quantize" << 9234.0;
    }
    void gpuEstimateCoversMeasuredPeak() {
        QFETCH(QString, method);
        QFETCH(int, calibSamples);
        QFETCH(QString, stage);
        QFETCH(double, measuredMiB);
        run::QuantizeOptions o;
        o.method = method.toStdString();
        o.batch = 4;
        o.seqLen = 2048;
        o.calibSamples = calibSamples;
        const auto e = run::estimateDeviceMemory(test::realConfig("llama-3.2-1b"), 2, o, run::runMethod(o));
        QCOMPARE(QString::fromStdString(e.peakStage), stage);
        const double estimateMiB = double(e.peakBytes) / (1 << 20);
        QVERIFY2(estimateMiB >= measuredMiB && estimateMiB <= 1.25 * measuredMiB,
                 qPrintable(QString("estimate %1 MiB, measured %2 MiB").arg(estimateMiB).arg(measuredMiB)));
    }

    // The progress bar's shares (run/quantize/StageCost.cpp) against the stage times measured on
    // an H200 at the 1B shape (docs/research/results.md, fourth visit): 5 training steps took 16 s and
    // GPTQ of 16 layers 169 s, of which the column loop as tensor operations was 124.5 s
    // (20480 columns a layer at 0.38 ms). The fused loop that replaced it runs on the host in
    // less than that and more than nothing, so quantizing is between 44.8 / 15.9 and
    // 169.3 / 15.9 times training there; the model must say so within a factor of two.
    // On a CPU with 1000 steps the training dominates instead.
    // Exact: training's seconds scale with the steps, the evaluation reads three models to the
    // folded check's one.
    void progressSharesFollowTheWork_data() {
        QTest::addColumn<QString>("config");
        QTest::addColumn<bool>("cuda");
        QTest::addColumn<int>("steps");
        QTest::addColumn<int>("seqLen");
        QTest::addColumn<int>("calibSamples");
        QTest::addColumn<double>("lowQuantizeOverTrain");
        QTest::addColumn<double>("highQuantizeOverTrain");
        QTest::newRow("1B, H200, 5 steps") << "llama-3.2-1b" << true << 5 << 2048 << 8 << (169.3 - 124.5) / 15.9 / 2
                                           << 169.3 / 15.9 * 2;
        QTest::newRow("1B, CPU, 1000 steps") << "llama-3.2-1b" << false << 1000 << 2048 << 8 << 0.0 << 0.5;
        // Measured (docs/research/results.md, "A mixture of experts on the CPU"): 2 steps of 4 × 128
        // tokens took 430.4 s, GPTQ of 4 layers × 387 linears from 4 windows 416.8 s. Each step
        // folds all 128 experts; a model that counted only the tokens' passes gave training a
        // sixteenth of that.
        QTest::newRow("Qwen3-MoE, CPU, 2 steps") << "qwen3-moe-scaled" << false << 2 << 128 << 4 << 416.8 / 430.4 / 2
                                                 << 416.8 / 430.4 * 2;
    }
    void progressSharesFollowTheWork() {
        QFETCH(QString, config);
        QFETCH(bool, cuda);
        QFETCH(int, steps);
        QFETCH(int, seqLen);
        QFETCH(int, calibSamples);
        QFETCH(double, lowQuantizeOverTrain);
        QFETCH(double, highQuantizeOverTrain);
        const auto c = test::realConfig(config);
        run::QuantizeOptions o;
        o.method = "latmix-lu";
        o.batch = 4;
        o.seqLen = seqLen;
        o.calibSamples = calibSamples;
        o.steps = steps;
        const run::MethodSpec m = run::runMethod(o);
        const auto t = run::stageSeconds(c, o, m, cuda, 4 * 2048);
        const double ratio = t.quantizing / t.transforms;
        QVERIFY2(ratio >= lowQuantizeOverTrain && ratio <= highQuantizeOverTrain, qPrintable(QString::number(ratio)));
        QVERIFY(t.folding > 0 && t.check > 0);
        QCOMPARE(t.evaluating, 3 * t.check);
        o.steps = 2 * steps;
        QCOMPARE(run::stageSeconds(c, o, m, cuda, 4 * 2048).transforms, 2 * t.transforms);
    }

    // One linear's cost (linearSeconds) against the seconds per linear measured on a 2-core CPU
    // with the fused column loop (docs/research/results.md, "GPTQ's column loop as one kernel":
    // the 1B widths, layer 0): each linear's cost relative to q_proj's within a factor of two of
    // the measured ratio. The model's rates are orders of magnitude; what it must get right is
    // which linears dominate (down_proj's [8192, 8192] Hessian on the CPU).
    void linearSecondsFollowTheMeasuredLinears_data() {
        QTest::addColumn<qint64>("out");
        QTest::addColumn<qint64>("in");
        QTest::addColumn<double>("measuredOverQ");
        const double q = 0.68;
        QTest::newRow("k_proj") << qint64(512) << qint64(2048) << 0.34 / q;
        QTest::newRow("o_proj") << qint64(2048) << qint64(2048) << 0.70 / q;
        QTest::newRow("gate_proj") << qint64(8192) << qint64(2048) << 1.85 / q;
        QTest::newRow("up_proj") << qint64(8192) << qint64(2048) << 1.69 / q;
        QTest::newRow("down_proj") << qint64(2048) << qint64(8192) << 14.99 / q;
    }
    void linearSecondsFollowTheMeasuredLinears() {
        QFETCH(qint64, out);
        QFETCH(qint64, in);
        QFETCH(double, measuredOverQ);
        const run::LinearCostModel cpu{true, false, 128, 2};
        const double ratio = run::linearSeconds(out, in, cpu) / run::linearSeconds(2048, 2048, cpu);
        QVERIFY2(ratio >= measuredOverQ / 2 && ratio <= measuredOverQ * 2,
                 qPrintable(QString("model %1, measured %2").arg(ratio).arg(measuredOverQ)));
    }

    // Data-parallel GPTQ of a 1B layer on two ranks. On the CPU down_proj's factorizations make it
    // the larger half alone (measured: 59.6 s against the six others' 22.9 s, results.md
    // "Data-parallel GPTQ"). On GPUs the factorizations take milliseconds and what is left goes by
    // the weights (the column loop on the host, packing): the ranks' weights within 1.5 times of
    // each other, where down_proj alone would hold 16.8 M against 44 M.
    void linearOwnersBalanceTheLayer_data() {
        QTest::addColumn<bool>("cuda");
        QTest::newRow("cpu") << false;
        QTest::newRow("cuda") << true;
    }
    void linearOwnersBalanceTheLayer() {
        QFETCH(bool, cuda);
        const std::vector<std::array<std::int64_t, 2>> layer = {{2048, 2048}, {512, 2048},  {512, 2048}, {2048, 2048},
                                                                {8192, 2048}, {8192, 2048}, {2048, 8192}};
        const auto owners = run::linearOwners(layer, 2, {true, cuda, 128, 16});
        QCOMPARE(run::linearOwners(layer, 2, {true, cuda, 128, 1}), owners); // whatever a rank's threads
        std::array<double, 2> weights{};
        for (std::size_t i = 0; i < layer.size(); ++i) weights.at(std::size_t(owners[i])) += double(layer[i][0] * layer[i][1]);
        const int downRank = owners.back();
        if (!cuda) {
            QCOMPARE(std::count(owners.begin(), owners.end(), downRank), std::ptrdiff_t(1));
        } else {
            const double high = std::max(weights[0], weights[1]), low = std::min(weights[0], weights[1]);
            QVERIFY2(high <= 1.5 * low, qPrintable(QString("%1 vs %2 weights").arg(high).arg(low)));
        }
    }

    void gpuEstimate_data() {
        QTest::addColumn<QString>("config");
        QTest::addColumn<double>("gib");
        QTest::addColumn<bool>("fits");
        QTest::newRow("1B on 80") << "llama-3.2-1b" << 80.0 << true;
        QTest::newRow("8B on 80") << "llama-3.1-8b" << 80.0 << true;
        QTest::newRow("32B on 80") << "qwen3-32b" << 80.0 << false;
        QTest::newRow("32B on 141") << "qwen3-32b" << 141.0 << true;
    }
    void gpuEstimate() {
        QFETCH(QString, config);
        QFETCH(double, gib);
        QFETCH(bool, fits);
        const auto c = test::realConfig(config);
        run::QuantizeOptions o;
        o.method = "latmix-lu";
        o.batch = 4;
        o.seqLen = 2048;
        o.calibSamples = 128;
        const auto e = run::estimateDeviceMemory(c, 2, o, run::runMethod(o));
        const auto one = run::planLayerPlacement(c, 2, {"cuda"}, o).front();
        QCOMPARE(e.stages.front().name, std::string("train"));
        QCOMPARE(e.stages.front().bytes, one.peakBytes);
        const std::int64_t weights = one.weightBytes; // the one-device plan holds every weight
        QVERIFY(e.stages.front().bytes > weights);
        // GPTQ after the fold: the frozen weights have left the device; the folded model's float32
        // embedding and lm_head are there with the host estimate's quantize buffers (less the
        // process's own 170 MiB, which is host memory).
        const std::int64_t folded = 2 * std::int64_t(c.vocabSize) * c.hiddenSize * 4 + c.hiddenSize * 4;
        std::int64_t hostQuantize = 0;
        for (const auto& st : run::estimateQuantizeMemory(c, 2, o, run::runMethod(o)).stages)
            if (st.name == "quantize") hostQuantize = st.bytes;
        QCOMPARE(e.stages.at(1).name, std::string("quantize"));
        // ... plus, per window of the chunk of 8, the MX tensor-ops path's temporaries at the
        // widest input: six of its size on the GPU where the host's fused kernel needs one beside
        // the Hessian's float64 copy (three): three more. The layer is the same float32 copy on
        // either (each linear's result taking the original's place). The host's peak is the
        // larger of the windows' pass and GPTQ (the float64 [in, in] pair and [in, out] pair at
        // down_proj, with one float32 result and its scales), the GPU's both together: it holds
        // the smaller of them more, at most all of GPTQ's part.
        const std::int64_t widest = std::int64_t(o.seqLen) * c.intermediateSize * 4;
        const std::int64_t in = c.intermediateSize, out = c.hiddenSize;
        const std::int64_t gptq = 2 * in * in * 8 + 2 * in * out * 8 + in * out * 4 + in * out / 32 * 4;
        const std::int64_t same = folded + hostQuantize - (std::int64_t(170) << 20) + 8 * 3 * widest;
        QVERIFY2(e.stages.at(1).bytes > same && e.stages.at(1).bytes <= same + gptq,
                 qPrintable(QString("GPU %1, host-derived %2 + at most %3").arg(e.stages.at(1).bytes).arg(same).arg(gptq)));
        if (config == "llama-3.2-1b")
            QCOMPARE(weights, 16 * (60817408LL * 2 + 4096 * 4) + 128256LL * 2048 * 2 + 2048 * 4);
        if (config == "qwen3-32b") { // the training peak, between the two cards
            QVERIFY(e.peakBytes > (std::int64_t(90) << 30) && e.peakBytes < (std::int64_t(100) << 30));
            QCOMPARE(e.peakStage, std::string("train"));
        }
        const auto available = run::parseGpuMemory(QByteArray::number(gib).toStdString());
        QCOMPARE(available, std::int64_t(gib * (1LL << 30)));
        const std::string problem = run::memoryProblem(e, available, o, "cuda:0");
        QCOMPARE(problem.empty(), fits);
        QCOMPARE(problem.empty(), e.peakBytes + run::kCudaContextBytes <= available);
        if (!fits) {
            QVERIFY2(problem.find("--offload") != std::string::npos && problem.find("--devices") != std::string::npos &&
                         problem.find("cuda:0") != std::string::npos,
                     problem.c_str());
        }
    }

    // Which estimate a run is checked against follows where it computes: the host's for a CPU
    // run, the GPU's (estimateDeviceMemory itself) for one GPU, none where the weights move
    // between the host and devices (--offload, --devices). A GPU named need not be here.
    void checkedMemoryFollowsTheDevice_data() {
        QTest::addColumn<QString>("device");
        QTest::addColumn<bool>("offload");
        QTest::addColumn<QString>("devices");
        QTest::addColumn<QString>("checked"); // "cpu", "cuda:N" or empty
        QTest::newRow("cpu") << "cpu" << false << "" << "cpu";
        QTest::newRow("cuda") << "cuda" << false << "" << "cuda:0";
        QTest::newRow("cuda:3") << "cuda:3" << false << "" << "cuda:3";
        QTest::newRow("cuda, --offload") << "cuda" << true << "" << "";
        QTest::newRow("--devices") << "cuda:0" << false << "cuda:0,cuda:1" << "";
        QTest::newRow("auto") << "auto" << false << "" << (torch::cuda::is_available() ? "cuda:0" : "cpu");
    }
    void checkedMemoryFollowsTheDevice() {
        QFETCH(QString, device);
        QFETCH(bool, offload);
        QFETCH(QString, devices);
        QFETCH(QString, checked);
        const auto c = test::realConfig("llama-3.1-8b");
        run::QuantizeOptions o;
        o.method = "latmix-lu";
        o.device = device.toStdString();
        o.offload = offload;
        if (!devices.isEmpty()) o.devices = run::parseDeviceList(devices.toStdString());
        const auto method = run::runMethod(o);
        const run::RunMemory m = run::estimateRunMemory(c, 2, o, method);
        QCOMPARE(QString::fromStdString(m.checkedDevice), checked);
        QCOMPARE(m.host.peakBytes, run::estimateQuantizeMemory(c, 2, o, method).peakBytes); // shown in every case
        const bool gpu = checked.startsWith("cuda");
        QCOMPARE(m.gpu.stages.empty(), !gpu);
        if (gpu) QCOMPARE(m.gpu.peakBytes, run::estimateDeviceMemory(c, 2, o, method).peakBytes);
        QCOMPARE(m.checked(), checked.isEmpty() ? nullptr : gpu ? &m.gpu : &m.host);
        // Nothing checked, nothing refused, whatever the size; a CPU run against the host's memory.
        if (checked.isEmpty()) QVERIFY(run::memoryProblem(m, o).empty());
        if (checked == "cpu") QCOMPARE(run::checkedDeviceMemory(m), run::availableHostMemory());
    }

    void badDeviceNameIsRefused() {
        run::QuantizeOptions o;
        o.method = "rtn";
        o.device = "gpu";
        try {
            run::estimateRunMemory(test::realConfig("llama-3.2-1b"), 2, o, run::runMethod(o));
            QFAIL("a device named 'gpu' was estimated");
        } catch (const std::invalid_argument& e) {
            QVERIFY2(QString(e.what()).contains("unknown device 'gpu'"), e.what());
        }
    }

    void gpuMemoryText_data() {
        QTest::addColumn<QString>("text");
        QTest::addColumn<double>("gib"); // 0: refused
        QTest::newRow("80") << "80" << 80.0;
        QTest::newRow("141 GiB") << "141 GiB" << 141.0;
        QTest::newRow("79.6GB") << "79.6GB" << 79.6;
        QTest::newRow("zero") << "0" << 0.0;
        QTest::newRow("words") << "lots" << 0.0;
        QTest::newRow("TB") << "1TB" << 0.0;
    }
    void gpuMemoryText() {
        QFETCH(QString, text);
        QFETCH(double, gib);
        try {
            const auto b = run::parseGpuMemory(text.toStdString());
            QVERIFY(gib > 0);
            QCOMPARE(b, std::int64_t(gib * (1LL << 30)));
        } catch (const std::invalid_argument& e) {
            QVERIFY2(gib == 0 && QString(e.what()).contains("--gpu-memory"), e.what());
        }
    }

    // The split is the best contiguous one: its largest device load equals the smallest largest
    // load over all ways to cut the layers into `devices` non-empty runs (enumerated here).
    void splitIsOptimal_data() {
        QTest::addColumn<QString>("config");
        QTest::addColumn<int>("devices");
        QTest::newRow("8B on 2") << "llama-3.1-8b" << 2;
        QTest::newRow("8B on 3") << "llama-3.1-8b" << 3;
        QTest::newRow("8B on 5") << "llama-3.1-8b" << 5;
        QTest::newRow("Qwen3-8B on 3") << "qwen3-8b" << 3;
        QTest::newRow("Qwen3-32B on 4") << "qwen3-32b" << 4;
        QTest::newRow("Qwen3-32B on 8") << "qwen3-32b" << 8;
    }
    void splitIsOptimal() {
        QFETCH(QString, config);
        QFETCH(int, devices);
        const auto c = test::realConfig(config);
        const auto plan = run::planLayerPlacement(c, 4, devicesOf(devices), run::QuantizeOptions{});
        std::int64_t planMax = 0;
        for (const auto& p : plan) planMax = std::max(planMax, p.weightBytes);
        // A layer's bytes from the config, float32: q/k/v/o, gate/up/down, the two norms and
        // Qwen3's per-head q/k norms (these configs have no biases).
        const std::int64_t h = c.hiddenSize, q = std::int64_t(c.numHeads) * c.headDim,
                           kv = std::int64_t(c.numKvHeads) * c.headDim, i = c.intermediateSize;
        QVERIFY(!c.qkvBias && !c.oProjBias && !c.mlpBias);
        const std::int64_t layer = (h * q + 2 * h * kv + q * h + 3 * h * i + 2 * h + (c.qkNorm ? 2 * c.headDim : 0)) * 4;
        const std::int64_t table = std::int64_t(c.vocabSize) * h * 4;
        const int L = c.numLayers;
        std::int64_t bestMax = std::numeric_limits<std::int64_t>::max();
        // Every split into `devices` consecutive non-empty parts, searched exhaustively; a branch
        // stops where one part already reaches the best maximum found, as a part only grows with
        // its layers (Qwen3-32B on 8 devices has 5.5e8 splits).
        auto partBytes = [&](int d, int n) {
            return n * layer + (d == 0 ? table : 0) + (d == devices - 1 ? table + h * 4 : 0);
        };
        std::function<void(int, int, std::int64_t)> enumerate = [&](int used, int d, std::int64_t maxSoFar) {
            if (d == devices - 1) {
                bestMax = std::min(bestMax, std::max(maxSoFar, partBytes(d, L - used)));
                return;
            }
            for (int n = 1; used + n <= L - (devices - 1 - d); ++n) {
                const std::int64_t m = std::max(maxSoFar, partBytes(d, n));
                if (m >= bestMax) break;
                enumerate(used + n, d + 1, m);
            }
        };
        enumerate(0, 0, 0);
        QCOMPARE(planMax, bestMax);
    }

    // A device may repeat: the split on one GPU (its transfers exercised); spaces are trimmed.
    void repeatedDeviceIsAllowed() {
        QCOMPARE(run::parseDeviceList("cuda:0, cuda:0"), (std::vector<std::string>{"cuda:0", "cuda:0"}));
    }

    // --devices with several ranks (torchrun's convention, local rank r on its own GPUs): worked
    // by hand from the rule (a single group shifted by rank x its size; ';' groups one per rank).
    void devicesOfLocalRank_data() {
        QTest::addColumn<QString>("list");
        QTest::addColumn<int>("localRank");
        QTest::addColumn<QString>("expected"); // comma-joined, or "error: ..." 
        QTest::newRow("rank 0 as given") << "cuda:0,cuda:1" << 0 << "cuda:0,cuda:1";
        QTest::newRow("rank 1 shifted by 2") << "cuda:0,cuda:1" << 1 << "cuda:2,cuda:3";
        QTest::newRow("rank 3 of 4 x 2 GPUs") << "cuda:0,cuda:1" << 3 << "cuda:6,cuda:7";
        QTest::newRow("no index is cuda:0") << "cuda,cuda" << 1 << "cuda:2,cuda:2";
        QTest::newRow("rank 1 starting at 4") << "cuda:4,cuda:5,cuda:6" << 1 << "cuda:7,cuda:8,cuda:9";
        QTest::newRow("cpu stays") << "cpu,cpu" << 1 << "cpu,cpu";
        QTest::newRow("groups, rank 1") << "cuda:0,cuda:0;cuda:1,cuda:1" << 1 << "cuda:1,cuda:1";
        QTest::newRow("groups, rank 0") << "cuda:3,cuda:2 ; cuda:1,cuda:0" << 0 << "cuda:3,cuda:2";
        QTest::newRow("groups, none for rank 2") << "cuda:0;cuda:1" << 2 << "error: none for local rank 2";
        QTest::newRow("bad index") << "cuda:0,cuda:x" << 1 << "error: 'cuda:x' is not cpu, cuda or cuda:N";
        QTest::newRow("empty group") << "cuda:0;" << 1 << "error: is empty";
    }
    void devicesOfLocalRank() {
        QFETCH(QString, list);
        QFETCH(int, localRank);
        QFETCH(QString, expected);
        std::string got;
        const QString e = test::errorOf([&] {
            for (const auto& d : run::devicesOfLocalRank(list.toStdString(), localRank)) got += (got.empty() ? "" : ",") + d;
        });
        if (expected.startsWith("error: "))
            QVERIFY2(!e.isEmpty() && e.contains(expected.mid(7)), qPrintable(e));
        else
            QCOMPARE(QString::fromStdString(got), expected);
    }

    // --device of a rank: "cuda" is the local rank's GPU; an index or the CPU as given.
    void deviceOfLocalRank_data() {
        QTest::addColumn<QString>("device");
        QTest::addColumn<int>("localRank");
        QTest::addColumn<QString>("expected");
        QTest::newRow("cuda, rank 0") << "cuda" << 0 << "cuda:0";
        QTest::newRow("cuda, rank 3") << "cuda" << 3 << "cuda:3";
        QTest::newRow("an index is kept") << "cuda:1" << 3 << "cuda:1";
        QTest::newRow("cpu") << "cpu" << 2 << "cpu";
    }
    void deviceOfLocalRank() {
        QFETCH(QString, device);
        QFETCH(int, localRank);
        QFETCH(QString, expected);
        QCOMPARE(QString::fromStdString(model::deviceOfLocalRank(device.toStdString(), localRank)), expected);
    }

    void badDeviceLists_data() {
        QTest::addColumn<QString>("list");
        QTest::addColumn<int>("layers"); // 0: parse only
        QTest::addColumn<QString>("message");
        QTest::newRow("empty entry") << "cuda:0,,cuda:1" << 0 << "empty entry";
        QTest::newRow("trailing comma") << "cuda:0," << 0 << "empty entry";
        QTest::newRow("nothing") << "" << 0 << "is empty";
        QTest::newRow("more devices than layers") << "cuda:0,cuda:1,cuda:2" << 2 << "3 devices for 2 decoder layers";
    }
    void badDeviceLists() {
        QFETCH(QString, list);
        QFETCH(int, layers);
        QFETCH(QString, message);
        const QString e = test::errorOf([&] {
            const auto d = run::parseDeviceList(list.toStdString());
            auto c = test::realConfig("llama-3.2-1b");
            c.numLayers = layers;
            run::planLayerPlacement(c, 2, d, run::QuantizeOptions{});
        });
        QVERIFY2(e.contains(message), qPrintable(e));
    }
};

QTEST_GUILESS_MAIN(TestPlacement)
#include "tst_placement.moc"
