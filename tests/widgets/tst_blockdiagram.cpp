// The "Block diagram" view (widgets/views/BlockDiagramView): one decoder layer with T1/T2/T3 where SPEC §4
// puts them and the four activation quantization points as clickable markers named by core. The
// expectations are written here from SPEC §4 (which module feeds which point, which transform sits
// on which edge), not read back from the view's own tables.
#include "model/LlamaModel.h"
#include "model/ModelConfig.h"

#include "BlockDiagramView.h"
#include "ElidedLabel.h"

#include <QColor>
#include <QImage>
#include <QPalette>
#include <QSignalSpy>
#include <QSpinBox>
#include <QtTest>

#include <optional>
#include <string>
#include <vector>

using latmix::gui::BlockDiagramView;
using latmix::model::ModelConfig;
using latmix::model::PointKind;

Q_DECLARE_METATYPE(PointKind)

namespace {

// "none" (no model: the generic block), a config of resources/configs, or "qwen2" (written here:
// Qwen2 has q/k/v biases and no qk norm; no config of that family ships).
std::optional<ModelConfig> configNamed(const QString& name) {
    if (name == QLatin1String("none")) return std::nullopt;
    if (name == QLatin1String("qwen2")) {
        ModelConfig c;
        c.architecture = latmix::model::Architecture::Qwen2;
        c.architectureName = "Qwen2ForCausalLM";
        c.hiddenSize = 896;
        c.intermediateSize = 4864;
        c.numLayers = 24;
        c.numHeads = 14;
        c.numKvHeads = 2;
        c.headDim = 64;
        c.vocabSize = 151936;
        c.qkvBias = true;
        return c;
    }
    QString dir = qEnvironmentVariable("LATMIX_CONFIGS_DIR");
    const QString file = dir.isEmpty() ? QFINDTESTDATA("../../resources/configs/" + name + ".json")
                                       : dir + QLatin1Char('/') + name + QStringLiteral(".json");
    return ModelConfig::fromFile(file.toStdString());
}

int layersOf(const std::optional<ModelConfig>& c) { return c ? c->numLayers : 1; }

QString coreName(int layer, PointKind kind) { return QString::fromStdString(latmix::model::pointName(layer, kind)); }

// SPEC §4: the module whose output reaches each point and the linears that read it.
struct PointEdge {
    QString from;
    QStringList to;
};
PointEdge edgeOf(PointKind kind) {
    switch (kind) {
    case PointKind::QkvInput: return {"input_layernorm", {"q_proj", "k_proj", "v_proj"}};
    case PointKind::OProjInput: return {"attention", {"o_proj"}};
    case PointKind::GateUpInput: return {"post_attention_layernorm", {"gate_proj", "up_proj"}};
    case PointKind::DownProjInput: return {"act_fn", {"down_proj"}};
    }
    return {};
}

const PointKind kKinds[] = {PointKind::QkvInput, PointKind::OProjInput, PointKind::GateUpInput,
                            PointKind::DownProjInput};
const char* kKindTags[] = {"qkv", "o", "gate_up", "down"};

QPalette darkPalette() {
    QPalette p;
    const QColor window(0x2b, 0x2d, 0x31), base(0x1e, 0x1f, 0x22), text(0xe6, 0xe6, 0xe6);
    for (auto role : {QPalette::Window, QPalette::Button, QPalette::AlternateBase}) p.setColor(role, window);
    p.setColor(QPalette::Base, base);
    for (auto role : {QPalette::Text, QPalette::WindowText, QPalette::ButtonText}) p.setColor(role, text);
    p.setColor(QPalette::Highlight, QColor(0x3d, 0x7e, 0xd6));
    p.setColor(QPalette::HighlightedText, Qt::white);
    return p;
}

// Overlap of more than a hair (anti-aliased edges may touch).
bool overlaps(const QRectF& a, const QRectF& b) {
    const QRectF i = a.intersected(b);
    return i.width() > 0.5 && i.height() > 0.5;
}

QString str(const QRectF& r) {
    return QStringLiteral("(%1,%2 %3×%4)").arg(r.x(), 0, 'f', 1).arg(r.y(), 0, 'f', 1).arg(r.width(), 0, 'f', 1).arg(
        r.height(), 0, 'f', 1);
}

int colourDistance(const QColor& a, const QColor& b) {
    return std::abs(a.red() - b.red()) + std::abs(a.green() - b.green()) + std::abs(a.blue() - b.blue());
}

} // namespace

