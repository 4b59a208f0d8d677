// The model folder of a quantization run and `latmix export` (SPEC §8). The test builds small
// runs itself from stories260K-hf: W_down moved into the online-Hadamard basis (W_down · Hᵀ),
// every block linear RTN-quantized with mx::pack, the unpacked values used as the weights, in
// mxfp4, mxint4 and nvfp4. stories260K's intermediate size 172 leaves a partial last block for
// the block-32 Hadamard (12 channels) and for every format (172 = 5·32 + 12 = 10·16 + 12), so
// the partial-block path is exercised throughout.
#include "TestSupport.h"

#include "ExportTestRun.h"

#include "export/Export.h"
#include "export/ExportTargets.h"
#include "io/SafeTensors.h"
#include "run/RunModel.h"
#include "run/quantize/OptionTable.h"
#include "model/Checkpoint.h"
#include "model/ConfigJson.h"
#include "model/LlamaModel.h"
#include "mx/MxPack.h"
#include "util/AtomicFile.h"
#include "util/Job.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>

#include "TestData.h" // after ATen: Qt's slots macro breaks ATen headers
#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

using namespace latmix;
using namespace latmix::exporting;
using namespace latmix::run;
namespace fs = std::filesystem;

namespace {

using latmix::test::dataDir;

QString sourceModel() { return dataDir() + "/models/stories260K-hf"; }

using test::readFile;
using test::writeFile;

using test::errorOf;

using test::bitsEqual;
using test::tempSiblings;

RunModel buildRun(const QString& runDir, const test::RunVariant& v, const QString& tokenizerDir) {
    return test::buildRun(sourceModel().toStdString(), runDir.toStdString(), v, tokenizerDir.toStdString());
}

mx::MxConfig configNamed(const QString& name) { return mx::makeConfig(mx::parseFormat(name.toStdString())); }


} // namespace

class TestExport : public QObject {
    Q_OBJECT

    QTemporaryDir m_tmp;
    QString m_tokenizer;

    bool haveData() const { return QFile::exists(sourceModel() + "/config.json"); }

    // A run per variant, built once.
    QString run(const QString& name) {
        const QString dir = m_tmp.filePath("runs/" + name);
        if (!QFile::exists(dir + "/latmix.json")) {
            test::RunVariant v;
            v.weights = configNamed(name.section('-', 0, 0));
            v.extraBiases = name.endsWith("-biases");
            v.headBias = name.endsWith("-headbias");
            buildRun(dir, v, m_tokenizer);
        }
        return dir;
    }

    void formats() {
        QTest::addColumn<QString>("variant");
        QTest::newRow("mxfp4") << "mxfp4";
        QTest::newRow("mxint4") << "mxint4";
        QTest::newRow("nvfp4") << "nvfp4";
        QTest::newRow("mxfp4 with biases") << "mxfp4-biases";
    }

private slots:
    void initTestCase() {
        QVERIFY(m_tmp.isValid());
        if (!haveData()) LATMIX_DATA_SKIP(qPrintable("not found: " + sourceModel() + " (set LATMIX_DATA_DIR)"));
        // stories260K-hf has no tokenizer files: a stand-in checks that they travel along.
        m_tokenizer = m_tmp.filePath("tokenizer-src");
        QDir().mkpath(m_tokenizer);
        writeFile((m_tokenizer + "/tokenizer.json").toStdString(), R"({"model": {"type": "BPE"}})");
        writeFile((m_tokenizer + "/tokenizer_config.json").toStdString(), R"({"bos_token": "<s>"})");
    }

    void parseFormat() {
        QCOMPARE(parseExportFormat("hf"), ExportFormat::Hf);
        QCOMPARE(parseExportFormat("compressed-tensors"), ExportFormat::CompressedTensors);
        QVERIFY(errorOf([] { parseExportFormat("onnx"); }).contains("'onnx' (hf or compressed-tensors"));
        // Every target by name, from the one table: the error lists them all.
        QVERIFY(errorOf([] { exporting::exportTargetKind("onnx"); }).contains("'onnx'; choose one of hf, compressed-tensors, gguf"));
        QCOMPARE(exporting::exportTargetKind("gguf").extension, std::string(".gguf"));
        QVERIFY(exporting::exportTargetKind("hf").extension.empty());
        QVERIFY(errorOf([] { parseExportFormat("gguf"); }).contains("exportGguf")); // a file, not a folder
    }

