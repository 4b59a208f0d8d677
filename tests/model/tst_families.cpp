// Every architecture the workbench reads (Llama, Mistral, Qwen2, Qwen3) through the paper's
// methods end to end on small random checkpoints of that family (import/RandomModel, the demo
// model's tokenizer): the run completes with the biases its folding creates, reloads and gives
// its own W4A4 perplexity again, and exports. The Hugging Face export, reloaded (bf16, T3 folded
// back into W_down, Qwen2 with an o_proj bias and Mistral with biases relabeled as Llama), computes the run's
// weight-only model: an independent path through config, bias flags and tensors. Qwen3 with a
// T1 bias (MLP biases, which no Hugging Face / vLLM Qwen3 can hold) is refused before any work,
// runs with --t1-bias off, and with the check skipped still completes here while the export
// refuses it naming the way out.
#include "SmallRuns.h"
#include "TestSupport.h"

#include "eval/Perplexity.h"
#include "export/Export.h"
#include "import/RandomModel.h"
#include "model/Checkpoint.h"
#include "model/LlamaModel.h"
#include "run/quantize/MemoryEstimate.h"
#include "run/QuantizeRun.h"
#include "run/quantize/OptionTable.h"
#include "run/quantize/Preflight.h"
#include "run/UnfinishedRun.h"
#include "run/RunModel.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "TestData.h" // after ATen: Qt's slots macro breaks ATen headers
#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

using namespace latmix;
using test::randomIds;

namespace {

// A small config of the family: the shapes the transforms need (hidden and head_dim multiples of
// the MX block, intermediate of the T3 block), GQA, and each family's own features.
model::ModelConfig familyConfig(const QString& family) {
    const std::map<QString, std::pair<const char*, const char*>> names = {
        {"llama", {"LlamaForCausalLM", "llama"}},
        {"mistral", {"MistralForCausalLM", "mistral"}},
        {"qwen2", {"Qwen2ForCausalLM", "qwen2"}},
        {"qwen3", {"Qwen3ForCausalLM", "qwen3"}}};
    const auto& n = names.at(family);
    std::string extra;
    if (family == "qwen3") extra = R"(, "tie_word_embeddings": true, "attention_bias": false)";
    if (family == "llama") extra = R"(, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 64})";
    const std::string text = std::string(R"({"architectures": [")") + n.first + R"("], "model_type": ")" + n.second +
                             R"(", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 300,
        "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu",
        "bos_token_id": 1, "eos_token_id": 2)" + extra + "}";
    return model::ModelConfig::fromJsonText(text, family.toStdString());
}

double maxAbs(const model::Checkpoint& ck, const std::string& name) {
    return ck.weight(name).abs().max().item<double>();
}

} // namespace

class TestFamilies : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;

    QString modelOf(const QString& family) {
        const QString dir = m_tmp.filePath("models/" + family);
        if (!QFile::exists(dir + "/config.json")) {
            importing::RandomModelOptions r;
            r.dtype = "float32";
            r.tokenizerDir = test::demoModelDir().toStdString();
            r.seed = 11;
            importing::writeRandomModel(familyConfig(family), dir.toStdString(), r);
        }
        return dir;
    }

