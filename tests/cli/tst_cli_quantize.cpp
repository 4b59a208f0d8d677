// `latmix quantize` and `latmix eval` as a user runs them: the demo model quantized with
// LATMiX-LU, the run's files, its JSON record, evaluation of the run's model, resume of the
// training, and one-line errors for bad arguments.
#include "eval/Perplexity.h"
#include "io/TensorFile.h"
#include "model/LlamaModel.h"
#include "tokenizer/Tokenizer.h"
#include "train/Distillation.h"

#include <ATen/ATen.h>

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRegularExpression>
#include "CliRunner.h"
#include "FoldedStudent.h"
#include "TestData.h"
#include "PoisonedModel.h"
#include <QTemporaryDir>
#include <QProcess>
#include <QMap>
#include <QtTest>

#include <limits>

class TestCliQuantize : public QObject {
    Q_OBJECT

    using Result = latmix::test::CliResult;

    QTemporaryDir m_tmp;
    QString m_model, m_calib;

    static Result run(const QStringList& args) { return latmix::test::runLatmixInProcess(args); }

    QStringList quantizeArgs(const QString& out, const QString& method, int steps) const {
        return {"quantize", "--model", m_model, "--method", method, "--format", "mxfp4", "--steps", QString::number(steps),
                "--calib", m_calib, "--calib-samples", "4", "--seqlen", "32", "--batch", "2", "--device", "cpu",
                "--checkpoint-every", "2", "--out", out};
    }

    static QJsonObject readJson(const QString& path) {
        QFile f(path);
        if (!f.open(QIODevice::ReadOnly)) return {};
        return QJsonDocument::fromJson(f.readAll()).object();
    }

private slots:
    void initTestCase() {
        const QString error = latmix::test::writeDemoFixture(m_tmp, m_model, m_calib);
        QVERIFY2(error.isEmpty(), qPrintable(error));
    }

    void quantizesAndEvaluates_data() {
        QTest::addColumn<QString>("method");
        QTest::newRow("latmix-lu") << "latmix-lu";
        QTest::newRow("mr-gptq") << "mr-gptq";
        QTest::newRow("rtn") << "rtn";
    }
    void quantizesAndEvaluates() {
        QFETCH(QString, method);
        const QString out = m_tmp.filePath("run-" + method);
        const Result r = run(quantizeArgs(out, method, 4));
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QVERIFY(r.out.contains("run "));
        const QJsonObject j = readJson(out + "/latmix.json");
        QCOMPARE(j["method"].toString(), method);
        // The command as typed (every flag, not a rebuilt subset); these arguments need no quotes.
        QCOMPARE(j["command"].toString(), "latmix " + quantizeArgs(out, method, 4).join(' '));
        QCOMPARE(j["format"].toObject()["format"].toString(), QString("mxfp4"));
        const int layers = readJson(m_model + "/config.json")["num_hidden_layers"].toInt();
        QVERIFY(layers > 0);
        QCOMPARE(j["linears"].toArray().size(), 7 * layers);
        QVERIFY(QFile::exists(out + "/model/config.json"));
        QCOMPARE(QFile::exists(out + "/train.h5"), method.startsWith("latmix"));
        // The run's model evaluates like any model folder (its W4A4 settings come from config.json).
        const Result e = run({"eval", "--model", out + "/model", "--dataset", m_calib, "--seqlen", "32", "--device", "cpu"});
        QVERIFY2(e.exitCode == 0, qPrintable(e.err));
        QVERIFY(e.out.contains("perplexity"));
    }

