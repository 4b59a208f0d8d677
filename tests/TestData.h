#pragma once
// Where the tests find the real models and text (never committed here): core's util::dataDir()
// (LATMIX_DATA_DIR, which CTest sets; default ../shared/data beside the checkout). A test that
// needs a missing file skips with the path it looked at, or fails when LATMIX_REQUIRE_DATA=1
// (CI sets it), so that a renamed data file cannot turn ~60 rows into silent skips.
#include "import/DemoModel.h"
#include "import/RandomModel.h"
#include "model/ModelConfig.h"
#include "util/DataPath.h"

#include <QString>
#include <QTemporaryDir>
#include <QTest>
#include <QtGlobal>

namespace latmix::test {

inline QString dataDir() { return QString::fromStdString(util::dataDir()); }

// The built-in demo model (import/DemoModel: 4 layers, hidden 128, GQA, outlier channels),
// written once per test process: checks that need a model but not a real one run on it
// instead of skipping where ../shared/data is absent.
inline QString demoModelDir() {
    static QTemporaryDir dir;
    static const QString path = [] {
        const QString p = dir.path() + QStringLiteral("/demo");
        importing::writeDemoModel(p.toStdString());
        return p;
    }();
    return path;
}

// A small random Qwen3-MoE checkpoint (3 layers, hidden 64, 8 experts of width 32, top 2,
// float32) with the demo model's tokenizer, written once per test process: the views' checks of
// mixture-of-experts models (experts' points, the expert load).
inline QString smallMoeModelDir() {
    static QTemporaryDir dir;
    static const QString path = [] {
        const QString p = dir.path() + QStringLiteral("/moe");
        importing::RandomModelOptions r;
        r.dtype = "float32";
        r.tokenizerDir = demoModelDir().toStdString();
        r.seed = 4;
        const auto c = model::ModelConfig::fromJsonText(R"({"architectures": ["Qwen3MoeForCausalLM"],
            "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 300, "max_position_embeddings": 256,
            "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "norm_topk_prob": true})");
        importing::writeRandomModel(c, p.toStdString(), r);
        return p;
    }();
    return path;
}

// A model folder by name: "demo" is demoModelDir(), any other name LATMIX_DATA_DIR/models/<name>.
inline QString modelFolder(const QString& name) {
    return name == QLatin1String("demo") ? demoModelDir() : dataDir() + QStringLiteral("/models/") + name;
}

inline bool dataRequired() { return qEnvironmentVariable("LATMIX_REQUIRE_DATA") == QLatin1String("1"); }

} // namespace latmix::test

// QSKIP for missing data, QFAIL under LATMIX_REQUIRE_DATA=1.
#define LATMIX_DATA_SKIP(message)                                                                            \
    do {                                                                                                     \
        if (latmix::test::dataRequired()) QFAIL(message);                                                    \
        QSKIP(message);                                                                                      \
    } while (false)

// The same for anything else a test needs that this machine or build may lack (libgloo-dev at
// configure time, libopenblas0-openmp, ctest's environment): the message says what is missing and
// how to get it. Under LATMIX_REQUIRE_DATA=1 (CI) the row fails. The only skips that stay skips
// there are "no data" when it is not required and "no GPU" (DeviceRows.h).
#define LATMIX_PREREQUISITE_SKIP(message) LATMIX_DATA_SKIP(message)