    void roundTrip_data() { formats(); }
    void roundTrip() {
        QFETCH(QString, variant);
        test::RunVariant v{configNamed(variant.section('-', 0, 0)), variant.endsWith("-biases")};
        const QString dir = m_tmp.filePath("roundtrip/" + variant);
        const RunModel written = buildRun(dir, v, m_tokenizer);
        const RunModel read = readRunModel((dir + "/model").toStdString());

        // The "latmix" object.
        QVERIFY(read.quant.weightFormat && read.quant.activationFormat);
        QCOMPARE(read.quant.method, std::string("rtn"));
        QCOMPARE(read.quant.weightFormat->format, v.weights.format);
        QCOMPARE(read.quant.weightFormat->blockSize, v.weights.blockSize);
        QCOMPARE(read.quant.t3Block, 32);
        QCOMPARE(read.quant.t3Seed, std::uint64_t(1234));
        const auto j = nlohmann::json::parse(read.configJson);
        QCOMPARE(j["latmix"]["t3"]["point"].get<std::string>(), std::string("mlp.down_proj.input"));
        QCOMPARE(j["latmix"]["lm_head_bias"].get<bool>(), false);
        QCOMPARE(j["tie_word_embeddings"].get<bool>(), !v.extraBiases);
        QCOMPARE(j["attention_bias"].get<bool>(), v.extraBiases);
        QCOMPARE(j["torch_dtype"].get<std::string>(), std::string("float32"));

        // Tensors: exactly what was given, plus zero biases where a group needed them.
        for (const auto& [name, t] : written.tensors) {
            QVERIFY2(read.tensors.count(name), name.c_str());
            QVERIFY2(bitsEqual(read.tensors.at(name), t), name.c_str());
        }
        int zeros = 0;
        for (const auto& [name, t] : read.tensors)
            if (!written.tensors.count(name)) {
                QVERIFY2(name.find(".bias") != std::string::npos, name.c_str());
                QVERIFY2(t.abs().max().item<float>() == 0.0f, name.c_str());
                ++zeros;
            }
        // q,k,v of 5 layers minus the given one; o_proj is a group of its own (latmix.biases).
        QCOMPARE(zeros, v.extraBiases ? 5 * 3 - 1 : 0);
        QCOMPARE(j["latmix"]["biases"]["q_k_v"].get<bool>(), v.extraBiases);
        QCOMPARE(j["latmix"]["biases"]["o_proj"].get<bool>(), false);

        // Packed weights: identical bytes, and they unpack to the stored weights.
        QCOMPARE(read.packed.size(), written.packed.size());
        for (const auto& [p, pk] : written.packed) {
            const auto& r = read.packed.at(p);
            QVERIFY2(at::equal(r.codes, pk.codes) && at::equal(r.scales, pk.scales), p.c_str());
            QCOMPARE(test::bitsOf(r.globalScale), test::bitsOf(pk.globalScale));
            QCOMPARE(r.lastDim, pk.lastDim);
            QVERIFY2(bitsEqual(mx::unpack(r), read.tensors.at(p + ".weight")), p.c_str());
        }
        const auto& down = read.packed.at("model.layers.0.mlp.down_proj");
        QCOMPARE(down.lastDim, std::int64_t(172));
        QCOMPARE(down.codes.size(1), std::int64_t(86));
        QCOMPARE(down.scales.size(1), std::int64_t((172 + v.weights.blockSize - 1) / v.weights.blockSize));

        // A run model is a Hugging Face folder this workbench loads, tokenizer files included.
        const auto ck = model::Checkpoint::load((dir + "/model").toStdString());
        QVERIFY(ck.config().latmix.has_value());
        QVERIFY(!ck.config().lmHeadBias);
        QVERIFY(QFile::exists(dir + "/model/tokenizer.json"));
        QVERIFY(QFile::exists(dir + "/model/tokenizer_config.json"));
        QVERIFY(tempSiblings(dir + "/model").isEmpty());

        // Writing again replaces the folder as a whole.
        writeRunModel((dir + "/model").toStdString(), written, "");
        QVERIFY(!QFile::exists(dir + "/model/tokenizer.json"));
        QVERIFY(tempSiblings(dir + "/model").isEmpty());
    }