    // Weights and activations share the run's format, and what the run prints is named by its
    // bits (the paper's W4A4 for 4-bit formats): the perplexity line and --dry-run's eval stage.
    void precisionNamedByFormat_data() {
        QTest::addColumn<QString>("format");
        QTest::addColumn<QString>("label");
        QTest::addColumn<QString>("notLabel");
        QTest::newRow("mxfp4") << "mxfp4" << "W4A4" << "W8A8";
        QTest::newRow("mxfp6_e2m3") << "mxfp6_e2m3" << "W6A6" << "W4A4";
        QTest::newRow("mxfp8_e4m3") << "mxfp8_e4m3" << "W8A8" << "W4A4";
    }
    void precisionNamedByFormat() {
        if (!QFile::exists(latmix::test::dataDir() + "/wikitext-2/wiki.test.raw"))
            LATMIX_DATA_SKIP("WikiText-2 test split not found (LATMIX_DATA_DIR)");
        QFETCH(QString, format);
        QFETCH(QString, label);
        QFETCH(QString, notLabel);
        QStringList args = quantizeArgs(m_tmp.filePath("precision-" + format), "rtn", 0);
        args[args.indexOf("--format") + 1] = format;
        args << "--eval-seqlen" << "32" << "--eval-windows" << "2";
        const Result dry = run(QStringList(args) << "--dry-run");
        QVERIFY2(dry.exitCode == 0, qPrintable(dry.err));
        QVERIFY2(dry.out.contains("eval (" + label + ")") && !dry.out.contains(notLabel), qPrintable(dry.out));
        const Result r = run(args);
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        const QRegularExpression line("perplexity +FP [0-9.]+ +" + label + " [0-9.]+ +weights only");
        QVERIFY2(r.out.contains(line) && !r.out.contains(notLabel), qPrintable(r.out));
        QVERIFY2(r.out.contains("KL           " + label + " vs FP: mean "), qPrintable(r.out));
        // The run's KL to the FP model is what `latmix eval --reference` computes for its folder
        // (the same windows, passes and threads: equal as written), and it is no trivial zero.
        const QString out = args[args.indexOf("--out") + 1];
        const QJsonObject p = readJson(out + "/latmix.json")["perplexity"].toObject();
        const QJsonObject kl = p["kl"].toObject();
        QCOMPARE(kl["tokens"].toInt(), 2 * 31);
        QVERIFY2(kl["mean"].toDouble() > 0 && kl["p99"].toDouble() >= kl["mean"].toDouble(), qPrintable(r.out));
        const Result e = run({"eval", "--model", out, "--reference", m_model, "--seqlen", "32", "--max-windows", "2",
                              "--device", "cpu", "--json", out + "/kl.json", "--tokens-out", out + "/kl-tokens.txt"});
        QVERIFY2(e.exitCode == 0, qPrintable(e.err));
        // --tokens-out writes the windows compared (issue 71: it was ignored with --reference): the
        // windows the plain evaluation writes, two lines of 32 ids.
        const Result plain = run({"eval", "--model", out, "--seqlen", "32", "--max-windows", "2", "--device", "cpu",
                                  "--tokens-out", out + "/tokens.txt"});
        QVERIFY2(plain.exitCode == 0, qPrintable(plain.err));
        const auto linesOf = [](const QString& file) {
            QFile f(file);
            return f.open(QIODevice::ReadOnly) ? QString::fromUtf8(f.readAll()).split('\n', Qt::SkipEmptyParts) : QStringList();
        };
        const QStringList windows = linesOf(out + "/kl-tokens.txt");
        QCOMPARE(windows.size(), 2);
        QCOMPARE(windows[0].split(' ').size(), 32);
        QCOMPARE(windows, linesOf(out + "/tokens.txt"));
        const QJsonObject again = readJson(out + "/kl.json");
        QCOMPARE(again["perplexity"].toDouble(), p["w4a4"].toDouble());
        QCOMPARE(again["reference_perplexity"].toDouble(), p["fp"].toDouble());
        for (const char* k : {"mean", "stderr", "p99", "top1_agreement", "delta_ppl", "delta_ppl_stderr"})
            QVERIFY2(again["kl"].toObject()[k].toDouble() == kl[k].toDouble(), k);
        QVERIFY2(e.out.contains("top-1") && e.out.contains("99th percentile"), qPrintable(e.out));
        // A reference with another vocabulary is refused, naming both folders.
        const Result bad = run({"eval", "--model", out, "--reference", latmix::test::dataDir() + "/models/stories260K-hf",
                                "--seqlen", "32", "--max-windows", "2", "--device", "cpu"});
        QVERIFY2(bad.exitCode != 0 && bad.err.contains("different vocabularies"), qPrintable(bad.err));
    }

    // --eval-tasks: the quantized model's zero-shot accuracies in the report and latmix.json,
    // the same numbers `latmix eval --tasks` gives for the run's model folder.
    // --tf32 changes float32 matrix products on CUDA only: on the CPU the run is the same and
    // latmix.json records that no TF32 was used.
    void tf32IsCudaOnly() {
        const QString out = m_tmp.filePath("run-tf32");
        auto args = quantizeArgs(out, "rtn", 4);
        args << "--tf32";
        const Result r = run(args);
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        const QJsonObject j = readJson(out + "/latmix.json");
        QVERIFY(j.contains("tf32"));
        QCOMPARE(j["tf32"].toBool(), false);
        QCOMPARE(readJson(m_tmp.filePath("run-rtn") + "/latmix.json")["tf32"].toBool(), false);
    }

    // latmix bench train: with one timed step its parts are that step's. Each part has a timer of
    // its own (the untimed rest is the step less their sum), so parts timed twice, or one part
    // inside another, make the rest negative: it must be >= 0 up to the printed rounding (0.05 ms
    // a row), and the parts with it add up to the step. A method that trains nothing is refused by name.
    void benchTrain_data() {
        QTest::addColumn<QString>("method");
        QTest::newRow("latmix-lu") << "latmix-lu";
        QTest::newRow("spinquant") << "spinquant";
    }
    void benchTrain() {
        QFETCH(QString, method);
        const Result r = run({"bench", "train", "--model", m_model, "--method", method, "--batch", "2", "--seqlen", "16",
                              "--repeat", "1", "--tf32"});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QVERIFY2(r.out.contains("method " + method) && !r.out.contains("TF32"), qPrintable(r.out)); // --tf32: CUDA only
        QMap<QString, double> part;
        const QRegularExpression row("^(\\S.*\\S) +([0-9]+\\.[0-9]{4}) +[-0-9.]+%$", QRegularExpression::MultilineOption);
        for (auto it = row.globalMatch(r.out); it.hasNext();) {
            const auto m = it.next();
            part[m.captured(1)] = m.captured(2).toDouble();
        }
        QCOMPARE(part.size(), 8);
        const double rounding = 0.00005;
        QVERIFY2(part.value("untimed rest (batch, transforms)", -1) >= -7 * rounding, qPrintable(r.out));
        double sum = 0;
        for (auto it = part.cbegin(); it != part.cend(); ++it)
            if (it.key() != "step") sum += it.value();
        QVERIFY2(part["step"] > 0 && std::abs(sum - part["step"]) <= 8 * rounding + 1e-9,
                 qPrintable(QString("parts %1 vs step %2\n%3").arg(sum).arg(part["step"]).arg(r.out)));
        QVERIFY2(r.out.contains(QRegularExpression("minor page faults per step \\d+")), qPrintable(r.out));
    }
    void benchTrainRefusesFixedMethods() {
        const Result r = run({"bench", "train", "--model", m_model, "--method", "quarot"});
        QCOMPARE(r.exitCode, 1);
        QVERIFY2(r.err.contains("not quarot"), qPrintable(r.err));
    }