class TestBlockDiagram : public QObject {
    Q_OBJECT

private slots:
    void markerSitsOnItsEdge_data() { pointRows(true); }
    void markerSitsOnItsEdge();
    void transformsWhereSpecPutsThem_data() { configRows(); }
    void transformsWhereSpecPutsThem();
    void clickEmitsCoreName_data() { pointRows(false); }
    void clickEmitsCoreName();
    void selectPointTakesEveryCoreName_data() { configRows(); }
    void selectPointTakesEveryCoreName();
    void selectPointRejectsOtherNames_data();
    void selectPointRejectsOtherNames();
    void keyboardWalksPoints();
    void layerSpinFollowsModel();
    void labelsDoNotOverlap_data();
    void labelsDoNotOverlap();
    void familyShapesTheBlock_data();
    void familyShapesTheBlock();

private:
    void pointRows(bool sizes);
    void configRows();
};

void TestBlockDiagram::configRows() {
    QTest::addColumn<QString>("config");
    for (const char* c : {"none", "llama-3.2-1b", "qwen3-8b", "qwen2"}) QTest::newRow(c) << QString::fromLatin1(c);
}

// Every kind at the first and last layer of each config (and at two sizes for the geometry).
void TestBlockDiagram::pointRows(bool sizes) {
    QTest::addColumn<QString>("config");
    QTest::addColumn<int>("layer");
    QTest::addColumn<PointKind>("kind");
    QTest::addColumn<QSize>("size");
    for (const char* c : {"none", "llama-3.2-1b", "qwen3-8b", "qwen2"}) {
        const int n = layersOf(configNamed(QString::fromLatin1(c)));
        for (int layer : {0, n - 1}) {
            for (int k = 0; k < 4; ++k)
                for (QSize size : {QSize(900, 650), QSize(1700, 950)}) {
                    if (!sizes && size.width() != 900) continue;
                    QTest::addRow("%s/L%d/%s/%dx%d", c, layer, kKindTags[k], size.width(), size.height())
                        << QString::fromLatin1(c) << layer << kKinds[k] << size;
                }
            if (n == 1) break;
        }
    }
}

void TestBlockDiagram::markerSitsOnItsEdge() {
    QFETCH(QString, config);
    QFETCH(int, layer);
    QFETCH(PointKind, kind);
    QFETCH(QSize, size);
    BlockDiagramView v;
    if (auto c = configNamed(config)) v.setModel(*c);
    v.setLayer(layer);
    v.resize(size);
    const QRectF widget(v.rect());
    const QRectF m = v.markerRect(kind);
    QVERIFY2(!m.isEmpty() && widget.contains(m), qPrintable(str(m)));

    // Between the module that produces the activation and the linears that read it.
    const PointEdge e = edgeOf(kind);
    const QRectF from = v.boxRect(e.from);
    QVERIFY2(!from.isEmpty(), qPrintable(e.from));
    QVERIFY2(m.top() >= from.bottom(), qPrintable(e.from + str(from) + str(m)));
    QVERIFY(m.center().x() > from.left() && m.center().x() < from.right());
    double left = 1e9, right = -1e9;
    for (const QString& to : e.to) {
        const QRectF t = v.boxRect(to);
        QVERIFY2(!t.isEmpty(), qPrintable(to));
        QVERIFY2(m.bottom() <= t.top(), qPrintable(to + str(t) + str(m)));
        left = std::min(left, t.left());
        right = std::max(right, t.right());
    }
    QVERIFY(m.center().x() > left && m.center().x() < right);
    // T3 is applied before the down_proj activation is quantized: on the same edge, above it.
    if (kind == PointKind::DownProjInput) {
        const QRectF t3 = v.transformRect(3);
        QVERIFY2(t3.top() >= from.bottom() && t3.bottom() <= m.top(), qPrintable(str(t3) + str(m)));
        QVERIFY(qAbs(t3.center().x() - m.center().x()) < 1);
    }

    // Apart from the other markers, the badges and every box and text but its own label.
    for (PointKind other : kKinds)
        if (other != kind) QVERIFY2(!overlaps(m, v.markerRect(other)), qPrintable(str(v.markerRect(other))));
    for (int t = 1; t <= 3; ++t) QVERIFY2(!overlaps(m, v.transformRect(t)), qPrintable(QString::number(t)));
    for (const QString& module : v.modules()) QVERIFY2(!overlaps(m, v.boxRect(module)), qPrintable(module));
    for (const QRectF& label : v.labelRects()) QVERIFY2(!overlaps(m, label), qPrintable(str(label)));
}

