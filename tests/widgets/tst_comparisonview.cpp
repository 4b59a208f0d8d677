// The transform comparison tab on the demo model (offscreen): the metrics table holds exactly
// what core's analysis computes on the same activations, sorts numerically, and the layer ×
// block heatmap holds core's per-block errors of every layer.
#include "model/Checkpoint.h"
#include "import/DemoModel.h"
#include "import/RandomModel.h"
#include "model/LlamaModel.h"
#include "train/TransformAnalysis.h"

#include <ATen/ATen.h>

#include "ComparisonView.h"
#include "MainWindow.h"
#include "ModelSummaryView.h"
#include "TestData.h"
#include "WidgetLookup.h"

#include <qcustomplot.h>

#include <QSettings>
#include <QSignalSpy>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <limits>

using namespace latmix;
using latmix::gui::ComparisonView;
using latmix::gui::MainWindow;

class TestComparisonView : public QObject {
    Q_OBJECT

    QTemporaryDir m_tmp;
    QString m_model;

    static int rowOf(QTableWidget* t, const QString& kind) {
        for (int r = 0; r < t->rowCount(); ++r)
            if (t->item(r, 0)->text() == kind) return r;
        return -1;
    }

    // The heat map's row labels: row -> layer number.
    static QMap<double, QString> layerLabels(const ComparisonView& v) {
        const auto t = test::child<QCustomPlot>(&v, "layerHeatmapPlot")->yAxis->ticker().dynamicCast<QCPAxisTickerText>();
        return t ? t->ticks() : QMap<double, QString>();
    }

private slots:
    void initTestCase() {
        QSettings(QStringLiteral("LATMiX"), QStringLiteral("Workbench")).clear();
        m_model = m_tmp.filePath("demo");
        importing::writeDemoModel(m_model.toStdString());
    }