    void zeroShotAfterQuantize() {
        if (!QFile::exists(latmix::test::dataDir() + "/zeroshot/arc_easy/ARC-Easy-Test.jsonl"))
            LATMIX_DATA_SKIP("zero-shot data not found (LATMIX_DATA_DIR)");
        const QString out = m_tmp.filePath("run-zeroshot");
        QStringList a = quantizeArgs(out, "rtn", 1);
        a << "--eval-tasks" << "arc_easy,lambada_openai" << "--eval-limit" << "6";
        const Result r = run(a);
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QVERIFY2(r.out.contains("zero-shot") && r.out.contains("average"), qPrintable(r.out));
        const QJsonObject z = readJson(out + "/latmix.json")["zeroshot"].toObject();
        QCOMPARE(z["model"].toString(), QString("w4a4"));
        const QJsonObject tasks = z["tasks"].toObject();
        QCOMPARE(tasks["arc_easy"].toObject()["n"].toInt(), 6);
        QCOMPARE(tasks["lambada_openai"].toObject()["n"].toInt(), 6);
        const Result e = run({"eval", "--model", out + "/model", "--tasks", "arc_easy,lambada_openai", "--limit", "6",
                              "--device", "cpu", "--json", out + "/zeroshot.json"});
        QVERIFY2(e.exitCode == 0, qPrintable(e.err));
        // exact: the same scoring code on the same stored model, same machine and thread count
        const QJsonObject again = readJson(out + "/zeroshot.json")["zeroshot"].toObject()["tasks"].toObject();
        for (const char* metric : {"acc", "acc_norm"})
            QCOMPARE(again["arc_easy"].toObject()[metric].toDouble(), tasks["arc_easy"].toObject()[metric].toDouble());
        QCOMPARE(again["lambada_openai"].toObject()["perplexity"].toDouble(),
                 tasks["lambada_openai"].toObject()["perplexity"].toDouble());
        QVERIFY(tasks["lambada_openai"].toObject()["perplexity"].toDouble() > 1);
    }

    // --weight-decay reaches AdamW (tst_adamw checks the update itself): recorded, and a strong
    // decay trains other transforms than none.
    void weightDecayReachesTraining() {
        const QString plain = m_tmp.filePath("wd-0"), decayed = m_tmp.filePath("wd-05");
        QVERIFY(run(quantizeArgs(plain, "latmix-lu", 3)).exitCode == 0);
        const Result r = run(quantizeArgs(decayed, "latmix-lu", 3) << "--weight-decay" << "0.5");
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        const QJsonObject a = readJson(plain + "/latmix.json")["training"].toObject();
        const QJsonObject b = readJson(decayed + "/latmix.json")["training"].toObject();
        QCOMPARE(a["weight_decay"].toDouble(), 0.0);
        QCOMPARE(b["weight_decay"].toDouble(), 0.5);
        QVERIFY(a["final_objective"].toDouble() != b["final_objective"].toDouble());
        QCOMPARE(a["first_objective"].toDouble(), b["first_objective"].toDouble()); // the same start
        QVERIFY(run(quantizeArgs(m_tmp.filePath("wd-bad"), "latmix-lu", 3) << "--weight-decay" << "-1").exitCode != 0);
        // --loss ce (tst_distillation checks its value and gradient): recorded, and its first
        // value is the student's cross-entropy on the text, far above the KL to the teacher.
        const QString ce = m_tmp.filePath("loss-ce");
        const Result c = run(quantizeArgs(ce, "spinquant", 2) << "--loss" << "ce");
        QVERIFY2(c.exitCode == 0, qPrintable(c.err));
        const QJsonObject t = readJson(ce + "/latmix.json")["training"].toObject();
        QCOMPARE(t["loss"].toString(), QString("ce"));
        QCOMPARE(a["loss"].toString(), QString("kl"));
        QVERIFY2(t["first_objective"].toDouble() > 1 && a["first_objective"].toDouble() < 1,
                 qPrintable(QString("CE %1, KL %2").arg(t["first_objective"].toDouble()).arg(a["first_objective"].toDouble())));
        // --loss block-mse (value and gradient: tst_distillation): recorded, trains, and its
        // value is another number than the KL of the same start.
        const QString mse = m_tmp.filePath("loss-block-mse");
        const Result m = run(quantizeArgs(mse, "latmix-lu", 3) << "--loss" << "block-mse");
        QVERIFY2(m.exitCode == 0, qPrintable(m.err));
        const QJsonObject tm = readJson(mse + "/latmix.json")["training"].toObject();
        QCOMPARE(tm["loss"].toString(), QString("block-mse"));
        QVERIFY(std::isfinite(tm["first_objective"].toDouble()) && tm["first_objective"].toDouble() > 0);
        QVERIFY(tm["first_objective"].toDouble() != a["first_objective"].toDouble());
    }

