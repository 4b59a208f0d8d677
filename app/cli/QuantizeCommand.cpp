// latmix quantize: a Hugging Face model → a folded, W4A4 MX-quantized run (SPEC §4–§6).
#include "cli/CliProgress.h"
#include "cli/Commands.h"
#include "dist/LocalLaunch.h"
#include "dist/ProcessGroup.h"
#include "util/AtomicFile.h"
#include "util/DataPath.h"
#include "util/Runtime.h"
#include "util/Text.h"

#include "eval/Perplexity.h"
#include "eval/ZeroShot.h"
#include "mx/MxFormat.h"
#include "model/Checkpoint.h"
#include "model/LlamaModel.h"
#include "run/MemoryEstimate.h"
#include "run/QuantizeRun.h"
#include "transforms/LearnedTransforms.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>

namespace latmix::cli {
namespace {

struct QuantizeCli {
    run::QuantizeOptions q;
    std::string model, format = "mxfp4", scaleMode = "floor", calib, out;
    std::string t1Bias = "on", t2Bias = "on";
    bool skipExportCheck = false;
    bool dryRun = false, force = false;
    int block = 0;
    int nproc = 1;
    std::string devices; // --devices: the training's layers split over these (run::QuantizeOptions::devices)
    std::string evalTasks; // --eval-tasks: zero-shot tasks of the W4A4 model
    std::string t3;        // --t3 none|block-hadamard
    int evalLimit = 0;
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

namespace fs = std::filesystem;

// --dry-run: the host memory of each stage and, with --device cuda (one GPU, no --offload, no
// --devices: their plan is printed before), the GPU's, against --gpu-memory or the device's own
// memory. --model may be a config.json alone (a model not downloaded yet; its torch_dtype is the
// stored dtype), e.g. resources/configs/llama-3.1-8b.json.
// The model's shape and bytes per stored weight element, from a checkpoint folder or (for the
// estimates alone) a config.json, whose torch_dtype stands for the weights.
struct ModelShape {
    model::ModelConfig config;
    int stored = 4;
};
ModelShape modelShapeOf(const std::string& path) {
    ModelShape m;
    if (fs::is_regular_file(path) && fs::path(path).extension() == ".json") {
        m.config = model::ModelConfig::fromFile(path);
        m.stored = m.config.torchDtype == "float32" ? 4 : 2;
    } else {
        const auto ck = model::Checkpoint::load(path);
        m.config = ck.config();
        m.stored = run::storedElementBytes(ck.weightBytes(), ck.parameterCount());
    }
    return m;
}

int printDryRun(const QuantizeCli& o) {
    const auto [config, stored] = modelShapeOf(o.model);
    std::printf("host memory\n%s", run::memoryTable(run::estimateQuantizeMemory(config, stored, o.q), run::availableHostMemory()).c_str());
    if (o.q.device.rfind("cuda", 0) != 0 || o.q.offload || !o.q.devices.empty()) return 0;
    const auto g = run::estimateDeviceMemory(config, stored, o.q);
    const auto colon = o.q.device.find(':');
    const int index = colon == std::string::npos ? 0 : std::atoi(o.q.device.c_str() + colon + 1);
    const std::int64_t total = o.gpuMemory.empty() ? latmix::cudaTotalMemory(index) : run::parseGpuMemory(o.gpuMemory);
    std::printf("\nGPU memory (%s, %s)\n%s", o.q.device.c_str(),
                !o.gpuMemory.empty() ? "--gpu-memory" : total > 0 ? "this machine's" : "not on this machine: --gpu-memory GiB compares",
                run::memoryTable(g, total).c_str());
    const std::string problem = run::memoryProblem(g, total, o.q, o.q.device);
    std::printf("%s\n", problem.empty() ? (total > 0 ? "fits" : "") : ("does not fit: " + problem).c_str());
    return 0;
}

int runQuantize(QuantizeCli& o) {
    if (!o.t3.empty()) o.q.t3Block = run::t3BlockOf(o.t3);
    run::runMethod(o.q); // unknown method, transform kind, initialisation or loss: fail before loading anything
    if (o.nproc > 1 && !o.dryRun) return launchRanks(o);
    if (o.distTimeout <= 0) throw std::invalid_argument("--dist-timeout must be positive (seconds)");
    const dist::World world = dist::worldFromEnvironment();
    o.q.format = mx::makeConfig(mx::parseFormat(o.format), mx::parseScaleMode(o.scaleMode));
    if (o.block > 0) o.q.format.blockSize = o.block;
    o.q.format.validate();
    if (o.q.steps < 1) throw std::invalid_argument("--steps must be at least 1");
    o.q.t1Bias = o.t1Bias == "on";
    o.q.t2Bias = o.t2Bias == "on";
    o.q.exportCheck = !o.skipExportCheck;
    o.q.memoryCheck = !o.force;
    // Several ranks on one machine: each on its own GPU (torchrun's convention, local rank r on
    // cuda:r) unless the devices name their indices.
    if (world.size > 1) o.q.device = model::deviceOfLocalRank(o.q.device, world.localRank);
    if (!o.devices.empty()) { // the plan is checked and printed before anything else
        o.q.devices = run::devicesOfLocalRank(o.devices, world.localRank);
        const auto shape = modelShapeOf(o.model);
        const auto plan = run::planLayerPlacement(shape.config, shape.stored, o.q.devices, o.q);
        if (world.rank == 0) {
            std::printf("training layers across %zu devices (balanced by the bytes of the weights each holds)%s:\n%s",
                        plan.size(), world.size > 1 ? " on rank 0; every rank holds the same split on its own devices" : "",
                        run::placementTable(plan).c_str());
            std::fflush(stdout);
        }
    }
    if (o.dryRun) return printDryRun(o); // the memory estimates and nothing else
    // How the ranks talk, checked also for one process: a refusal comes before any work.
    const c10::Device rankDevice = model::parseDevice(o.q.devices.empty() ? o.q.device : o.q.devices.front());
    const dist::Backend backend = dist::chooseBackend(o.distBackend, rankDevice.is_cuda());
    // SPEC §5: calibrate on a training-side split, never on the test text perplexity uses.
    o.q.calibSource = util::calibrationTextFile(o.calib);
    if (o.q.evalSeqLen > 0) o.q.evalSource = util::wikiText2TestFile();
    if (!o.evalTasks.empty() && world.rank == 0) // read and checked now: a bad task file stops before any work
        o.q.evalTasks = eval::loadZeroShotTasks(o.evalTasks, util::dataDir(), o.evalLimit);
    const auto ids = run::tokenizeRunInputs(o.model, util::readTextFile(o.q.calibSource, "calibration text"), o.q.evalSource, o.q.seqLen);
    if (world.size > 1) {
        // One rank of a data-parallel run (torchrun or --nproc): the ranks meet, check that they
        // run the same thing, then train and run GPTQ together; rank 0 alone prints progress
        // and the report.
        o.q.group = dist::Group::connect(world, run::runKey(o.model, o.q, ids.calibIds, ids.evalIds),
                                         std::chrono::milliseconds(static_cast<long long>(o.distTimeout * 1000)), backend,
                                         rankDevice.is_cuda() ? rankDevice.index() : 0);
    }
    run::QuantizeResult r;
    try {
        if (world.rank == 0) {
            CliProgress progress("quantize " + o.q.method);
            r = run::runQuantize(o.model, ids.calibIds, ids.evalIds, o.out, o.q, progress);
        } else {
            CliProgress cancelOnly("", true);
            r = run::runQuantize(o.model, ids.calibIds, ids.evalIds, o.out, o.q, cancelOnly);
            return 0;
        }
    } catch (const JobCancelled&) {
        throw; // every rank stopped at the same step
    } catch (const std::exception& e) {
        if (o.q.group) o.q.group->reportFailure(e.what());
        throw;
    }

    std::printf("run          %s (method %s, %s)\n", o.out.c_str(), o.q.method.c_str(), o.q.format.describe().c_str());
    if (!r.training.history.empty()) {
        const auto& first = r.training.history.front();
        const auto& last = r.training.history.back();
        double teacher = 0, student = 0, backward = 0, metrics = 0, total = 0;
        for (const auto& s : r.training.history) {
            teacher += s.teacherSeconds, student += s.studentSeconds, backward += s.backwardSeconds;
            metrics += s.metricsSeconds, total += s.seconds;
        }
        const double n = static_cast<double>(r.training.history.size());
        std::printf("training     %zu steps, KL %.4f -> %.4f, %.1f s\n", r.training.history.size(), first.kl, last.kl,
                    r.trainSeconds);
        std::printf("step time    %.3f s: teacher %.3f, student %.3f, backward %.3f, metrics %.3f (means)\n", total / n,
                    teacher / n, student / n, backward / n, metrics / n);
        if (o.q.group)
            std::printf("ranks        %d (data parallel, batch %d each), %.2f MiB communicated per step\n",
                        o.q.group->size(), o.q.batch,
                        r.trainBytes / n / 1048576.0);
    }
    std::map<std::string, std::pair<double, int>> perLinear;
    double seconds = 0;
    for (const auto& l : r.linears) {
        perLinear[l.linear].first += l.relativeError;
        perLinear[l.linear].second += 1;
        seconds += l.seconds;
    }
    std::printf("weights      %s, %.1f s (%.2f s per layer)\n", run::methodSpec(o.q.method).gptq ? "GPTQ" : "RTN",
                r.quantizeSeconds, r.linears.empty() ? 0.0 : r.quantizeSeconds / (r.linears.size() / 7.0));
    if (o.q.group) // only for several ranks
        std::printf("             %d ranks: Hessians summed over the ranks, each linear quantized by one; %.1f MiB "
                    "communicated\n",
                    o.q.group->size(), r.quantizeBytes / 1048576.0);
    if (run::weightQuantizationWindows(run::runMethod(o.q), o.q) == 0)
        std::printf("             no calibration: relative errors of the weights (--rtn-error-windows N: of the "
                    "outputs on N windows)\n");
    for (const auto& [name, v] : perLinear)
        std::printf("  %-18s mean relative error %.5f\n", name.c_str(), v.first / v.second);
    if (r.fpPerplexity > 0)
        std::printf("perplexity   FP %.3f   W4A4 %.3f   weights only %.3f   (WikiText-2 test, seqlen %d)\n",
                    r.fpPerplexity, r.quantizedPerplexity, r.weightOnlyPerplexity, o.q.evalSeqLen);
    if (r.foldedPerplexity > 0)
        std::printf("folded FP    %.3f (transforms folded, nothing quantized; %+.2f%% vs FP)\n", r.foldedPerplexity,
                    100.0 * (r.foldedPerplexity / r.fpPerplexity - 1));
    if (!r.zeroShot.tasks.empty())
        std::printf("zero-shot    W4A4 model, lm-evaluation-harness templates, %.1f s\n%s", r.zeroShot.seconds,
                    eval::zeroShotTable(r.zeroShot).c_str());
    for (const auto& n : r.notes) std::printf("note         %s\n", n.c_str());
    std::printf("time         %.1f s total, peak resident %.0f MiB", r.totalSeconds, r.peakRssMb);
    if (r.peakGpuMb > 0) std::printf(", peak GPU %.0f MiB", r.peakGpuMb);
    std::printf("\n");
    return 0;
}

} // namespace

Runner addQuantizeCommand(CLI::App& app) {
    auto o = std::make_shared<QuantizeCli>();
    auto* cmd = app.add_subcommand("quantize", "quantize a model with one of the paper's methods (folded W4A4 MX run)");
    cmd->add_option("--model", o->model, "Hugging Face model folder")->required();
    cmd->add_option("--method", o->q.method, "one of " + run::methodNameList())->required();
    cmd->add_option("--format", o->format, "mxfp4, mxint4, nvfp4 (weights and activations)")->capture_default_str();
    cmd->add_option("--block", o->block, "block size (default: the format's)");
    cmd->add_option("--scale-mode", o->scaleMode, "floor, ceil or even")->capture_default_str();
    cmd->add_option("--out", o->out, "run folder to write")->required();
    cmd->add_option("--steps", o->q.steps, "training steps (learned methods)")->capture_default_str();
    cmd->add_option("--batch", o->q.batch, "sequences per training step")->capture_default_str();
    cmd->add_option("--lr", o->q.lr, "peak learning rate")->capture_default_str();
    cmd->add_option("--warmup", o->q.warmupSteps, "warmup steps (at most steps/10)")->capture_default_str();
    cmd->add_option("--temperature", o->q.temperature, "distillation temperature tau")->capture_default_str();
    cmd->add_option("--volume-weight", o->q.volumeWeight, "lambda of the volume regulariser")->capture_default_str();
    cmd->add_option("--t1", o->q.t1Kind,
                    "ablation: T1 (residual stream) of this kind instead of the method's: " +
                        util::joinList(transforms::transformKinds()));
    cmd->add_option("--t2", o->q.t2Kind, "ablation: T2 (value/o_proj head space) of this kind instead of the method's");
    cmd->add_option("--t3", o->t3, "ablation: the online T3 on the down_proj input: none or block-hadamard (the default "
                                   "of the transformed methods)");
    cmd->add_option("--init", o->q.init,
                    "ablation: initialisation of the learned transforms: " + util::joinList(transforms::initKinds()));
    cmd->add_option("--init-noise", o->q.initNoise, "ablation: standard deviation of the +noise initialisations (1e-3)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--granularity", o->q.granularity,
                    "ablation: the learned T1/T2 as full matrices (full, the method's) or block-diagonal with the MX "
                    "block (block; paper Table 1)");
    cmd->add_option("--loss", o->q.loss,
                    "what the learned methods minimise: kl (to the original model, SPEC §5), ce (cross-entropy "
                    "against the calibration text, SpinQuant's loss) or block-mse (every decoder block's output "
                    "against the original's, FlatQuant's loss)")
        ->capture_default_str();
    cmd->add_option("--weight-decay", o->q.weightDecay,
                    "AdamW weight decay of the transforms (the paper uses some, unstated; PyTorch's default is 0.01)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--calib", o->calib, "calibration text (default LATMIX_DATA_DIR/wikitext-2/wiki.valid.tokens)");
    cmd->add_option("--calib-samples", o->q.calibSamples, "calibration windows")->capture_default_str();
    cmd->add_option("--seqlen", o->q.seqLen, "calibration window length")->capture_default_str();
    cmd->add_option("--seed", o->q.seed, "seed of windows, initialisations, batches and T3")->capture_default_str();
    cmd->add_option("--device", o->q.device, "cpu, cuda, cuda:N or auto")->capture_default_str();
    cmd->add_flag("--act-order", o->q.gptq.actOrder, "GPTQ: inputs by decreasing Hessian diagonal");
    cmd->add_option("--damping", o->q.gptq.damping, "GPTQ damping (fraction of mean diag H)")->capture_default_str();
    cmd->add_option("--rtn-error-windows", o->q.rtnErrorWindows,
                    "rtn, quarot-rtn: pass the first N calibration windows through the layers for each linear's "
                    "output-space error (0: none, the error is in weight space and RTN costs no calibration)")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    cmd->add_option("--metrics-every", o->q.metricsEvery, "matrix metrics every k steps (0: never)")->capture_default_str();
    cmd->add_option("--checkpoint-every", o->q.checkpointEvery, "training state saved every k steps")->capture_default_str();
    cmd->add_flag("--resume", o->q.resume, "continue the training saved in RUN_DIR/train.h5");
    cmd->add_option("--track-layer", o->q.trackedLayer, "layer whose A2 metrics the training reports")
        ->capture_default_str();
    cmd->add_flag("--tf32", o->q.tf32,
                  "on CUDA: float32 matrix products in TF32 on the tensor cores (faster; 10-bit mantissa, so results "
                  "differ from the CPU's more than in float32; recorded in latmix.json)");
    cmd->add_flag("--offload", o->q.offload,
                  "keep the decoder layers in host memory, one at a time on the device (models larger than its memory)");
    cmd->add_option("--t1-bias", o->t1Bias, "learned T1 bias v1: on (the paper) or off (v1 = 0; Qwen3 exports need it)")
        ->capture_default_str()
        ->check(CLI::IsMember({"on", "off"}));
    cmd->add_option("--t2-bias", o->t2Bias, "learned T2 bias v2: on or off")->capture_default_str()->check(CLI::IsMember({"on", "off"}));
    cmd->add_flag("--skip-export-check", o->skipExportCheck,
                  "run even when no Hugging Face / vLLM runtime could load the folded biases");
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
    cmd->add_option("--devices", o->devices,
                    "split the training's decoder layers over these devices, e.g. cuda:0,cuda:1 (several ranks: local rank r "
                    "shifts the CUDA indices by r x the list's length, or give one ';'-separated list per rank; printed "
                    "with each device's memory first; --dry-run: only that)");
    cmd->add_flag("--dry-run", o->dryRun, "print the estimated peak memory of each stage and exit (nothing is run)");
    cmd->add_flag("--force", o->force, "run even when the estimated peak memory exceeds the memory available");
    cmd->add_option("--eval-seqlen", o->q.evalSeqLen, "WikiText-2 test perplexity window (0: no evaluation)")
        ->capture_default_str();
    cmd->add_option("--eval-windows", o->q.evalWindows, "evaluation windows (0: all)")->capture_default_str();
    cmd->add_option("--folded-eval-every", o->q.foldedEvalEvery,
                    "learned methods: perplexity of the folded, unquantized model (the evaluation windows) before "
                    "training, after step 1, every K steps and after the last (paper Table 2); 0: never")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--eval-tasks", o->evalTasks,
                    "zero-shot tasks of the quantized model, e.g. arc_easy,piqa (as latmix eval --tasks; into latmix.json)");
    cmd->add_option("--eval-limit", o->evalLimit, "the first N documents of each --eval-tasks task (0: all)")
        ->capture_default_str();
    o->q.device = "auto";
    o->q.evalSeqLen = 0;
    return [o] {
        o->q.commandLine = typedCommandLine();
        return runQuantize(*o);
    };
}

} // namespace latmix::cli