    void tableEqualsCore_data() {
        QTest::addColumn<QString>("model");
        QTest::addColumn<QString>("point");
        QTest::addColumn<QString>("format");
        QTest::newRow("down_proj mxfp4") << "demo" << "layers.1.mlp.down_proj.input" << "mxfp4";
        QTest::newRow("qkv mxint4") << "demo" << "layers.0.self_attn.qkv.input" << "mxint4";
        // A mixture of experts: one expert's own down_proj input, the tokens routed to it.
        QTest::newRow("expert 6's down_proj mxfp4") << "moe" << "layers.2.mlp.experts.6.down_proj.input" << "mxfp4";
    }
    void tableEqualsCore() {
        QFETCH(QString, model);
        QFETCH(QString, point);
        QFETCH(QString, format);
        const QString dir = model == QLatin1String("moe") ? test::smallMoeModelDir() : m_model;
        MainWindow w;
        QVERIFY(w.openCheckpoint(dir, false));
        ComparisonView* v = w.comparisonView();
        QVERIFY(v->selectPoint(point));
        v->setFormat(format);
        v->setTransforms({"none", "hadamard", "block-hadamard", "learned-affine-lu"});
        v->setCalibration(4, 32, 10);
        QSignalSpy done(v, &ComparisonView::comparisonFinished);
        QVERIFY(v->compare());
        QVERIFY(done.wait(120000));
        QVERIFY2(done.first().at(0).toBool(), qPrintable(done.first().at(1).toString()));

        // The same analysis, run here directly on core.
        const auto ck = model::Checkpoint::load(dir.toStdString());
        const model::LlamaModel m(ck);
        QString re = point;
        re.replace(".", "\\.");
        const auto acts = train::captureActivationsInMemory(m, ComparisonView::calibrationIds(dir.toStdString()),
                                                            ("^" + re + "$").toStdString(), 4, 32, 0, 0, true);
        QCOMPARE(int(acts.size()), 1);
        QCOMPARE(QString::fromStdString(acts[0].first), point);
        const auto want = train::analyzeTransforms(acts, v->analysisOptions());
        QTableWidget* t = v->table();
        QCOMPARE(t->rowCount(), 4);
        for (const auto& e : want.entries) {
            QVERIFY2(e.error.empty(), e.error.c_str());
            const int r = rowOf(t, QString::fromStdString(e.kind));
            QVERIFY(r >= 0);
            auto cell = [&](int c) { return t->item(r, c)->data(Qt::UserRole).toDouble(); };
            QCOMPARE(cell(1), e.report.mse);
            QCOMPARE(cell(2), e.report.perBlockMax);
            QCOMPARE(cell(3), e.report.bound);
            QCOMPARE(cell(4), e.report.spectral.conditionNumber);
            QCOMPARE(cell(5), e.report.spectral.orthogonalityDeviation);
            QCOMPARE(cell(6), e.report.offBlockNorm);
            // The column left out is E(T) again: the mean of the per-block errors (SPEC §3), two
            // float64 sums of d terms apart (d ε64 relative).
            QVERIFY(std::abs(e.report.perBlockMean - e.report.mse) <=
                    double(e.report.dim) * std::numeric_limits<double>::epsilon() * e.report.mse);
        }
        // One per-block curve per transform, each core's per-block vector.
        QCOMPARE(test::child<QCustomPlot>(v, "perBlockPlot")->graphCount(), 4);
        for (const auto& e : want.entries) {
            QCPGraph* g = nullptr;
            for (int i = 0; i < test::child<QCustomPlot>(v, "perBlockPlot")->graphCount(); ++i)
                if (test::child<QCustomPlot>(v, "perBlockPlot")->graph(i)->name() == QString::fromStdString(e.kind)) g = test::child<QCustomPlot>(v, "perBlockPlot")->graph(i);
            QVERIFY2(g, e.kind.c_str());
            const auto pb = e.report.perBlock.to(at::kDouble).contiguous();
            QCOMPARE(g->data()->size(), int(pb.numel()));
            int k = 0;
            for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it, ++k)
                QCOMPARE(it->value, pb[k].item<double>());
        }
        // Sorting by E(T) orders the rows numerically.
        t->sortItems(1, Qt::AscendingOrder);
        for (int r = 1; r < t->rowCount(); ++r)
            QVERIFY(t->item(r - 1, 1)->data(Qt::UserRole).toDouble() <= t->item(r, 1)->data(Qt::UserRole).toDouble());
    }

    void heatmapAcrossLayers() {
        MainWindow w;
        QVERIFY(w.openCheckpoint(m_model, false));
        ComparisonView* v = w.comparisonView();
        QVERIFY(v->selectPoint("layers.2.mlp.down_proj.input"));
        v->setCalibration(4, 32, 10);
        // Empty, the map says how to fill it; filled, it does not.
        auto hintShown = [v] {
            QCustomPlot* p = test::child<QCustomPlot>(v, "layerHeatmapPlot");
            for (int i = 0; i < p->itemCount(); ++i)
                if (p->item(i)->objectName() == QLatin1String("heatmapHint")) return p->item(i)->visible();
            return false;
        };
        QVERIFY(hintShown());
        QSignalSpy done(v, &ComparisonView::comparisonFinished);
        QVERIFY(v->compareAcrossLayers("block-hadamard"));
        QVERIFY(done.wait(120000));
        QVERIFY(done.first().at(0).toBool());
        QVERIFY(!hintShown());
        QCOMPARE(test::child<latmix::gui::ModelSummaryView>(&w)->pointMetricName(), QString("E(T), block-hadamard"));
        QCOMPARE(v->heatmapPoints(), (QStringList{"layers.0.mlp.down_proj.input", "layers.1.mlp.down_proj.input",
                                                   "layers.2.mlp.down_proj.input", "layers.3.mlp.down_proj.input"}));
        const auto ck = model::Checkpoint::load(m_model.toStdString());
        const model::LlamaModel m(ck);
        const auto acts = train::captureActivationsInMemory(m, ComparisonView::calibrationIds(m_model.toStdString()),
                                                            "^layers\\.[0-9]+\\.mlp\\.down_proj\\.input$", 4, 32, 0);
        auto options = v->analysisOptions();
        options.kinds = {"block-hadamard"};
        options.sweepBlocks.clear();
        const auto want = train::analyzeTransforms(acts, options);
        const auto rows = v->heatmapRows();
        QCOMPARE(rows.size(), 4);
        for (int l = 0; l < 4; ++l) {
            // The model dock's point tree shows each layer's E(T) with block-hadamard.
            QCOMPARE(test::child<latmix::gui::ModelSummaryView>(&w)->pointMetricShown(QString("layers.%1.mlp.down_proj.input").arg(l)),
                     want.entries[size_t(l)].report.mse);
            const at::Tensor pb = want.entries[size_t(l)].report.perBlock;
            QCOMPARE(rows[l].size(), int(pb.numel())); // 384 / 32 = 12 blocks
            for (int b = 0; b < rows[l].size(); ++b) QCOMPARE(rows[l][b], pb[b].item<double>());
        }
        QCOMPARE(layerLabels(*v), (QMap<double, QString>{{0, "0"}, {1, "1"}, {2, "2"}, {3, "3"}}));

        // Issue 71: "Hold the colour scale" keeps the block-Hadamard map's colours for the next
        // map (no transform: other errors, another range of its own), so the two compare by colour;
        // released, a map takes its own range again.
        const auto held = v->heatmapColourRange();
        QVERIFY(held.first < held.second);
        v->setHoldColourScale(true);
        QVERIFY(v->compareAcrossLayers("none"));
        QVERIFY(done.wait(120000));
        QCOMPARE(v->heatmapColourRange(), held);
        v->setHoldColourScale(false);
        QVERIFY(v->compareAcrossLayers("none"));
        QVERIFY(done.wait(120000));
        QVERIFY2(v->heatmapColourRange() != held, "the map without a transform has the block-Hadamard range of its own");
    }

    // One expert's own point across layers: a row for each sparse layer only (decoder_sparse_step
    // 2: layers 1 and 3 of 4), each row labelled with its layer, every cell whole.
    void expertAcrossLayersNamesItsLayers() {
        const QString dir = m_tmp.filePath("moe-step2");
        importing::RandomModelOptions r;
        r.dtype = "float32";
        r.tokenizerDir = test::demoModelDir().toStdString();
        importing::writeRandomModel(model::ModelConfig::fromJsonText(R"({"architectures": ["Qwen3MoeForCausalLM"],
            "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 4, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 300, "max_position_embeddings": 256,
            "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64, "decoder_sparse_step": 2})"),
                                    dir.toStdString(), r);
        MainWindow w;
        QVERIFY(w.openCheckpoint(dir, false));
        ComparisonView* v = w.comparisonView();
        QVERIFY(!v->selectPoint("layers.0.mlp.experts.1.down_proj.input")); // layer 0 is dense
        QVERIFY(v->selectPoint("layers.3.mlp.experts.1.down_proj.input"));
        v->setCalibration(4, 32, 10);
        QSignalSpy done(v, &ComparisonView::comparisonFinished);
        QVERIFY(v->compareAcrossLayers("none"));
        QVERIFY(done.wait(120000));
        QVERIFY2(done.first().at(0).toBool(), qPrintable(done.first().at(1).toString()));
        QCOMPARE(v->heatmapPoints(),
                 (QStringList{"layers.1.mlp.experts.1.down_proj.input", "layers.3.mlp.experts.1.down_proj.input"}));
        QCOMPARE(v->heatmapRows().size(), 2);
        QCOMPARE(v->heatmapRows().first().size(), 2); // 64 wide: two MX blocks
        QCOMPARE(layerLabels(*v), (QMap<double, QString>{{0, "1"}, {1, "3"}}));
        QCOMPARE(test::child<QCustomPlot>(v, "layerHeatmapPlot")->xAxis->range(), QCPRange(-0.5, 1.5));
        QCOMPARE(test::child<QCustomPlot>(v, "layerHeatmapPlot")->yAxis->range(), QCPRange(-0.5, 1.5));
    }

    void noModelNoRun() {
        ComparisonView v;
        QString error;
        QVERIFY(!v.compare(&error));
        QVERIFY(error.contains("Open a model"));
    }
};

QTEST_MAIN(TestComparisonView)
#include "tst_comparisonview.moc"