    // --folded-eval-every (paper Table 2): the folded FP model's perplexity before training,
    // after step 1, every k steps and the last, in latmix.json and train.h5. The last one is the
    // run's own folded FP perplexity (same transforms, same windows, folded by the run's float64
    // path instead of the training's float32 one). The run starts from block-Hadamard transforms
    // without noise, so the start is the FP model's perplexity up to float32 rounding. Both within
    // FoldedStudent.h's bound, 2e-4 L on |log(ratio)|: L from the FP model for the start, from the
    // trained student rebuilt from transforms.h5 for the last.
    void foldedPerplexityTracked() {
        const QString raw = latmix::test::dataDir() + "/wikitext-2/wiki.test.raw";
        if (!QFile::exists(raw)) LATMIX_DATA_SKIP("WikiText-2 test split not found (LATMIX_DATA_DIR)");
        const QString out = m_tmp.filePath("folded-track");
        const int evalSeqLen = 32, evalWindows = 2;
        const Result r = run(quantizeArgs(out, "latmix-lu", 4) << "--init" << "block-hadamard" << "--eval-seqlen"
                                                               << QString::number(evalSeqLen) << "--eval-windows"
                                                               << QString::number(evalWindows) << "--folded-eval-every" << "2");
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        const QJsonObject j = readJson(out + "/latmix.json");
        const QJsonArray f = j["training"].toObject()["folded_fp_perplexity"].toArray();
        QCOMPARE(f.size(), 4);
        const int steps[] = {0, 1, 2, 4};
        for (int i = 0; i < 4; ++i) QCOMPARE(f[i].toArray()[0].toInt(), steps[i]);
        const QJsonObject p = j["perplexity"].toObject();
        const double last = f[3].toArray()[1].toDouble(), start = f[0].toArray()[1].toDouble();

        using namespace latmix;
        const auto base = model::Checkpoint::load(m_model.toStdString());
        const auto ids = eval::tokenizeForEvaluation(*tokenizer::Tokenizer::loadFromDir(m_model.toStdString()),
                                                     eval::wikiText2TestText(raw.toStdString()));
        const double fpLargest = test::largestLogit(model::LlamaModel(base), ids, evalSeqLen, evalWindows);
        const double studentLargest = test::largestLogit(test::foldedStudent(base, (out + "/transforms.h5").toStdString()),
                                                         ids, evalSeqLen, evalWindows);
        QVERIFY2(std::abs(std::log(start / p["fp"].toDouble())) <= test::foldedLogPerplexityBound(fpLargest),
                 qPrintable(QString("start %1, FP %2, largest logit %3").arg(start, 0, 'g', 10).arg(p["fp"].toDouble(), 0, 'g', 10).arg(fpLargest)));
        QVERIFY2(std::abs(std::log(last / p["folded_fp"].toDouble())) <= test::foldedLogPerplexityBound(studentLargest),
                 qPrintable(QString("tracked %1, run's folded FP %2, largest logit %3")
                               .arg(last, 0, 'g', 10).arg(p["folded_fp"].toDouble(), 0, 'g', 10).arg(studentLargest)));
        QVERIFY(last != start); // the transforms trained: the tracked points are not all the start's
        const auto series = latmix::train::readDistillSeries((out + "/train.h5").toStdString());
        QCOMPARE(int(series.size()), 4);
        QVERIFY(std::isnan(series[2].foldedPerplexity)); // step 3: not a tracked step
        QCOMPARE(series[3].foldedPerplexity, last);
        QCOMPARE(latmix::train::readFoldedPerplexityStart((out + "/train.h5").toStdString()), start);
    }

    // --granularity block keeps the learned T1 and every T2 block-diagonal with the MX block
    // (paper Table 1): after training, nothing off the 32×32 blocks of A1 (128 channels: four
    // blocks); the full run moves off them. (A2 of the demo model is one 32×32 block.)
    void blockGranularity() {
        const QString blk = m_tmp.filePath("gran-block"), full = m_tmp.filePath("gran-full");
        const Result b = run(quantizeArgs(blk, "latmix-lu", 3) << "--granularity" << "block");
        QVERIFY2(b.exitCode == 0, qPrintable(b.err));
        QVERIFY(run(quantizeArgs(full, "latmix-lu", 3)).exitCode == 0);
        QCOMPARE(readJson(blk + "/latmix.json")["transforms"].toObject()["granularity"].toString(), QString("block"));
        QCOMPARE(readJson(full + "/latmix.json")["transforms"].toObject()["granularity"].toString(), QString("full"));
        auto offBlock = [](const QString& run, const std::string& name) {
            const auto f = latmix::io::readTensorFile((run + "/transforms.h5").toStdString());
            const auto a = f.tensors.at(name);
            const auto blockOf = at::arange(a.size(0), at::kLong).div(32, "floor");
            return a.masked_select(blockOf.unsqueeze(1) != blockOf.unsqueeze(0)).abs().max().item<double>();
        };
        QCOMPARE(offBlock(blk, "T1/A"), 0.0);
        QVERIFY(offBlock(full, "T1/A") > 0);
        QCOMPARE(latmix::io::readTensorFile((blk + "/transforms.h5").toStdString()).attributes.at("granularity"), std::string("block"));
    }

