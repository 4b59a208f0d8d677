#include "export/ExportDetail.h"

#include "export/RunModel.h"
#include "model/Checkpoint.h"

#include <ATen/ATen.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fcntl.h>
#include <sys/stat.h>

namespace fs = std::filesystem;

namespace latmix::exporting::detail {

std::string makeTempSibling(const std::string& finalDir) {
    fs::path target = fs::path(finalDir).lexically_normal();
    if (target.filename().empty()) target = target.parent_path(); // "dir/" → "dir"
    fs::path parent = target.parent_path();
    if (parent.empty()) parent = ".";
    std::error_code ec;
    fs::create_directories(parent, ec);
    if (ec)
        throw std::runtime_error("cannot create folder '" + parent.string() + "': " + ec.message() +
                                 "; check the path and permissions");
    std::string pattern = (parent / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
    if (!::mkdtemp(pattern.data()))
        throw std::runtime_error("cannot create a temporary folder next to '" + target.string() +
                                 "': " + std::strerror(errno) + "; check that '" + parent.string() + "' is writable");
    // mkdtemp creates 0700; the finished folder is an ordinary one (rwxr-xr-x, less the umask).
    // The umask is read from /proc (umask() would change it, racing other threads); 022 if absent.
    mode_t mask = 022;
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
        if (line.rfind("Umask:", 0) == 0) mask = static_cast<mode_t>(std::stoul(line.substr(6), nullptr, 8));
    ::chmod(pattern.c_str(), 0777 & ~mask);
    return pattern;
}

void removeTreeQuietly(const std::string& dir) noexcept {
    std::error_code ec;
    fs::remove_all(dir, ec);
}

void replaceDirectory(const std::string& tmp, const std::string& finalDir) {
    fs::path target = fs::path(finalDir).lexically_normal();
    if (target.filename().empty()) target = target.parent_path();
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(target, ec))) {
        if (::rename(tmp.c_str(), target.c_str()) != 0)
            throw std::runtime_error("cannot rename '" + tmp + "' to '" + target.string() + "': " + std::strerror(errno));
        return;
    }
    if (!fs::is_directory(fs::symlink_status(target, ec)))
        throw std::runtime_error("'" + target.string() + "' exists and is not a folder; remove it or choose another path");
    // Atomic swap: at every moment target is either the old or the new complete folder.
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
        removeTreeQuietly(tmp); // now holds the old content
        return;
    }
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
        throw std::runtime_error("cannot replace '" + target.string() + "' by '" + tmp + "': " + std::strerror(errno));
    // File systems without RENAME_EXCHANGE: move the old folder aside, then the new one in. The
    // final name is briefly absent, never partial.
    std::string aside = tmp + ".old";
    if (::rename(target.c_str(), aside.c_str()) != 0)
        throw std::runtime_error("cannot move '" + target.string() + "' aside: " + std::strerror(errno));
    if (::rename(tmp.c_str(), target.c_str()) != 0) {
        const int err = errno;
        ::rename(aside.c_str(), target.c_str());
        throw std::runtime_error("cannot rename '" + tmp + "' to '" + target.string() + "': " + std::strerror(err));
    }
    removeTreeQuietly(aside);
}

std::vector<std::string> copyTokenizerFiles(const std::string& from, const std::string& to) {
    std::vector<std::string> copied;
    if (from.empty()) return copied;
    for (const auto& name : tokenizerFileNames()) {
        const fs::path src = fs::path(from) / name;
        std::error_code ec;
        if (!fs::is_regular_file(src, ec)) continue;
        fs::copy_file(src, fs::path(to) / name, fs::copy_options::overwrite_existing, ec);
        if (ec)
            throw std::runtime_error("cannot copy tokenizer file '" + src.string() + "' to '" + to + "': " + ec.message());
        copied.push_back(name);
    }
    return copied;
}

std::string readTextFile(const std::string& path, const std::string& what) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error(what + " '" + path + "' is missing or unreadable");
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void writeTextFile(const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) throw std::runtime_error("cannot write '" + path + "'; check free disk space and permissions");
}

std::string shapeText(const std::vector<std::int64_t>& s) {
    std::string t = "[";
    for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
    return t + "]";
}

