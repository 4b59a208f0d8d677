// The built-in demo model: a small LlamaForCausalLM written from a seeded generator, so that the
// workbench, the CLI and the tests have a model with the activation statistics that make MX
// quantization hard (SPEC §4 quantization points) without any download.
//
// Why planted outliers: trained LLMs carry a few "massive activation" channels in the residual
// stream (Sun et al. 2024, "Massive Activations in Large Language Models"; the outlier channels
// QuaRot/SpinQuant/LATMiX rotate away). Their values are orders of magnitude above the rest and
// nearly constant across tokens; the model uses them as biases. After RMSNorm they dominate the
// inputs of q/k/v and gate/up, so one MX block of 32 containing such a channel gets a shared scale
// that flushes its other 31 elements to zero. A random Gaussian model has none of this, and a
// transform learned on it would show nothing. Here:
//  - embedding rows carry large values of a fixed sign in kOutliers (70-110x the std of the other
//    channels, i.e. > 20x the largest of them);
//  - the input/post-attention RMSNorm weight of those channels is 5 (others ~1), so after the norm
//    they are two orders of magnitude above the rest (tst_demomodel checks >= 100x the median
//    channel at every q/k/v and gate/up input; ~130-200x in practice);
//  - one value dimension (kv head 0, dim 0) and one MLP unit (index 0) read only the outlier
//    channels, so their outputs are constant across tokens; the o_proj/down_proj rows of the
//    outlier channels read exactly those, which adds a constant, bias-like push along the
//    outliers' sign in every block: the channels grow with depth as they do in trained models;
//  - every other weight reading the residual sees the outlier channels at 1/20 of its scale
//    (trained models learn to ignore them outside the "bias" units), which keeps attention logits
//    and MLP activations in a normal range;
//  - the final norm weight of the outlier channels is small (0.02), so logits come from the
//    ordinary channels, again as in trained models.
//
// Weights come from SplitMix64 and an Irwin-Hall normal (sum of 12 uniforms - 6): only integer
// operations, additions, multiplications and sqrt, all exactly specified by IEEE 754, so the file
// is byte-identical on every machine and libtorch version (at::randn's stream is not).
#include "import/DemoModel.h"

#include "io/SafeTensors.h"
#include "model/ModelConfig.h"
#include "model/TensorNames.h"
#include "util/AtomicFile.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <utility>

namespace fs = std::filesystem;

