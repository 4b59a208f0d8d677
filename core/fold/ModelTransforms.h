#pragma once
// The transforms of a whole model (SPEC §4): T1 (d_model, one), T2 (head_dim, one per layer)
// and the fixed online block Hadamard T3 (intermediate). Built from a spec, folded into weights
// (differentiably, for training), saved to and restored from transforms.h5.
#include "fold/Fold.h"
#include "model/LlamaModel.h"
#include "transforms/AffineTransform.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace latmix::fold {

struct TransformSpec {
    std::string t1Kind = "learned-affine-lu"; // any transforms::transformKinds() kind; "none": no T1
    std::string t2Kind = "learned-affine-lu"; // "none": no T2
    std::string init = "default";             // learned kinds (LearnedTransforms.h)
    double noiseStd = 1e-3;
    int blockSize = 32;                       // block-* kinds and block initialisations
    // Learned kinds kept block-diagonal with blockSize (paper Table 1 "Block" granularity;
    // transforms::TransformOptions::blockDiagonal); false: full matrices. Fixed kinds name
    // their granularity themselves (hadamard / block-hadamard).
    bool blockDiagonal = false;
    std::uint64_t seed = 0;                   // T1 gets seed, T2 of layer l seed + 1 + l
    // false: a kind with a learned bias is built without it (transforms::TransformOptions::bias).
    // A T1 bias folds into q/k/v, gate/up and lm_head biases, a T2 bias into v and o_proj biases.
    bool t1Bias = true, t2Bias = true;
    int t3Block = 32;                         // 0: no T3
    std::uint64_t t3Seed = 0;
    // The T1/T2 leaves in float64 instead of float32: a reference path for tests (the float32
    // step's own rounding measured against it); runs train in float32.
    bool float64 = false;
};

class ModelTransforms {
public:
    ModelTransforms(const model::ModelConfig& config, TransformSpec spec);
    ~ModelTransforms();
    ModelTransforms(ModelTransforms&&) noexcept;
    ModelTransforms& operator=(ModelTransforms&&) noexcept;

    const TransformSpec& spec() const { return m_spec; }
    transforms::AffineTransform* t1() const { return m_t1.get(); }
    transforms::AffineTransform* t2(int layer) const;
    int layers() const { return static_cast<int>(m_t2.size()); }
    // T3: block-diagonal [intermediate]², float64 on the CPU, kept as its blocks; undefined without T3.
    const transforms::BlockDiagonal& t3() const { return m_t3; }
    // A, A⁻¹ and v of T1 / of layer's T2 (undefined when absent), differentiable.
    fold::AffineMatrices t1Matrices() const;
    fold::AffineMatrices t2Matrices(int layer) const;

    std::vector<at::Tensor> parameters() const; // every learned leaf (T1 then T2 by layer)
    bool learned() const { return !parameters().empty(); }
    // Σ over transforms with scales of (Σ_i log|s_i|)² (SPEC §5 volume term, without λ).
    at::Tensor volume() const;
    void to(const at::Device& device);

    // Norm-folded weights (fold::foldNorms) with T3 already applied → the student's weights with
    // T1 and T2 folded in; differentiable w.r.t. parameters().
    model::LlamaWeights fold(const model::ModelConfig& config, const model::LlamaWeights& base) const;
    // The same for the top-level tensors (embed, lm_head) of base, its layers left as they are
    // (a layer at a time: foldedLayer).
    void foldTopLevel(const model::ModelConfig& config, model::LlamaWeights& base) const;

    // transforms.h5: T1/A, T1/v, layers/<l>/T2/A, layers/<l>/T2/v (float64 matrices, what the
    // folding used), params/<i> (the learned leaves, for an exact restore) and attributes
    // (kinds, init, seeds, T3 block and seed). extra attributes are added (method, format...).
    void save(const std::string& path, const std::map<std::string, std::string>& extra = {}) const;
    // A spec read back from a transforms.h5, and the transforms it describes with the saved
    // parameters restored. Throws naming the file when it does not match the config.
    static TransformSpec readSpec(const std::string& path);
    static ModelTransforms load(const model::ModelConfig& config, const std::string& path);
    void setParameters(const std::vector<at::Tensor>& values); // copies values into parameters()

private:
    TransformSpec m_spec;
    std::unique_ptr<transforms::AffineTransform> m_t1;
    std::vector<std::unique_ptr<transforms::AffineTransform>> m_t2;
    transforms::BlockDiagonal m_t3;
};

// The full-precision model a run with transforms t quantizes (SPEC §4): γ folded, T3 on W_down
// and applied online, T1 and T2 folded, in options' dtype and device, no activation
// quantization. Its activation points hold exactly what the run's quantizers see there (up to
// their quantization). original: the checkpoint's weights as loaded (any dtype/device).
model::LlamaModel foldedModel(const model::ModelConfig& config, const model::LlamaWeights& original, const ModelTransforms& t,
                              const at::TensorOptions& options);
// One layer of foldedModel's weights without touching the other layers: what the run's weight
// quantizer sees there. Folded in options' dtype and device (fold::foldLayer), returned in out's;
// a sparse layer's experts an expert at a time (fold::foldExpert), so that only one of them is
// in options' precision at once.
model::LayerWeights foldedLayer(const model::ModelConfig& config, const model::LayerWeights& original,
                                const ModelTransforms& t, int layer, const at::TensorOptions& options,
                                const at::TensorOptions& out);

} // namespace latmix::fold
