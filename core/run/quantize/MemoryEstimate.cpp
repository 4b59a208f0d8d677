// Memory estimates (MemoryEstimate.h). Every term names the buffer of the code it stands for;
// sizes in bytes, float32 = 4, float64 = 8, s = the stored element size.
#include "run/quantize/MemoryEstimate.h"

#include "run/quantize/OptionTable.h"

#include "model/LlamaModel.h" // attentionQueryBlock
#include "model/TensorNames.h"
#include "mx/MxFormat.h"
#include "train/Distillation.h"
#include "util/Runtime.h"
#include "util/Text.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace latmix::run {
namespace {

using I = std::int64_t;

// The process itself: libtorch's code and allocator, the tokenizer (measured: `latmix eval` of
// stories260K, a 1 MB model, peaks at 165 MiB).
constexpr I kBase = I(170) << 20;

struct Shape {
    I h, i, q, kv, heads, v, layers;
    I linear; // model::ModelConfig::layerLinearWeights
    // The MLP per token: i, or in a mixture of experts k x the experts' width (each token's rows
    // gathered for its k experts, their activations, outputs).
    I mlpWidth;
    I experts = 0, expertWidth = 0, routedCopies = 0; // a sparse layer: E, its width, k copies of a token's row
    // The largest linear [out, in] and its input width: GPTQ's float64 work and the fold's product.
    I largestIn, largestOut;
    I layerParams() const { return linear + 2 * h; }
    I linearParams() const { return layers * (layerParams() - 2 * h); }
    I table() const { return v * h; }
    // The elements of one layer's input Hessians ([in, in] per point): q/k/v and gate/up share
    // the hidden-wide one; every expert has its own gate/up and down_proj inputs.
    I hessianElements() const {
        return experts > 0 ? h * h + q * q + experts * (h * h + expertWidth * expertWidth) : 2 * h * h + q * q + i * i;
    }
};
Shape shapeOf(const model::ModelConfig& c) {
    const I hd = c.headDim;
    Shape s{c.hiddenSize, c.intermediateSize, I(c.numHeads) * hd, I(c.numKvHeads) * hd, c.numHeads, c.vocabSize,
            c.numLayers, c.layerLinearWeights(), c.intermediateSize, 0, 0, 0, 0, 0};
    s.largestIn = c.intermediateSize, s.largestOut = c.hiddenSize;
    if (c.moe) {
        s.experts = c.moe->numExperts, s.expertWidth = c.moe->expertWidth, s.routedCopies = c.moe->expertsPerToken;
        s.mlpWidth = std::max<I>(c.intermediateSize, I(c.moe->expertsPerToken) * c.moe->expertWidth);
        s.largestIn = std::max<I>(c.hiddenSize, c.moe->expertWidth);
        s.largestOut = std::max<I>(s.q, c.moe->expertWidth);
    }
    return s;
}

// Activations of one decoder layer over T tokens of one sequence (float32): hidden states and
// their norm, q/k/v with RoPE copies, attention scores and probabilities in blocks of 256
// queries when T > 512 (model/LlamaModel.cpp), the MLP's gate/up/product.
I layerActivationBytes(const Shape& s, I T) {
    const I queries = model::attentionQueryBlock(T);
    // A sparse layer gathers each token's row for its k experts and scatters k outputs back.
    const I routed = 2 * T * s.routedCopies * s.h * 4;
    return 3 * T * s.h * 4 + 2 * T * (s.q + 2 * s.kv) * 4 + 2 * queries * T * s.heads * 4 + 3 * T * s.mlpWidth * 4 + routed;
}
// The loss over T tokens: one vocabulary chunk of 16384 logits with its exp / log-sum-exp
// temporaries (model::nextTokenNll).
I lossBytes(const Shape& s, I T) { return 3 * T * std::min<I>(s.v, 16384) * 4; }

// Terms of a distillation step (train::distillationStep) over B windows of T tokens, shared by
// the train stage and the per-device plan of --devices. The top: the teacher's final states and
// the student's with their gradient, a vocabulary chunk of both models' logits, probabilities
// and their difference. One layer recomputed with its graph: the layer as stored and folded in
// float32 (γ, T3, T1, T2: each a saved intermediate), its activations and attention
// probabilities kept for backward.
// Hidden-state copies kept per layer through a step: its checkpointed input, and with
// --loss block-mse also the teacher's output of that block.
I keptPerLayer(const RunConfig& o) { return o.loss == "block-mse" ? 2 : 1; }
I trainTopBytes(const Shape& s, I B, I T) { return 4 * B * T * s.h * 4 + 6 * B * T * std::min<I>(s.v, 16384) * 4; }
I trainLayerGraphBytes(const Shape& s, int stored, I B, I T) {
    const I P = s.layerParams();
    return 5 * P * 4 + P * stored + B * layerActivationBytes(s, T) + 2 * B * T * T * s.heads * 4;
}

std::string mib(I b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f MiB", double(b) / (1 << 20));
    return buf;
}

// An evaluation pass peaks either inside a decoder layer (the layer as stored, its float32 copy
// when stored narrower, the layer's activations) or in the loss (the lm_head table read whole,
// a chunk of logits); the mapped pages of each are released after use (io::releaseMappedPages).
MemoryStage evalStage(const std::string& name, const Shape& s, int stored, I T, I extra = 0) {
    const I layer = s.layerParams() * stored + (stored == 4 ? 0 : s.layerParams() * 4);
    const I inLayer = layer + layerActivationBytes(s, T) + extra;
    const I lmHead = s.table() * stored;
    const I inLoss = lmHead + lossBytes(s, T) + 2 * T * s.h * 4;
    return {name, kBase + std::max(inLayer, inLoss),
            inLayer >= inLoss ? "in a layer: the layer " + mib(layer) + ", activations " + mib(inLayer - layer)
                              : "in the loss: lm_head " + mib(lmHead) + ", logits " + mib(inLoss - lmHead)};
}

void finish(MemoryEstimate& e) {
    for (const auto& st : e.stages)
        if (st.bytes > e.peakBytes) {
            e.peakBytes = st.bytes;
            e.peakStage = st.name;
        }
}

// The quantize stage (run/quantize/LayerQuantizer.cpp), the larger of its moments, beside the
// calibration windows' hidden states (in and out) that it holds throughout:
// - converting a layer: its float32 copy beside the layer as stored when that is narrower (the
//   stored pages leave once it is copied);
// - the windows' pass: the float32 layer, the Hessians in float64 and one chunk of 8 windows
//   through the layer without a graph;
// - GPTQ: the layer, the Hessians and GPTQ's float64 work on the widest input; each linear's
//   result takes the original's place as it is quantized (LayerQuantizer::adoptResult), so one
//   result with its group scales is there beside the layer; the packed codes grow as the Hessians
//   are taken, far smaller than them;
// - the layer done: its results and packed codes (element bits + one scale byte per block) while
//   the run model's writer streams them to quantized.safetensors;
// - the end: the embedding converted to float32 for the run model when stored narrower.
// With transforms the layer is read from the folded model's float32 spill (mapped: no copy).
// On a device the layer, the Hessians, GPTQ's work and the chunk are there; the packed codes and
// the embedding's conversion are host memory.
MemoryStage quantizeStage(const Shape& s, I T, int stored, const RunConfig& o, const MethodSpec& m, bool onDevice) {
    const auto bits = mx::elementSpec(o.format.element()).bits;
    const I P = s.layerParams(), B = o.format.blockSize;
    const I packed = (s.linearParams() * bits / 8 + s.linearParams() / B) / s.layers;
    const I read = m.transformed ? 4 : stored;
    const I layer = P * 4;
    const I convert = layer + (onDevice || read == 4 ? 0 : P * read);
    const I oneResult = s.largestIn * s.largestOut * 4 + s.largestIn * s.largestOut / B * 4;
    // At down_proj: the three smaller Hessians, down_proj's own (taken, no copy) and GPTQ's
    // two [in, in] matrices alive at a time plus W and its working copy in float64.
    // RTN runs windows through the layers only for --rtn-error-windows (RunConfig).
    const I windows = weightQuantizationWindows(m, o);
    const I hess = windows > 0 ? s.hessianElements() * 8 : 0;
    const I gptq = m.gptq ? 2 * s.largestIn * s.largestIn * 8 + 2 * s.largestIn * s.largestOut * 8 : 0;
    const I calib = 2 * windows * T * s.h * 4;
    // The chunk, per window: the residual stream (input, norm, output) and the larger of the
    // attention (q/k/v with RoPE copies, k/v widened to every head, one block of scores, masked
    // scores and probabilities) and the MLP at its widest input: gate, up and their product,
    // then either the activation quantization's work or the Hessian's float64 copy of the
    // quantized input (HessianAccumulator::add). On the CPU the MX kernel writes its output
    // alone; on a GPU the tensor-ops path (mx/MxQuantizer.cpp) held up to six temporaries of the
    // input's size when it was measured on an H200 (docs/research/results.md), 1B shape, 16 windows
    // of 2048: peak 9234 MiB for an estimate of 9774 MiB. It now holds one besides its output
    // (the grid search's int32 indices); the six stay counted until a GPU measures the new peak.
    const I queries = model::attentionQueryBlock(T);
    const I residual = 3 * T * s.h * 4;
    const I attention = 2 * T * (s.q + 2 * s.kv) * 4 + 2 * T * s.q * 4 + 3 * queries * T * s.heads * 4;
    const I widest = T * s.mlpWidth * 4;
    const I mlp = 3 * widest + std::max(onDevice ? 6 * widest : widest, widest + 2 * widest);
    const I chunk = std::min<I>(8, windows) * (residual + std::max(attention, mlp));
    // The windows' pass and GPTQ come one after the other; on the host the larger of the two is
    // the peak (measured here: a 1B shape's GPTQ stage 2445 MiB, a Qwen3-MoE shape's 7761). On a
    // GPU they are counted together: that sum is what covered the H200's measured peak.
    const I pass = layer + hess + chunk, quantizing = layer + oneResult + hess + gptq;
    const I work = onDevice ? layer + oneResult + hess + gptq + chunk : std::max(pass, quantizing);
    const I done = layer + (onDevice ? 0 : packed);
    const I top = onDevice || m.transformed || stored == 4 ? 0 : s.table() * 4;
    const I largest = std::max({convert, work, done, top});
    const std::string at = largest == work ? "quantizing" : largest == convert ? "converting a layer"
                         : largest == done ? "writing a layer" : "writing the embedding";
    return {"quantize", kBase + calib + largest,
            at + ": a layer " + mib(layer) + ", Hessians " + mib(hess) + ", GPTQ " + mib(gptq) + ", packed " + mib(packed) +
                ", calibration activations " + mib(calib + chunk) + (top > 0 ? ", embedding " + mib(top) : "")};
}

} // namespace