namespace latmix::importing {
using namespace latmix::model; // importers build model::ModelConfig and its tensors
namespace {

constexpr int kHidden = 128, kInter = 384, kLayers = 4, kHeads = 4, kKvHeads = 2, kHeadDim = 32;
constexpr int kVocab = 300, kMaxPos = 512;

// Outlier channels in three different MX blocks of 32, their signs and sizes (in units of the
// embedding std).
const std::vector<int> kOutliers = {13, 66, 101};
constexpr double kSign[] = {1.0, -1.0, 1.0};
constexpr double kMagnitude[] = {70.0, 90.0, 110.0};
constexpr double kEmbedStd = 0.05;
constexpr double kOutlierColumnScale = 0.05; // weight columns reading the outliers, outside the bias units
constexpr double kGrowth = 0.25;             // each block adds this fraction of the embedding outlier

class Rng {
public:
    explicit Rng(std::uint64_t seed) : m_state(seed) {}
    std::uint64_t next() { // SplitMix64 (Steele, Lea, Flood 2014)
        std::uint64_t z = (m_state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
    double normal() { // mean 0, variance 1, tails cut at 6: harmless for weights
        double s = 0;
        for (int i = 0; i < 12; ++i) s += uniform();
        return s - 6.0;
    }

private:
    std::uint64_t m_state;
};

// One generator per tensor, so that changing one tensor's recipe leaves the others as they were.
Rng rngFor(std::uint64_t seed, std::uint64_t tensorIndex) {
    Rng mix(seed ^ (0xD1B54A32D192ED03ull * (tensorIndex + 1)));
    return Rng(mix.next());
}

at::Tensor gaussian(Rng& r, std::vector<int64_t> shape, double std) {
    auto t = at::empty(shape, at::kFloat);
    float* p = t.data_ptr<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(r.normal() * std);
    return t;
}

// Scale the columns of a [out, in] weight that read the outlier channels.
void damp(at::Tensor& w) {
    float* p = w.data_ptr<float>();
    const int64_t rows = w.size(0), cols = w.size(1);
    for (int64_t r = 0; r < rows; ++r)
        for (int c : kOutliers) p[r * cols + c] = static_cast<float>(p[r * cols + c] * kOutlierColumnScale);
}

at::Tensor normWeight(Rng& r, double outlierValue) {
    auto g = gaussian(r, {kHidden}, 0.05);
    float* p = g.data_ptr<float>();
    for (int64_t i = 0; i < kHidden; ++i) p[i] = static_cast<float>(1.0 + p[i]);
    for (int c : kOutliers) p[c] = static_cast<float>(outlierValue);
    return g;
}

// Post-norm value of outlier channel k for a token whose residual is dominated by the planted
// pattern: RMSNorm divides by sqrt(mean of squares) ~ kEmbedStd * |m| / sqrt(hidden).
double postNormOutlier(int k) {
    double ss = kHidden - static_cast<double>(kOutliers.size()); // the ordinary channels, ~1 each
    for (double m : kMagnitude) ss += m * m;
    return kMagnitude[k] / std::sqrt(ss / kHidden);
}

std::string byteToken(int b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    return buf;
}

// SentencePiece-style BPE with byte fallback, in the Hugging Face tokenizer.json layout Llama 2
// uses. Pieces use U+2581 for a space. Every merged piece is the concatenation of its merge pair,
// and merges are ranked so that each word reaches its longest piece (e.g. "▁the" = "▁t" + "he",
// with "he" ranked before "▁t h" would apply).
nlohmann::ordered_json demoTokenizer() {
    const std::string sp = "\xE2\x96\x81"; // ▁
    const std::vector<std::string> chars = {sp,  "e", "t", "a", "o", "h", "n", "i", "s", "r",
                                            "d", "l", "u", "y", "w", "m", "g", "c", ".", ","};
    const std::vector<std::pair<std::string, std::string>> merges = {
        {sp, "t"}, {"h", "e"}, {sp, "a"}, {"i", "n"}, {"e", "r"},   {sp + "t", "h"}, {sp + "t", "he"},
        {"o", "n"}, {sp, "s"}, {"n", "d"}, {sp, "w"}, {"e", "d"},   {sp, "o"},       {"a", "n"},
        {sp + "a", "nd"}, {"o", "u"}, {sp, "h"}, {"in", "g"}, {sp, "l"}, {sp, "d"}, {"l", "l"},
    };
    nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
    int id = 0;
    vocab["<unk>"] = id++;
    vocab["<s>"] = id++;
    vocab["</s>"] = id++;
    for (int b = 0; b < 256; ++b) vocab[byteToken(b)] = id++;
    for (const auto& c : chars) vocab[c] = id++;
    nlohmann::ordered_json mergeList = nlohmann::ordered_json::array();
    for (const auto& [a, b] : merges) {
        if (!vocab.contains(a) || !vocab.contains(b)) throw std::logic_error("demo tokenizer: merge of unknown piece");
        if (!vocab.contains(a + b)) vocab[a + b] = id++;
        mergeList.push_back(a + " " + b);
    }
    if (id != kVocab) throw std::logic_error("demo tokenizer: vocabulary size does not match the model");

    auto special = [](int i, const char* content) {
        nlohmann::ordered_json t;
        t["id"] = i;
        t["content"] = content;
        t["single_word"] = false;
        t["lstrip"] = false;
        t["rstrip"] = false;
        t["normalized"] = false;
        t["special"] = true;
        return t;
    };
    auto replace = [](const std::string& from, const std::string& to) {
        nlohmann::ordered_json r;
        r["type"] = "Replace";
        r["pattern"] = {{"String", from}};
        r["content"] = to;
        return r;
    };
    auto piece = [](const char* seqOrSpecial, const char* id, int typeId) {
        nlohmann::ordered_json p, inner;
        inner["id"] = id;
        inner["type_id"] = typeId;
        p[seqOrSpecial] = inner;
        return p;
    };

    nlohmann::ordered_json j;
    j["version"] = "1.0";
    j["truncation"] = nullptr;
    j["padding"] = nullptr;
    j["added_tokens"] = {special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")};
    nlohmann::ordered_json prepend;
    prepend["type"] = "Prepend";
    prepend["prepend"] = sp;
    j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {prepend, replace(" ", sp)}}};
    j["pre_tokenizer"] = nullptr;
    nlohmann::ordered_json post;
    post["type"] = "TemplateProcessing";
    post["single"] = {piece("SpecialToken", "<s>", 0), piece("Sequence", "A", 0)};
    post["pair"] = {piece("SpecialToken", "<s>", 0), piece("Sequence", "A", 0), piece("SpecialToken", "<s>", 1),
                    piece("Sequence", "B", 1)};
    nlohmann::ordered_json bos;
    bos["id"] = "<s>";
    bos["ids"] = {1};
    bos["tokens"] = {"<s>"};
    post["special_tokens"] = {{"<s>", bos}};
    j["post_processor"] = post;
    nlohmann::ordered_json strip;
    strip["type"] = "Strip";
    strip["content"] = " ";
    strip["start"] = 1;
    strip["stop"] = 0;
    j["decoder"] = {{"type", "Sequence"},
                    {"decoders",
                     {replace(sp, " "), nlohmann::ordered_json{{"type", "ByteFallback"}},
                      nlohmann::ordered_json{{"type", "Fuse"}}, strip}}};
    nlohmann::ordered_json model;
    model["type"] = "BPE";
    model["dropout"] = nullptr;
    model["unk_token"] = "<unk>";
    model["continuing_subword_prefix"] = nullptr;
    model["end_of_word_suffix"] = nullptr;
    model["fuse_unk"] = true;
    model["byte_fallback"] = true;
    model["ignore_merges"] = false;
    model["vocab"] = vocab;
    model["merges"] = mergeList;
    j["model"] = model;
    return j;
}

// The embedding: Gaussian rows with the outlier channels set in every row.
at::Tensor demoEmbedding(std::uint64_t seed, std::uint64_t index) {
    const int nOut = static_cast<int>(kOutliers.size());
    Rng r = rngFor(seed, index);
    auto e = gaussian(r, {kVocab, kHidden}, kEmbedStd);
    float* p = e.data_ptr<float>();
    for (int64_t row = 0; row < kVocab; ++row)
        for (int k = 0; k < nOut; ++k)
            p[row * kHidden + kOutliers[k]] = static_cast<float>(kSign[k] * kMagnitude[k] * kEmbedStd * (1.0 + 0.05 * r.normal()));
    return e;
}

// Decoder layer `layer`'s nine tensors, drawn from the generators index, index + 1, ... in the
// order of their names (norm, q, k, v, o, norm, gate, up, down), appended to t.
void appendDemoLayer(int layer, std::uint64_t seed, std::uint64_t& index, std::vector<std::pair<std::string, at::Tensor>>& t) {
    const int nOut = static_cast<int>(kOutliers.size());
    const double inStd = 1.0 / std::sqrt(double(kHidden)), interStd = 1.0 / std::sqrt(double(kInter));
    const double depth = 1.0 / std::sqrt(2.0 * kLayers); // residual-branch scaling (GPT-2 style)
    const double normOutlier = 5.0;
    double sumX = 0; // sum over outlier channels of |post-norm value| (times the norm weight)
    for (int k = 0; k < nOut; ++k) sumX += normOutlier * postNormOutlier(k);
    const std::string p = names::layerPrefix(layer);
    Rng rn1 = rngFor(seed, index++), rq = rngFor(seed, index++), rk = rngFor(seed, index++), rv = rngFor(seed, index++),
        ro = rngFor(seed, index++), rn2 = rngFor(seed, index++), rg = rngFor(seed, index++), ru = rngFor(seed, index++),
        rd = rngFor(seed, index++);
    auto q = gaussian(rq, {kHeads * kHeadDim, kHidden}, inStd);
    auto k = gaussian(rk, {kKvHeads * kHeadDim, kHidden}, inStd);
    auto v = gaussian(rv, {kKvHeads * kHeadDim, kHidden}, inStd);
    auto o = gaussian(ro, {kHidden, kHeads * kHeadDim}, inStd * depth);
    auto gate = gaussian(rg, {kInter, kHidden}, inStd);
    auto up = gaussian(ru, {kInter, kHidden}, inStd);
    auto down = gaussian(rd, {kHidden, kInter}, interStd * depth);
    for (at::Tensor* w : {&q, &k, &v, &gate, &up}) damp(*w);

    // Bias units. Value dim 0 of kv head 0 reads only the outliers (value ~1 for every token);
    // the attention heads sharing that kv head (GQA) pass it through unchanged, because softmax
    // rows sum to 1, and o_proj's outlier rows read it from those heads.
    float* vp = v.data_ptr<float>();
    for (int c = 0; c < kHidden; ++c) vp[c] = 0.0f;
    for (int j = 0; j < nOut; ++j) vp[kOutliers[j]] = static_cast<float>(kSign[j] / sumX);
    const int headsPerKv = kHeads / kKvHeads;
    float* op = o.data_ptr<float>();
    for (int j = 0; j < nOut; ++j)
        for (int h = 0; h < headsPerKv; ++h)
            op[kOutliers[j] * (kHeads * kHeadDim) + h * kHeadDim] =
                static_cast<float>(kSign[j] * kGrowth * kMagnitude[j] * kEmbedStd / headsPerKv);
    // MLP unit 0: gate ~3 and up ~1 for every token, silu(3) * 1 ~ 2.86.
    float* gp = gate.data_ptr<float>();
    float* upp = up.data_ptr<float>();
    for (int c = 0; c < kHidden; ++c) gp[c] = upp[c] = 0.0f;
    for (int j = 0; j < nOut; ++j) {
        gp[kOutliers[j]] = static_cast<float>(3.0 * kSign[j] / sumX);
        upp[kOutliers[j]] = static_cast<float>(kSign[j] / sumX);
    }
    const double unitOut = 2.8577223804673; // silu(3) * 1 (a literal: libm's exp may differ by an ulp)
    float* dp = down.data_ptr<float>();
    for (int j = 0; j < nOut; ++j)
        dp[kOutliers[j] * kInter + 0] = static_cast<float>(kSign[j] * kGrowth * kMagnitude[j] * kEmbedStd / unitOut);

    t.emplace_back(p + names::kInputNorm + ".weight", normWeight(rn1, normOutlier));
    t.emplace_back(p + names::kQProj + ".weight", q);
    t.emplace_back(p + names::kKProj + ".weight", k);
    t.emplace_back(p + names::kVProj + ".weight", v);
    t.emplace_back(p + names::kOProj + ".weight", o);
    t.emplace_back(p + names::kPostAttentionNorm + ".weight", normWeight(rn2, normOutlier));
    t.emplace_back(p + names::kGateProj + ".weight", gate);
    t.emplace_back(p + names::kUpProj + ".weight", up);
    t.emplace_back(p + names::kDownProj + ".weight", down);
}

ModelConfig demoConfig() {
    ModelConfig c;
    c.architecture = Architecture::Llama;
    c.architectureName = "LlamaForCausalLM";
    c.hiddenSize = kHidden;
    c.intermediateSize = kInter;
    c.numLayers = kLayers;
    c.numHeads = kHeads;
    c.numKvHeads = kKvHeads;
    c.headDim = kHeadDim;
    c.vocabSize = kVocab;
    c.maxPositions = kMaxPos;
    c.rmsNormEps = 1e-5;
    c.ropeTheta = 10000.0;
    c.tieWordEmbeddings = false;
    c.bosTokenId = 1;
    c.eosTokenId = 2;
    c.torchDtype = "float32";
    return c;
}

void writeDemoTokenizer(const std::string& dir) {
    util::writeFileAtomically((fs::path(dir) / "tokenizer.json").string(), demoTokenizer().dump(2) + "\n");
    nlohmann::ordered_json tc;
    tc["tokenizer_class"] = "LlamaTokenizerFast";
    tc["bos_token"] = "<s>";
    tc["eos_token"] = "</s>";
    tc["unk_token"] = "<unk>";
    tc["add_bos_token"] = true;
    tc["add_eos_token"] = false;
    tc["model_max_length"] = kMaxPos;
    util::writeFileAtomically((fs::path(dir) / "tokenizer_config.json").string(), tc.dump(2) + "\n");
}

} // namespace

const std::vector<int>& demoModelOutlierChannels() { return kOutliers; }

void writeDemoModel(const std::string& dir, std::uint64_t seed) {
    fs::create_directories(dir);
    std::uint64_t index = 0; // each tensor's generator, in the file's order
    std::vector<std::pair<std::string, at::Tensor>> t;
    t.emplace_back(names::kEmbed, demoEmbedding(seed, index++));
    for (int layer = 0; layer < kLayers; ++layer) appendDemoLayer(layer, seed, index, t);
    {
        Rng r = rngFor(seed, index++);
        t.emplace_back(names::kFinalNorm, normWeight(r, 0.02));
    }
    {
        Rng r = rngFor(seed, index++);
        t.emplace_back(names::kLmHead, gaussian(r, {kVocab, kHidden}, 1.0 / std::sqrt(double(kHidden))));
    }
    io::writeSafeTensors((fs::path(dir) / "model.safetensors").string(), t,
                         {{"format", "pt"}, {"source", "latmix demo model, seed " + std::to_string(seed)}});
    util::writeFileAtomically((fs::path(dir) / "config.json").string(), demoConfig().toJsonText());
    writeDemoTokenizer(dir);
}

} // namespace latmix::importing
