// The model folder of a quantization run (run/RunModel.h): what writeRunModel refuses (weights
// that are not what their packed form unpacks to, missing or foreign tensors, a format the config
// does not name) and the biases folding creates, which it holds in the source architecture with
// the groups stated in config.json's "latmix" object. Runs are built from stories260K-hf as in
// tst_export (tests/ExportTestRun.h).
#include "TestSupport.h"

#include "ExportTestRun.h"

#include "model/Checkpoint.h"
#include "model/ConfigJson.h"
#include "run/RunModel.h"
#include "util/AtomicFile.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <string>

#include "TestData.h" // after ATen: Qt's slots macro breaks ATen headers
#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

using namespace latmix;
using namespace latmix::run;

namespace {

using latmix::test::dataDir;
using test::errorOf;
using test::readFile;

QString sourceModel() { return dataDir() + "/models/stories260K-hf"; }

using test::bitsEqual;
using test::tempSiblings;

} // namespace

class TestRunModel : public QObject {
    Q_OBJECT

    QTemporaryDir m_tmp;

    // An MXFP4 run (RTN, W_down in the online-Hadamard basis), built once.
    QString run(const QString& name) {
        const QString dir = m_tmp.filePath("runs/" + name);
        if (!QFile::exists(dir + "/latmix.json")) {
            test::RunVariant v;
            v.weights = mx::makeConfig(mx::parseFormat(name.toStdString()));
            test::buildRun(sourceModel().toStdString(), dir.toStdString(), v, "");
        }
        return dir;
    }

private slots:
    void initTestCase() {
        QVERIFY(m_tmp.isValid());
        if (!QFile::exists(sourceModel() + "/config.json"))
            LATMIX_DATA_SKIP(qPrintable("not found: " + sourceModel() + " (set LATMIX_DATA_DIR)"));
    }

    void writerRejectsInconsistentRuns() {
        const QString runDir = run("mxfp4");
        RunModel r = readRunModel((runDir + "/model").toStdString());
        const QString dir = m_tmp.filePath("rejected/model");
        // A weight that is not what its packed form unpacks to.
        RunModel a = r;
        a.tensors["model.layers.2.mlp.up_proj.weight"] = r.tensors.at("model.layers.2.mlp.up_proj.weight") * 1.5;
        QString e = errorOf([&] { writeRunModel(dir.toStdString(), a); });
        QVERIFY2(e.contains("model.layers.2.mlp.up_proj") && e.contains("bit for bit"), qPrintable(e));
        // A block linear without packed weights.
        RunModel b = r;
        b.packed.erase("model.layers.4.self_attn.v_proj");
        e = errorOf([&] { writeRunModel(dir.toStdString(), b); });
        QVERIFY2(e.contains("no packed weight for 'model.layers.4.self_attn.v_proj'"), qPrintable(e));
        // A tensor that is not part of the model.
        RunModel c = r;
        c.tensors["model.layers.0.mlp.extra.weight"] = at::zeros({2});
        e = errorOf([&] { writeRunModel(dir.toStdString(), c); });
        QVERIFY2(e.contains("'model.layers.0.mlp.extra.weight' is not part of a LlamaForCausalLM"), qPrintable(e));
        // Packed in another format than the config says.
        RunModel d = r;
        d.quant.weightFormat = mx::makeConfig(mx::Format::MxInt4);
        e = errorOf([&] { writeRunModel(dir.toStdString(), d); });
        QVERIFY2(e.contains("mxfp4") && e.contains("mxint4"), qPrintable(e));
        QVERIFY(!QFile::exists(dir));
        QVERIFY(tempSiblings(dir).isEmpty());
    }