    // Ablation options replace the method's transforms place by place. latmix-lu with fixed
    // block-Hadamard T1 and T2 learns nothing and is exactly mr-gptq (same seeds, same GPTQ);
    // --t3 none drops the online Hadamard from the run and from the run model's config.
    void ablationOverridesTransforms() {
        const QString mr = m_tmp.filePath("abl-mr"), fixed = m_tmp.filePath("abl-fixed"), noT3 = m_tmp.filePath("abl-not3");
        QVERIFY(run(quantizeArgs(mr, "mr-gptq", 2)).exitCode == 0);
        const Result b = run(quantizeArgs(fixed, "latmix-lu", 2) << "--t1" << "block-hadamard" << "--t2" << "block-hadamard");
        QVERIFY2(b.exitCode == 0, qPrintable(b.err));
        const QJsonObject ja = readJson(mr + "/latmix.json"), jb = readJson(fixed + "/latmix.json");
        QVERIFY(!QFile::exists(fixed + "/train.h5"));
        QVERIFY(jb["method_description"].toString().contains("ablation: T1 block-hadamard, T2 block-hadamard"));
        QCOMPARE(jb["transforms"].toObject()["t1"].toString(), QString("block-hadamard"));
        const QString differ = latmix::test::runsDiffer(ja, jb); // neither trained: no final KL on either side
        QVERIFY2(differ.isEmpty(), qPrintable(differ));
        const Result c = run(quantizeArgs(noT3, "mr-gptq", 2) << "--t3" << "none");
        QVERIFY2(c.exitCode == 0, qPrintable(c.err));
        QCOMPARE(readJson(noT3 + "/latmix.json")["transforms"].toObject()["t3_block"].toInt(), 0);
        QCOMPARE(readJson(mr + "/latmix.json")["transforms"].toObject()["t3_block"].toInt(), 32);
        QVERIFY(readJson(noT3 + "/model/config.json")["latmix"].toObject()["t3"].isNull()); // no online Hadamard
        QCOMPARE(readJson(mr + "/model/config.json")["latmix"].toObject()["t3"].toObject()["block"].toInt(), 32);
    }

    // A finished run resumed with more steps continues from its saved state.
    void resumesTraining() {
        const QString out = m_tmp.filePath("run-resume");
        QVERIFY(run(quantizeArgs(out, "latmix-lu", 2)).exitCode == 0);
        const Result r = run(quantizeArgs(out, "latmix-lu", 4) << "--resume");
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QCOMPARE(readJson(out + "/latmix.json")["training"].toObject()["resumed_from_step"].toInt(), 2);
        // The run folder alone: every option from latmix.json's "options", --steps replacing its.
        const QJsonObject before = readJson(out + "/latmix.json")["options"].toObject();
        const Result again = run({"quantize", "--resume", out, "--steps", "6"});
        QVERIFY2(again.exitCode == 0, qPrintable(again.err));
        const QJsonObject j = readJson(out + "/latmix.json");
        QCOMPARE(j["training"].toObject()["resumed_from_step"].toInt(), 4);
        QJsonObject expected = before;
        expected["steps"] = 6;
        QCOMPARE(j["options"].toObject(), expected);
        QCOMPARE(j["command"].toString(), QString("latmix quantize --resume %1 --steps 6").arg(out));
        // A record written before runs kept their options: the way out is named.
        QJsonObject old = j;
        old.remove("options");
        QFile f(out + "/latmix.json");
        QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
        f.write(QJsonDocument(old).toJson());
        f.close();
        const Result refused = run({"quantize", "--resume", out});
        QVERIFY(refused.exitCode != 0);
        QVERIFY2(refused.err.contains("holds no options to resume with") && refused.err.contains("--model, --method"),
                 qPrintable(refused.err));
    }

    // `--devices` with --dry-run: the plan (the demo model's 4 layers, 2 per device; the tables
    // are small beside a layer) and each device's training peak, nothing run or written.
    void devicesPlan() {
        const QString out = m_tmp.filePath("devices-plan");
        QStringList a = quantizeArgs(out, "latmix-lu", 2);
        a << "--devices" << "cuda:0,cuda:1" << "--dry-run";
        const Result r = run(a);
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QVERIFY2(r.out.contains(QRegularExpression("cuda:0 +0\\.\\.1 \\(2\\) +embedding ")), qPrintable(r.out));
        QVERIFY2(r.out.contains(QRegularExpression("cuda:1 +2\\.\\.3 \\(2\\) +lm_head ")), qPrintable(r.out));
        QVERIFY(!QFileInfo::exists(out));
    }

