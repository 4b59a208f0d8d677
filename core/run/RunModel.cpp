// The model folder of a quantization run (RunModel.h): writer, reader and their validation.
#include "run/RunModel.h"

#include "model/TensorNames.h"
#include "tokenizer/Tokenizer.h"
#include "util/AtomicFile.h"
#include "util/BitCompare.h"
#include "util/Text.h"
#include "model/ConfigJson.h"
#include "io/SafeTensors.h"
#include "model/Checkpoint.h"
#include "model/FusionGroups.h"
#include "model/LlamaModel.h"
#include "transforms/FixedTransforms.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>
#include <stdexcept>

namespace fs = std::filesystem;

namespace latmix::run {
namespace names = model::names;
namespace {

using util::shapeText;

std::string join(const fs::path& a, const char* b) { return (a / b).string(); }

bool sameConfig(const mx::MxConfig& a, const mx::MxConfig& b) {
    return a.format == b.format && a.blockSize == b.blockSize && a.scaleMode == b.scaleMode;
}

// Shapes a packed weight of [out, in] must have.
std::vector<std::int64_t> codesShape(const mx::MxConfig& c, std::int64_t out, std::int64_t in) {
    const bool nibbles = mx::elementSpec(c.element()).bits == 4;
    return {out, nibbles ? (in + 1) / 2 : in};
}
std::vector<std::int64_t> scalesShape(const mx::MxConfig& c, std::int64_t out, std::int64_t in) {
    return {out, (in + c.blockSize - 1) / c.blockSize};
}

// Throws when p does not unpack to w bit for bit (or is malformed). where: "…" for messages.
void checkPacked(const std::string& prefix, const mx::PackedTensor& p, const at::Tensor& w, const mx::MxConfig& want,
                 const std::string& where, const std::string& fix) {
    const std::int64_t out = w.size(0), in = w.size(1);
    if (!sameConfig(p.config, want))
        throw std::runtime_error(where + ": packed weight '" + prefix + "' is " + p.config.describe() +
                                 ", but the run model's config says " + want.describe() + "; " + fix);
    if (!p.codes.defined() || p.codes.scalar_type() != at::kByte || p.codes.sizes().vec() != codesShape(want, out, in))
        throw std::runtime_error(where + ": '" + prefix + ".weight_packed' must be uint8 " +
                                 shapeText(codesShape(want, out, in)) + " for weight " + shapeText({out, in}) +
                                 (p.codes.defined() ? ", got " + std::string(c10::toString(p.codes.scalar_type())) +
                                                          " " + shapeText(p.codes.sizes().vec())
                                                    : std::string(", got nothing")) +
                                 "; " + fix);
    if (!p.scales.defined() || p.scales.scalar_type() != at::kByte ||
        p.scales.sizes().vec() != scalesShape(want, out, in))
        throw std::runtime_error(where + ": '" + prefix + ".weight_scale' must be uint8 " +
                                 shapeText(scalesShape(want, out, in)) + "; " + fix);
    if (p.lastDim != in)
        throw std::runtime_error(where + ": packed weight '" + prefix + "' has " + std::to_string(p.lastDim) +
                                 " columns, the weight " + std::to_string(in) + "; " + fix);
    const at::Tensor u = mx::unpack(p);
    const auto m = util::firstBitMismatch(u, w.to(at::kFloat));
    if (m.index >= 0) {
        const std::int64_t r = m.index / in, col = m.index % in;
        char buf[160];
        std::snprintf(buf, sizeof buf, " at [%lld, %lld]: %.9g unpacked vs %.9g stored", static_cast<long long>(r),
                      static_cast<long long>(col), m.a, m.b);
        throw std::runtime_error(where + ": packed weight '" + prefix + "' does not unpack to '" + prefix +
                                 ".weight' bit for bit" + buf + "; " + fix);
    }
}

} // namespace

transforms::BlockDiagonal t3Transform(const model::LatmixQuantization& q, std::int64_t n) {
    if (q.t3Block <= 0) return {};
    return transforms::blockHadamard(n, q.t3Block, q.t3Seed);
}

model::ModelConfig runModelConfig(const RunModel& run) {
    return model::ModelConfig::fromJsonText(run.configJson, "run model config.json");
}

void writeRunModel(const std::string& dir, const RunModel& run, const std::string& tokenizerSourceDir) {
    const std::string where = "writing run model '" + dir + "'";
    if (run.quant.weightFormat) {
        const std::set<std::string> prefixes = [&] {
            const auto c = model::ModelConfig::fromJsonText(run.configJson, where + " (config.json)");
            const auto v = model::names::blockLinearPrefixes(c);
            return std::set<std::string>(v.begin(), v.end());
        }();
        for (const auto& [p, pk] : run.packed)
            if (!prefixes.count(p))
                throw std::runtime_error(where + ": packed weight '" + p + "' is not a block linear of this model");
    } else if (!run.packed.empty()) {
        throw std::runtime_error(where + ": packed weights given (e.g. '" + run.packed.begin()->first +
                                 "') but quant.weightFormat is unset");
    }
    std::set<std::string> names;
    for (const auto& [name, t] : run.tensors) names.insert(name);
    RunModelWriter out(dir, run.configJson, run.quant, names, tokenizerSourceDir);
    for (int l = 0; l < out.layers(); ++l) out.writeLayer(l, run.tensors, run.packed);
    out.addInputAmax(run.inputAmax);
    out.writeTopLevel(run.tensors);
    out.commit();
}

// What the writer knows once the names are checked: the files' entries in order, the bias
// groups' zeros, the block linears' weights, and the two files being written in the temporary
// folder.
struct RunModelWriter::State {
    std::string dir, where, tmp, tokenizerSourceDir;
    model::LatmixQuantization quant;
    model::ModelConfig config;
    std::set<std::string> names;
    std::vector<io::TensorSpec> specs; // the decoder layers first, in order, then the top level
    std::set<std::string> linearWeights;
    std::map<std::string, mx::MxConfig> linearFormats; // a scheme's groups in another format than quant.weightFormat
    std::unique_ptr<io::SafeTensorsWriter> weights, packed;
    std::vector<std::pair<std::string, at::Tensor>> inputTransforms;
    std::map<std::string, float> inputAmax;
    bool committed = false;

