// Opening checkpoints in the workbench: MainWindow::openCheckpoint loads the folder through core
// and the "Model" dock's summary shows what core reads from it (shape, parameters, tokenizer,
// the 4 quantization points per layer with their widths). A folder that cannot be opened leaves
// the previous model in place, says why in a non-modal banner naming the folder, and stays out
// of Recent. Real checkpoints come from $LATMIX_DATA_DIR/models; those rows skip without it.
#include "model/Checkpoint.h"
#include "import/DemoModel.h"
#include "model/LlamaModel.h"
#include "util/Runtime.h"
#include "run/quantize/Preflight.h"

#include "CalibrationView.h"
#include "MainWindow.h"
#include "ModelSummaryView.h"

#include "TestData.h"
#include "WidgetLookup.h"

#include <QApplication>
#include <QDir>
#include <QDockWidget>
#include <QFile>
#include <QFileInfo>
#include <QLabel>
#include <QLocale>
#include <QSettings>
#include <QSignalSpy>
#include <QStatusBar>
#include <QTemporaryDir>
#include <QToolButton>
#include <QTreeWidget>
#include <QtTest>

#include <algorithm>

using latmix::gui::MainWindow;
using latmix::gui::ModelSummaryView;
using latmix::model::Checkpoint;
using latmix::model::PointKind;