    // --dry-run says which estimate a run is checked against: the host's for a CPU run; for a
    // GPU run the GPU's table with its verdict, and the host table (a CPU run's estimate) marked
    // as not checked, so that a host figure above this machine's memory is not read as a refusal.
    // The host table is the one checked for a CPU run only; a GPU run's is its GPU's (one GPU, no
    // --offload), named with the device's index, or none.
    void dryRunNamesTheCheckedMemory_data() {
        QTest::addColumn<QString>("device");
        QTest::addColumn<QStringList>("extra");
        QTest::addColumn<QString>("gpuTable"); // the GPU table's device, empty: none
        QTest::newRow("cpu") << "cpu" << QStringList{} << "";
        QTest::newRow("cuda, --gpu-memory 80") << "cuda" << QStringList{"--gpu-memory", "80"} << "cuda:0";
        QTest::newRow("cuda:1, --gpu-memory 80") << "cuda:1" << QStringList{"--gpu-memory", "80"} << "cuda:1";
        QTest::newRow("cuda, --offload") << "cuda" << QStringList{"--offload"} << "";
        // auto as this machine resolves it: the GPU's table where it has one
        QTest::newRow("auto, --gpu-memory 80") << "auto" << QStringList{"--gpu-memory", "80"}
                                               << (latmix::model::deviceFromName("auto").is_cuda() ? "cuda:0" : "");
    }
    void dryRunNamesTheCheckedMemory() {
        QFETCH(QString, device);
        QFETCH(QStringList, extra);
        QFETCH(QString, gpuTable);
        const QString out = m_tmp.filePath("dry-" + QString(QTest::currentDataTag()).replace(' ', '_'));
        QStringList a = quantizeArgs(out, "latmix-lu", 2);
        a[a.indexOf("--device") + 1] = device;
        a << "--dry-run" << extra;
        const Result r = run(a);
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        const bool cpuRun = device == "cpu" || (device == "auto" && gpuTable.isEmpty());
        const QStringList host = r.out.split('\n').filter(QRegularExpression("^host memory"));
        QCOMPARE(host.size(), 1);
        QCOMPARE(host.front(), cpuRun ? QString("host memory")
                                      : QString("host memory (of the same run with --device cpu; not checked for a GPU run)"));
        QCOMPARE(r.out.contains("\nGPU memory ("), !gpuTable.isEmpty());
        if (!gpuTable.isEmpty()) QVERIFY2(r.out.contains("\nGPU memory (" + gpuTable + ", --gpu-memory)\n"), qPrintable(r.out));
        QCOMPARE(r.out.endsWith("\nfits\n"), !gpuTable.isEmpty()); // the demo model beside 80 GiB
        QVERIFY(!QFileInfo::exists(out));
    }

    // A run with the layers split over two "devices" that are both the CPU: the placement code
    // runs (weights placed per layer, per-device options, T1 copies whose gradients are summed)
    // and must train exactly what the plain run trains; latmix.json records the devices. (The
    // transfers between different devices need a GPU: see README.)
    void devicesRunMatchesPlainRun() {
        const QString plain = m_tmp.filePath("devices-plain"), split = m_tmp.filePath("devices-split");
        const Result a = run(quantizeArgs(plain, "latmix-lu", 3));
        QVERIFY2(a.exitCode == 0, qPrintable(a.err));
        const Result b = run(quantizeArgs(split, "latmix-lu", 3) << "--devices" << "cpu,cpu");
        QVERIFY2(b.exitCode == 0, qPrintable(b.err));
        const QJsonObject ja = readJson(plain + "/latmix.json"), jb = readJson(split + "/latmix.json");
        QCOMPARE(jb["devices"].toArray(), QJsonArray({"cpu", "cpu"}));
        const QString differ = latmix::test::runsDiffer(ja, jb);
        QVERIFY2(differ.isEmpty(), qPrintable(differ));
    }