    bool has(const std::string& n) const { return names.count(n) != 0; }
    const mx::MxConfig& formatOf(const std::string& linear) const {
        const auto it = linearFormats.find(linear);
        return it != linearFormats.end() ? it->second : *quant.weightFormat;
    }
    void writeNext(const std::map<std::string, at::Tensor>& tensors, const std::map<std::string, mx::PackedTensor>& packedOf);
};

namespace {

// The "latmix" object and the bias flags set on the config the writer is given; throws naming
// what is wrong.
std::string runConfigText(const std::string& configJson, const model::LatmixQuantization& q,
                          const std::set<std::string>& names, const std::string& where,
                          std::map<std::string, std::vector<std::int64_t>>& zeros) {
    nlohmann::ordered_json j;
    try {
        j = nlohmann::ordered_json::parse(configJson);
    } catch (const nlohmann::json::exception& e) {
        throw std::runtime_error(where + ": configJson is not valid JSON (" + e.what() + ")");
    }
    if (!j.is_object()) throw std::runtime_error(where + ": configJson is not a JSON object");
    j.erase("latmix");
    if (q.method.empty()) throw std::runtime_error(where + ": quant.method is empty; name the method (\"rtn\", \"latmix-lu\", ...)");
    try {
        if (q.weightFormat) q.weightFormat->validate();
        if (q.activationFormat) q.activationFormat->validate();
    } catch (const std::invalid_argument& e) {
        throw std::runtime_error(where + ": " + e.what());
    }
    if (q.t3Block < 0) throw std::runtime_error(where + ": online Hadamard block must be >= 0");
    auto has = [&](const std::string& n) { return names.count(n) != 0; };
    const auto fixup = model::fixBiasFlags(j, has, model::BiasTarget::RunModel, where);
    zeros = std::map<std::string, std::vector<std::int64_t>>(fixup.zeroBiases.begin(), fixup.zeroBiases.end());
    j["torch_dtype"] = "float32";
    model::ModelConfig biases;
    biases.qkvBias = fixup.qkvBias;
    biases.oProjBias = fixup.oProjBias;
    biases.mlpBias = fixup.mlpBias;
    biases.lmHeadBias = has(names::kLmHeadBias);
    j["latmix"] = model::latmixJson(q, biases);
    return j.dump(2) + "\n";
}

} // namespace

RunModelWriter::RunModelWriter(const std::string& dir, const std::string& configJson, const model::LatmixQuantization& q,
                               const std::set<std::string>& tensorNames, const std::string& tokenizerSourceDir)
    : m(std::make_unique<State>()) {
    m->dir = dir;
    m->where = "writing run model '" + dir + "'";
    m->quant = q;
    m->names = tensorNames;
    m->tokenizerSourceDir = tokenizerSourceDir;
    const std::string& where = m->where;
    std::map<std::string, std::vector<std::int64_t>> zeros;
    const std::string configText = runConfigText(configJson, q, tensorNames, where, zeros);
    m->config = model::ModelConfig::fromJsonText(configText, where + " (config.json)");
    const model::ModelConfig& c = m->config;
    try {
        m->linearFormats = model::groupLinearFormats(c, q.groupFormats);
    } catch (const std::runtime_error& e) {
        throw std::runtime_error(where + ": " + e.what());
    }

    // Every name checked before anything is written; the file lists the decoder layers first
    // (in order: they come a layer at a time), then the other tensors.
    std::set<std::string> expected;
    std::vector<io::TensorSpec> otherSpecs;
    for (const auto& [name, shape] : model::requiredTensors(c)) {
        expected.insert(name);
        if (!m->has(name) && !zeros.count(name))
            throw std::runtime_error(where + ": tensor '" + name + "' " + shapeText(shape) + " is missing; a " +
                                     c.architectureName + " model with this config needs it");
        (names::layerOf(name) >= 0 ? m->specs : otherSpecs).push_back({name, "F32", shape});
    }
    for (const auto& name : tensorNames)
        if (!expected.count(name))
            throw std::runtime_error(where + ": tensor '" + name + "' is not part of a " + c.architectureName +
                                     " model with this config (q/k/v bias " + (c.qkvBias ? "true" : "false") +
                                     ", o_proj bias " + (c.oProjBias ? "true" : "false") + ", mlp bias " +
                                     (c.mlpBias ? "true" : "false") + ", tie_word_embeddings " +
                                     (c.tieWordEmbeddings ? "true" : "false") + "); remove it or fix the config");
    m->specs.insert(m->specs.end(), otherSpecs.begin(), otherSpecs.end());
    // The block linears kept in full precision (--keep) have no packed weight.
    const std::set<std::string> kept(q.keptLinears.begin(), q.keptLinears.end());
    if (q.weightFormat)
        for (const auto& p : model::names::blockLinearPrefixes(c))
            if (!kept.count(p)) m->linearWeights.insert(p + ".weight");

    // Packed weights: exactly the block linears, each checked against its float32 weight (bit for
    // bit) when its weight is written and written to quantized.safetensors right away, in the
    // same order, so neither file's tensors are held in memory.
    std::vector<io::TensorSpec> packedSpecs;
    for (const auto& s : m->specs)
        if (m->linearWeights.count(s.name)) {
            const std::string p = names::blockLinearOfWeight(s.name);
            const std::int64_t out = s.shape[0], in = s.shape[1];
            const mx::MxConfig& f = m->formatOf(p);
            packedSpecs.push_back({p + ".weight_packed", "U8", codesShape(f, out, in)});
            packedSpecs.push_back({p + ".weight_scale", "U8", scalesShape(f, out, in)});
            if (f.isNvfp4()) packedSpecs.push_back({p + ".weight_global_scale", "F32", {1}});
        }
    m->tmp = util::makeTempSibling(dir);
    try {
        util::writeTextFile(join(m->tmp, kRunConfigFile), configText);
        if (!packedSpecs.empty())
            m->packed = std::make_unique<io::SafeTensorsWriter>(join(m->tmp, kRunPackedFile), packedSpecs,
                                                                std::map<std::string, std::string>{{"format", "latmix-mx"}});
        m->weights = std::make_unique<io::SafeTensorsWriter>(join(m->tmp, kRunWeightsFile), m->specs,
                                                             std::map<std::string, std::string>{{"format", "pt"}});
    } catch (...) {
        util::removeTreeQuietly(m->tmp);
        throw;
    }
}

RunModelWriter::~RunModelWriter() {
    if (!m || m->committed) return;
    m->weights.reset();
    m->packed.reset();
    util::removeTreeQuietly(m->tmp);
}

int RunModelWriter::layers() const { return m->config.numLayers; }

// The next entry of the weights file from tensors (a bias the group needs and nobody gave:
// zeros), with its packed weight when it is a block linear's.
void RunModelWriter::State::writeNext(const std::map<std::string, at::Tensor>& tensors,
                                      const std::map<std::string, mx::PackedTensor>& packedOf) {
    const auto& [name, dtype, shape] = specs[weights->next()];
    if (!has(name)) return weights->write(at::zeros(shape, at::kFloat));
    const auto it = tensors.find(name);
    if (it == tensors.end() || !it->second.defined() || !at::isFloatingType(it->second.scalar_type()))
        throw std::runtime_error(where + ": tensor '" + name + "' must be a floating-point tensor");
    at::Tensor t = it->second;
    if (t.sizes().vec() != shape)
        throw std::runtime_error(where + ": tensor '" + name + "' has shape " + shapeText(t.sizes().vec()) +
                                 ", the config implies " + shapeText(shape));
    t = t.detach().to(at::kCPU).to(at::kFloat).contiguous();
    if (linearWeights.count(name)) {
        const std::string p = names::blockLinearOfWeight(name);
        const auto pk = packedOf.find(p);
        if (pk == packedOf.end())
            throw std::runtime_error(where + ": no packed weight for '" + p +
                                     "'; every block linear is quantized when latmix.weight_format is set");
        checkPacked(p, pk->second, t, formatOf(p), where, "this is a bug in the code that built the run model");
        packed->write(pk->second.codes);
        packed->write(pk->second.scales);
        if (formatOf(p).isNvfp4()) packed->write(at::full({1}, pk->second.globalScale, at::kFloat));
    }
    weights->write(t);
}

void RunModelWriter::writeLayer(int layer, const std::map<std::string, at::Tensor>& tensors,
                                const std::map<std::string, mx::PackedTensor>& packed) {
    const std::size_t next = m->weights->next();
    if (next >= m->specs.size() || names::layerOf(m->specs[next].name) != layer)
        throw std::logic_error(m->where + ": layer " + std::to_string(layer) + " written out of order");
    while (m->weights->next() < m->specs.size() && names::layerOf(m->specs[m->weights->next()].name) == layer)
        m->writeNext(tensors, packed);
}

void RunModelWriter::writeTopLevel(const std::map<std::string, at::Tensor>& tensors) {
    while (m->weights->next() < m->specs.size()) {
        if (names::layerOf(m->specs[m->weights->next()].name) >= 0)
            throw std::logic_error(m->where + ": the top level written before the last layer");
        m->writeNext(tensors, {});
    }
}

void RunModelWriter::addInputAmax(const std::map<std::string, float>& byLinear) {
    for (const auto& [linear, amax] : byLinear) {
        if (!m->linearWeights.count(linear + ".weight"))
            throw std::logic_error(m->where + ": an input maximum for '" + linear + "', which is no packed block linear");
        m->inputAmax[linear] = amax;
    }
}

void RunModelWriter::addInputTransforms(const std::map<std::string, transforms::BlockDiagonal>& byPoint) {
    for (const auto& [point, t] : byPoint) {
        if (t.blocks().defined()) m->inputTransforms.emplace_back(point + ".transform", t.blocks().to(at::kCPU, at::kFloat).contiguous());
        if (t.tail().defined()) m->inputTransforms.emplace_back(point + ".transform_tail", t.tail().to(at::kCPU, at::kFloat).contiguous());
    }
}

void RunModelWriter::commit() {
    if (m->weights->next() != m->specs.size()) throw std::logic_error(m->where + ": committed before every tensor");
    if (!m->quant.inputTransforms.empty() && m->inputTransforms.empty())
        throw std::logic_error(m->where + ": the config names input transforms and none were given");
    m->weights->finish();
    if (m->packed) m->packed->finish();
    if (!m->inputTransforms.empty())
        io::writeSafeTensors(join(m->tmp, model::kInputTransformsFile), m->inputTransforms,
                             std::map<std::string, std::string>{{"format", "latmix-input-transforms"}});
    if (!m->inputAmax.empty()) {
        std::vector<std::pair<std::string, at::Tensor>> t;
        for (const auto& [linear, amax] : m->inputAmax) t.emplace_back(linear + ".input_amax", at::full({1}, amax, at::kFloat));
        io::writeSafeTensors(join(m->tmp, kRunInputAmaxFile), t, std::map<std::string, std::string>{{"format", "latmix-input-amax"}});
    }
    tokenizer::copyTokenizerFiles(m->tokenizerSourceDir, m->tmp);
    util::replaceDirectory(m->tmp, m->dir);
    m->committed = true;
}

RunModel readRunModel(const std::string& dir) {
    const fs::path root(dir);
    std::error_code ec;
    if (!fs::is_directory(root, ec))
        throw std::runtime_error("run model folder '" + dir +
                                 "' does not exist; give the folder of a `latmix quantize` run (RUN_DIR, whose "
                                 "model/ holds config.json, model.safetensors and quantized.safetensors)");
    const std::string again = "the run folder is incomplete or damaged: run `latmix quantize` again";
    RunModel run;
    const std::string configPath = join(root, kRunConfigFile);
    run.configJson = util::readTextFile(configPath, "run model config");
    const model::ModelConfig c = model::ModelConfig::fromJsonText(run.configJson, configPath);
    if (!c.latmix)
        throw std::runtime_error(configPath + " has no \"latmix\" object, so '" + dir +
                                 "' is a plain Hugging Face folder, not the model of a quantization run; "
                                 "quantize it with `latmix quantize` first");
    run.quant = *c.latmix;

    const std::string weightsPath = join(root, kRunWeightsFile);
    if (!fs::is_regular_file(weightsPath, ec))
        throw std::runtime_error("run model weights '" + weightsPath + "' are missing; " + again);
    const auto file = io::SafeTensorsFile::open(weightsPath);
    std::set<std::string> expected;
    for (const auto& [name, shape] : model::requiredTensors(c)) {
        expected.insert(name);
        if (!file->contains(name))
            throw std::runtime_error(weightsPath + ": tensor '" + name + "' " + shapeText(shape) +
                                     " is missing; " + again);
        const auto& e = file->entry(name);
        if (e.dtype != "F32" || e.shape != shape)
            throw std::runtime_error(weightsPath + ": tensor '" + name + "' is " + e.dtype + " " + shapeText(e.shape) +
                                     ", expected F32 " + shapeText(shape) + "; " + again);
        run.tensors[name] = file->tensor(name);
    }
    for (const auto& e : file->entries())
        if (!expected.count(e.name))
            throw std::runtime_error(weightsPath + ": tensor '" + e.name + "' does not belong to a " +
                                     c.architectureName + " model with this config.json; " + again);

    const std::string packedPath = join(root, kRunPackedFile);
    const bool packedExists = fs::is_regular_file(packedPath, ec);
    if (!run.quant.weightFormat) {
        if (packedExists)
            throw std::runtime_error(packedPath + " exists, but " + configPath +
                                     " says the weights are unquantized (latmix.weight_format null); " + again);
        return run;
    }
    const mx::MxConfig wf = *run.quant.weightFormat;
    if (!packedExists)
        throw std::runtime_error("packed weights '" + packedPath + "' are missing, but " + configPath +
                                 " says the weights are quantized (" + wf.describe() + "); " + again);
    const auto pf = io::SafeTensorsFile::open(packedPath);
    std::set<std::string> packedNames;
    auto get = [&](const std::string& name, const char* dtype) {
        packedNames.insert(name);
        if (!pf->contains(name))
            throw std::runtime_error(packedPath + ": tensor '" + name + "' is missing; " + again);
        if (pf->entry(name).dtype != dtype)
            throw std::runtime_error(packedPath + ": tensor '" + name + "' is " + pf->entry(name).dtype +
                                     ", expected " + dtype + "; " + again);
        return pf->tensor(name);
    };
    const std::set<std::string> kept(run.quant.keptLinears.begin(), run.quant.keptLinears.end());
    const auto linearFormats = model::groupLinearFormats(c, run.quant.groupFormats);
    for (const auto& p : model::names::blockLinearPrefixes(c)) {
        if (kept.count(p)) continue; // kept in full precision: no packed weight
        const at::Tensor& w = run.tensors.at(p + ".weight");
        const auto own = linearFormats.find(p);
        const mx::MxConfig f = own != linearFormats.end() ? own->second : wf;
        mx::PackedTensor pk;
        pk.config = f;
        pk.lastDim = w.size(1);
        pk.codes = get(p + ".weight_packed", "U8");
        pk.scales = get(p + ".weight_scale", "U8");
        if (f.isNvfp4()) {
            const at::Tensor g = get(p + ".weight_global_scale", "F32");
            if (g.numel() != 1)
                throw std::runtime_error(packedPath + ": tensor '" + p + ".weight_global_scale' must hold one value; " +
                                         again);
            pk.globalScale = g.reshape({-1})[0].item<float>();
        }
        checkPacked(p, pk, w, f, packedPath, again);
        run.packed[p] = std::move(pk);
    }
    for (const auto& e : pf->entries())
        if (!packedNames.count(e.name))
            throw std::runtime_error(packedPath + ": tensor '" + e.name + "' is not a packed block-linear weight of "
                                     "this model; " + again);
    if (const std::string amaxPath = join(root, kRunInputAmaxFile); fs::exists(amaxPath, ec)) {
        const auto f = io::SafeTensorsFile::open(amaxPath);
        for (const auto& e : f->entries()) {
            const std::string suffix = ".input_amax", linear = e.name.substr(0, e.name.size() - std::min(e.name.size(), suffix.size()));
            if (e.name.size() <= suffix.size() || e.name.compare(linear.size(), suffix.size(), suffix) != 0 ||
                !run.packed.count(linear) || e.dtype != "F32" || e.shape != std::vector<std::int64_t>{1})
                throw std::runtime_error(amaxPath + ": tensor '" + e.name + "' is not a packed linear's input maximum "
                                         "(\"<linear>.input_amax\", F32 [1]); " + again);
            run.inputAmax[linear] = f->tensor(e.name).item<float>();
        }
    }
    if (!run.quant.inputTransforms.empty()) {
        try {
            run.inputTransforms = model::loadInputTransforms(dir, c, at::TensorOptions().dtype(at::kFloat));
        } catch (const std::exception& e) {
            throw std::runtime_error(std::string(e.what()) + "; " + again);
        }
    }
    return run;
}

} // namespace latmix::run