    void exportCompressedTensors_data() { formats(); }
    void exportCompressedTensors() {
        QFETCH(QString, variant);
        const QString runDir = run(variant);
        const RunModel r = readRunModel((runDir + "/model").toStdString());
        const mx::MxConfig wf = *r.quant.weightFormat;
        const QString out = m_tmp.filePath("ct/" + variant);
        const ExportReport rep = exportRun(runDir.toStdString(), ExportFormat::CompressedTensors, out.toStdString(),
                                           silentJob());
        QCOMPARE(rep.packedLinears, 5 * 7);
        QVERIFY(rep.bytes > 0);
        QVERIFY(tempSiblings(out).isEmpty());

        // Packed tensors, read back independently of the exporter's verification.
        const auto st = io::SafeTensorsFile::open((out + "/model.safetensors").toStdString());
        for (const auto& p : model::names::blockLinearPrefixes(runModelConfig(r))) {
            const at::Tensor& w = r.tensors.at(p + ".weight");
            const auto& codes = st->entry(p + ".weight_packed");
            const auto& scales = st->entry(p + ".weight_scale");
            QCOMPARE(codes.dtype, std::string("U8"));
            QCOMPARE(codes.shape, (std::vector<std::int64_t>{w.size(0), (w.size(1) + 1) / 2}));
            QCOMPARE(scales.dtype, std::string(wf.isNvfp4() ? "F8_E4M3" : "U8"));
            QCOMPARE(scales.shape, (std::vector<std::int64_t>{w.size(0), (w.size(1) + wf.blockSize - 1) / wf.blockSize}));
            QVERIFY(!st->contains(p + ".weight"));
            mx::PackedTensor pk;
            pk.config = wf;
            pk.codes = st->tensor(p + ".weight_packed");
            pk.scales = st->tensor(p + ".weight_scale");
            pk.lastDim = w.size(1);
            if (wf.isNvfp4()) {
                const float stored = st->tensor(p + ".weight_global_scale").template item<float>();
                const float g = r.packed.at(p).globalScale;
                QCOMPARE(test::bitsOf(stored), test::bitsOf(1.0f / g)); // compressed-tensors: 448·6/amax
                pk.globalScale = g;
            } else {
                QVERIFY(!st->contains(p + ".weight_global_scale"));
            }
            QVERIFY2(bitsEqual(mx::unpack(pk), w), p.c_str()); // bit for bit the run's weights
        }
        // Everything else bf16: the run's tensors rounded.
        for (const char* n : {"model.embed_tokens.weight", "model.norm.weight", "model.layers.2.input_layernorm.weight"}) {
            QCOMPARE(st->entry(n).dtype, std::string("BF16"));
            QVERIFY2(bitsEqual(st->tensor(n), r.tensors.at(n).to(at::kBFloat16)), n);
        }
        if (variant.endsWith("-biases")) QVERIFY(st->contains("model.layers.0.self_attn.o_proj.bias"));
        QVERIFY(!st->contains("lm_head.bias"));

        // config.json
        const auto j = nlohmann::json::parse(readFile((out + "/config.json").toStdString()));
        QVERIFY(!j.contains("latmix"));
        QCOMPARE(j["torch_dtype"].get<std::string>(), std::string("bfloat16"));
        const auto& qc = j["quantization_config"];
        const std::string fmt = wf.format == mx::Format::MxFp4   ? "mxfp4-pack-quantized"
                                : wf.format == mx::Format::NvFp4 ? "nvfp4-pack-quantized"
                                                                 : "mxint4-pack-quantized";
        QCOMPARE(qc["quant_method"].get<std::string>(), std::string("compressed-tensors"));
        QCOMPARE(qc["format"].get<std::string>(), fmt);
        QCOMPARE(qc["ignore"], nlohmann::json::array({"lm_head"}));
        const auto& g0 = qc["config_groups"]["group_0"];
        QCOMPARE(g0["format"].get<std::string>(), fmt);
        QCOMPARE(g0["weights"]["num_bits"].get<int>(), 4);
        QCOMPARE(g0["weights"]["group_size"].get<int>(), wf.blockSize);
        QCOMPARE(g0["weights"]["type"].get<std::string>(), std::string(wf.format == mx::Format::MxInt4 ? "int" : "float"));
        QCOMPARE(g0["weights"]["scale_dtype"].get<std::string>(),
                 std::string(wf.isNvfp4() ? "torch.float8_e4m3fn" : "torch.uint8"));
        QCOMPARE(g0["input_activations"]["dynamic"].get<bool>(), true);
        QCOMPARE(g0["input_activations"]["group_size"].get<int>(), wf.blockSize);
        const auto& t3 = qc["transform_config"]["config_groups"]["latmix_t3"];
        QCOMPARE(t3["type"].get<std::string>(), std::string("random-hadamard"));
        QCOMPARE(t3["head_dim"].get<int>(), 32);
        QCOMPARE(t3["apply"][0]["location"].get<std::string>(), std::string("input"));
        QCOMPARE(t3["apply"][0]["targets"][0].get<std::string>(), std::string("re:.*mlp\\.down_proj$"));

        // The exact T3 blocks: 5 of 32 and the last one of 12, as in H.
        const auto tf = io::SafeTensorsFile::open((out + "/latmix_t3.safetensors").toStdString());
        const at::Tensor h = t3Transform(r.quant, 172).dense();
        const at::Tensor blocks = tf->tensor("blocks");
        QCOMPARE(blocks.sizes().vec(), (std::vector<std::int64_t>{5, 32, 32}));
        for (int b = 0; b < 5; ++b) QVERIFY(at::equal(blocks[b], h.slice(0, 32 * b, 32 * b + 32).slice(1, 32 * b, 32 * b + 32)));
        QVERIFY(at::equal(tf->tensor("last_block"), h.slice(0, 160, 172).slice(1, 160, 172)));
        QCOMPARE(tf->metadata().at("seed"), std::string("1234"));

        // Side files.
        const auto lj = nlohmann::json::parse(readFile((out + "/latmix.json").toStdString()));
        QCOMPARE(lj["method"].get<std::string>(), std::string("rtn"));
        QCOMPARE(lj["export"]["format"].get<std::string>(), std::string("compressed-tensors"));
        QVERIFY(lj["export"].contains("time") && lj["export"].contains("latmix_version"));
        QCOMPARE(readFile((out + "/transforms.h5").toStdString()), readFile((runDir + "/transforms.h5").toStdString()));
        QVERIFY(QFile::exists(out + "/tokenizer.json"));
        verifyExport(out.toStdString(), runDir.toStdString());
    }