    void badArguments_data() {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("message");
        QTest::newRow("unknown method") << QStringList{"--method", "awq"} << "latmix-lu";
        QTest::newRow("unknown format") << QStringList{"--format", "mxfp5"} << "mxfp4";
        QTest::newRow("missing model") << QStringList{"--model", "/nonexistent/model"} << "/nonexistent/model";
        QTest::newRow("tracked layer out of range") << QStringList{"--track-layer", "9"} << "tracked layer 9 is not a layer";
        // No machine has 64 GPUs: a CPU-only libtorch and a CUDA one both refuse, naming what exists.
        QTest::newRow("absent CUDA device") << QStringList{"--device", "cuda:63"}
                                            << "device 'cuda:63' is not available: ";
        QTest::newRow("malformed device") << QStringList{"--device", "cuda:x"} << "unknown device 'cuda:x'";
        QTest::newRow("--devices more than layers") << QStringList{"--devices", "a,b,c,d,e"} << "5 devices for 4 decoder layers";
        QTest::newRow("--devices absent") << QStringList{"--devices", "cpu,cuda:63"} << "device 'cuda:63' is not available";
        QTest::newRow("--devices empty entry") << QStringList{"--devices", "cpu,"} << "empty entry";
        QTest::newRow("unknown --t1 kind") << QStringList{"--t1", "learned-magic"} << "unknown --t1 transform kind 'learned-magic'; use one of none,";
        QTest::newRow("unknown --init") << QStringList{"--init", "zeros"} << "unknown --init initialisation 'zeros'";
        QTest::newRow("unknown --t3") << QStringList{"--t3", "hadamard"} << "unknown --t3 'hadamard'";
        QTest::newRow("unknown --loss") << QStringList{"--loss", "mse"} << "unknown --loss 'mse'; use kl, ce or block-mse";
        QTest::newRow("--folded-eval-every without evaluation") << QStringList{"--folded-eval-every", "2"}
                                                                << "needs the evaluation windows; use --eval-seqlen 256";
        QTest::newRow("--eval-windows without --eval-seqlen")
            << QStringList{"--eval-windows", "4"}
            << "an evaluation of 4 windows was asked for without their length: no perplexity would be measured; use "
               "--eval-seqlen 2048";
        QTest::newRow("unknown --granularity") << QStringList{"--granularity", "row"} << "unknown --granularity 'row'; use one of full, block";
        QTest::newRow("--granularity block, nothing learned") << QStringList{"--granularity", "block", "--method", "quarot"}
                                                              << "--granularity block applies to learned T1/T2";
        QTest::newRow("--granularity block, full init") << QStringList{"--granularity", "block", "--init", "hadamard"}
                                                        << "--init hadamard is a full matrix";
        QTest::newRow("unknown zero-shot task") << QStringList{"--eval-tasks", "arc_easy,mmlu"} << "unknown zero-shot task 'mmlu'";
        QTest::newRow("--devices, nothing trained") << QStringList{"--devices", "cpu,cpu", "--method", "mr-gptq"}
                                                    << "trains nothing";
    }
    void badArguments() {
        QFETCH(QStringList, args);
        QFETCH(QString, message);
        const QString out = m_tmp.filePath(QString("bad-") + QTest::currentDataTag());
        QStringList a = quantizeArgs(out, "latmix-lu", 2);
        for (int i = 0; i + 1 < args.size(); i += 2) {
            const int at = a.indexOf(args[i]);
            if (at >= 0)
                a[at + 1] = args[i + 1];
            else
                a << args[i] << args[i + 1];
        }
        const Result r = run(a);
        QVERIFY(r.exitCode != 0);
        QVERIFY2(r.err.contains(message), qPrintable(r.err));
        QVERIFY2(r.err.trimmed().count('\n') == 0, qPrintable("not one line: " + r.err)); // no backtrace
        QVERIFY2(!QFileInfo::exists(out), "a refused run wrote its folder"); // nothing written
        if (QTest::currentDataTag() == QByteArray("absent CUDA device"))
            QVERIFY2(r.err.contains("(available: cpu"), qPrintable(r.err));
    }

    // One NaN weight in the model: every command that computes with it stops before writing
    // anything, naming the tensor, its first bad index and value and what to do, never with
    // "perplexity nan", an internal class name or a divergence diagnosis.
    void nonFiniteWeight_data() {
        QTest::addColumn<QString>("command");
        QTest::newRow("eval") << "eval";
        QTest::newRow("eval, zero-shot") << "eval-tasks";
        QTest::newRow("quantize rtn") << "rtn";
        QTest::newRow("quantize gptq") << "gptq";
        QTest::newRow("quantize latmix-lu") << "latmix-lu";
        QTest::newRow("capture") << "capture";
        QTest::newRow("analyze") << "analyze";
    }
    void nonFiniteWeight() {
        QFETCH(QString, command);
        const QString model = m_tmp.filePath("nan-model");
        if (!QFileInfo::exists(model + "/model.safetensors"))
            QVERIFY(latmix::test::writePoisonedModel(m_model, model, "model.layers.2.self_attn.v_proj.weight", 3 * 128 + 9,
                                                     std::numeric_limits<double>::quiet_NaN()));
        const QString out = m_tmp.filePath("nan-" + command);
        QStringList args;
        if (command == "eval")
            args = {"eval", "--model", model, "--dataset", m_calib, "--seqlen", "32", "--device", "cpu"};
        else if (command == "eval-tasks")
            args = {"eval", "--model", model, "--tasks", "arc_easy", "--limit", "2", "--device", "cpu"};
        else if (command == "capture")
            args = {"capture", "--model", model, "--calib", m_calib, "--points", "layers\\.1\\.mlp\\.down_proj", "--samples", "1",
                    "--seqlen", "32", "--out", out};
        else if (command == "analyze")
            args = {"analyze", "--model", model, "--calib", m_calib, "--samples", "1", "--seqlen", "32", "--points",
                    "layers\\.0\\.mlp\\.down_proj", "--transforms", "none", "--out", out};
        else {
            args = quantizeArgs(out, command, 2);
            args[args.indexOf("--model") + 1] = model;
        }
        if (command == "eval-tasks" && !QFileInfo::exists(latmix::test::dataDir() + "/zeroshot"))
            LATMIX_DATA_SKIP("no zero-shot data under LATMIX_DATA_DIR");
        const Result r = run(args);
        QVERIFY(r.exitCode != 0);
        const QString last = r.err.trimmed().split('\n').last();
        for (const QString& p : {QString("tensor 'model.layers.2.self_attn.v_proj.weight' in model.safetensors holds NaN/Inf"),
                                 QString("first at [3, 9] (nan), 1 of"), QString("download or export it again")})
            QVERIFY2(last.contains(p), qPrintable(r.err + "\n  lacks: " + p));
        for (const char* no : {"perplexity", "diverged", "Accumulator"}) QVERIFY2(!r.err.contains(no), qPrintable(r.err));
        QVERIFY2(!r.out.contains("perplexity"), qPrintable(r.out));
        QVERIFY2(!QFileInfo::exists(out), "a refused command wrote its output");
    }