private slots:
    void initTestCase() { QVERIFY(m_tmp.isValid()); }

    void everyFamilyCompletesAndExports_data() {
        QTest::addColumn<QString>("family");
        QTest::addColumn<QString>("method");
        QTest::addColumn<bool>("t1Bias");
        for (const char* f : {"llama", "mistral", "qwen2", "qwen3"})
            for (const char* m : {"latmix-lu", "latmix-qr", "mr-gptq"}) {
                // Qwen3 with LATMiX needs the deployable T1 (no bias) to export (see below).
                const bool t1Bias = !(QString(f) == "qwen3" && QString(m).startsWith("latmix"));
                QTest::addRow("%s %s", f, m) << f << m << t1Bias;
            }
    }
    void everyFamilyCompletesAndExports() {
        QFETCH(QString, family);
        QFETCH(QString, method);
        QFETCH(bool, t1Bias);
        const QString model = modelOf(family);
        const QString runDir = m_tmp.filePath("runs/" + family + "-" + method);
        auto o = test::smallRunOptions(method);
        o.t1Bias = t1Bias;
        const auto calib = randomIds(2000, 300, 1), evalIds = randomIds(400, 300, 2);
        const auto r = run::runQuantize(model.toStdString(), calib, evalIds, runDir.toStdString(), o);
        QCOMPARE(int(r.linears.size()), 2 * 7);
        QVERIFY(std::isfinite(r.quantizedPerplexity) && r.quantizedPerplexity > 1);
        QVERIFY(!QFile::exists(runDir + "/folded.partial")); // the folded model's spill is gone

        // The run model keeps the family and the biases folding created.
        const auto ck = model::Checkpoint::load((runDir + "/model").toStdString());
        const auto& c = ck.config();
        QCOMPARE(c.architecture, familyConfig(family).architecture);
        const bool learned = method.startsWith("latmix");
        QCOMPARE(c.qkvBias, learned || family == "qwen2");   // T2's v bias (and T1's) reach q/k/v
        QCOMPARE(c.oProjBias, learned);                      // T2 bias: o_proj, any family
        QCOMPARE(c.mlpBias, learned && t1Bias);              // T1 bias: gate/up
        QVERIFY(!c.lmHeadBias); // T1's bias is folded into the blocks' readers, never lm_head (issue 71)
        // effect: Adam moves every parameter by ~lr = 1e-2 a step, so the folded biases end ≫ 1e-4
        if (learned) QVERIFY(maxAbs(ck, "model.layers.1.self_attn.o_proj.bias") > 1e-4);
        if (learned && t1Bias) QVERIFY(maxAbs(ck, "model.layers.0.mlp.up_proj.bias") > 1e-4);

        // Reloaded, it gives its own W4A4 and weight-only perplexities again (exact: the run
        // evaluated this stored model with the same code, windows and threads).
        QCOMPARE(test::runPerplexity(model::LlamaModel(ck, at::kFloat), evalIds, o), r.quantizedPerplexity);
        const double weightOnly = test::runPerplexity(model::LlamaModel(ck, at::kFloat, c10::kCPU, false), evalIds, o);
        QCOMPARE(weightOnly, r.weightOnlyPerplexity);

        // Both exports; the Hugging Face one computes the run's weight-only model (bf16 weights).
        const QString hf = m_tmp.filePath("exports/" + family + "-" + method + "-hf");
        exportRun(runDir.toStdString(), exporting::ExportFormat::Hf, hf.toStdString(), silentJob());
        exporting::verifyExport(hf.toStdString(), runDir.toStdString());
        const QString ct = m_tmp.filePath("exports/" + family + "-" + method + "-ct");
        exportRun(runDir.toStdString(), exporting::ExportFormat::CompressedTensors, ct.toStdString(), silentJob());
        exporting::verifyExport(ct.toStdString(), runDir.toStdString());
        const auto hck = model::Checkpoint::load(hf.toStdString());
        // Classes without flags for the biases load them as the equivalent Llama: Qwen2 with an
        // o_proj bias, Mistral with any (MistralForCausalLM ignores attention_bias / mlp_bias).
        const bool relabeled = (family == "qwen2" && c.oProjBias) || (family == "mistral" && c.qkvBias);
        QCOMPARE(hck.config().architectureName,
                 std::string(relabeled ? "LlamaForCausalLM" : familyConfig(family).architectureName));
        QVERIFY(!hck.config().latmix.has_value());
        const double exported = test::runPerplexity(model::LlamaModel(hck, at::kFloat, c10::kCPU, false), evalIds, o);
        // bf16 weights (relative rounding 2^-9) on a near-uniform random model: a few 1e-3.
        QVERIFY2(std::abs(exported / weightOnly - 1) < 5e-3,
                 qPrintable(QString("export %1 vs run weight-only %2").arg(exported).arg(weightOnly)));
    }

    // Cancelled while the run model is being written (after the folded spill exists), between
    // two layers or between two linears of a layer: the cancel is honoured before anything
    // further is reported, and nothing that looks complete is left, neither the model folder nor
    // latmix.json, and the spill is removed; the transforms file of stage 1 (complete) stays.
    void cancelDuringQuantizationLeavesNothingPartial_data() {
        QTest::addColumn<QString>("trigger");
        QTest::newRow("after layer 1") << "quantizing: layer 1/2";
        QTest::newRow("inside layer 2") << "quantizing: layer 2/2: mlp.gate_proj";
    }
    void cancelDuringQuantizationLeavesNothingPartial() {
        QFETCH(QString, trigger);
        struct CancelAt : JobContext {
            std::string trigger;
            mutable bool seen = false;
            std::vector<std::string> messages;
            void progress(double, const std::string& m) override {
                messages.push_back(m);
                // The whole message ends with the trigger: "layer 1/2" is not "layer 1/2: q_proj".
                if (m.size() >= trigger.size() && m.compare(m.size() - trigger.size(), trigger.size(), trigger) == 0)
                    seen = true;
            }
            bool cancelRequested() const override { return seen; }
        } job;
        job.trigger = trigger.toStdString();
        const QString runDir = m_tmp.filePath("runs/cancelled-" + QString(QTest::currentDataTag()).replace(' ', '-'));
        const auto calib = randomIds(2000, 300, 1);
        bool cancelled = false;
        try {
            run::runQuantize(modelOf("llama").toStdString(), calib, {}, runDir.toStdString(), test::smallRunOptions("mr-gptq"), job);
        } catch (const JobCancelled&) {
            cancelled = true;
        }
        QVERIFY(cancelled);
        QVERIFY(std::any_of(job.messages.begin(), job.messages.end(),
                            [](const std::string& m) { return m.find("folding: layer 2/2") != std::string::npos; }));
        QVERIFY2(QString::fromStdString(job.messages.back()).endsWith(trigger), job.messages.back().c_str());
        QVERIFY(!QFile::exists(runDir + "/model"));
        QVERIFY(!QFile::exists(runDir + "/folded.partial"));
        QVERIFY(!QFile::exists(runDir + "/latmix.json"));
        // Only stage 1's complete file stays (what a rerun or `latmix analyze` can use), and the
        // marker that says the run is unfinished (run/UnfinishedRun.h) at the stage it reached.
        const QStringList left = QDir(runDir).entryList(QDir::AllEntries | QDir::NoDotAndDotDot | QDir::Hidden);
        QVERIFY2(left == (QStringList{"transforms.h5", "unfinished.json"}), qPrintable(left.join(", ")));
        QCOMPARE(run::readUnfinishedRun(runDir.toStdString()).stage, std::string("quantizing"));
    }

    // Qwen3 + a T1 bias: --t1-bias auto (the default) trains without it and says so; `on` is
    // refused before any work; with the check skipped the run completes (the run model holds the
    // MLP biases) and the export names the way out.
    void qwen3T1BiasIsCheckedBeforeWork() {
        const QString model = modelOf("qwen3");
        const QString runDir = m_tmp.filePath("runs/qwen3-t1bias");
        auto o = test::smallRunOptions("latmix-lu");
        o.t1Bias.reset(); // auto
        const auto resolved = run::preflight(model.toStdString(), o);
        QVERIFY(!resolved.method.t1Bias);
        QCOMPARE(int(resolved.notes.size()), 1);
        const std::string note = run::messageFor(resolved.notes.front(), run::Face::Cli);
        QVERIFY2(QString::fromStdString(note).contains("off (auto: Hugging Face and vLLM Qwen3 models have no MLP biases") &&
                     QString::fromStdString(note).contains("use --t1-bias on"),
                 note.c_str());
        const auto llama = run::preflight(modelOf("llama").toStdString(), o); // a family that loads them: on
        QVERIFY(llama.method.t1Bias);
        o.t1Bias = true;
        const auto calib = randomIds(2000, 300, 1), evalIds = randomIds(400, 300, 2);
        QString e = test::errorOf([&] { run::runQuantize(model.toStdString(), calib, evalIds, runDir.toStdString(), o); });
        QVERIFY2(e.contains("--t1-bias off") && e.contains("Qwen3") && e.contains("--skip-export-check"), qPrintable(e));
        QVERIFY(!QFile::exists(runDir)); // refused before the run folder was made

        o.exportCheck = false;
        const auto r = run::runQuantize(model.toStdString(), calib, evalIds, runDir.toStdString(), o);
        const auto ck = model::Checkpoint::load((runDir + "/model").toStdString());
        QVERIFY(ck.config().mlpBias);
        QVERIFY(maxAbs(ck, "model.layers.0.mlp.gate_proj.bias") > 1e-4);
        QCOMPARE(test::runPerplexity(model::LlamaModel(ck, at::kFloat), evalIds, o), r.quantizedPerplexity);
        const QString out = m_tmp.filePath("exports/qwen3-t1bias");
        e = test::errorOf([&] { exportRun(runDir.toStdString(), exporting::ExportFormat::Hf, out.toStdString(), silentJob()); });
        QVERIFY2(e.contains("mlp.gate_proj.bias") && e.contains("--t1-bias off"), qPrintable(e));
        QVERIFY(!QFile::exists(out));
    }

    // QuaRot's full Hadamard T1 of hidden_size 184 = 92 * 2 (no Sylvester, Paley or Kronecker
    // construction) and SpinQuant's Hadamard start are refused before the run folder exists,
    // naming the width and the block methods; those pass the same check, and a head_dim of 46
    // is named as T2's width when hidden_size is constructible.
    void fullHadamardWidthIsCheckedBeforeWork_data() {
        QTest::addColumn<int>("hidden");
        QTest::addColumn<int>("headDim");
        QTest::addColumn<QString>("method");
        QTest::addColumn<QString>("named"); // empty: accepted
        QTest::newRow("quarot 184") << 184 << 32 << "quarot" << "hidden_size (T1) = 184";
        QTest::newRow("quarot-rtn 184") << 184 << 32 << "quarot-rtn" << "hidden_size (T1) = 184";
        QTest::newRow("spinquant 184") << 184 << 32 << "spinquant" << "hidden_size (T1) = 184";
        QTest::newRow("quarot head_dim 46") << 128 << 46 << "quarot" << "head_dim (T2) = 46";
        QTest::newRow("mr-gptq 184") << 184 << 32 << "mr-gptq" << "";
        QTest::newRow("latmix-lu 184") << 184 << 32 << "latmix-lu" << "";
        QTest::newRow("quarot 96") << 96 << 32 << "quarot" << "";
    }
    void fullHadamardWidthIsCheckedBeforeWork() {
        QFETCH(int, hidden);
        QFETCH(int, headDim);
        QFETCH(QString, method);
        QFETCH(QString, named);
        auto c = familyConfig("llama");
        c.hiddenSize = hidden;
        c.headDim = headDim;
        const auto o = test::smallRunOptions(method);
        const QString e = test::errorOf([&] { run::checkMethodFits(c, run::runMethod(o), o); });
        if (named.isEmpty()) {
            QVERIFY2(e.isEmpty(), qPrintable(e));
            return;
        }
        QVERIFY2(e.contains(named) && e.contains("mr-gptq") && e.contains(method), qPrintable(e));
        if (method != "quarot" || hidden != 184) return;
        // Through the run: refused before the folder is made.
        const QString dir = m_tmp.filePath("random/llama-184");
        importing::RandomModelOptions r;
        r.tokenizerDir = test::demoModelDir().toStdString();
        importing::writeRandomModel(c, dir.toStdString(), r);
        const QString runDir = m_tmp.filePath("runs/quarot-184");
        const QString e2 = test::errorOf([&] {
            run::runQuantize(dir.toStdString(), randomIds(2000, 300, 1), {}, runDir.toStdString(), o);
        });
        QVERIFY2(e2.contains(named), qPrintable(e2));
        QVERIFY(!QFile::exists(runDir));
    }

    // The memory estimate of the real shapes (resources/configs): each stage holds at least the
    // buffers that stage cannot do without (lower bounds worked from the shapes: GPTQ's float64
    // Hessian, its Cholesky factor and the layer's own Hessian at the intermediate width; the
    // eval's lm_head table as stored), more windows and longer windows cost more, and a peak
    // above the available memory is refused with both numbers and the way out.
    void memoryEstimateOfRealShapes_data() {
        QTest::addColumn<QString>("config");
        QTest::newRow("llama-3.2-1b") << "llama-3.2-1b";
        QTest::newRow("llama-3.1-8b") << "llama-3.1-8b";
        QTest::newRow("qwen3-8b") << "qwen3-8b";
        QTest::newRow("qwen3-32b") << "qwen3-32b";
    }
    void memoryEstimateOfRealShapes() {
        QFETCH(QString, config);
        const auto c = test::realConfig(config);
        const std::int64_t i = c.intermediateSize, table = std::int64_t(c.vocabSize) * c.hiddenSize;
        auto o = test::smallRunOptions("mr-gptq");
        o.calibSamples = 8;
        const auto q = run::estimateQuantizeMemory(c, 2, o, run::runMethod(o));
        auto stage = [](const run::MemoryEstimate& e, const std::string& name) {
            for (const auto& s : e.stages)
                if (s.name == name) return s.bytes;
            return std::int64_t(-1);
        };
        QVERIFY(stage(q, "quantize") >= 3 * i * i * 8);
        QVERIFY(stage(q, "fold") >= table * 4); // the folded float32 embedding
        QVERIFY(q.peakBytes >= stage(q, "quantize") && q.peakBytes >= stage(q, "fold"));
        o.calibSamples = 128;
        QVERIFY(run::estimateQuantizeMemory(c, 2, o, run::runMethod(o)).peakBytes > q.peakBytes);
        const auto e2048 = run::estimateEvalMemory(c, 2, 2048), e256 = run::estimateEvalMemory(c, 2, 256);
        QVERIFY(e2048.peakBytes >= table * 2 && e2048.peakBytes > e256.peakBytes);
        QVERIFY(run::estimateEvalMemory(c, 4, 2048).peakBytes >= table * 4); // float32 lm_head, read whole
        qInfo("%s: eval 2048 %s, mr-gptq (8 x 256) %s", qPrintable(config), run::gibText(e2048.peakBytes).c_str(),
              run::gibText(q.peakBytes).c_str());

        QVERIFY(run::memoryProblem(q, q.peakBytes, o).empty());
        QVERIFY(run::memoryProblem(q, 0, o).empty()); // unknown: no refusal
        const std::string m = run::memoryProblem(q, q.peakBytes - (std::int64_t(1) << 30), o);
        QVERIFY2(QString::fromStdString(m).contains(QString::fromStdString(run::gibText(q.peakBytes))) &&
                     QString::fromStdString(m).contains(QString::fromStdString(run::gibText(q.peakBytes - (std::int64_t(1) << 30)))) &&
                     QString::fromStdString(m).contains("--force") && QString::fromStdString(m).contains("--calib-samples"),
                 m.c_str());
    }

    // The random checkpoint itself: its config reads back, weights have the stated dtype and the
    // initialisation's standard deviation, norms are 1, and the same seed gives the same bytes.
    void randomModelOfAnyConfig_data() {
        QTest::addColumn<QString>("family");
        QTest::addColumn<QString>("dtype");
        QTest::newRow("qwen3 bf16") << "qwen3" << "bfloat16";
        QTest::newRow("qwen2 f32") << "qwen2" << "float32";
        QTest::newRow("llama bf16") << "llama" << "bfloat16";
    }
    void randomModelOfAnyConfig() {
        QFETCH(QString, family);
        QFETCH(QString, dtype);
        const QString a = m_tmp.filePath("random/" + family + dtype + "-a"), b = m_tmp.filePath("random/" + family + dtype + "-b");
        importing::RandomModelOptions r;
        r.dtype = dtype.toStdString();
        r.tokenizerDir = test::demoModelDir().toStdString();
        importing::writeRandomModel(familyConfig(family), a.toStdString(), r);
        importing::writeRandomModel(familyConfig(family), b.toStdString(), r);
        QVERIFY(QFile::exists(a + "/tokenizer.json"));
        QFile fa(a + "/model.safetensors"), fb(b + "/model.safetensors");
        QVERIFY(fa.open(QIODevice::ReadOnly) && fb.open(QIODevice::ReadOnly));
        QVERIFY(fa.readAll() == fb.readAll());
        const auto ck = model::Checkpoint::load(a.toStdString());
        const auto want = familyConfig(family);
        QCOMPARE(ck.config().hiddenSize, want.hiddenSize);
        QCOMPARE(ck.config().qkNorm, want.qkNorm);
        QCOMPARE(ck.config().qkvBias, want.qkvBias);
        QCOMPARE(ck.config().tieWordEmbeddings, want.tieWordEmbeddings);
        QCOMPARE(ck.config().torchDtype, dtype.toStdString());
        const at::Tensor w = ck.weight("model.layers.1.mlp.up_proj.weight");
        QCOMPARE(w.scalar_type(), dtype == "bfloat16" ? at::kBFloat16 : at::kFloat);
        // statistical: 8192 seeded uniform draws, the sample std's relative spread √(0.2/N) ≈ 0.5%,
        // so 2% is 4σ; the maximum is 0.02·√3 up to bf16 rounding (2^-9 < 1%).
        const double std = w.to(at::kDouble).std().item<double>();
        QVERIFY2(std::abs(std / 0.02 - 1) < 0.02, qPrintable(QString::number(std)));
        QVERIFY(w.to(at::kFloat).abs().max().item<float>() <= float(0.02 * std::sqrt(3.0) * 1.01));
        QVERIFY(at::equal(ck.weight("model.norm.weight").to(at::kFloat), at::ones({want.hiddenSize})));
        if (want.qkNorm)
            QVERIFY(at::equal(ck.weight("model.layers.0.self_attn.q_norm.weight").to(at::kFloat), at::ones({want.headDim})));
        // A tokenizer larger than the vocabulary is refused, naming both sizes; nothing is left.
        auto small = familyConfig(family);
        small.vocabSize = 100;
        const QString c = m_tmp.filePath("random/" + family + dtype + "-small");
        const QString e = test::errorOf([&] { importing::writeRandomModel(small, c.toStdString(), r); });
        QVERIFY2(e.contains("300 tokens") && e.contains("vocab_size 100"), qPrintable(e));
        QVERIFY(!QFile::exists(c));
    }
};

QTEST_GUILESS_MAIN(TestFamilies)
#include "tst_families.moc"