    void exportHf_data() { formats(); }
    void exportHf() {
        QFETCH(QString, variant);
        const QString runDir = run(variant);
        const RunModel r = readRunModel((runDir + "/model").toStdString());
        const QString out = m_tmp.filePath("hf/" + variant);
        const ExportReport rep = exportRun(runDir.toStdString(), ExportFormat::Hf, out.toStdString(), silentJob());
        QCOMPARE(rep.packedLinears, 0);
        const QString notes = QString::fromStdString([&] {
            std::string s;
            for (const auto& n : rep.notes) s += n + "\n";
            return s;
        }());
        QVERIFY2(notes.contains("activations are unquantized"), qPrintable(notes));
        QVERIFY2(!notes.contains("lm_head"), qPrintable(notes)); // no head bias to warn of (issue 71)

        // A plain Hugging Face folder: loads, no "latmix" object, bf16.
        const auto ck = model::Checkpoint::load(out.toStdString());
        QVERIFY(!ck.config().latmix.has_value());
        const auto j = nlohmann::json::parse(readFile((out + "/config.json").toStdString()));
        QVERIFY(!j.contains("latmix"));
        QVERIFY(!j.contains("quantization_config"));
        QCOMPARE(j["torch_dtype"].get<std::string>(), std::string("bfloat16"));
        QCOMPARE(j["attention_bias"].get<bool>(), variant.endsWith("-biases"));

        // Every tensor: bf16 of the run's, W_down with T3 folded back (W_down · H).
        const at::Tensor h = t3Transform(r.quant, 172).dense();
        for (const auto& name : ck.names()) {
            const at::Tensor got = ck.weight(name);
            QCOMPARE(got.scalar_type(), at::kBFloat16);
            at::Tensor want;
            if (name.find("mlp.down_proj.weight") != std::string::npos) {
                // W_down · H in float64 (dense here, block by block in the export): the two sums
                // differ by float64 rounding, at most ~1e-16 of Σ|w||h| per entry (more than that
                // of the value itself where terms cancel), so the bf16 result is the same except
                // where the exact value lies within 1e-12·Σ|w||h| of a rounding boundary; there
                // either neighbour is right.
                const auto wd = r.tensors.at(name).to(at::kDouble);
                const auto exact = wd.mm(h), tol = 1e-12 * wd.abs().mm(h.abs());
                auto bf16 = [](const at::Tensor& x) { return x.to(at::kFloat).to(at::kBFloat16).to(at::kDouble); };
                const auto g = got.to(at::kDouble);
                QVERIFY2(at::logical_and(g >= bf16(exact - tol), g <= bf16(exact + tol)).all().item<bool>(), name.c_str());
                QVERIFY2(g.ne(bf16(exact)).sum().item<int64_t>() <= got.numel() / 100, name.c_str());
                continue;
            } else if (r.tensors.count(name))
                want = r.tensors.at(name).to(at::kBFloat16);
            else
                want = at::zeros(got.sizes(), at::kBFloat16); // a completed bias group
            QVERIFY2(bitsEqual(got, want), name.c_str());
        }
        // Folding T3 back recovers the original weight up to quantization and bf16 rounding
        // (effect: 4-bit error ≈ 0.1–0.2 of ‖W‖; T3 left in, W·Hᵀ vs W, would be ≈ √2).
        const auto orig = model::Checkpoint::load(sourceModel().toStdString());
        const auto w0 = orig.weight("model.layers.0.mlp.down_proj.weight");
        const auto w1 = ck.weight("model.layers.0.mlp.down_proj.weight").to(at::kFloat);
        const double rel = ((w1 - w0).norm() / w0.norm()).item<double>();
        QVERIFY2(rel < 0.3, qPrintable(QString::number(rel)));
        QVERIFY(!ck.has("lm_head.bias"));
        verifyExport(out.toStdString(), runDir.toStdString());
    }