void TestBlockDiagram::transformsWhereSpecPutsThem() {
    QFETCH(QString, config);
    BlockDiagramView v;
    if (auto c = configNamed(config)) v.setModel(*c);
    v.resize(900, 650);
    const QRectF t1 = v.transformRect(1), t2 = v.transformRect(2), t3 = v.transformRect(3);
    for (const QRectF& t : {t1, t2, t3}) QVERIFY2(!t.isEmpty() && QRectF(v.rect()).contains(t), qPrintable(str(t)));
    QVERIFY(v.transformRect(0).isEmpty() && v.transformRect(4).isEmpty());
    // T1: where the embedding enters the residual stream, before the first layer reads it.
    const QRectF embed = v.boxRect("embed_tokens"), norm = v.boxRect("input_layernorm");
    QVERIFY(t1.top() >= embed.bottom() && t1.bottom() <= norm.top() && t1.right() < norm.left());
    // T2: on the value path, between v_proj and the attention.
    const QRectF vproj = v.boxRect("v_proj"), attn = v.boxRect("attention");
    QVERIFY(t2.top() >= vproj.bottom() && t2.bottom() <= attn.top());
    QVERIFY(t2.center().x() > vproj.left() && t2.center().x() < vproj.right());
    // T3: between SiLU ⊙ up and down_proj.
    QVERIFY(t3.top() >= v.boxRect("act_fn").bottom() && t3.bottom() <= v.boxRect("down_proj").top());
    for (int a = 1; a <= 3; ++a)
        for (int b = a + 1; b <= 3; ++b) QVERIFY(!overlaps(v.transformRect(a), v.transformRect(b)));

    // Folded or online, as the tooltips say.
    const QString tip1 = v.toolTipAt(t1.center()), tip2 = v.toolTipAt(t2.center()), tip3 = v.toolTipAt(t3.center());
    QVERIFY2(tip1.contains("folded (free at inference)") && !tip1.contains("online"), qPrintable(tip1));
    QVERIFY2(tip2.contains("folded (free at inference)") && !tip2.contains("online"), qPrintable(tip2));
    QVERIFY2(tip3.contains("online") && !tip3.contains("free at inference"), qPrintable(tip3));
    QVERIFY(tip1.contains("A1") && tip2.contains("A2") && tip3.contains("32"));
    // Quantized weights on every block linear, not on the embedding or lm_head.
    for (const char* linear : {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"})
        QVERIFY2(v.boxText(linear).contains("W: MX") || v.toolTipAt(v.boxRect(linear).center()).contains("quantized (MX)"),
                 linear);
    for (const char* stub : {"embed_tokens", "lm_head"}) QVERIFY2(v.boxText(stub).contains("not quantized"), stub);
    QVERIFY(v.boxText("attention").contains("not quantized"));
}

void TestBlockDiagram::clickEmitsCoreName() {
    QFETCH(QString, config);
    QFETCH(int, layer);
    QFETCH(PointKind, kind);
    QFETCH(QSize, size);
    BlockDiagramView v;
    if (auto c = configNamed(config)) v.setModel(*c);
    auto* spin = v.findChild<QSpinBox*>("layerSpin");
    QVERIFY(spin);
    spin->setValue(layer); // the user's way to another layer
    v.resize(size);
    v.show();
    QVERIFY(QTest::qWaitForWindowExposed(&v));
    QSignalSpy spy(&v, &BlockDiagramView::pointSelected);

    // Off the markers: nothing.
    QTest::mouseClick(&v, Qt::LeftButton, {}, v.boxRect("attention").center().toPoint());
    QCOMPARE(spy.count(), 0);
    QVERIFY(v.currentPoint().isEmpty());

    QTest::mouseClick(&v, Qt::LeftButton, {}, v.markerRect(kind).center().toPoint());
    QCOMPARE(spy.count(), 1);
    QCOMPARE(spy.at(0).at(0).toString(), coreName(layer, kind));
    QCOMPARE(v.currentPoint(), coreName(layer, kind));
    // The marker's tooltip names the point in full.
    QVERIFY(v.toolTipAt(v.markerRect(kind).center()).contains(coreName(layer, kind)));
}

void TestBlockDiagram::selectPointTakesEveryCoreName() {
    QFETCH(QString, config);
    const auto c = configNamed(config);
    BlockDiagramView v;
    if (c) v.setModel(*c);
    v.resize(900, 650);
    auto* spin = v.findChild<QSpinBox*>("layerSpin");
    QSignalSpy spy(&v, &BlockDiagramView::pointSelected);
    std::vector<std::string> names;
    if (c) {
        names = latmix::model::quantizationPointNames(*c);
    } else {
        for (PointKind k : kKinds) names.push_back(latmix::model::pointName(0, k));
    }
    QCOMPARE(int(names.size()), 4 * layersOf(c));
    for (size_t i = 0; i < names.size(); ++i) {
        const QString name = QString::fromStdString(names[i]);
        QVERIFY2(v.selectPoint(name), qPrintable(name));
        QCOMPARE(v.currentPoint(), name);
        const int layer = int(i / 4); // quantizationPointNames lists 4 points a layer, in layer order
        QCOMPARE(spin->value(), layer);
        QCOMPARE(v.layer(), layer);
    }
    QCOMPARE(spy.count(), 0);
}

void TestBlockDiagram::selectPointRejectsOtherNames_data() {
    QTest::addColumn<QString>("config");
    QTest::addColumn<QString>("name");
    QTest::newRow("empty") << "llama-3.2-1b" << QString();
    QTest::newRow("past last layer") << "llama-3.2-1b" << coreName(16, PointKind::QkvInput);
    QTest::newRow("negative layer") << "llama-3.2-1b" << "layers.-1.self_attn.qkv.input";
    QTest::newRow("leading zero") << "llama-3.2-1b" << "layers.01.self_attn.qkv.input";
    QTest::newRow("not a point") << "llama-3.2-1b" << "layers.0.mlp.up_proj.input";
    QTest::newRow("trailing text") << "qwen3-8b" << coreName(3, PointKind::DownProjInput) + "x";
    QTest::newRow("no model, layer 1") << "none" << coreName(1, PointKind::GateUpInput);
}

void TestBlockDiagram::selectPointRejectsOtherNames() {
    QFETCH(QString, config);
    QFETCH(QString, name);
    BlockDiagramView v;
    if (auto c = configNamed(config)) v.setModel(*c);
    QVERIFY(v.selectPoint(coreName(0, PointKind::OProjInput)));
    QVERIFY(!v.selectPoint(name));
    QCOMPARE(v.currentPoint(), coreName(0, PointKind::OProjInput));
    QCOMPARE(v.layer(), 0);
}

void TestBlockDiagram::keyboardWalksPoints() {
    BlockDiagramView v;
    v.setModel(*configNamed("llama-3.2-1b"));
    v.resize(900, 650);
    v.show();
    QVERIFY(QTest::qWaitForWindowExposed(&v));
    v.setFocus();
    QVERIFY(v.selectPoint(coreName(2, PointKind::QkvInput)));
    QSignalSpy spy(&v, &BlockDiagramView::pointSelected);
    QTest::keyClick(&v, Qt::Key_Down);
    QTest::keyClick(&v, Qt::Key_Down);
    QTest::keyClick(&v, Qt::Key_Down);
    QTest::keyClick(&v, Qt::Key_Down); // wraps
    QTest::keyClick(&v, Qt::Key_Up);
    QTest::keyClick(&v, Qt::Key_Return);
    const QStringList expected = {coreName(2, PointKind::OProjInput), coreName(2, PointKind::GateUpInput),
                                  coreName(2, PointKind::DownProjInput), coreName(2, PointKind::QkvInput),
                                  coreName(2, PointKind::DownProjInput), coreName(2, PointKind::DownProjInput)};
    QCOMPARE(spy.count(), expected.size());
    for (int i = 0; i < expected.size(); ++i) QCOMPARE(spy.at(i).at(0).toString(), expected[i]);
}

void TestBlockDiagram::layerSpinFollowsModel() {
    BlockDiagramView v;
    auto* spin = v.findChild<QSpinBox*>("layerSpin");
    auto* hint = v.findChild<latmix::gui::ElidedLabel*>("blockDiagramHint");
    QVERIFY(spin && hint);
    QVERIFY(!spin->isEnabled());
    QVERIFY(hint->fullText().contains("open a model to pick a layer"));
    QCOMPARE(v.layerCount(), 1);

    const ModelConfig qwen3 = *configNamed("qwen3-8b");
    v.setModel(qwen3);
    QVERIFY(spin->isEnabled());
    QCOMPARE(spin->maximum(), qwen3.numLayers - 1);
    QVERIFY(!hint->fullText().contains("open a model"));
    QVERIFY(v.selectPoint(coreName(30, PointKind::DownProjInput)));
    // Another layer keeps the kind, and is no selection by the user (no signal).
    QSignalSpy spy(&v, &BlockDiagramView::pointSelected);
    spin->setValue(7);
    QCOMPARE(v.currentPoint(), coreName(7, PointKind::DownProjInput));
    QCOMPARE(spy.count(), 0);
    // A smaller model: layer 30 is gone, so layer 0; 7 is kept where it exists.
    v.setLayer(30);
    v.setModel(*configNamed("llama-3.2-1b"));
    QCOMPARE(v.layer(), 0);
    QCOMPARE(spin->maximum(), 15);
    v.setLayer(7);
    v.setModel(qwen3);
    QCOMPARE(v.layer(), 7);
    v.clearModel();
    QVERIFY(!spin->isEnabled() && v.currentPoint().isEmpty() && v.layer() == 0);
    QVERIFY(hint->fullText().contains("open a model to pick a layer"));
}

void TestBlockDiagram::labelsDoNotOverlap_data() {
    QTest::addColumn<QString>("config");
    QTest::addColumn<QSize>("size");
    QTest::addColumn<bool>("dark");
    for (const char* c : {"none", "llama-3.2-1b", "qwen3-8b", "qwen2"})
        for (QSize size : {QSize(900, 650), QSize(1280, 760), QSize(1700, 950)})
            for (bool dark : {false, true})
                QTest::addRow("%s/%dx%d/%s", c, size.width(), size.height(), dark ? "dark" : "light")
                    << QString::fromLatin1(c) << size << dark;
}

void TestBlockDiagram::labelsDoNotOverlap() {
    QFETCH(QString, config);
    QFETCH(QSize, size);
    QFETCH(bool, dark);
    BlockDiagramView v;
    if (dark) v.setPalette(darkPalette());
    if (auto c = configNamed(config)) v.setModel(*c);
    QVERIFY(v.selectPoint(coreName(0, PointKind::GateUpInput)));
    v.resize(size);
    const QRectF widget(v.rect());
    const QList<QRectF> labels = v.labelRects();
    QVERIFY(labels.size() > 30);
    for (int i = 0; i < labels.size(); ++i) {
        QVERIFY2(widget.contains(labels[i]), qPrintable(str(labels[i])));
        for (int j = i + 1; j < labels.size(); ++j)
            QVERIFY2(!overlaps(labels[i], labels[j]), qPrintable(str(labels[i]) + str(labels[j])));
    }
    const QStringList modules = v.modules();
    for (int i = 0; i < modules.size(); ++i) {
        QVERIFY2(widget.contains(v.boxRect(modules[i])), qPrintable(modules[i]));
        for (int j = i + 1; j < modules.size(); ++j)
            QVERIFY2(!overlaps(v.boxRect(modules[i]), v.boxRect(modules[j])), qPrintable(modules[i] + modules[j]));
    }
    // Readable: never below 7 pt at these sizes.
    QVERIFY2(v.fontPointSize() >= 7.0, qPrintable(QString::number(v.fontPointSize())));

    // Drawn in the palette's colours: the canvas in Base, the box titles in Text.
    const QImage img = v.grab().toImage();
    const qreal dpr = img.devicePixelRatio();
    const QPalette pal = v.palette();
    const QRectF attn = v.boxRect("attention");
    const QPoint empty((attn.left() + 3) * dpr, (attn.bottom() + v.markerRect(PointKind::OProjInput).top()) / 2 * dpr);
    QVERIFY2(colourDistance(img.pixelColor(empty), pal.color(QPalette::Base)) < 10,
             qPrintable(img.pixelColor(empty).name()));
    const QRectF q = v.boxRect("q_proj");
    int inked = 0;
    for (int y = int(q.top() * dpr); y < int(q.bottom() * dpr); ++y)
        for (int x = int(q.left() * dpr); x < int(q.right() * dpr); ++x)
            inked += colourDistance(img.pixelColor(x, y), pal.color(QPalette::Text)) < 60;
    QVERIFY2(inked > 20, qPrintable(QString::number(inked)));
}

void TestBlockDiagram::familyShapesTheBlock_data() {
    QTest::addColumn<QString>("config");
    QTest::addColumn<bool>("qkNorm");
    QTest::addColumn<bool>("bias");
    QTest::newRow("generic") << "none" << false << false;
    QTest::newRow("llama-3.2-1b") << "llama-3.2-1b" << false << false;
    QTest::newRow("qwen3-8b") << "qwen3-8b" << true << false;
    QTest::newRow("qwen2") << "qwen2" << false << true;
}

void TestBlockDiagram::familyShapesTheBlock() {
    QFETCH(QString, config);
    QFETCH(bool, qkNorm);
    QFETCH(bool, bias);
    const auto c = configNamed(config);
    BlockDiagramView v;
    if (c) v.setModel(*c);
    v.resize(900, 650);
    QCOMPARE(v.modules().contains("q_norm"), qkNorm);
    QCOMPARE(v.modules().contains("k_norm"), qkNorm);
    if (qkNorm) {
        // Per-head norms after q_proj / k_proj, before RoPE and the attention.
        for (auto [norm, proj] : {std::pair{"q_norm", "q_proj"}, std::pair{"k_norm", "k_proj"}}) {
            const QRectF n = v.boxRect(norm), p = v.boxRect(proj);
            QVERIFY(n.top() >= p.bottom() && n.bottom() <= v.boxRect("attention").top());
            QVERIFY(qAbs(n.center().x() - p.center().x()) < 1);
        }
    } else {
        QVERIFY(v.boxRect("q_norm").isEmpty() && v.boxRect("k_norm").isEmpty());
    }
    for (const char* p : {"q_proj", "k_proj", "v_proj"}) QCOMPARE(v.boxText(p).contains("bias"), bias);
    // GQA: k and v say how many kv heads serve the q heads.
    if (c) {
        QVERIFY2(v.boxText("q_proj").contains(QString::number(c->numHeads) + " heads"), qPrintable(v.boxText("q_proj")));
        for (const char* p : {"k_proj", "v_proj"})
            QVERIFY2(v.boxText(p).contains(QString::number(c->numKvHeads) + " kv heads (GQA)"), qPrintable(v.boxText(p)));
    }
}

QTEST_MAIN(TestBlockDiagram)
#include "tst_blockdiagram.moc"