    // The run model (our format) holds any bias folding creates, in the source architecture, with
    // the groups stated in latmix.biases; the Hugging Face side relabels Qwen2 as Llama and
    // refuses Qwen3 MLP biases (q/k norms) naming the way out.
    void runModelHoldsEveryBiasExportDecides() {
        const model::Checkpoint ck = model::Checkpoint::load(sourceModel().toStdString());
        auto j = nlohmann::ordered_json::parse(readFile(sourceModel().toStdString() + "/config.json"));
        RunModel r;
        r.quant.method = "latmix-lu";
        for (const auto& n : ck.names()) r.tensors[n] = ck.weight(n).clone();
        r.tensors["model.layers.0.self_attn.o_proj.bias"] = at::ones({64});

        j["architectures"] = {"Qwen2ForCausalLM"};
        j["model_type"] = "qwen2";
        r.configJson = j.dump();
        const QString qwen2 = m_tmp.filePath("qwen2/model");
        writeRunModel(qwen2.toStdString(), r);
        const RunModel back = readRunModel(qwen2.toStdString());
        auto c = nlohmann::json::parse(back.configJson);
        QCOMPARE(c["architectures"][0].get<std::string>(), std::string("Qwen2ForCausalLM"));
        QCOMPARE(c["latmix"]["biases"]["o_proj"].get<bool>(), true);
        QCOMPARE(c["latmix"]["biases"]["mlp"].get<bool>(), false);
        QVERIFY(model::Checkpoint::load(qwen2.toStdString()).config().oProjBias);
        QVERIFY(bitsEqual(back.tensors.at("model.layers.0.self_attn.o_proj.bias"), at::ones({64})));
        // Qwen2's q/k/v always carry biases: zero ones were added; o_proj of the other layers too.
        QCOMPARE(back.tensors.at("model.layers.3.self_attn.k_proj.bias").abs().sum().item<float>(), 0.0f);
        QCOMPARE(back.tensors.at("model.layers.3.self_attn.o_proj.bias").abs().sum().item<float>(), 0.0f);
        QVERIFY(!back.tensors.count("model.layers.0.mlp.up_proj.bias"));
        auto hasIn = [](const RunModel& m) { return [&m](const std::string& n) { return m.tensors.count(n) != 0; }; };
        {
            auto hj = nlohmann::ordered_json::parse(back.configJson);
            hj.erase("latmix");
            const auto fix = model::fixBiasFlags(hj, hasIn(back), model::BiasTarget::HfRuntime, "qwen2");
            QCOMPARE(fix.relabeledFrom, std::string("Qwen2ForCausalLM"));
            QCOMPARE(hj["architectures"][0].get<std::string>(), std::string("LlamaForCausalLM"));
            QCOMPARE(hj["attention_bias"].get<bool>(), true);
        }

        j["architectures"] = {"Qwen3ForCausalLM"};
        j["model_type"] = "qwen3";
        r.configJson = j.dump();
        for (int i = 0; i < 5; ++i)
            for (const char* n : {"q_norm", "k_norm"})
                r.tensors["model.layers." + std::to_string(i) + ".self_attn." + n + ".weight"] = at::ones({8});
        r.tensors["model.layers.2.mlp.up_proj.bias"] = at::ones({172});
        const QString qwen3 = m_tmp.filePath("qwen3/model");
        writeRunModel(qwen3.toStdString(), r);
        const RunModel back3 = readRunModel(qwen3.toStdString());
        c = nlohmann::json::parse(back3.configJson);
        QCOMPARE(c["architectures"][0].get<std::string>(), std::string("Qwen3ForCausalLM"));
        QCOMPARE(c["latmix"]["biases"]["mlp"].get<bool>(), true);
        QCOMPARE(c["latmix"]["biases"]["q_k_v"].get<bool>(), false);
        QVERIFY(model::Checkpoint::load(qwen3.toStdString()).config().mlpBias);
        QVERIFY(bitsEqual(back3.tensors.at("model.layers.2.mlp.up_proj.bias"), at::ones({172})));
        QCOMPARE(back3.tensors.at("model.layers.2.mlp.gate_proj.bias").abs().sum().item<float>(), 0.0f);
        auto hj = nlohmann::ordered_json::parse(back3.configJson);
        hj.erase("latmix");
        const QString e = errorOf([&] { model::fixBiasFlags(hj, hasIn(back3), model::BiasTarget::HfRuntime, "qwen3"); });
        QVERIFY2(e.contains("model.layers.0.mlp.gate_proj.bias") && e.contains("Qwen3") && e.contains("--t1-bias off"),
                 qPrintable(e));
    }
};

QTEST_GUILESS_MAIN(TestRunModel)
#include "tst_runmodel.moc"