    // Re-evaluation (SPEC §8): the hf export computes the run's function (online T3, quantized
    // weights, activations unquantized) without any online transform.
    void hfComputesRunFunction() {
        const QString runDir = run("mxfp4");
        const QString out = m_tmp.filePath("hf-eval");
        exportRun(runDir.toStdString(), ExportFormat::Hf, out.toStdString(), silentJob());
        const auto tokens = at::arange(1, 65, at::kLong).remainder(500).add(3).reshape({1, 64});
        const model::LlamaModel runModel(model::Checkpoint::load((runDir + "/model").toStdString()), at::kFloat,
                                         c10::kCPU, /*quantizeActivations=*/false);
        const model::LlamaModel hfModel(model::Checkpoint::load(out.toStdString()));
        const model::LlamaModel original(model::Checkpoint::load(sourceModel().toStdString()));
        const auto lr = runModel.forward(tokens), lh = hfModel.forward(tokens), lo = original.forward(tokens);
        const double exportErr = (lh - lr).abs().max().item<double>();
        const double quantErr = (lo - lr).abs().max().item<double>();
        QVERIFY2(exportErr < 0.1 * quantErr,
                 qPrintable(QString("export %1 vs quantization %2").arg(exportErr).arg(quantErr)));
    }

    void overwriteRules() {
        const QString runDir = run("mxfp4");
        const QString out = m_tmp.filePath("existing");
        QDir().mkpath(out);
        writeFile((out + "/keep.txt").toStdString(), "user data");
        const QString e = errorOf([&] { exportRun(runDir.toStdString(), ExportFormat::Hf, out.toStdString(), silentJob()); });
        QVERIFY2(e.contains("exists and is not empty") && e.contains("--overwrite"), qPrintable(e));
        QVERIFY(QFile::exists(out + "/keep.txt"));
        QVERIFY(tempSiblings(out).isEmpty());

        ExportOptions o;
        o.overwrite = true;
        exportRun(runDir.toStdString(), ExportFormat::Hf, out.toStdString(), silentJob(), o);
        QVERIFY(!QFile::exists(out + "/keep.txt"));
        QVERIFY(QFile::exists(out + "/model.safetensors"));
        QVERIFY(tempSiblings(out).isEmpty());

        // An empty folder is fine without --overwrite.
        const QString empty = m_tmp.filePath("empty");
        QDir().mkpath(empty);
        exportRun(runDir.toStdString(), ExportFormat::CompressedTensors, empty.toStdString(), silentJob());
        QVERIFY(QFile::exists(empty + "/config.json"));

        // Never over the run itself.
        const QString self = errorOf([&] {
            exportRun(runDir.toStdString(), ExportFormat::Hf, (runDir + "/model").toStdString(), silentJob(), o);
        });
        QVERIFY2(self.contains("would replace the run"), qPrintable(self));
        QVERIFY(QFile::exists(runDir + "/model/quantized.safetensors"));
    }