std::string gibText(std::int64_t bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / double(I(1) << 30));
    return buf;
}

MemoryEstimate estimateEvalMemory(const model::ModelConfig& c, int storedBytes, int seqLen) {
    MemoryEstimate e;
    e.stages.push_back(evalStage("eval", shapeOf(c), storedBytes, std::min(seqLen, c.maxPositions)));
    finish(e);
    return e;
}

MemoryEstimate estimateQuantizeMemory(const model::ModelConfig& c, int stored, const RunConfig& o,
                                      const MethodSpec& m) {
    const Shape s = shapeOf(c);
    const I P = s.layerParams(), T = std::min(o.seqLen, c.maxPositions), N = o.calibSamples;
    MemoryEstimate e;

    if (m.learned) {
        // train::distillationStep over batch x T tokens: the lm_head table as stored (read a
        // chunk at a time, both models), every layer's input kept (activation checkpointing),
        // then the larger of the top and one layer's graph (trainTopBytes, trainLayerGraphBytes).
        const I B = o.batch, N = B * T;
        const I lmHead = s.table() * stored;
        const I perLayer = keptPerLayer(o);
        const I inputs = perLayer * s.layers * N * s.h * 4;
        const I top = trainTopBytes(s, B, T);
        const I layerGraph = trainLayerGraphBytes(s, stored, B, T);
        // Small models keep every layer's graph instead (train::keepsLayerGraphs): all of them
        // live beside the top.
        const bool kept = train::keepsLayerGraphs(c, B, T);
        // The teacher's states of every window, when windows come back (train::teacherCacheBytes).
        const I teacher = train::teacherCacheBytes(c, o.calibSamples, T, o.steps, int(B), train::objectiveOf(o.loss));
        e.stages.push_back({"train", kBase + lmHead + inputs + teacher + (kept ? s.layers * layerGraph + top : std::max(top, layerGraph)),
                            "lm_head " + mib(lmHead) + (perLayer == 2 ? ", layer inputs and teacher outputs " : ", layer inputs ") + mib(inputs) +
                                (kept ? ", every layer's graph " + mib(s.layers * layerGraph) : ", one layer's graph " + mib(layerGraph)) +
                                ", vocabulary chunk " + mib(top) + (teacher > 0 ? ", teacher states " + mib(teacher) : "")});
    }
    if (m.transformed) {
        // fold: one layer as stored, its float64 copy with a matmul result (the largest is an
        // [intermediate, hidden] weight), the float32 result; a sparse layer's experts go
        // through float64 one at a time (fold::foldedLayer). At the end the embedding / lm_head
        // folded into a float32 table, 8192 rows at a time in float64 (rows, product, bias),
        // with the original table's pages read.
        const I expert = 3 * s.h * s.expertWidth;
        const I inFloat64 = s.experts > 0 ? P - (s.experts - 1) * expert : P;
        const I layer = P * stored + inFloat64 * 8 + s.largestIn * s.largestOut * 8 + P * 4;
        const I top = s.table() * (4 + stored) + 3 * 8192 * s.h * 8;
        e.stages.push_back({"fold", kBase + std::max(layer, top),
                            "a layer " + mib(layer) + ", embedding/lm_head " + mib(top)});
        if (o.evalSeqLen > 0) e.stages.push_back(evalStage("eval (folded FP)", s, 4, o.evalSeqLen));
    }
    e.stages.push_back(quantizeStage(s, T, stored, o, m, false));
    if (o.evalSeqLen > 0) {
        e.stages.push_back(evalStage("eval (FP)", s, stored, o.evalSeqLen));
        // The run model is float32; activation quantization adds a copy of the widest input.
        e.stages.push_back(evalStage("eval (" + mx::precisionLabel(o.format.format) + ")", s, 4, o.evalSeqLen, I(o.evalSeqLen) * s.mlpWidth * 4));
    }
    finish(e);
    return e;
}