    // Finite weights whose forward overflows (a final-norm weight of 3e38): eval refuses to print
    // a NaN perplexity and says what to do, distinct from the damaged-checkpoint message.
    void evalOverflow() {
        const QString model = m_tmp.filePath("overflow-model");
        QVERIFY(latmix::test::writePoisonedModel(m_model, model, "model.norm.weight", 0, 3e38));
        const Result r = run({"eval", "--model", model, "--dataset", m_calib, "--seqlen", "32", "--device", "cpu"});
        QVERIFY(r.exitCode != 0);
        const QString last = r.err.trimmed().split('\n').last();
        QVERIFY2(last.contains("is not finite") && last.contains("although its weights are") && last.contains("--dtype float32"),
                 qPrintable(r.err));
        QVERIFY2(!r.out.contains("perplexity"), qPrintable(r.out));
    }

    // Finite weights whose calibration forward overflows (an input-norm weight of 3e38 in layer 1):
    // GPTQ names the calibration windows and the point where the Hessian's activations turn
    // NaN/Inf, and writes no run. (RTN runs no calibration forward unless --rtn-error-windows.)
    void quantizeOverflow() {
        const QString model = m_tmp.filePath("overflow-layer1");
        QVERIFY(latmix::test::writePoisonedModel(m_model, model, "model.layers.1.input_layernorm.weight", 0, 3e38));
        const QString out = m_tmp.filePath("overflow-gptq");
        QStringList args = quantizeArgs(out, "gptq", 2);
        args[args.indexOf("--model") + 1] = model;
        const Result r = run(args);
        QVERIFY(r.exitCode != 0);
        const QString last = r.err.trimmed().split('\n').last();
        for (const QString& p : {QString("calibration windows 0.."), QString(" at layers.1."), QString("hold NaN/Inf"),
                                 QString("the folded model overflows there")})
            QVERIFY2(last.contains(p), qPrintable(r.err + "\n  lacks: " + p));
        for (const char* no : {"diverged", "Accumulator", "damaged"}) QVERIFY2(!r.err.contains(no), qPrintable(r.err));
        QVERIFY2(!QFileInfo::exists(out + "/latmix.json"), "a failed run looks finished");
    }

    // Issue 17.5: a run folder that another process is writing is refused, naming that process,
    // before anything is written; once the holder is killed (kill -9: it cannot clean up) the
    // next run takes the stale lock over and says so.
    void heldRunFolder() {
        const QString out = m_tmp.filePath("held-rtn");
        const QString lock = m_tmp.filePath(".held-rtn.lock");
        {
            QFile f(lock);
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write("pid 4242\nhost gpu-node-7\nstarted 2026-11-25T08:00:00Z\ncommand latmix quantize --out held-rtn\n");
        }
        QProcess holder; // holds the lock as a latmix process does (flock(2) on the file)
        holder.start("flock", {"--exclusive", "--close", lock, "sh", "-c", "echo held; read x"});
        QVERIFY(holder.waitForStarted() && holder.waitForReadyRead(10000));
        const Result r = run(quantizeArgs(out, "rtn", 2));
        QVERIFY(r.exitCode != 0);
        const QString last = r.err.trimmed().split('\n').last();
        QVERIFY2(last.contains("run folder '" + out + "' is being written by another latmix process: pid 4242 on host "
                               "gpu-node-7 (started 2026-11-25T08:00:00Z, `latmix quantize --out held-rtn`)"),
                 qPrintable(r.err));
        QVERIFY2(!QFileInfo::exists(out), "the refused run wrote its folder");
        holder.kill();
        QVERIFY(holder.waitForFinished());
        holder.close();
        const Result again = run(quantizeArgs(out, "rtn", 2));
        QVERIFY2(again.exitCode == 0, qPrintable(again.err));
        QVERIFY2(again.out.contains("note         took over the lock of run folder '" + out + "' left by pid 4242 on host "
                                    "gpu-node-7"),
                 qPrintable(again.out));
        QVERIFY(QFileInfo::exists(out + "/latmix.json"));
        QVERIFY2(!QFileInfo::exists(lock), "a finished run left its lock file");
    }
};

QTEST_GUILESS_MAIN(TestCliQuantize)
#include "tst_cli_quantize.moc"