    void cancel_data() {
        QTest::addColumn<QString>("stage");
        QTest::addColumn<int>("count");
        QTest::newRow("while reading") << "reading" << 1;
        QTest::newRow("while writing tensors") << "tensor" << 10;
        QTest::newRow("while verifying") << "verifying" << 20;
    }
    void cancel() {
        QFETCH(QString, stage);
        QFETCH(int, count);
        const QString runDir = run("nvfp4");
        const QString out = m_tmp.filePath("cancelled");
        test::CancelAfter job(count, stage.toStdString()); // stage: "reading", "tensor", "verifying"
        bool cancelled = false;
        try {
            exportRun(runDir.toStdString(), ExportFormat::CompressedTensors, out.toStdString(), job);
        } catch (const JobCancelled&) {
            cancelled = true;
        }
        QVERIFY2(cancelled, qPrintable(QString("progress calls: %1").arg(job.reports())));
        QVERIFY(!QFile::exists(out));
        QVERIFY(tempSiblings(out).isEmpty());

        // A cancelled overwrite leaves the old folder alone.
        const QString old = m_tmp.filePath("cancelled-overwrite");
        QDir().mkpath(old);
        writeFile((old + "/keep.txt").toStdString(), "old export");
        test::CancelAfter job2(count, stage.toStdString());
        ExportOptions o;
        o.overwrite = true;
        QVERIFY_THROWS_EXCEPTION(JobCancelled,
                                 exportRun(runDir.toStdString(), ExportFormat::Hf, old.toStdString(), job2, o));
        QVERIFY(QFile::exists(old + "/keep.txt"));
        QVERIFY(tempSiblings(old).isEmpty());
    }