MemoryEstimate estimateDeviceMemory(const model::ModelConfig& c, int stored, const RunConfig& o,
                                    const MethodSpec& m) {
    const Shape s = shapeOf(c);
    // Everything on one device: the placement plan's weights as stored (layers, embedding and
    // lm_head) and training peak.
    const DeviceShare one = planLayerPlacement(c, stored, {"cuda"}, o).front();
    MemoryEstimate e;
    if (m.learned) e.stages.push_back({"train", one.peakBytes, one.detail});
    // The quantize stage: the host estimate's buffers (a layer, the Hessians, GPTQ's work, the
    // calibration activations) without the process's own memory, next to the weights GPTQ
    // reads: the original as stored, or for the methods with transforms the folded model's
    // float32 embedding and lm_head (its layers are mapped in host memory, a layer at a time
    // on the device).
    const I read = m.transformed ? 2 * s.table() * 4 + s.h * 4 : one.weightBytes;
    const std::string readName = m.transformed ? "folded embedding + lm_head " : "weights ";
    const MemoryStage q = quantizeStage(s, std::min(o.seqLen, c.maxPositions), stored, o, m, true);
    e.stages.push_back({"quantize", read + q.bytes - kBase, readName + mib(read) + ", " + q.detail});
    if (o.evalSeqLen > 0) {
        // The evaluated model in float32 (the frozen weights have left the device) and the larger
        // of one window's layer activations and its loss.
        const I weights = s.layers * s.layerParams() * 4 + (c.tieWordEmbeddings ? 1 : 2) * s.table() * 4 + s.h * 4;
        const I T = std::min(o.evalSeqLen, c.maxPositions);
        const I work = std::max(layerActivationBytes(s, T), lossBytes(s, T) + 2 * T * s.h * 4);
        // The KL to the FP model (SPEC §7) brings the FP model's lm_head, as stored, beside it.
        const I reference = s.table() * stored;
        e.stages.push_back({"eval", weights + work + reference, "float32 model " + mib(weights) + ", one window " + mib(work) +
                                                                   ", the FP lm_head for the KL " + mib(reference)});
    }
    finish(e);
    e.note = "frozen weights on the device as stored (" + std::string(stored == 4 ? "float32" : "16-bit") +
             "), each layer converted to float32 where it is used; plus the CUDA context, about " +
             mib(kCudaContextBytes) + " outside PyTorch's allocator";
    return e;
}

