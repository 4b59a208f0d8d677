#include "analysis/AnalysisStore.h"

#include "util/AtomicFile.h"

#include "train/TransformAnalysis.h"

#include <ATen/ATen.h>
#include <H5Cpp.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <functional>
#include <stdexcept>

namespace latmix::analysis {
namespace {

using nlohmann::json;

// Runs write(partialPath), then renames it to path (util/AtomicFile: removed on any failure).
void writeAtomically(const std::string& path, const std::function<void(const std::string&)>& write) {
    util::AtomicFile file(path);
    write(file.tempPath());
    file.commit();
}

// ---- HDF5 ----

void setString(H5::H5Object& obj, const std::string& name, const std::string& value) {
    H5::StrType type(H5::PredType::C_S1, std::max<size_t>(value.size(), 1));
    obj.createAttribute(name, type, H5::DataSpace(H5S_SCALAR)).write(type, value.empty() ? std::string(1, '\0') : value);
}

void setNumber(H5::H5Object& obj, const std::string& name, double value) {
    obj.createAttribute(name, H5::PredType::NATIVE_DOUBLE, H5::DataSpace(H5S_SCALAR))
        .write(H5::PredType::NATIVE_DOUBLE, &value);
}

// A float64 (or int32 when asInt) dataset of any rank from a tensor.
void writeTensor(H5::Group& g, const std::string& name, const at::Tensor& t, bool asInt = false) {
    auto c = t.detach().to(at::kCPU).to(asInt ? at::kInt : at::kDouble).contiguous();
    std::vector<hsize_t> dims(c.sizes().begin(), c.sizes().end());
    const H5::PredType& type = asInt ? H5::PredType::NATIVE_INT32 : H5::PredType::NATIVE_DOUBLE;
    H5::DataSet ds = g.createDataSet(name, type, H5::DataSpace(static_cast<int>(dims.size()), dims.data()));
    if (c.numel() > 0) ds.write(c.data_ptr(), type);
}

at::Tensor column(const std::vector<train::TrainingStep>& h, double train::TrainingStep::*field) {
    std::vector<double> v;
    for (const auto& s : h) v.push_back(s.*field);
    return at::tensor(v, at::kDouble);
}

void writeHistory(H5::Group& parent, const std::vector<train::TrainingStep>& h) {
    H5::Group g = parent.createGroup("history");
    std::vector<int> steps;
    for (const auto& s : h) steps.push_back(s.step);
    writeTensor(g, "step", at::tensor(steps, at::kInt), true);
    writeTensor(g, "loss", column(h, &train::TrainingStep::loss));
    writeTensor(g, "mse", column(h, &train::TrainingStep::mse));
    writeTensor(g, "vol", column(h, &train::TrainingStep::vol));
    writeTensor(g, "lr", column(h, &train::TrainingStep::lr));
    writeTensor(g, "condition_number", column(h, &train::TrainingStep::conditionNumber));
    writeTensor(g, "orthogonality_deviation", column(h, &train::TrainingStep::orthogonalityDeviation));
    writeTensor(g, "off_block_norm", column(h, &train::TrainingStep::offBlockNorm));
}

void writeEntry(H5::Group& pointGroup, const train::AnalysisEntry& e) {
    H5::Group g = pointGroup.createGroup(e.kind);
    setString(g, "error", e.error);
    setNumber(g, "seconds", e.seconds);
    if (!e.error.empty()) return;
    const auto& r = e.report;
    setString(g, "transform", r.transform);
    setString(g, "remainder_note", r.remainderNote);
    setNumber(g, "mse", r.mse);
    setNumber(g, "per_block_mean", r.perBlockMean);
    setNumber(g, "per_block_max", r.perBlockMax);
    setNumber(g, "bound", r.bound);
    setNumber(g, "inverse_norm_sq", r.spectral.inverseNormSquared);
    setNumber(g, "sigma_min", r.spectral.sigmaMin);
    setNumber(g, "sigma_max", r.spectral.sigmaMax);
    setNumber(g, "condition_number", r.spectral.conditionNumber);
    setNumber(g, "orthogonality_deviation", r.spectral.orthogonalityDeviation);
    setNumber(g, "off_block_norm", r.offBlockNorm);
    writeTensor(g, "per_block_error", r.perBlock);
    writeTensor(g, "block_max_sq", r.blockMaxSquared);
    std::vector<int> blocks;
    std::vector<double> mses;
    for (const auto& s : r.sweep) blocks.push_back(s.blockSize), mses.push_back(s.mse);
    writeTensor(g, "sweep_block_size", at::tensor(blocks, at::kInt), true);
    writeTensor(g, "sweep_mse", at::tensor(mses, at::kDouble));
    if (!e.learned) return;
    setNumber(g, "initial_mse", e.training.initialMse);
    setNumber(g, "training_seconds", e.training.seconds);
    if (e.matrix.defined()) writeTensor(g, "A", e.matrix);
    if (e.matrixBlocks.defined()) writeTensor(g, "A_blocks", e.matrixBlocks); // [nb, b, b]: A block-diagonal
    if (e.matrixTail.defined()) writeTensor(g, "A_tail", e.matrixTail);
    if (e.learnedBlock > 0) setNumber(g, "learned_block", static_cast<double>(e.learnedBlock));
    if (e.bias.defined()) writeTensor(g, "v", e.bias);
    if (e.logAbsScales.defined()) writeTensor(g, "log_abs_s", e.logAbsScales);
    writeHistory(g, e.training.history);
}

void writeHdf5File(const std::string& file, const train::AnalysisResult& result, const Attributes& attributes) {
    H5::H5File f(file, H5F_ACC_TRUNC);
    H5::Group root = f.openGroup("/");
    for (const auto& [k, v] : attributes) setString(root, k, v);
    H5::Group points = f.createGroup("/points");
    for (const auto& [point, shape] : result.points) {
        H5::Group pg = points.createGroup(point);
        setNumber(pg, "rows", static_cast<double>(shape.first));
        setNumber(pg, "dim", static_cast<double>(shape.second));
        for (const auto& e : result.entries)
            if (e.point == point) writeEntry(pg, e);
    }
}

// ---- JSON ----

json vectorJson(const at::Tensor& t) {
    std::vector<double> v;
    if (t.defined()) {
        auto c = t.detach().to(at::kCPU).to(at::kDouble).contiguous();
        v.assign(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
    }
    return v;
}

json historyJson(const std::vector<train::TrainingStep>& h) {
    auto col = [&](double train::TrainingStep::*field) { return vectorJson(column(h, field)); };
    return {{"loss", col(&train::TrainingStep::loss)},
            {"mse", col(&train::TrainingStep::mse)},
            {"vol", col(&train::TrainingStep::vol)},
            {"lr", col(&train::TrainingStep::lr)},
            {"condition_number", col(&train::TrainingStep::conditionNumber)},
            {"orthogonality_deviation", col(&train::TrainingStep::orthogonalityDeviation)},
            {"off_block_norm", col(&train::TrainingStep::offBlockNorm)}};
}

json entryJson(const train::AnalysisEntry& e) {
    json j = {{"kind", e.kind}, {"learned", e.learned}, {"seconds", e.seconds}};
    if (!e.error.empty()) {
        j["error"] = e.error;
        return j;
    }
    const auto& r = e.report;
    json sweep = json::array();
    for (const auto& s : r.sweep) sweep.push_back({{"block", s.blockSize}, {"mse", s.mse}});
    j.update({{"transform", r.transform},
              {"remainder_note", r.remainderNote},
              {"mse", r.mse},
              {"per_block_error", vectorJson(r.perBlock)},
              {"per_block_mean", r.perBlockMean},
              {"per_block_max", r.perBlockMax},
              {"block_max_sq", vectorJson(r.blockMaxSquared)},
              {"bound", r.bound},
              {"inverse_norm_sq", r.spectral.inverseNormSquared},
              {"sigma_min", r.spectral.sigmaMin},
              {"sigma_max", r.spectral.sigmaMax},
              {"condition_number", r.spectral.conditionNumber},
              {"orthogonality_deviation", r.spectral.orthogonalityDeviation},
              {"off_block_norm", r.offBlockNorm},
              {"sweep", sweep}});
    if (e.learned)
        j["training"] = {{"steps", e.training.history.size()},
                         {"initial_mse", e.training.initialMse},
                         {"final_mse", e.training.finalMse},
                         {"seconds", e.training.seconds},
                         {"history", historyJson(e.training.history)}};
    return j;
}

} // namespace

std::string analysisJson(const train::AnalysisResult& result, const Attributes& attributes) {
    json points = json::array();
    for (const auto& [point, shape] : result.points) {
        json transforms = json::array();
        for (const auto& e : result.entries)
            if (e.point == point) transforms.push_back(entryJson(e));
        points.push_back({{"name", point}, {"rows", shape.first}, {"dim", shape.second}, {"transforms", transforms}});
    }
    json j = {{"attributes", attributes}, {"seconds", result.seconds}, {"points", points}};
    return j.dump(2) + "\n"; // NaN/Inf (untracked steps, singular A) become null
}

void writeAnalysisJson(const std::string& path, const train::AnalysisResult& result, const Attributes& attributes) {
    const std::string text = analysisJson(result, attributes);
    writeAtomically(path, [&](const std::string& file) {
        std::ofstream out(file, std::ios::binary);
        out << text;
        out.close();
        if (!out) throw std::runtime_error("cannot write '" + file + "'");
    });
}

void writeAnalysisHdf5(const std::string& path, const train::AnalysisResult& result, const Attributes& attributes) {
    writeAtomically(path, [&](const std::string& file) {
        try {
            writeHdf5File(file, result, attributes);
        } catch (const H5::Exception& e) {
            throw std::runtime_error("cannot write analysis file '" + file + "': " + e.getDetailMsg());
        }
    });
}

std::vector<std::string> analysisFileEntries(const std::string& path) {
    std::vector<std::string> out;
    try {
        H5::H5File f(path, H5F_ACC_RDONLY);
        H5::Group points = f.openGroup("/points");
        for (hsize_t i = 0; i < points.getNumObjs(); ++i) {
            const std::string point = points.getObjnameByIdx(i);
            H5::Group pg = points.openGroup(point);
            for (hsize_t k = 0; k < pg.getNumObjs(); ++k) out.push_back(point + "/" + pg.getObjnameByIdx(k));
        }
    } catch (const H5::Exception& e) {
        throw std::runtime_error("cannot read analysis file '" + path + "': " + e.getDetailMsg());
    }
    return out;
}

} // namespace latmix::analysis