    void badInputs_data() {
        QTest::addColumn<QString>("damage");
        QTest::addColumn<QStringList>("phrases");
        QTest::newRow("no run folder") << "no run" << QStringList{"does-not-exist", "does not exist"};
        QTest::newRow("no latmix.json") << "no record" << QStringList{"latmix.json", "is missing"};
        QTest::newRow("no config.json") << "no config" << QStringList{"config.json", "missing"};
        QTest::newRow("plain HF folder") << "no latmix object"
                                         << QStringList{"has no \"latmix\" object", "latmix quantize"};
        QTest::newRow("no model.safetensors") << "no weights" << QStringList{"model.safetensors", "missing"};
        QTest::newRow("truncated model.safetensors")
            << "truncated weights" << QStringList{"model.safetensors", "corrupt or truncated"};
        QTest::newRow("no quantized.safetensors")
            << "no packed" << QStringList{"quantized.safetensors", "are missing", "mxfp4"};
        QTest::newRow("packed code changed")
            << "flipped code"
            << QStringList{"quantized.safetensors", "model.layers.3.mlp.down_proj", "bit for bit", "latmix quantize"};
        QTest::newRow("packed tensor missing")
            << "dropped scale" << QStringList{"model.layers.0.self_attn.k_proj.weight_scale", "is missing"};
        QTest::newRow("unquantized run to compressed-tensors")
            << "unquantized" << QStringList{"unquantized weights", "export it as hf"};
    }
    void badInputs() {
        QFETCH(QString, damage);
        QFETCH(QStringList, phrases);
        const QString good = run("mxfp4");
        QString dir = m_tmp.filePath("bad/" + QString(QTest::currentDataTag()).replace(' ', '_'));
        latmix::util::removeTreeQuietly(dir.toStdString());
        fs::create_directories(dir.toStdString());
        fs::copy(good.toStdString(), dir.toStdString(), fs::copy_options::recursive);
        const std::string model = (dir + "/model").toStdString();
        ExportFormat fmt = ExportFormat::CompressedTensors;
        if (damage == "no run") dir = m_tmp.filePath("bad/does-not-exist");
        else if (damage == "no record") fs::remove(dir.toStdString() + "/latmix.json");
        else if (damage == "no config") fs::remove(model + "/config.json");
        else if (damage == "no latmix object") {
            auto j = nlohmann::json::parse(readFile(model + "/config.json"));
            j.erase("latmix");
            writeFile(model + "/config.json", j.dump(2));
        } else if (damage == "no weights") fs::remove(model + "/model.safetensors");
        else if (damage == "truncated weights") fs::resize_file(model + "/model.safetensors", 100);
        else if (damage == "no packed") fs::remove(model + "/quantized.safetensors");
        else if (damage == "flipped code" || damage == "dropped scale") {
            auto f = io::SafeTensorsFile::open(model + "/quantized.safetensors");
            std::vector<std::pair<std::string, at::Tensor>> ts;
            for (const auto& e : f->entries()) {
                if (damage == "dropped scale" && e.name == "model.layers.0.self_attn.k_proj.weight_scale") continue;
                at::Tensor t = f->tensor(e.name).clone();
                if (damage == "flipped code" && e.name == "model.layers.3.mlp.down_proj.weight_packed")
                    t.index_put_({0, 5}, t.index({0, 5}).bitwise_xor(0x11));
                ts.emplace_back(e.name, t);
            }
            f.reset();
            io::writeSafeTensors(model + "/quantized.safetensors", ts);
        } else if (damage == "unquantized") {
            RunModel r = readRunModel(model);
            RunModel u;
            u.configJson = r.configJson;
            u.quant = r.quant;
            u.quant.weightFormat.reset();
            for (const auto& [n, t] : r.tensors) u.tensors[n] = t.clone();
            r = RunModel{};
            writeRunModel(model, u);
        }
        const QString out = m_tmp.filePath("bad-out");
        const QString e = errorOf([&] { exportRun(dir.toStdString(), fmt, out.toStdString(), silentJob()); });
        for (const auto& p : phrases) QVERIFY2(e.contains(p), qPrintable("'" + p + "' not in: " + e));
        QVERIFY(!QFile::exists(out));
        QVERIFY(tempSiblings(out).isEmpty());
    }

