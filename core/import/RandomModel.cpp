#include "import/RandomModel.h"

#include "io/SafeTensors.h"
#include "model/Checkpoint.h"
#include "model/Device.h"
#include "model/TensorNames.h"
#include "tokenizer/Tokenizer.h"
#include "util/AtomicFile.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <filesystem>
#include <stdexcept>

namespace fs = std::filesystem;

namespace latmix::importing {
namespace {

// transformers' PretrainedConfig.initializer_range default (Llama, Mistral, Qwen2, Qwen3).
constexpr double kInitStd = 0.02;
constexpr std::int64_t kChunk = 1 << 16; // elements per independently seeded stream

std::uint64_t splitMix(std::uint64_t& state) {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Uniform on [-a, a] with standard deviation std (a = std·√3). Each chunk of kChunk elements has
// its own SplitMix64 stream keyed by (seed, tensor, chunk), so the values do not depend on the
// number of threads that fill them.
at::Tensor uniformTensor(const std::vector<std::int64_t>& shape, double std, std::uint64_t seed, std::uint64_t tensor) {
    at::Tensor t = at::empty(shape, at::kFloat);
    float* p = t.data_ptr<float>();
    const std::int64_t n = t.numel();
    const double a = std * std::sqrt(3.0);
    const std::int64_t chunks = (n + kChunk - 1) / kChunk;
    at::parallel_for(0, chunks, 1, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t c = begin; c < end; ++c) {
            std::uint64_t state = seed ^ (0xD1B54A32D192ED03ull * (tensor + 1)) ^ (0x9E6C63D0676A9A99ull * (c + 1));
            splitMix(state);
            const std::int64_t hi = std::min(n, (c + 1) * kChunk);
            for (std::int64_t i = c * kChunk; i < hi; ++i) {
                const double u = static_cast<double>(splitMix(state) >> 11) * 0x1.0p-53; // [0, 1)
                p[i] = static_cast<float>((2.0 * u - 1.0) * a);
            }
        }
    });
    return t;
}

bool endsWith(const std::string& s, const char* suffix) {
    const std::string x(suffix);
    return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
}

} // namespace

void writeRandomModel(const model::ModelConfig& config, const std::string& dir, const RandomModelOptions& o,
                      JobContext& job) {
    const at::ScalarType dtype = model::parseDtype(o.dtype); // float32 or bfloat16
    const std::string stDtype = io::safeTensorsDtype(dtype)->name;
    if (!o.tokenizerDir.empty()) {
        const auto tok = tokenizer::Tokenizer::loadFromDir(o.tokenizerDir);
        if (tok->vocabSize() > config.vocabSize)
            throw std::runtime_error("the tokenizer in '" + o.tokenizerDir + "' has " + std::to_string(tok->vocabSize()) +
                                     " tokens, more than the config's vocab_size " + std::to_string(config.vocabSize) +
                                     "; give a tokenizer of this model family or raise vocab_size");
    }
    model::ModelConfig c = config;
    c.torchDtype = o.dtype;
    c.latmix.reset();

    std::vector<io::TensorSpec> specs;
    for (const auto& [name, shape] : model::requiredTensors(c)) specs.push_back({name, stDtype, shape});
    const std::string tmp = util::makeTempSibling(dir);
    try {
        util::writeTextFile((fs::path(tmp) / "config.json").string(), c.toJsonText());
        io::writeSafeTensorsStreamed(
            (fs::path(tmp) / "model.safetensors").string(), specs,
            [&](std::size_t i) {
                job.checkCancelled();
                job.progress(double(i) / specs.size(), "tensor " + std::to_string(i + 1) + "/" +
                                                           std::to_string(specs.size()) + " " + specs[i].name);
                const auto& s = specs[i];
                // Norm weights (input/post-attention/final, Qwen3's q_norm/k_norm) start at 1;
                // biases, embeddings and linears are random.
                const bool norm = s.shape.size() == 1 && endsWith(s.name, "norm.weight");
                at::Tensor t = norm ? at::ones(s.shape, at::kFloat) : uniformTensor(s.shape, kInitStd, o.seed, i);
                return t.to(dtype);
            },
            {{"format", "pt"}, {"source", "latmix random model, seed " + std::to_string(o.seed)}});
        if (!o.tokenizerDir.empty()) tokenizer::copyTokenizerFiles(o.tokenizerDir, tmp);
        job.progress(1.0, "written");
        util::replaceDirectory(tmp, dir);
    } catch (...) {
        util::removeTreeQuietly(tmp);
        throw;
    }
}

} // namespace latmix::importing
