// The option table of a quantize run (run/quantize/OptionTable.h): every option set to a value
// other than its default reaches latmix.json's "options" and reads back to the same value (so
// its reader and writer touch the same field, and --resume RUN_DIR continues with what the run
// was given); the type and range checks name the key; the CLI's text forms; a refusal said with
// the CLI's flag and with the workbench's control; the help of --method and --format lists every
// choice.
#include "run/quantize/Method.h"
#include "run/quantize/OptionTable.h"
#include "util/OutOfMemory.h"

#include <nlohmann/json.hpp>

// Qt after ATen: Qt's `slots` macro breaks ATen headers.
#include "TestSupport.h"

#include <QtTest>

#include <cctype>
#include <map>
#include <set>
#include <string>

using namespace latmix;
using json = nlohmann::ordered_json;

namespace {

// A valid value other than the default, by key (text options) or by type.
json otherValue(const run::OptionField& f, const json& current) {
    static const std::map<std::string, json> text = {
        {"method", "mr-gptq"},     {"format", "nvfp4"},   {"scale_mode", "even"}, {"t1", "hadamard"},
        {"t2", "none"},            {"t3", "none"},        {"init", "identity"},   {"granularity", "block"},
        {"loss", "ce"},            {"calib", "/c.txt"},   {"device", "cuda:1"},   {"eval_tasks", "piqa"},
        {"precision", "bf16"},     {"keep", "down_proj"}, {"scheme", "self_attn = mxfp8"}};
    switch (f.type) {
    case run::OptionType::Text: return text.at(f.key);
    case run::OptionType::Integer: return std::string(f.key) == "block" ? json(16) : json(current.get<long long>() + 3);
    case run::OptionType::Number: return json(current.get<double>() < 0 ? 0.25 : current.get<double>() * 2 + 0.5);
    case run::OptionType::Flag:
    case run::OptionType::OnOff: return json(!current.get<bool>());
    case run::OptionType::OnOffAuto: return current.is_boolean() ? json(!current.get<bool>()) : json(false);
    case run::OptionType::List: return json::array({"cpu", "cuda:0"});
    }
    return {};
}

} // namespace

class TestOptions : public QObject {
    Q_OBJECT
private slots:
    void everyOptionIsRecordedAndReadBack_data() {
        QTest::addColumn<QString>("key");
        for (const auto& f : run::optionFields()) QTest::newRow(f.key) << QString(f.key);
    }
    void everyOptionIsRecordedAndReadBack() {
        QFETCH(QString, key);
        const std::string k = key.toStdString();
        const run::RunConfig defaults;
        const json value = otherValue(run::optionField(k), run::optionValue(defaults, k));
        run::RunConfig changed = defaults;
        run::setOption(changed, k, value);
        QCOMPARE(run::optionValue(changed, k).dump(), value.dump());
        const json recorded = run::configJson(changed);
        QVERIFY2(recorded.at(k) != run::configJson(defaults).at(k), recorded.dump().c_str());
        // Read back from the record's text onto the defaults: the same options, every one.
        const run::RunConfig back = run::configFromJson(json::parse(recorded.dump()));
        QCOMPARE(QString::fromStdString(run::configJson(back).dump()), QString::fromStdString(recorded.dump()));
        // And as the CLI types it.
        const auto& f = run::optionField(k);
        if (f.type != run::OptionType::Flag) {
            run::RunConfig typed = defaults;
            run::setOption(typed, k, run::optionFromText(f, run::optionText(f, value)));
            QCOMPARE(QString::fromStdString(run::optionValue(typed, k).dump()), QString::fromStdString(value.dump()));
        }
    }

    void keysAreUniqueAndNamed() {
        std::map<std::string, int> keys, flags, labels;
        for (const auto& f : run::optionFields()) {
            QVERIFY(std::string(f.key).size() > 0 && std::string(f.flag).rfind("--", 0) == 0 && std::string(f.label).size() > 0);
            QVERIFY2(++keys[f.key] == 1 && ++flags[f.flag] == 1 && ++labels[f.label] == 1, f.key);
        }
    }

    // The help of --method and --format names every method and format the run accepts (the
    // method list is written by hand in the table, the formats come from mx's).
    void helpNamesEveryChoice() {
        // The help's words: names are runs of letters, digits, '-' and '_' ("gptq" is not "mr-gptq").
        auto words = [](const char* help) {
            std::set<std::string> w;
            std::string word;
            for (const char* c = help;; ++c) {
                if (*c && (std::isalnum(static_cast<unsigned char>(*c)) || *c == '-' || *c == '_')) {
                    word += *c;
                    continue;
                }
                if (!word.empty()) w.insert(word);
                word.clear();
                if (!*c) return w;
            }
        };
        const auto methodWords = words(run::optionField("method").help), formatWords = words(run::optionField("format").help);
        for (const auto& m : run::methods()) QVERIFY2(methodWords.count(m.name), m.name.c_str());
        for (const auto& f : mx::allFormats()) QVERIFY2(formatWords.count(f.name), f.name);
    }