    // The 4-bit formats and MXFP8 have a compressed-tensors form (not MXINT8) and only MXFP4 and
    // NVFP4 a GGUF type; hf takes every format. checkExportTarget says so from config.json alone, with the
    // export's own words (nothing written); the GGUF remedy names the workbench's Format control.
    void targetsRefuseWhatTheyCannotHold_data() {
        QTest::addColumn<QString>("variant");
        QTest::addColumn<QString>("target");
        QTest::addColumn<QString>("refusal"); // "": exported
        QTest::newRow("mxint8 compressed-tensors") << "mxint8" << "compressed-tensors"
                                                   << "compressed-tensors holds mxfp4, nvfp4, mxint4 and mxfp8";
        QTest::newRow("mxfp8 compressed-tensors") << "mxfp8_e4m3" << "compressed-tensors" << "";
        QTest::newRow("mxfp8 gguf") << "mxfp8_e4m3" << "gguf" << "use --format mxfp4 or nvfp4 when quantizing it again";
        QTest::newRow("mxint4 gguf") << "mxint4" << "gguf" << "MXINT4 has none";
        QTest::newRow("mxfp8 hf") << "mxfp8_e4m3" << "hf" << "";
        QTest::newRow("mxint4 compressed-tensors") << "mxint4" << "compressed-tensors" << "";
        // A run of a version that folded T1's bias into lm_head (issue 71): no runtime's head loads
        // a bias, so no target computes that run's function.
        for (const char* t : {"hf", "compressed-tensors", "gguf"})
            QTest::newRow((std::string("lm_head bias ") + t).c_str())
                << "mxfp4-headbias" << t << "its lm_head has a bias (T1's bias, folded there by versions before issue 71)";
    }
    void targetsRefuseWhatTheyCannotHold() {
        QFETCH(QString, variant);
        QFETCH(QString, target);
        QFETCH(QString, refusal);
        const std::string runDir = run(variant).toStdString(), t = target.toStdString();
        const QString out = m_tmp.filePath("refuse-" + variant + "-" + target + (target == "gguf" ? ".gguf" : ""));
        const QString checked = errorOf([&] { exporting::checkExportTarget(runDir, t); });
        const QString exported = errorOf([&] { exporting::exportTo(runDir, t, out.toStdString(), silentJob()); });
        QCOMPARE(checked, exported);
        if (refusal.isEmpty()) {
            QVERIFY2(checked.isEmpty() && QFileInfo::exists(out), qPrintable(checked));
            return;
        }
        QVERIFY2(checked.contains(refusal) && checked.contains(QString::fromStdString(runDir)), qPrintable(checked));
        QVERIFY(!QFileInfo::exists(out));
        if (target != "gguf" || variant.endsWith("-headbias")) return;
        try {
            exporting::checkExportTarget(runDir, t);
        } catch (const std::exception& e) {
            const QString words = QString::fromStdString(run::messageFor(e, run::Face::Workbench));
            QVERIFY2(words.contains("Format") && !words.contains("--format"), qPrintable(words));
        }
    }

    void verifyFindsTampering() {
        const QString runDir = run("nvfp4");
        const QString out = m_tmp.filePath("tampered");
        exportRun(runDir.toStdString(), ExportFormat::CompressedTensors, out.toStdString(), silentJob());
        verifyExport(out.toStdString(), runDir.toStdString());
        // Flip one byte inside the scales of one linear.
        const std::string path = (out + "/model.safetensors").toStdString();
        std::uint64_t at;
        {
            const auto st = io::SafeTensorsFile::open(path);
            std::uint64_t headerLen = 0;
            const std::string head = readFile(path).substr(0, 8);
            for (int i = 7; i >= 0; --i) headerLen = (headerLen << 8) | static_cast<unsigned char>(head[i]);
            at = 8 + headerLen + st->entry("model.layers.1.mlp.gate_proj.weight_scale").begin + 3;
        }
        {
            std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
            f.seekg(static_cast<std::streamoff>(at));
            char c = 0;
            f.read(&c, 1);
            c = static_cast<char>(c ^ 0x01);
            f.seekp(static_cast<std::streamoff>(at));
            f.write(&c, 1);
        }
        const QString e = errorOf([&] { verifyExport(out.toStdString(), runDir.toStdString()); });
        QVERIFY2(e.contains("model.layers.1.mlp.gate_proj.weight_scale"), qPrintable(e));
    }
};

QTEST_GUILESS_MAIN(TestExport)
#include "tst_export.moc"