std::string blockLinearOfWeight(const std::string& name) {
    static const char* kSuffixes[] = {".self_attn.q_proj.weight", ".self_attn.k_proj.weight",
                                      ".self_attn.v_proj.weight", ".self_attn.o_proj.weight",
                                      ".mlp.gate_proj.weight",    ".mlp.up_proj.weight",
                                      ".mlp.down_proj.weight"};
    if (name.rfind("model.layers.", 0) != 0) return "";
    for (const char* s : kSuffixes) {
        const std::string suf(s);
        if (name.size() > suf.size() && name.compare(name.size() - suf.size(), suf.size(), suf) == 0)
            return name.substr(0, name.size() - std::string(".weight").size());
    }
    return "";
}

Mismatch firstBitMismatch(const at::Tensor& a, const at::Tensor& b) {
    Mismatch m;
    if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) {
        m.index = 0;
        return m;
    }
    auto ac = a.contiguous().reshape({-1}), bc = b.contiguous().reshape({-1});
    at::ScalarType bits;
    switch (a.element_size()) {
    case 1: bits = at::kByte; break;
    case 2: bits = at::kShort; break;
    case 4: bits = at::kInt; break;
    default: bits = at::kLong; break;
    }
    auto differ = ac.view(bits).ne(bc.view(bits));
    if (at::isFloatingType(a.scalar_type())) differ = differ.logical_and(ac.isnan().logical_and(bc.isnan()).logical_not());
    if (!differ.any().item<bool>()) return m;
    m.index = differ.nonzero().index({0, 0}).item<std::int64_t>();
    m.a = ac[m.index].to(at::kDouble).item<double>();
    m.b = bc[m.index].to(at::kDouble).item<double>();
    return m;
}

BiasFix fixBiasFlags(nlohmann::ordered_json& j, const std::function<bool(const std::string&)>& has,
                     bool forHfRuntime, const std::string& source) {
    BiasFix fix;
    const model::ModelConfig c = model::ModelConfig::fromJsonText(j.dump(), source);
    bool attnAny = false, oAny = false, mlpAny = false;
    std::string firstMlpBias;
    for (int i = 0; i < c.numLayers; ++i) {
        const std::string p = "model.layers." + std::to_string(i) + ".";
        for (const char* n : {"q_proj", "k_proj", "v_proj", "o_proj"})
            if (has(p + "self_attn." + n + ".bias")) {
                attnAny = true;
                if (std::string(n) == "o_proj") oAny = true;
            }
        for (const char* n : {"gate_proj", "up_proj", "down_proj"})
            if (has(p + "mlp." + n + ".bias")) {
                mlpAny = true;
                if (firstMlpBias.empty()) firstMlpBias = p + "mlp." + n + ".bias";
            }
    }
    auto relabel = [&] {
        fix.relabeledFrom = c.architectureName;
        j["architectures"] = nlohmann::ordered_json::array({"LlamaForCausalLM"});
        j["model_type"] = "llama";
    };
    switch (c.architecture) {
    case model::Architecture::Qwen2:
        // Hugging Face Qwen2: q/k/v always biased, o_proj and the MLP never. Qwen2 is the Llama
        // decoder with q/k/v biases, so LlamaForCausalLM with attention_bias computes the same.
        if (oAny || mlpAny) {
            relabel();
            j["attention_bias"] = true;
            j["mlp_bias"] = mlpAny;
        }
        break;
    case model::Architecture::Qwen3:
        if (mlpAny)
            throw std::runtime_error(source + ": '" + firstMlpBias +
                                     "' exists, but Qwen3 models have no MLP biases (Hugging Face Qwen3MLP is "
                                     "bias-free) and cannot be rewritten as Llama (q/k norms); fold a T1 without "
                                     "bias (v1 = 0) for Qwen3");
        j["attention_bias"] = attnAny;
        break;
    case model::Architecture::Mistral:
        if (forHfRuntime && (attnAny || mlpAny)) relabel();
        j["attention_bias"] = attnAny;
        j["mlp_bias"] = mlpAny;
        break;
    case model::Architecture::Llama:
        j["attention_bias"] = attnAny;
        j["mlp_bias"] = mlpAny;
        break;
    }
    if (has("lm_head.weight")) j["tie_word_embeddings"] = false;

    const model::ModelConfig c2 = model::ModelConfig::fromJsonText(j.dump(), source);
    for (const auto& [name, shape] : model::requiredTensors(c2)) {
        const bool bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
        if (bias && name != "lm_head.bias" && !has(name)) fix.zeroBiases.emplace_back(name, shape);
    }
    return fix;
}

} // namespace latmix::exporting::detail