RunMemory estimateRunMemory(const model::ModelConfig& c, int stored, const RunConfig& o, const MethodSpec& m) {
    RunMemory r;
    r.host = estimateQuantizeMemory(c, stored, o, m);
    const c10::Device on = model::deviceFromName(o.device);
    if (on.is_cpu()) {
        r.checkedDevice = "cpu";
    } else if (!o.offload && o.devices.empty()) {
        r.checkedDevice = on.str();
        r.gpu = estimateDeviceMemory(c, stored, o, m);
    }
    return r;
}

std::int64_t checkedDeviceMemory(const RunMemory& memory) {
    if (memory.checkedDevice.empty()) return 0;
    if (memory.checkedDevice == "cpu") return availableHostMemory();
    return cudaTotalMemory(model::deviceFromName(memory.checkedDevice).index());
}

std::int64_t parseGpuMemory(const std::string& text) {
    std::size_t used = 0;
    double gib = 0;
    try {
        gib = std::stod(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    std::string unit = text.substr(used);
    unit.erase(std::remove(unit.begin(), unit.end(), ' '), unit.end());
    if (used == 0 || !(gib > 0) || gib > 1e6 || !(unit.empty() || unit == "GiB" || unit == "GB" || unit == "G"))
        throw std::invalid_argument("--gpu-memory '" + text + "' is not a size in GiB, e.g. 80 (an H100) or 141 (an H200)");
    return static_cast<std::int64_t>(gib * double(I(1) << 30));
}

std::string memoryTable(const MemoryEstimate& e, std::int64_t available) {
    std::string t;
    char buf[160];
    std::snprintf(buf, sizeof buf, "%-18s %10s  %s\n", "stage", "estimate", "largest terms");
    t += buf;
    for (const auto& st : e.stages) {
        std::snprintf(buf, sizeof buf, "%-18s %10s  ", st.name.c_str(), gibText(st.bytes).c_str());
        t += buf + st.detail + "\n";
    }
    t += "peak               " + gibText(e.peakBytes) + " (" + e.peakStage + ")";
    if (available > 0) t += ", available " + gibText(available);
    t += "\n";
    if (!e.note.empty()) t += "note: " + e.note + "\n";
    return t;
}

void refuseOverMemory(const MemoryEstimate& e, std::int64_t available, const RunConfig& o, const std::string& gpu) {
    const I need = e.peakBytes + (gpu.empty() ? 0 : kCudaContextBytes);
    if (available <= 0 || need <= available) return;
    const auto now = [](int v) { return "(now " + std::to_string(v) + ")"; };
    std::vector<Remedy> ways;
    if (!gpu.empty()) {
        ways.push_back({"offload", "", "", "(the decoder layers in host memory)"});
        ways.push_back({"devices", "", "", "(the layers split over several GPUs)"});
    }
    ways.push_back({"calib_samples", "", "fewer", now(o.calibSamples)});
    ways.push_back({"seqlen", "", "a shorter", now(o.seqLen)});
    const bool trains = std::any_of(e.stages.begin(), e.stages.end(), [](const MemoryStage& st) { return st.name == "train"; });
    if (trains) ways.push_back({"batch", "", "a smaller", now(o.batch)});
    if (o.evalSeqLen > 0) ways.push_back({"eval_seqlen", "", "a shorter", now(o.evalSeqLen)});
    if (gpu.empty()) ways.push_back({"offload", "", "a GPU with", ""});
    ways.push_back({"force", "", "", "to run anyway"});
    const std::string cause =
        gpu.empty() ? "the estimated peak memory of this run is " + gibText(e.peakBytes) + " (stage " + e.peakStage +
                          "), more than the " + gibText(available) + " this machine has available"
                    : "the estimated peak GPU memory of this run is " + gibText(need) + " (stage " + e.peakStage +
                          ", with the CUDA context), more than the " + gibText(available) + " of " + gpu;
    throw RunRefused(cause, ways, "the estimate is what `latmix quantize --dry-run` prints");
}

void refuseOverMemory(const RunMemory& m, const RunConfig& o) {
    if (const MemoryEstimate* e = m.checked())
        refuseOverMemory(*e, checkedDeviceMemory(m), o, m.checkedDevice == "cpu" ? std::string() : m.checkedDevice);
}

std::string memoryProblem(const RunMemory& m, const RunConfig& o) { return memoryProblem(m, checkedDeviceMemory(m), o); }

std::string memoryProblem(const RunMemory& m, std::int64_t available, const RunConfig& o) {
    const MemoryEstimate* e = m.checked();
    return e ? memoryProblem(*e, available, o, m.checkedDevice == "cpu" ? std::string() : m.checkedDevice) : std::string();
}

std::string memoryProblem(const MemoryEstimate& e, std::int64_t available, const RunConfig& o,
                          const std::string& gpu) {
    try {
        refuseOverMemory(e, available, o, gpu);
    } catch (const RunRefused& r) {
        return r.what();
    }
    return {};
}

int storedElementBytes(std::int64_t fileBytes, std::int64_t parameters) {
    if (parameters <= 0) return 4;
    const double b = double(fileBytes) / double(parameters);
    return b < 3.0 ? 2 : 4;
}

std::vector<std::string> parseDeviceList(const std::string& list) {
    if (list.find_first_not_of(" \t") == std::string::npos) throw std::invalid_argument("--devices is empty; give e.g. cuda:0,cuda:1");
    auto out = util::splitList(list);
    for (const auto& d : out)
        if (d.empty()) throw std::invalid_argument("--devices '" + list + "' has an empty entry; give e.g. cuda:0,cuda:1");
    return out;
}

std::vector<std::string> devicesOfLocalRank(const std::string& list, int localRank) {
    const auto groups = util::splitList(list, ';');
    if (groups.size() > 1) {
        if (localRank >= static_cast<int>(groups.size()))
            throw std::invalid_argument("--devices '" + list + "' has " + std::to_string(groups.size()) +
                                        " ';'-separated groups and none for local rank " + std::to_string(localRank) +
                                        "; give one group per local rank, or a single group that each rank shifts");
        return parseDeviceList(groups[static_cast<std::size_t>(localRank)]);
    }
    auto devices = parseDeviceList(list);
    const int shift = localRank * static_cast<int>(devices.size());
    for (auto& d : devices) {
        if (d.rfind("cuda", 0) != 0 || shift == 0) continue;
        const auto colon = d.find(':');
        int index = 0;
        if (colon != std::string::npos) {
            try {
                std::size_t used = 0;
                index = std::stoi(d.substr(colon + 1), &used);
                if (used != d.size() - colon - 1) throw std::invalid_argument(d);
            } catch (const std::exception&) {
                throw std::invalid_argument("--devices entry '" + d + "' is not cpu, cuda or cuda:N");
            }
        }
        d = "cuda:" + std::to_string(index + shift);
    }
    return devices;
}

std::vector<DeviceShare> planLayerPlacement(const model::ModelConfig& c, int stored, const std::vector<std::string>& devices,
                                            const RunConfig& o) {
    const Shape s = shapeOf(c);
    const I L = s.layers, D = static_cast<I>(devices.size());
    if (D < 1) throw std::invalid_argument("no device to place the layers on");
    if (D > L)
        throw std::invalid_argument(std::to_string(D) + " devices for " + std::to_string(L) +
                                    " decoder layers: give at most one device per layer");
    // As stored on the devices (run/QuantizeRun.cpp's placeLayers, model::loadStoredWeights): the
    // layers' matrices in the stored element size and their norms in float32, the embedding on
    // the first device, the final norm and lm_head on the last (a copy when tied, unless one
    // device holds both).
    // Layer by layer: a mixture of experts' sparse layers carry the router and every expert, its
    // dense ones (mlp_only_layers) their MLP, so the cut points balance the experts' weights.
    // Every tensor the config calls for (model::requiredTensors): matrices as stored, vectors
    // (norms, biases) in float32.
    std::vector<I> upTo(static_cast<size_t>(L) + 1, 0); // bytes of layers [0, l)
    for (const auto& [name, shape] : model::requiredTensors(c)) {
        const int l = model::names::layerOf(name);
        if (l < 0) continue;
        I n = 1;
        for (auto d : shape) n *= d;
        upTo[size_t(l) + 1] += n * (shape.size() >= 2 ? stored : 4);
    }
    for (I l = 0; l < L; ++l) upTo[size_t(l) + 1] += upTo[size_t(l)];
    const I embed = s.table() * stored;
    const I head = (c.tieWordEmbeddings && D == 1 ? 0 : s.table() * stored) + s.h * 4;
    auto load = [&](I d, I from, I to) { return upTo[size_t(to)] - upTo[size_t(from)] + (d == 0 ? embed : 0) + (d == D - 1 ? head : 0); };
    // best[d][l]: the smallest largest load placing the first l layers on devices 0..d-1, each
    // with at least one layer; cut[d][l] where device d-1's run starts.
    const I inf = std::numeric_limits<I>::max();
    std::vector<std::vector<I>> best(D + 1, std::vector<I>(L + 1, inf)), cut(D + 1, std::vector<I>(L + 1, 0));
    best[0][0] = 0;
    for (I d = 1; d <= D; ++d)
        for (I l = d; l <= L; ++l)
            for (I k = d - 1; k < l; ++k) {
                if (best[d - 1][k] == inf) continue;
                const I m = std::max(best[d - 1][k], load(d - 1, k, l));
                if (m < best[d][l]) {
                    best[d][l] = m;
                    cut[d][l] = k;
                }
            }
    std::vector<DeviceShare> plan(static_cast<size_t>(D));
    for (I d = D, l = L; d >= 1; l = cut[d][l], --d) {
        DeviceShare& p = plan[static_cast<size_t>(d - 1)];
        p.device = devices[static_cast<size_t>(d - 1)];
        p.firstLayer = static_cast<int>(cut[d][l]);
        p.layers = static_cast<int>(l - cut[d][l]);
        p.embedding = d == 1;
        p.lmHead = d == D;
        p.weightBytes = load(d - 1, p.firstLayer, p.firstLayer + p.layers);
    }
    // The training's peak on each device (the train stage of estimateQuantizeMemory): its
    // weights, its layers' checkpointed inputs, and the larger of one layer's graph
    // and (last device) a vocabulary chunk of both models' logits; the transforms with AdamW's
    // two moments and gradients on the first device.
    const I T = std::min(o.seqLen, c.maxPositions), B = o.batch, N = B * T;
    const I layerGraph = trainLayerGraphBytes(s, stored, B, T);
    const I top = trainTopBytes(s, B, T);
    const I hd = c.headDim;
    const I transforms = 4 * 4 * (s.h * s.h + s.h + s.layers * (hd * hd + hd));
    for (auto& p : plan) {
        const I inputs = keptPerLayer(o) * I(p.layers) * N * s.h * 4;
        const I work = p.lmHead ? std::max(layerGraph, top) : layerGraph;
        p.peakBytes = p.weightBytes + inputs + work + (p.embedding ? transforms : 0);
        p.detail = "weights " + mib(p.weightBytes) + ", layer inputs " + mib(inputs) + ", " +
                   (p.lmHead && top > layerGraph ? "vocabulary chunk " : "one layer's graph ") + mib(work) +
                   (p.embedding ? ", transforms + AdamW " + mib(transforms) : "");
    }
    return plan;
}

std::string placementTable(const std::vector<DeviceShare>& plan) {
    std::string t = "device       layers         holds                      training peak\n";
    for (const auto& p : plan) {
        char buf[160];
        const std::string layers = std::to_string(p.firstLayer) + ".." + std::to_string(p.firstLayer + p.layers - 1) +
                                   " (" + std::to_string(p.layers) + ")";
        std::string holds = p.embedding && p.lmHead ? "embedding, lm_head" : p.embedding ? "embedding" : p.lmHead ? "lm_head" : "";
        std::snprintf(buf, sizeof buf, "%-12s %-14s %-26s %s  ", p.device.c_str(), layers.c_str(), holds.c_str(),
                      gibText(p.peakBytes).c_str());
        t += buf + p.detail + "\n";
    }
    t += "(training peaks for --batch x --seqlen tokens, without each device's CUDA context)\n";
    return t;
}

std::int64_t availableHostMemory() {
    std::ifstream f("/proc/meminfo");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("MemAvailable:", 0) == 0) {
            std::istringstream in(line.substr(13));
            I kb = 0;
            in >> kb;
            return kb * 1024;
        }
    return 0;
}

} // namespace latmix::run