    void badValuesAreNamed_data() {
        QTest::addColumn<QString>("key");
        QTest::addColumn<QString>("value"); // JSON
        QTest::addColumn<QString>("message");
        QTest::newRow("text for an integer") << "steps" << "\"ten\"" << "option 'steps' must be an integer, not \"ten\"";
        QTest::newRow("number for an integer") << "batch" << "2.5" << "option 'batch' must be an integer";
        QTest::newRow("negative decay") << "weight_decay" << "-0.1" << "option 'weight_decay' must be 0 or more";
        QTest::newRow("number for a flag") << "skip_export_check" << "1" << "option 'skip_export_check' must be true or false";
        QTest::newRow("number for on/off/auto") << "t1_bias" << "1" << "option 't1_bias' must be true, false or \"auto\"";
        QTest::newRow("unknown t3") << "t3" << "\"hadamard\"" << "unknown --t3 'hadamard'";
        QTest::newRow("unknown format") << "format" << "\"mxfp5\"" << "mxfp4";
        QTest::newRow("unknown key") << "stepz" << "1" << "unknown option 'stepz'; the options are method, format";
    }
    void badValuesAreNamed() {
        QFETCH(QString, key);
        QFETCH(QString, value);
        QFETCH(QString, message);
        run::RunConfig c;
        const QString e = test::errorOf([&] { run::setOption(c, key.toStdString(), json::parse(value.toStdString()), "grid g.json"); });
        QVERIFY2(e.contains(message), qPrintable(e));
        QVERIFY2(key == "t3" || key == "format" || key == "stepz" || e.startsWith("grid g.json: "), qPrintable(e));
    }

    void recordOfAnotherVersionIsRefusedByKey() {
        const QString e = test::errorOf([] { run::configFromJson(json::parse(R"({"steps": 5, "future_option": 1})")); });
        QVERIFY2(e.contains("unknown option 'future_option'"), qPrintable(e));
    }

    void cliText_data() {
        QTest::addColumn<QString>("key");
        QTest::addColumn<QString>("text");
        QTest::addColumn<QString>("json");
        QTest::newRow("on") << "t1_bias" << "on" << "true";
        QTest::newRow("off") << "t2_bias" << "off" << "false";
        QTest::newRow("integer") << "steps" << "250" << "250";
        QTest::newRow("number") << "lr" << "2e-4" << "0.0002";
        QTest::newRow("list") << "devices" << "cuda:0,cuda:1" << "[\"cuda:0\",\"cuda:1\"]";
        QTest::newRow("text") << "loss" << "block-mse" << "\"block-mse\"";
    }
    void cliText() {
        QFETCH(QString, key);
        QFETCH(QString, text);
        QFETCH(QString, json);
        const auto& f = run::optionField(key.toStdString());
        QCOMPARE(QString::fromStdString(run::optionFromText(f, text.toStdString()).dump()), json);
        QVERIFY(test::errorOf([&] { run::optionFromText(f, "maybe"); }).contains(f.flag) || f.type == run::OptionType::Text ||
                f.type == run::OptionType::List);
    }

    // The same refusal in both faces: the CLI's flags, the workbench's controls.
    void refusalNamesTheFlagOrTheControl() {
        const run::RunRefused r("T1's bias cannot be exported",
                                {{"t1_bias", "off", "", "(deployable)"}, {"skip_export_check", "", "", "to run anyway"},
                                 {"calib_samples", "", "fewer", "(now 64)"}});
        QCOMPARE(QString(r.what()), QString("T1's bias cannot be exported; use --t1-bias off (deployable), "
                                            "--skip-export-check to run anyway, or fewer --calib-samples (now 64)"));
        QCOMPARE(QString::fromStdString(r.message(run::Face::Workbench)),
                 QString("T1's bias cannot be exported; use Learned T1 bias: off (deployable), Skip export check: on "
                         "to run anyway, or fewer Windows (now 64)"));
    }

    // A failure raised below run/ (here: out of host memory in a training step, as
    // train::distill guards it) carries its ways out as option keys: what() and the CLI name the
    // flags, the workbench its controls (JobRunner shows messageFor(…, Workbench)).
    void failureNamesTheFlagOrTheControl() {
        std::string cli, workbench, what;
        try {
            guardMemory("training step 3/10", {{"batch", "", "a smaller", ""}, {"seqlen", "", "a shorter", ""},
                                                {"offload", "", "", "(one layer at a time)"}},
                        "the run folder keeps the last finished step", [] { throw std::bad_alloc(); });
        } catch (const std::exception& e) {
            what = e.what();
            cli = run::messageFor(e, run::Face::Cli);
            workbench = run::messageFor(e, run::Face::Workbench);
        }
        QCOMPARE(QString::fromStdString(cli),
                 QString("out of host memory in training step 3/10; use a smaller --batch, a shorter --seqlen, or "
                         "--offload (one layer at a time); the run folder keeps the last finished step"));
        QCOMPARE(what, cli);
        QCOMPARE(QString::fromStdString(workbench),
                 QString("out of host memory in training step 3/10; use a smaller Batch, a shorter Window length, or "
                         "Offload layers: on (one layer at a time); the run folder keeps the last finished step"));
        // Any other error is its what() on both faces.
        const std::runtime_error plain("disk full");
        QCOMPARE(run::messageFor(plain, run::Face::Workbench), std::string("disk full"));
    }
};

QTEST_GUILESS_MAIN(TestOptions)
#include "tst_options.moc"