namespace {

// Empty without LATMIX_DATA_DIR (ctest sets it): those rows then skip.
QString dataModelDir(const QString& name) {
    const QString d = QString::fromLocal8Bit(qgetenv("LATMIX_DATA_DIR"));
    return d.isEmpty() ? QString() : d + QStringLiteral("/models/") + name;
}

// Written out here rather than calling formatCount: the test states what people should read.
QString expectedCount(qint64 n) {
    if (n >= 1'000'000'000) return QString::number(n / 1e9, 'f', 2) + QStringLiteral(" B");
    if (n >= 1'000'000) return QString::number(n / 1e6, 'f', 2) + QStringLiteral(" M");
    if (n >= 1'000) return QString::number(n / 1e3, 'f', 2) + QStringLiteral(" K");
    return QString::number(n);
}

void clearSettings() { QSettings(QStringLiteral("LATMiX"), QStringLiteral("Workbench")).clear(); }

} // namespace

class TestModelSummaryView : public QObject {
    Q_OBJECT

private slots:
    void initTestCase();
    void init() { clearSettings(); }
    void cleanupTestCase() { clearSettings(); }
    void emptyViewSaysNoModel();
    void opensCheckpoint_data();
    void opensCheckpoint();
    void failedOpenKeepsPreviousModel_data();
    void failedOpenKeepsPreviousModel();
    void bannerClosesAndNextOpenClearsIt();
    void longFolderPathIsElided();
    void keepTogglesFeedTheCalibrationForm_data();
    void keepTogglesFeedTheCalibrationForm();

private:
    QTemporaryDir m_tmp;
    QString m_demo;
};

void TestModelSummaryView::initTestCase() {
    latmix::configureThreads(2);
    QVERIFY(m_tmp.isValid());
    m_demo = m_tmp.filePath(QStringLiteral("demo-model"));
    latmix::importing::writeDemoModel(m_demo.toStdString());
}

void TestModelSummaryView::emptyViewSaysNoModel() {
    MainWindow w;
    ModelSummaryView* s = latmix::test::child<latmix::gui::ModelSummaryView>(&w);
    QVERIFY(s);
    QVERIFY(latmix::test::child<QDockWidget>(&w, "modelDock") && latmix::test::child<QDockWidget>(&w, "modelDock")->widget() == s);
    QVERIFY(!s->hasModel());
    QVERIFY(!w.currentModel());
    QVERIFY(w.currentModelDir().isEmpty());
    QCOMPARE(s->pointCount(), 0);
    QVERIFY(s->fieldText(QStringLiteral("layers")).isEmpty());
    QVERIFY(s->findChild<QLabel*>(QStringLiteral("noModelLabel")));
    QVERIFY(!w.isErrorBannerShown());
}

void TestModelSummaryView::opensCheckpoint_data() {
    QTest::addColumn<QString>("dir");
    QTest::addColumn<QString>("tokenizer");
    QTest::newRow("demo-model") << QString() << QStringLiteral("bpe-sentencepiece");
    // llama2.c conversion without a tokenizer next to the weights.
    QTest::newRow("stories260K-hf") << dataModelDir(QStringLiteral("stories260K-hf")) << QStringLiteral("none found");
    QTest::newRow("brownpy-13M") << dataModelDir(QStringLiteral("brownpy-13M")) << QStringLiteral("sentencepiece");
}

void TestModelSummaryView::opensCheckpoint() {
    QFETCH(QString, dir);
    QFETCH(QString, tokenizer);
    if (QByteArray(QTest::currentDataTag()) == "demo-model") dir = m_demo;
    if (dir.isEmpty()) LATMIX_DATA_SKIP("LATMIX_DATA_DIR is not set: run through ctest or point it at the shared data folder");
    if (!QFile::exists(dir + QStringLiteral("/config.json")))
        LATMIX_DATA_SKIP(qPrintable(QStringLiteral("checkpoint not found: %1 (set LATMIX_DATA_DIR to the shared data folder)")
                             .arg(dir)));

    MainWindow w;
    QSignalSpy opened(&w, &MainWindow::modelOpened);
    QVERIFY2(w.openCheckpoint(dir), qPrintable(w.errorBannerText()));
    const QString clean = QDir::cleanPath(QFileInfo(dir).absoluteFilePath());

    const Checkpoint ck = Checkpoint::load(dir.toStdString());
    const auto& c = ck.config();
    ModelSummaryView* s = latmix::test::child<latmix::gui::ModelSummaryView>(&w);
    QVERIFY(s->hasModel());
    QCOMPARE(s->fieldText(QStringLiteral("architecture")), QString::fromStdString(c.architectureName));
    QCOMPARE(s->fieldText(QStringLiteral("layers")), QString::number(c.numLayers));
    QCOMPARE(s->fieldText(QStringLiteral("hidden")), QString::number(c.hiddenSize));
    QCOMPARE(s->fieldText(QStringLiteral("heads")), QStringLiteral("%1 / %2").arg(c.numHeads).arg(c.numKvHeads));
    QCOMPARE(s->fieldText(QStringLiteral("headDim")), QString::number(c.headDim));
    QCOMPARE(s->fieldText(QStringLiteral("intermediate")), QString::number(c.intermediateSize));
    QCOMPARE(s->fieldText(QStringLiteral("vocab")), QString::number(c.vocabSize));
    QCOMPARE(s->fieldText(QStringLiteral("parameters")), expectedCount(ck.parameterCount()));
    auto* params = s->findChild<QLabel*>(QStringLiteral("parametersValue"));
    QVERIFY(params && params->toolTip().contains(QLocale::c().toString(qint64(ck.parameterCount()))));
    QCOMPARE(s->fieldText(QStringLiteral("dtype")), QString::fromStdString(c.torchDtype));
    QCOMPARE(s->fieldText(QStringLiteral("tokenizer")), tokenizer);
    QVERIFY(!s->fieldText(QStringLiteral("weightBytes")).isEmpty());
    QVERIFY(s->fieldText(QStringLiteral("memoryFloat32")).contains(QString::fromStdString(latmix::deviceDescription())));
    QVERIFY(!s->fieldText(QStringLiteral("memoryBFloat16")).isEmpty());
    // The estimate follows the device chosen for runs: 2 bytes per parameter in bfloat16, a
    // converted copy (not the mapped file) on a GPU.
    s->setDevice(QStringLiteral("cuda:1"));
    QVERIFY2(s->fieldText(QStringLiteral("memoryBFloat16")).endsWith(QStringLiteral(" on cuda:1")),
             qPrintable(s->fieldText(QStringLiteral("memoryBFloat16"))));
    QVERIFY(!s->fieldText(QStringLiteral("memoryFloat32")).contains(QStringLiteral("mapped")));
    s->setDevice(QStringLiteral("cpu"));
    QVERIFY(s->fieldText(QStringLiteral("memoryFloat32")).contains(QStringLiteral(" on CPU")));
    for (const QString& key : ModelSummaryView::fieldKeys())
        QVERIFY2(s->findChild<QLabel*>(key + QStringLiteral("Value")), qPrintable(key));

    // Four points per layer, named as core names them, with the widths of SPEC §4 written out
    // from the config (not through pointWidth, which is what is being checked).
    QCOMPARE(s->pointCount(), 4 * c.numLayers);
    QCOMPARE(latmix::test::child<QTreeWidget>(s, "pointTree")->topLevelItemCount(), c.numLayers);
    const auto names = latmix::model::quantizationPointNames(c);
    QCOMPARE(int(names.size()), 4 * c.numLayers);
    const struct { PointKind kind; int width; } points[] = {
        {PointKind::QkvInput, c.hiddenSize},
        {PointKind::OProjInput, c.numHeads * c.headDim},
        {PointKind::GateUpInput, c.hiddenSize},
        {PointKind::DownProjInput, c.intermediateSize},
    };
    for (int layer = 0; layer < c.numLayers; ++layer)
        for (const auto& p : points) {
            const QString name = QString::fromStdString(latmix::model::pointName(layer, p.kind));
            QVERIFY(std::find(names.begin(), names.end(), name.toStdString()) != names.end());
            QCOMPARE(s->pointWidthShown(name), p.width);
        }

    // The window follows: current model, title, Recent, status bar, signal; no error shown.
    QCOMPARE(w.currentModelDir(), clean);
    QVERIFY(w.currentModel() && w.currentModel()->config().numLayers == c.numLayers);
    QCOMPARE(w.windowTitle(), QFileInfo(clean).fileName() + QStringLiteral(" — LATMiX Workbench"));
    QCOMPARE(w.recentCheckpoints(), QStringList{clean});
    QVERIFY2(w.statusBar()->currentMessage().contains(QDir::toNativeSeparators(clean)),
             qPrintable(w.statusBar()->currentMessage()));
    QCOMPARE(opened.count(), 1);
    QCOMPARE(opened.at(0).at(0).toString(), clean);
    QVERIFY(!w.isErrorBannerShown());
    QVERIFY(latmix::test::child<QDockWidget>(&w, "modelDock")->isVisibleTo(&w));
}

void TestModelSummaryView::failedOpenKeepsPreviousModel_data() {
    QTest::addColumn<QString>("dir");
    QTest::addColumn<QString>("cause"); // a piece of core's reason that must reach the banner

    const QString missing = m_tmp.filePath(QStringLiteral("no-such-model"));
    QTest::newRow("missing folder") << missing << QStringLiteral("does not exist");

    const QString corrupt = m_tmp.filePath(QStringLiteral("corrupt-config"));
    QVERIFY(QDir().mkpath(corrupt));
    QFile::remove(corrupt + QStringLiteral("/model.safetensors"));
    QVERIFY(QFile::copy(m_demo + QStringLiteral("/model.safetensors"), corrupt + QStringLiteral("/model.safetensors")));
    QFile cfg(corrupt + QStringLiteral("/config.json"));
    QVERIFY(cfg.open(QIODevice::WriteOnly | QIODevice::Truncate));
    cfg.write("{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": ");
    cfg.close();
    QTest::newRow("corrupt config.json") << corrupt << QStringLiteral("not valid JSON");

    const QString noWeights = m_tmp.filePath(QStringLiteral("no-weights"));
    QVERIFY(QDir().mkpath(noWeights));
    QFile::remove(noWeights + QStringLiteral("/config.json"));
    QVERIFY(QFile::copy(m_demo + QStringLiteral("/config.json"), noWeights + QStringLiteral("/config.json")));
    QTest::newRow("no weights") << noWeights << QStringLiteral("no weights");

    // A real checkpoint of an architecture the decoder does not implement.
    const QString gpt2 = m_tmp.filePath(QStringLiteral("gpt2"));
    QVERIFY(QDir().mkpath(gpt2));
    QFile::remove(gpt2 + QStringLiteral("/model.safetensors"));
    QVERIFY(QFile::copy(m_demo + QStringLiteral("/model.safetensors"), gpt2 + QStringLiteral("/model.safetensors")));
    QFile g(gpt2 + QStringLiteral("/config.json"));
    QVERIFY(g.open(QIODevice::WriteOnly | QIODevice::Truncate));
    g.write("{\"architectures\": [\"GPT2LMHeadModel\"], \"model_type\": \"gpt2\", \"n_embd\": 128}");
    g.close();
    QTest::newRow("unsupported architecture") << gpt2 << QStringLiteral("unsupported architecture 'GPT2LMHeadModel'");
}

void TestModelSummaryView::failedOpenKeepsPreviousModel() {
    QFETCH(QString, dir);
    QFETCH(QString, cause);

    MainWindow w;
    w.show(); // a modal dialog would block here; the banner must not
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(w.openCheckpoint(m_demo));
    const QString demo = w.currentModelDir();
    const QString title = w.windowTitle();
    const QStringList recent = w.recentCheckpoints();
    QSignalSpy opened(&w, &MainWindow::modelOpened);

    QVERIFY(!w.openCheckpoint(dir));
    QVERIFY(!QApplication::activeModalWidget());
    QVERIFY(w.isErrorBannerShown());
    QVERIFY(w.findChild<QFrame*>(QStringLiteral("errorBanner"))->isVisible());
    const QString text = w.errorBannerText();
    QVERIFY2(text.contains(QDir::toNativeSeparators(dir)), qPrintable(text));
    QVERIFY2(text.contains(cause), qPrintable(text));
    QCOMPARE(w.findChild<QLabel*>(QStringLiteral("errorBannerText"))->text(), text);
    QVERIFY2(w.statusBar()->currentMessage().contains(QDir::toNativeSeparators(dir)),
             qPrintable(w.statusBar()->currentMessage()));

    // The previous model stays: dir, summary, title, Recent; no modelOpened.
    QCOMPARE(w.currentModelDir(), demo);
    QVERIFY(w.currentModel());
    QCOMPARE(latmix::test::child<latmix::gui::ModelSummaryView>(&w)->fieldText(QStringLiteral("layers")), QStringLiteral("4"));
    QCOMPARE(latmix::test::child<latmix::gui::ModelSummaryView>(&w)->pointCount(), 16);
    QCOMPARE(w.windowTitle(), title);
    QCOMPARE(w.recentCheckpoints(), recent);
    QCOMPARE(opened.count(), 0);
}

void TestModelSummaryView::bannerClosesAndNextOpenClearsIt() {
    MainWindow w;
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    const QString missing = m_tmp.filePath(QStringLiteral("missing-again"));
    QVERIFY(!w.openCheckpoint(missing));
    QVERIFY(w.isErrorBannerShown());
    QVERIFY(!latmix::test::child<latmix::gui::ModelSummaryView>(&w)->hasModel()); // nothing was open before: nothing to keep
    QVERIFY(w.recentCheckpoints().isEmpty());

    auto* close = w.findChild<QToolButton*>(QStringLiteral("errorBannerClose"));
    QVERIFY(close && close->isVisible());
    QTest::mouseClick(close, Qt::LeftButton);
    QVERIFY(!w.isErrorBannerShown());

    QVERIFY(!w.openCheckpoint(missing));
    QVERIFY(w.isErrorBannerShown());
    QVERIFY(w.openCheckpoint(m_demo)); // a success makes the old error stale
    QVERIFY(!w.isErrorBannerShown());

    // remember=false (the demo model opened at start) opens without touching Recent.
    clearSettings();
    MainWindow quiet;
    QVERIFY(quiet.openCheckpoint(m_demo, /*remember=*/false));
    QVERIFY(quiet.recentCheckpoints().isEmpty());
    QCOMPARE(quiet.currentModelDir(), QDir::cleanPath(m_demo));
}

void TestModelSummaryView::longFolderPathIsElided() {
    // A deep path must not widen the dock: it is elided in the middle, full in the tooltip.
    QString deep = m_tmp.path();
    for (int i = 0; i < 8; ++i) deep += QStringLiteral("/a-rather-long-folder-name-%1").arg(i);
    deep += QStringLiteral("/demo-model");
    latmix::importing::writeDemoModel(deep.toStdString());
    MainWindow w;
    w.resize(1280, 800);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(w.openCheckpoint(deep));
    QCoreApplication::processEvents();
    auto* folder = latmix::test::child<latmix::gui::ModelSummaryView>(&w)->findChild<QLabel*>(QStringLiteral("folderValue"));
    QVERIFY(folder);
    QCOMPARE(folder->toolTip(), QDir::toNativeSeparators(deep));
    QTRY_VERIFY(folder->text().contains(QChar(0x2026))); // "…"
    QVERIFY2(folder->text().endsWith(QStringLiteral("demo-model")), qPrintable(folder->text() + " " + QString::number(folder->width())));
    QVERIFY(latmix::test::child<QDockWidget>(&w, "modelDock")->width() < 500);
}

QTEST_MAIN(TestModelSummaryView)
#include "tst_modelsummaryview.moc"

// The Model dock's "keep in bf16" boxes (one per linear under the point it reads) set the
// Calibration form's --keep: the regex they write picks exactly the linears checked (the run's
// own resolution, run::resolveKeptLinears, says so), and opening another model clears it.
void TestModelSummaryView::keepTogglesFeedTheCalibrationForm_data() {
    QTest::addColumn<QStringList>("check");
    QTest::newRow("one down_proj") << QStringList{"model.layers.0.mlp.down_proj"};
    QTest::newRow("q of layer 1 and gate/up of layer 0")
        << QStringList{"model.layers.1.self_attn.q_proj", "model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj"};
}
void TestModelSummaryView::keepTogglesFeedTheCalibrationForm() {
    QFETCH(QStringList, check);
    MainWindow w;
    QVERIFY(w.openCheckpoint(m_demo, /*remember=*/false));
    ModelSummaryView* s = latmix::test::child<latmix::gui::ModelSummaryView>(&w);
    QTreeWidget* tree = s->findChild<QTreeWidget*>(QStringLiteral("pointTree"));
    QVERIFY(tree);
    QSignalSpy spy(s, &ModelSummaryView::keptLinearsChanged);
    int rows = 0;
    for (int i = 0; i < tree->topLevelItemCount(); ++i)
        for (int j = 0; j < tree->topLevelItem(i)->childCount(); ++j) {
            QTreeWidgetItem* point = tree->topLevelItem(i)->child(j);
            for (int k = 0; k < point->childCount(); ++k) {
                ++rows;
                QTreeWidgetItem* linear = point->child(k);
                if (check.contains(linear->toolTip(0).section('\n', 0, 0))) linear->setCheckState(0, Qt::Checked); // as a click does
            }
        }
    const auto& c = w.currentModel()->config();
    QCOMPARE(rows, 7 * c.numLayers);     // every block linear of the dense model has its box
    QCOMPARE(s->pointCount(), 4 * c.numLayers); // and the points are still the tree's points
    QCOMPARE(spy.count(), check.size());
    QStringList got = s->keptLinears();
    got.sort();
    QStringList want = check;
    want.sort();
    QCOMPARE(got, want);
    const QString regex = w.calibrationView()->keep();
    QCOMPARE(w.calibrationView()->options().keep, regex.toStdString());
    std::vector<std::string> resolved = latmix::run::resolveKeptLinears(c, regex.toStdString());
    QStringList fromRun;
    for (const auto& r : resolved) fromRun << QString::fromStdString(r);
    fromRun.sort();
    QCOMPARE(fromRun, want);
    // Another model: its own tree, no box checked, the form's --keep cleared.
    const QString other = m_tmp.filePath(QStringLiteral("demo-model-2"));
    if (!QFileInfo::exists(other)) latmix::importing::writeDemoModel(other.toStdString());
    QVERIFY(w.openCheckpoint(other, /*remember=*/false));
    QVERIFY(w.calibrationView()->keep().isEmpty());
    QVERIFY(s->keptLinears().isEmpty());
}
