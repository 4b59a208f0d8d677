// latmix quantize: a Hugging Face model → a folded, W4A4 MX-quantized run (SPEC §4–§6).
#include "cli/CliProgress.h"
#include "cli/Commands.h"
#include "dist/LocalLaunch.h"
#include "dist/ProcessGroup.h"
#include "util/AtomicFile.h"
#include "util/DataPath.h"
#include "util/Text.h"

#include "eval/Perplexity.h"
#include "eval/ZeroShot.h"
#include "mx/MxFormat.h"
#include "model/Checkpoint.h"
#include "model/Device.h"
#include "run/quantize/MemoryEstimate.h"
#include "model/TensorNames.h"
#include "run/PrepareRun.h"
#include "run/quantize/LayerQuantizer.h"
#include "run/UnfinishedRun.h"
#include "run/quantize/OptionTable.h"
#include "transforms/LearnedTransforms.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <memory>
#include <stdexcept>

namespace latmix::cli {
namespace {

namespace fs = std::filesystem;

struct QuantizeCli {
    std::string model, out;
    std::string commandLine;
    // --resume [RUN_DIR]: continue the unfinished run there with the options it recorded.
    std::string resumeDir;
    CLI::Option* resume = nullptr;
    // The run's options (run/quantize/OptionTable.h) as typed: text by key, flags by key, and
    // each option's CLI entry (its count() says whether it was given).
    std::map<std::string, std::string> text;
    std::map<std::string, bool> flag;
    std::map<std::string, CLI::Option*> given;
    bool dryRun = false;
    int nproc = 1;
    double distTimeout = 1800; // seconds; PyTorch's default for process groups
    std::string distBackend = "auto";
    std::string gpuMemory; // --gpu-memory (GiB) for --dry-run on a GPU this machine lacks
};

// `--nproc N`: the same command line without --nproc, started N times as the ranks of one world.
int launchRanks(const QuantizeCli& o) {
    const auto& argv = invocation();
    if (argv.empty())
        throw std::invalid_argument("--nproc starts copies of the latmix executable; run `latmix quantize --nproc` "
                                    "from a shell, or start the ranks with torchrun");
    if (std::getenv("WORLD_SIZE") && std::string(std::getenv("WORLD_SIZE")) != "1")
        throw std::invalid_argument("--nproc inside a world that torchrun (or --nproc) already started (WORLD_SIZE=" +
                                    std::string(std::getenv("WORLD_SIZE")) + "): use one or the other");
    std::vector<std::string> args;
    for (std::size_t i = 0; i < argv.size(); ++i) {
        if (argv[i] == "--nproc") {
            ++i; // and its value
            continue;
        }
        if (argv[i].rfind("--nproc=", 0) == 0) continue;
        args.push_back(argv[i]);
    }
    return dist::launchLocalRanks(dist::currentExecutable(), args, o.nproc,
                                  std::chrono::milliseconds(static_cast<long long>(o.distTimeout * 1000)));
}

// --dry-run: the host memory of each stage and, for a run on one GPU (--device cuda[:N], or auto
// where there is one; no --offload, no --devices: their plan is printed before), the GPU's,
// against --gpu-memory or the device's own memory. --model may be a config.json alone (a model not downloaded yet; its torch_dtype is the
// stored dtype), e.g. resources/configs/llama-3.1-8b.json.
int printDryRun(const QuantizeCli& o, const run::PreparedRun& prepared) {
    const run::ResolvedRun& resolved = prepared.resolved;
    // The host estimate is a CPU run's (run/quantize/MemoryEstimate.h); a GPU run is checked against its
    // GPU's memory or not at all (RunMemory::checkedDevice).
    const run::RunMemory& m = resolved.memory;
    const bool cpu = m.checkedDevice == "cpu";
    std::printf("host memory%s\n%s", cpu ? "" : " (of the same run with --device cpu; not checked for a GPU run)",
                run::memoryTable(m.host, run::availableHostMemory()).c_str());
    if (cpu || m.checkedDevice.empty()) return 0;
    const std::int64_t total = o.gpuMemory.empty() ? run::checkedDeviceMemory(m) : run::parseGpuMemory(o.gpuMemory);
    std::printf("\nGPU memory (%s, %s)\n%s", m.checkedDevice.c_str(),
                !o.gpuMemory.empty() ? "--gpu-memory" : total > 0 ? "this machine's" : "not on this machine: --gpu-memory GiB compares",
                run::memoryTable(m.gpu, total).c_str());
    const std::string problem = run::memoryProblem(m.gpu, total, prepared.options, m.checkedDevice);
    std::printf("%s\n", problem.empty() ? (total > 0 ? "fits" : "") : ("does not fit: " + problem).c_str());
    return 0;
}

// The options the CLI starts from: QuantizeOptions' defaults with the device chosen automatically.
run::RunConfig cliDefaults() {
    run::RunConfig c;
    c.device = "auto";
    c.evalSeqLen = 0;
    return c;
}

// --resume RUN_DIR (or --resume --out RUN_DIR): the run folder, its model and the options it
// recorded (the unfinished-run marker, or latmix.json of a finished learned run whose training
// goes on). Markers written before the options were recorded need the flags typed again.
run::RunConfig resumedConfig(QuantizeCli& o) {
    if (!o.resumeDir.empty() && !o.out.empty() && fs::path(o.resumeDir) != fs::path(o.out))
        throw std::invalid_argument("--resume " + o.resumeDir + " and --out " + o.out + " name two run folders; give one");
    if (o.out.empty()) o.out = o.resumeDir;
    if (o.out.empty()) throw std::invalid_argument("--resume needs the run folder: --resume RUN_DIR");
    const run::RecordedRun recorded = run::recordedRun(o.out);
    const std::string& options = recorded.options;
    const std::string& what = recorded.file;
    if (o.model.empty()) o.model = recorded.model;
    if (options.empty()) {
        if (!o.given.at("method")->count() || o.model.empty())
            throw std::invalid_argument(
                "'" + o.out + "' holds no options to resume with (" +
                (what.empty() ? std::string("no unfinished run there") : what + " was written before runs recorded them") +
                "): give --model, --method and the other options as first typed, with --resume --out " + o.out);
        return cliDefaults();
    }
    return run::configFromJson(nlohmann::ordered_json::parse(options), cliDefaults(), what);
}

// The run asked for: the defaults (or the options a resumed run recorded), then every option
// typed on the command line, in the table's order.
run::RunRequest requestOf(QuantizeCli& o, const dist::World& world) {
    run::RunConfig config = cliDefaults();
    const bool resume = o.resume->count() > 0;
    if (resume) config = resumedConfig(o);
    else if (!o.given.at("method")->count()) throw std::invalid_argument("--method is required (or --resume RUN_DIR)");
    if (o.model.empty()) throw std::invalid_argument("--model is required (or --resume RUN_DIR)");
    if (o.out.empty()) throw std::invalid_argument("--out is required");
    for (const auto& f : run::optionFields()) {
        if (!o.given.at(f.key)->count()) continue;
        if (std::string(f.key) == "devices") // one list per rank: this rank's
            config.devices = run::devicesOfLocalRank(o.text.at(f.key), world.localRank);
        else if (f.type == run::OptionType::Flag)
            run::setOption(config, f.key, o.flag.at(f.key));
        else
            run::setOption(config, f.key, run::optionFromText(f, o.text.at(f.key)));
    }
    // --eval-windows typed without a window length would end the run without the evaluation
    // asked for (QuantizeOptions' evalSeqLen 0 means none: in the library, not a typo).
    if (o.given.at("eval_windows")->count() && config.evalWindows > 0 && config.evalSeqLen < 1)
        throw run::RunRefused("an evaluation of " + std::to_string(config.evalWindows) +
                                  " windows was asked for without their length: no perplexity would be measured",
                              {{"eval_seqlen", "2048"}, {"eval_windows", "0"}});
    // Several ranks on one machine: each on its own GPU (torchrun's convention, local rank r on
    // cuda:r) unless the devices name their indices.
    if (world.size > 1) config.device = model::deviceOfLocalRank(config.device, world.localRank);
    run::RunRequest request;
    request.modelDir = o.model;
    request.runDir = o.out;
    request.config = std::move(config);
    request.resume = resume ? run::ResumeRule::Asked : run::ResumeRule::Never;
    request.commandLine = o.commandLine;
    request.purpose = o.dryRun ? run::PreflightFor::Estimate : run::PreflightFor::Run;
    return request;
}

// The report of a finished run, on stdout.
void printTraining(const run::QuantizeOptions& o, const run::RunHooks& hooks, const run::QuantizeResult& r) {
    if (r.training.history.empty()) return;
    const auto& first = r.training.history.front();
    const auto& last = r.training.history.back();
    double teacher = 0, student = 0, backward = 0, metrics = 0, total = 0;
    for (const auto& s : r.training.history) {
        teacher += s.teacherSeconds, student += s.studentSeconds, backward += s.backwardSeconds;
        metrics += s.metricsSeconds, total += s.seconds;
    }
    const double n = static_cast<double>(r.training.history.size());
    std::printf("training     %zu steps, %s %.4f -> %.4f, %.1f s\n", r.training.history.size(),
                o.loss == "kl" ? "KL" : o.loss.c_str(), first.objective, last.objective, r.trainSeconds);
    std::printf("step time    %.3f s: teacher %.3f, student %.3f, backward %.3f, metrics %.3f (means)\n", total / n,
                teacher / n, student / n, backward / n, metrics / n);
    if (hooks.group)
        std::printf("ranks        %d (data parallel, batch %d each), %.2f MiB communicated per step\n", hooks.group->size(),
                    o.batch, r.trainBytes / n / 1048576.0);
}

void printWeights(const run::PreparedRun& p, const run::RunHooks& hooks, const run::QuantizeResult& r) {
    const run::ResolvedRun& resolved = p.resolved;
    std::map<std::string, std::pair<double, int>> perLinear; // experts: mean over the experts of a kind
    std::set<int> layers;
    int rounded = 0;
    for (const auto& l : r.linears) {
        const std::string kind = model::names::linearKind(l.linear);
        perLinear[kind].first += l.relativeError;
        perLinear[kind].second += 1;
        layers.insert(l.layer);
        rounded += l.roundedToNearest ? 1 : 0;
    }
    std::printf("weights      %s, %.1f s (%.2f s per layer)\n", resolved.method.gptq ? "GPTQ" : "RTN",
                r.quantizeSeconds, layers.empty() ? 0.0 : r.quantizeSeconds / double(layers.size()));
    if (rounded > 0)
        std::printf("             %d expert linears rounded to nearest: their experts got under %.1f%% of the "
                    "calibration tokens (latmix.json lists every expert's tokens)\n",
                    rounded, 100 * run::kStarvedShare);
    if (hooks.group) // only for several ranks
        std::printf("             %d ranks: Hessians summed over the ranks, each linear quantized by one; %.1f MiB "
                    "communicated\n",
                    hooks.group->size(), r.quantizeBytes / 1048576.0);
    if (run::weightQuantizationWindows(resolved.method, p.options) == 0)
        std::printf("             no calibration: relative errors of the weights (--rtn-error-windows N: of the "
                    "outputs on N windows)\n");
    for (const auto& [name, v] : perLinear)
        std::printf("  %-18s mean relative error %.5f\n", name.c_str(), v.first / v.second);
}

void printReport(const run::PreparedRun& p, const run::RunHooks& hooks, const run::QuantizeResult& r) {
    const run::QuantizeOptions& o = p.options;
    std::printf("run          %s (method %s, %s)\n", p.runDir.c_str(), o.method.c_str(), o.format.describe().c_str());
    if (!o.scheme.empty())
        std::printf("scheme       %s: %.4f bits per weight, %zu fusion group(s) in other MX formats, %zu linear(s) kept in bf16\n",
                    o.scheme.c_str(), p.resolved.schemeBits, p.resolved.groupFormats.size(), p.resolved.keptLinears.size());
    printTraining(o, hooks, r);
    printWeights(p, hooks, r);
    // "W4A4", "W8A8", ...; a scheme's several formats: "mixed"
    const std::string precision = o.scheme.empty() ? mx::precisionLabel(o.format.format) : std::string("mixed");
    if (r.fpPerplexity > 0)
        std::printf("perplexity   FP %.3f   %s %.3f   weights only %.3f   (WikiText-2 test, seqlen %d)\n",
                    r.fpPerplexity, precision.c_str(), r.quantizedPerplexity, r.weightOnlyPerplexity, o.evalSeqLen);
    if (r.kl.tokens > 0)
        std::printf("KL           %s vs FP: mean %.5f +- %.5f, 99th percentile %.5f, top-1 agreement %.4f, "
                    "delta ppl %+.3f +- %.3f (%lld tokens)\n",
                    precision.c_str(), r.kl.meanKl, r.kl.klStdErr, r.kl.klP99, r.kl.top1, r.kl.deltaPpl, r.kl.deltaPplStdErr,
                    static_cast<long long>(r.kl.tokens));
    if (r.foldedPerplexity > 0)
        std::printf("folded FP    %.3f (transforms folded, nothing quantized; %+.2f%% vs FP)\n", r.foldedPerplexity,
                    100.0 * (r.foldedPerplexity / r.fpPerplexity - 1));
    if (!r.zeroShot.tasks.empty())
        std::printf("zero-shot    %s model, lm-evaluation-harness templates, %.1f s\n%s", precision.c_str(), r.zeroShot.seconds,
                    eval::zeroShotTable(r.zeroShot).c_str());
    for (const auto& n : r.notes) std::printf("note         %s\n", n.c_str());
    std::printf("time         %.1f s total, peak resident %.0f MiB", r.totalSeconds, r.peakRssMb);
    if (r.peakGpuMb > 0) std::printf(", peak GPU %.0f MiB", r.peakGpuMb);
    std::printf("\n");
    // Each stage's peak, beside --dry-run's estimate of it.
    const auto byStage = [](const char* head, const std::vector<std::pair<std::string, double>>& peaks, const char* tail) {
        if (peaks.empty()) return;
        std::printf("%s", head);
        for (std::size_t i = 0; i < peaks.size(); ++i)
            std::printf("%s%s %.0f MiB", i ? ", " : "", peaks[i].first.c_str(), peaks[i].second);
        std::printf("%s\n", tail);
    };
    byStage("peak resident ", r.stagePeakRssMb, "");
    byStage("peak GPU     ", r.stagePeakGpuMb, " (PyTorch's allocator; the CUDA context adds about 512 MiB)");
}

int runQuantize(QuantizeCli& o) {
    if (o.distTimeout <= 0) throw std::invalid_argument("--dist-timeout must be positive (seconds)");
    const dist::World world = dist::worldFromEnvironment();
    // Every check before any work, once (run/PrepareRun.h): options, checkpoint, placement,
    // memory, the run folder's state, the data files.
    const run::PreparedRun prepared = run::prepareRun(requestOf(o, world));
    const run::ResolvedRun& resolved = prepared.resolved;
    if (o.nproc > 1 && !o.dryRun) return launchRanks(o); // each rank checks again and rank 0 prints the plan
    if (!resolved.placement.empty() && world.rank == 0) {
        std::printf("training layers across %zu devices (balanced by the bytes of the weights each holds)%s:\n%s",
                    resolved.placement.size(),
                    world.size > 1 ? " on rank 0; every rank holds the same split on its own devices" : "",
                    run::placementTable(resolved.placement).c_str());
        std::fflush(stdout);
    }
    if (world.rank == 0)
        for (const auto& note : resolved.notes) std::printf("note: %s\n", run::messageFor(note, run::Face::Cli).c_str());
    std::fflush(stdout);
    if (o.dryRun) return printDryRun(o, prepared); // the memory estimates and nothing else
    // How the ranks talk, checked also for one process: a refusal comes before any work.
    const c10::Device rankDevice = model::parseDevice(resolved.device);
    const dist::Backend backend = dist::chooseBackend(o.distBackend, rankDevice.is_cuda());
    const run::RunInputs inputs = run::loadRunInputs(prepared); // a bad task file stops here, before any work
    run::RunHooks hooks;
    if (world.size > 1) {
        // One rank of a data-parallel run (torchrun or --nproc): the ranks meet, check that they
        // run the same thing, then train and run GPTQ together; rank 0 alone prints progress
        // and the report.
        hooks.group = dist::Group::connect(world, run::runKey(resolved, prepared.options, inputs.calibIds, inputs.evalIds),
                                           std::chrono::milliseconds(static_cast<long long>(o.distTimeout * 1000)), backend,
                                           rankDevice.is_cuda() ? rankDevice.index() : 0);
    }
    run::QuantizeResult r;
    try {
        if (world.rank == 0) {
            CliProgress progress("quantize " + prepared.options.method);
            r = run::runQuantize(prepared, inputs, progress, hooks);
        } else {
            CliProgress cancelOnly("", true);
            r = run::runQuantize(prepared, inputs, cancelOnly, hooks);
            return 0;
        }
    } catch (const JobCancelled&) {
        throw; // every rank stopped at the same step
    } catch (const std::exception& e) {
        if (hooks.group) hooks.group->reportFailure(e.what());
        throw;
    }

    printReport(prepared, hooks, r);
    return 0;
}

// Each option of the table (run/quantize/OptionTable.h) as a flag, with its default shown
// where one means something.
void addOptionFlags(CLI::App* cmd, QuantizeCli& o) {
    const run::RunConfig defaults = cliDefaults();
    for (const auto& f : run::optionFields()) {
        CLI::Option* opt = nullptr;
        std::string help = f.help;
        if (std::string(f.key) == "t1") help += ": " + util::joinList(transforms::transformKinds());
        if (std::string(f.key) == "init") help += ": " + util::joinList(transforms::initKinds());
        const bool required = std::string(f.key) == "method";
        if (required) help = "one of " + run::methodNameList() + " (required unless --resume)";
        if (f.type == run::OptionType::Flag) {
            opt = cmd->add_flag(f.flag, o.flag[f.key], help);
        } else {
            opt = cmd->add_option(f.flag, o.text[f.key], help);
            const auto value = run::optionValue(defaults, f.key);
            const std::string shown = run::optionText(f, value);
            const bool unset = shown.empty() || (value.is_number() && value.get<double>() < 0) ||
                               (std::string(f.key) == "block" && value.get<int>() == 0);
            if (!unset && !required && std::string(f.key) != "block") opt->default_str(shown);
            opt->type_name(f.type == run::OptionType::Integer  ? "INT"
                           : f.type == run::OptionType::Number ? "FLOAT"
                           : f.type == run::OptionType::OnOff  ? "on|off"
                           : f.type == run::OptionType::OnOffAuto ? "auto|on|off"
                           : f.type == run::OptionType::List   ? "LIST"
                                                               : "TEXT");
        }
        o.given[f.key] = opt;
    }
}

} // namespace

Runner addQuantizeCommand(CLI::App& app) {
    auto o = std::make_shared<QuantizeCli>();
    auto* cmd = app.add_subcommand("quantize", "quantize a model with one of the paper's methods (a folded run, weights "
                                               "and activations in one MX format: W4A4 for mxfp4)");
    cmd->add_option("--model", o->model, "Hugging Face model folder (with --resume: the run's own)");
    cmd->add_option("--out", o->out, "run folder to write");
    o->resume = cmd->add_option("--resume", o->resumeDir,
                                "continue the unfinished run in RUN_DIR (or --out) with the options it recorded; "
                                "flags given too replace those")
                    ->expected(0, 1)
                    ->type_name("[RUN_DIR]");
    addOptionFlags(cmd, *o);
    cmd->add_option("--nproc", o->nproc,
                    "data parallel over N processes on this machine, training and GPTQ (as torchrun --nproc-per-node N)")
        ->capture_default_str()
        ->check(CLI::Range(1, 1024));
    cmd->add_option("--gpu-memory", o->gpuMemory,
                    "--dry-run with --device cuda: the GPU's memory in GiB to compare with (default: the device's), e.g. 80 or 141");
    cmd->add_option("--dist-backend", o->distBackend,
                    "how the ranks talk: gloo (CPU buffers), nccl (on the GPUs; ranks on CUDA devices only) or auto "
                    "(nccl when the ranks run on CUDA and this build has it)")
        ->capture_default_str();
    cmd->add_option("--dist-timeout", o->distTimeout,
                    "seconds a rank waits for the others (rendezvous, each all-reduce) before failing")
        ->capture_default_str();
    cmd->add_flag("--dry-run", o->dryRun, "print the estimated peak memory of each stage and exit (nothing is run)");
    return [o] {
        o->commandLine = typedCommandLine();
        return runQuantize(*o);
    };
}

} // namespace latmix::cli
