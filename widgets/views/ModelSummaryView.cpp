#include "ModelSummaryView.h"

#include "FormWidgets.h"

// Core headers first: they pull in ATen/core/Tensor.h only, which is safe next to Qt's keywords.
#include "model/QuantizationPoints.h"
#include "model/TensorNames.h"
#include "tokenizer/Tokenizer.h"
#include "util/Runtime.h"

#include <QDir>
#include <QFileInfo>
#include <QFormLayout>
#include <QHeaderView>
#include <QLabel>
#include <QEvent>
#include <QLocale>
#include <QSignalBlocker>
#include <QStackedWidget>
#include <QTreeWidget>
#include <QRegularExpression>
#include <QVBoxLayout>

#include <cmath>
#include <vector>
#include <exception>
#include <limits>

namespace latmix::gui {

namespace {

using latmix::model::PointKind;

// A sparse layer's experts row: how many experts it stands for.
constexpr int kExpertsRole = Qt::UserRole + 1;
constexpr int kLinearRole = Qt::UserRole + 2; // a linear's module name, on its "keep in bf16" row

constexpr PointKind kKinds[] = {PointKind::QkvInput, PointKind::OProjInput, PointKind::GateUpInput,
                                PointKind::DownProjInput};

// What each point feeds, for the tree's tooltips: the name alone ("gate_up.input") does not say
// that two projections share the one activation.
QString pointRole(PointKind kind) {
    switch (kind) {
    case PointKind::QkvInput: return ModelSummaryView::tr("input of q_proj, k_proj and v_proj (after input RMSNorm)");
    case PointKind::OProjInput: return ModelSummaryView::tr("input of o_proj (attention output, heads × head_dim)");
    case PointKind::GateUpInput: return ModelSummaryView::tr("input of gate_proj and up_proj (after post-attention RMSNorm)");
    case PointKind::DownProjInput: return ModelSummaryView::tr("input of down_proj (SiLU(gate) · up)");
    }
    return {};
}

// The block linears a point's input feeds (modules after the layer prefix).
std::vector<const char*> linearsReading(PointKind kind) {
    namespace n = latmix::model::names;
    switch (kind) {
    case PointKind::QkvInput: return {n::kQProj, n::kKProj, n::kVProj};
    case PointKind::OProjInput: return {n::kOProj};
    case PointKind::GateUpInput: return {n::kGateProj, n::kUpProj};
    case PointKind::DownProjInput: return {n::kDownProj};
    }
    return {};
}

// IEC units (MiB) from QLocale: what file managers and `du -h` show for the same files.
QString dataSize(qint64 bytes) { return QLocale().formattedDataSize(bytes, 1, QLocale::DataSizeIecFormat); }

} // namespace

ModelSummaryView::ModelSummaryView(QWidget* parent) : QWidget(parent) {
    setObjectName(QStringLiteral("modelSummaryView"));

    m_stack = new QStackedWidget(this);
    m_stack->setObjectName(QStringLiteral("modelSummaryStack"));

    auto* empty = new QLabel(tr("No model open.\n\nFile › Open checkpoint… opens a Hugging Face model folder "
                                "(config.json + model.safetensors)."),
                             m_stack);
    empty->setObjectName(QStringLiteral("noModelLabel"));
    empty->setAlignment(Qt::AlignCenter);
    empty->setWordWrap(true);
    m_stack->addWidget(empty);

    auto* page = new QWidget(m_stack);
    auto* column = new QVBoxLayout(page);
    column->setContentsMargins(0, 0, 0, 0);
    m_title = new QLabel(page);
    m_title->setObjectName(QStringLiteral("modelTitle"));
    m_title->setTextFormat(Qt::PlainText);
    QFont big = m_title->font();
    big.setBold(true);
    big.setPointSizeF(big.pointSizeF() * 1.15);
    m_title->setFont(big);
    column->addWidget(m_title);

    m_form = new QFormLayout;
    m_form->setObjectName(QStringLiteral("modelFields"));
    m_form->setLabelAlignment(Qt::AlignLeft);
    m_form->setVerticalSpacing(3);
    m_form->setRowWrapPolicy(QFormLayout::DontWrapRows);
    column->addLayout(m_form);
    addField(QStringLiteral("folder"), tr("Folder"), QString());
    m_folderValue = findChild<QLabel*>(QStringLiteral("folderValue"));
    // Ignored: a long path must not widen the dock; it is elided to the width it gets instead.
    m_folderValue->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
    m_folderValue->setMinimumWidth(40);
    m_folderValue->setWordWrap(false); // elided to one line (elideFolder), not wrapped
    m_folderValue->installEventFilter(this);
    addField(QStringLiteral("architecture"), tr("Architecture"), tr("config.json architectures[0]"));
    addField(QStringLiteral("layers"), tr("Layers"), tr("num_hidden_layers"));
    addField(QStringLiteral("hidden"), tr("Hidden size"), tr("hidden_size: width of the residual stream"));
    addField(QStringLiteral("heads"), tr("Heads / KV heads"),
             tr("num_attention_heads / num_key_value_heads (fewer KV heads: grouped-query attention)"));
    addField(QStringLiteral("headDim"), tr("Head dim"), tr("head_dim (hidden_size / heads unless set)"));
    addField(QStringLiteral("intermediate"), tr("Intermediate size"), tr("intermediate_size: width of the MLP"));
    addField(QStringLiteral("vocab"), tr("Vocabulary"), tr("vocab_size"));
    addField(QStringLiteral("parameters"), tr("Parameters"), QString());
    addField(QStringLiteral("dtype"), tr("Stored dtype"), tr("config.json torch_dtype"));
    addField(QStringLiteral("weightBytes"), tr("Weights on disk"), tr("Bytes of tensor data in the safetensors files"));
    addField(QStringLiteral("memoryFloat32"), tr("Memory, float32"), QString());
    addField(QStringLiteral("memoryBFloat16"), tr("Memory, bfloat16"), QString());
    addField(QStringLiteral("tokenizer"), tr("Tokenizer"), QString());

    auto* pointsTitle = new QLabel(tr("<b>Quantization points</b>"), page);
    pointsTitle->setObjectName(QStringLiteral("pointsTitle"));
    pointsTitle->setToolTip(tr("Activations that MX quantization rounds: four per layer, each entering linear layers"));
    column->addSpacing(6);
    column->addWidget(pointsTitle);
    m_tree = new QTreeWidget(page);
    m_tree->setObjectName(QStringLiteral("pointTree"));
    setHeader();
    m_tree->setUniformRowHeights(true);
    m_tree->setAlternatingRowColors(true);
    // A few rows at least, the rest scrolls: the dock fits a 700-px-high window (gui_x_check).
    m_tree->setMinimumHeight(5 * m_tree->fontMetrics().height());
    // The numbers whole, the point names in what is left, elided at the left when the E(T)
    // column leaves too little: a name's end tells the points apart ("…qkv.input", "…o_proj.input";
    // in the middle, a real X window showed four rows of "self_…input"). Each row's tool tip has
    // the full name.
    m_tree->header()->setStretchLastSection(false);
    m_tree->header()->setSectionResizeMode(0, QHeaderView::Stretch);
    m_tree->header()->setSectionResizeMode(1, QHeaderView::ResizeToContents);
    m_tree->header()->setSectionResizeMode(2, QHeaderView::ResizeToContents);
    m_tree->setTextElideMode(Qt::ElideLeft);
    // A point (not a layer branch) made current, by click or keyboard, is announced.
    // A linear's row stands for the point it reads.
    connect(m_tree, &QTreeWidget::currentItemChanged, this, [this](QTreeWidgetItem* item) {
        if (item && !item->data(0, kLinearRole).toString().isEmpty()) item = item->parent();
        const QString name = item ? item->data(0, Qt::UserRole).toString() : QString();
        if (!name.isEmpty()) emit pointSelected(name);
    });
    connect(m_tree, &QTreeWidget::itemChanged, this, [this](QTreeWidgetItem* item, int column) {
        if (column == 0 && !item->data(0, kLinearRole).toString().isEmpty()) emit keptLinearsChanged(keptLinears());
    });
    column->addWidget(m_tree, 1);
    m_stack->addWidget(page);

    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(6, 6, 6, 6);
    layout->addWidget(m_stack);
}

void ModelSummaryView::addField(const QString& key, const QString& label, const QString& tip) {
    auto* name = new QLabel(label + QLatin1Char(':'), this);
    name->setObjectName(key + QStringLiteral("Label"));
    name->setToolTip(tip);
    auto* value = new QLabel(this);
    value->setObjectName(key + QStringLiteral("Value"));
    value->setTextFormat(Qt::PlainText);
    // Numbers and paths are what people copy into notes and issues.
    value->setTextInteractionFlags(Qt::TextSelectableByMouse);
    value->setToolTip(tip);
    value->setWordWrap(true); // a long value takes a second line in a narrow dock, never cut
    m_form->addRow(name, value);
}

void ModelSummaryView::setField(const QString& key, const QString& text, const QString& tip) {
    auto* value = findChild<QLabel*>(key + QStringLiteral("Value"));
    if (!value) return;
    value->setText(text);
    if (!tip.isEmpty()) value->setToolTip(tip);
}

QStringList ModelSummaryView::fieldKeys() {
    return {QStringLiteral("folder"),        QStringLiteral("architecture"), QStringLiteral("layers"),
            QStringLiteral("hidden"),        QStringLiteral("heads"),        QStringLiteral("headDim"),
            QStringLiteral("intermediate"),  QStringLiteral("vocab"),        QStringLiteral("parameters"),
            QStringLiteral("dtype"),         QStringLiteral("weightBytes"),  QStringLiteral("memoryFloat32"),
            QStringLiteral("memoryBFloat16"), QStringLiteral("tokenizer")};
}

QString ModelSummaryView::fieldText(const QString& key) const {
    if (!m_checkpoint) return {};
    const auto* value = findChild<QLabel*>(key + QStringLiteral("Value"));
    return value ? value->text() : QString();
}

QString ModelSummaryView::formatCount(qint64 n) {
    const double v = static_cast<double>(n);
    if (n >= 1'000'000'000) return QString::number(v / 1e9, 'f', 2) + QStringLiteral(" B");
    if (n >= 1'000'000) return QString::number(v / 1e6, 'f', 2) + QStringLiteral(" M");
    if (n >= 1'000) return QString::number(v / 1e3, 'f', 2) + QStringLiteral(" K");
    return QString::number(n);
}

void ModelSummaryView::setCheckpoint(std::shared_ptr<const latmix::model::Checkpoint> checkpoint) {
    m_checkpoint = std::move(checkpoint);
    m_tree->clear();
    if (!m_checkpoint) {
        m_stack->setCurrentIndex(0);
        return;
    }
    const auto& ck = *m_checkpoint;
    const auto& c = ck.config();
    const QString dir = QString::fromStdString(ck.dir());
    const QString folderName = QFileInfo(QDir::cleanPath(dir)).fileName();

    m_title->setText(folderName);
    m_title->setToolTip(QDir::toNativeSeparators(dir));
    m_folderPath = QDir::toNativeSeparators(dir);
    m_folderValue->setToolTip(m_folderPath);
    elideFolder();
    setField(QStringLiteral("architecture"), QString::fromStdString(c.architectureName));
    setField(QStringLiteral("layers"), QString::number(c.numLayers));
    setField(QStringLiteral("hidden"), QString::number(c.hiddenSize));
    setField(QStringLiteral("heads"), QStringLiteral("%1 / %2").arg(c.numHeads).arg(c.numKvHeads));
    setField(QStringLiteral("headDim"), QString::number(c.headDim));
    if (c.moe) // a mixture of experts: the router picks top-k of E experts of their own width per token
        setField(QStringLiteral("intermediate"),
                 tr("%1 experts of %2, top %3").arg(c.moe->numExperts).arg(c.moe->expertWidth).arg(c.moe->expertsPerToken),
                 tr("Mixture of experts: a router (kept in full precision) sends each token to %1 of %2 SwiGLU experts "
                    "of width %3%4")
                     .arg(c.moe->expertsPerToken)
                     .arg(c.moe->numExperts)
                     .arg(c.moe->expertWidth)
                     .arg(c.moe->denseLayers.empty() && c.moe->sparseStep == 1
                              ? QString()
                              : tr("; dense MLPs of %1 in the other layers").arg(c.intermediateSize)));
    else
        setField(QStringLiteral("intermediate"), QString::number(c.intermediateSize));
    setField(QStringLiteral("vocab"), QString::number(c.vocabSize));

    const qint64 params = ck.parameterCount();
    setField(QStringLiteral("parameters"), formatCount(params),
             tr("%1 parameters stored in the checkpoint%2")
                 .arg(QLocale::c().toString(params),
                      c.tieWordEmbeddings ? tr(" (lm_head shares the embedding: counted once)") : QString()));
    setField(QStringLiteral("dtype"), QString::fromStdString(c.torchDtype));
    setField(QStringLiteral("weightBytes"), dataSize(ck.weightBytes()),
             tr("%1 bytes of tensor data in the safetensors files").arg(QLocale::c().toString(ck.weightBytes())));

    updateMemoryRows();

    QString detail;
    setField(QStringLiteral("tokenizer"), tokenizerDescription(dir, &detail), detail);

    fillTree(c);
    m_stack->setCurrentIndex(1);
}

QString ModelSummaryView::tokenizerDescription(const QString& dir, QString* detail) const {
    const QDir d(dir);
    const bool hasFile = d.exists(QStringLiteral("tokenizer.json")) || d.exists(QStringLiteral("tokenizer.model"));
    try {
        const auto tok = latmix::tokenizer::Tokenizer::loadFromDir(dir.toStdString());
        *detail = tr("%1 from %2, %3 tokens")
                      .arg(QString::fromStdString(tok->kind()),
                           d.exists(QStringLiteral("tokenizer.json")) ? QStringLiteral("tokenizer.json")
                                                                      : QStringLiteral("tokenizer.model"))
                      .arg(tok->vocabSize());
        return QString::fromStdString(tok->kind());
    } catch (const std::exception& e) {
        // No tokenizer is normal for weight-only exports (llama2.c conversions); a tokenizer
        // file that fails to load is a different problem and is named as such.
        *detail = QString::fromStdString(e.what());
        return hasFile ? tr("unreadable") : tr("none found");
    }
}

void ModelSummaryView::setDevice(const QString& device) {
    m_device = device;
    updateMemoryRows();
}

void ModelSummaryView::updateMemoryRows() {
    if (!m_checkpoint) return;
    QString device = m_device.isEmpty() ? QString::fromStdString(latmix::deviceDescription()) : m_device;
    if (device.compare(QLatin1String("cpu"), Qt::CaseInsensitive) == 0) device = QStringLiteral("CPU");
    const bool onCpu = device.compare(QLatin1String("CPU"), Qt::CaseInsensitive) == 0;
    const auto f32 = latmix::model::weightMemory(*m_checkpoint, at::kFloat, onCpu);
    const auto bf16 = latmix::model::weightMemory(*m_checkpoint, at::kBFloat16, onCpu);
    const bool mapped = f32.mappedInPlace;
    const QString memTip = tr("Weights of the decoder in this dtype on %1 (the device chosen for runs); "
                              "activations come on top.").arg(device);
    setField(QStringLiteral("memoryFloat32"),
             tr("%1 on %2").arg(dataSize(f32.bytes), device) + (mapped ? tr(" (mapped)") : QString()),
             memTip + (mapped ? tr(" The weights are read in place from the memory-mapped file; when it "
                                   "holds another dtype, one layer at a time is converted.") : QString()));
    setField(QStringLiteral("memoryBFloat16"),
             tr("%1 on %2").arg(dataSize(bf16.bytes), device) + (mapped ? tr(" (mapped)") : QString()), memTip);
}

void ModelSummaryView::fillTree(const latmix::model::ModelConfig& config) {
    m_tree->setUpdatesEnabled(false);
    m_metricName.clear();
    m_metric.clear();
    setHeader();
    for (int layer = 0; layer < config.numLayers; ++layer) {
        auto* layerItem = new QTreeWidgetItem(m_tree, {tr("Layer %1").arg(layer)});
        const QString prefix = QStringLiteral("layers.%1.").arg(layer);
        for (PointKind kind : kKinds) {
            if (kind == PointKind::DownProjInput && config.isSparseLayer(layer)) {
                // A sparse layer: each expert's down_proj input is its own point, over the tokens
                // routed to it; the row stands for all of them ("layers.1.mlp.experts.E.down_proj.input":
                // the views keep the expert they show; the Experts tab shows the load).
                const auto& moe = *config.moe;
                auto* item = new QTreeWidgetItem(
                    layerItem, {tr("router → %1 experts (top %2)").arg(moe.numExperts).arg(moe.expertsPerToken),
                                QString::number(moe.expertWidth)});
                item->setData(0, Qt::UserRole,
                              FormWidgets::expertItem(QString::fromStdString(latmix::model::expertPointName(layer, 0, kind))).item);
                item->setData(0, kExpertsRole, moe.numExperts);
                item->setData(1, Qt::UserRole, moe.expertWidth);
                item->setTextAlignment(1, Qt::AlignRight | Qt::AlignVCenter);
                item->setToolTip(0, tr("%1 … %2\ninput of each expert's down_proj, over the tokens the router sends it; "
                                       "the router reads gate_up's input unquantized (see the Experts tab)")
                                        .arg(QString::fromStdString(latmix::model::expertPointName(layer, 0, kind)))
                                        .arg(moe.numExperts - 1));
                continue;
            }
            const QString name = QString::fromStdString(latmix::model::pointName(layer, kind));
            const int width = latmix::model::pointWidth(config, kind);
            // The layer is the parent; repeating "layers.N." in every row only costs dock width, and
            // so do the block ("self_attn.", "mlp.") and ".input" every point ends in: the row says
            // which linear reads it ("qkv", "down_proj"; issue 71: in a real X window the long names
            // elided to four rows of "…_proj.input"). The tool tip has the whole name.
            QString shortName = name.startsWith(prefix) ? name.mid(prefix.size()) : name;
            if (shortName.count(QLatin1Char('.')) >= 2) shortName = shortName.section(QLatin1Char('.'), 1);
            if (shortName.endsWith(QLatin1String(".input"))) shortName.chop(6);
            auto* item = new QTreeWidgetItem(layerItem, {shortName, QString::number(width), m_formats.value(name)});
            item->setData(0, Qt::UserRole, name);
            item->setData(1, Qt::UserRole, width);
            item->setTextAlignment(1, Qt::AlignRight | Qt::AlignVCenter);
            item->setToolTip(0, QStringLiteral("%1\n%2").arg(name, pointRole(kind)));
            // A sparse layer's experts are quantized with their layer (run::resolveKeptLinears).
            const bool experts = config.isSparseLayer(layer) && kind == PointKind::GateUpInput;
            for (const char* linear : experts ? std::vector<const char*>{} : linearsReading(kind)) {
                const QString module = QString::fromStdString(latmix::model::names::layerPrefix(layer)) + QLatin1String(linear);
                auto* row = new QTreeWidgetItem(item, {tr("%1: keep in bf16").arg(QString::fromLatin1(linear).section('.', -1))});
                row->setData(0, kLinearRole, module);
                row->setFlags(row->flags() | Qt::ItemIsUserCheckable);
                row->setCheckState(0, Qt::Unchecked);
                QString tip = tr("%1\nChecked: its weights and its input stay in bf16 in the runs started from the "
                                 "Calibration tab (--keep), through every method, the fold and the exports")
                                  .arg(module);
                if (linearsReading(kind).size() > 1) // vLLM fuses the linears of one input (SPEC §4, kept linears)
                    tip += tr("\nFor a compressed-tensors export (vLLM), keep the linears of this input together: "
                              "vLLM loads them as one layer with one scheme");
                row->setToolTip(0, tip);
            }
        }
    }
    // Small models open fully; for big ones the first layer shows what every layer holds
    // (32 open layers would be 160 rows to scroll through).
    // The points' linears stay folded away until asked for.
    if (config.numLayers <= 8)
        for (int i = 0; i < m_tree->topLevelItemCount(); ++i) m_tree->topLevelItem(i)->setExpanded(true);
    else if (m_tree->topLevelItemCount() > 0)
        m_tree->topLevelItem(0)->setExpanded(true);
    m_tree->setUpdatesEnabled(true);
}

QStringList ModelSummaryView::keptLinears() const {
    QStringList r;
    for (int i = 0; i < m_tree->topLevelItemCount(); ++i)
        for (int j = 0; j < m_tree->topLevelItem(i)->childCount(); ++j) {
            const QTreeWidgetItem* point = m_tree->topLevelItem(i)->child(j);
            for (int k = 0; k < point->childCount(); ++k)
                if (point->child(k)->checkState(0) == Qt::Checked) r << point->child(k)->data(0, kLinearRole).toString();
        }
    return r;
}

void ModelSummaryView::setKeptLinears(const QStringList& modules) {
    const QSignalBlocker block(m_tree);
    for (int i = 0; i < m_tree->topLevelItemCount(); ++i)
        for (int j = 0; j < m_tree->topLevelItem(i)->childCount(); ++j) {
            QTreeWidgetItem* point = m_tree->topLevelItem(i)->child(j);
            for (int k = 0; k < point->childCount(); ++k)
                point->child(k)->setCheckState(0, modules.contains(point->child(k)->data(0, kLinearRole).toString()) ? Qt::Checked
                                                                                                                   : Qt::Unchecked);
        }
}

QString ModelSummaryView::keepRegex(const QStringList& modules) {
    if (modules.isEmpty()) return {};
    QStringList escaped;
    for (const QString& m : modules) escaped << QRegularExpression::escape(m);
    return QStringLiteral("^(%1)$").arg(escaped.join(QLatin1Char('|')));
}

bool ModelSummaryView::eventFilter(QObject* watched, QEvent* event) {
    // The label's own resize (not ours): only then is the width the form layout gave it final.
    if (watched == m_folderValue && event->type() == QEvent::Resize) elideFolder();
    return QWidget::eventFilter(watched, event);
}

// The model's own folder name whole, what leads to it elided ("/tmp/tst_…/demo-model"), when it
// fits; else the whole path elided in the middle.
void ModelSummaryView::elideFolder() {
    const int width = m_folderValue->width();
    const QFontMetrics fm = m_folderValue->fontMetrics();
    if (width <= 40 || fm.horizontalAdvance(m_folderPath) <= width) {
        m_folderValue->setText(m_folderPath);
        return;
    }
    const qsizetype cut = m_folderPath.lastIndexOf(QDir::separator());
    const QString last = cut >= 0 ? m_folderPath.mid(cut) : QString(); // "/demo-model"
    const int room = width - fm.horizontalAdvance(last);
    if (cut > 0 && room > fm.horizontalAdvance(QStringLiteral("/t…")))
        m_folderValue->setText(fm.elidedText(m_folderPath.left(cut), Qt::ElideRight, room) + last);
    else
        m_folderValue->setText(fm.elidedText(m_folderPath, Qt::ElideMiddle, width));
}

int ModelSummaryView::pointCount() const {
    int n = 0;
    for (int i = 0; i < m_tree->topLevelItemCount(); ++i) n += m_tree->topLevelItem(i)->childCount();
    return n;
}

// The tree's row of a point (its full name in the row's data), null when it has none.
QTreeWidgetItem* ModelSummaryView::pointItem(const QString& pointName) const {
    for (int i = 0; i < m_tree->topLevelItemCount(); ++i) {
        QTreeWidgetItem* layer = m_tree->topLevelItem(i);
        for (int j = 0; j < layer->childCount(); ++j)
            if (layer->child(j)->data(0, Qt::UserRole).toString() == pointName) return layer->child(j);
    }
    return nullptr;
}

int ModelSummaryView::pointWidthShown(const QString& pointName) const {
    const QTreeWidgetItem* item = pointItem(pointName);
    return item ? item->text(1).toInt() : -1;
}

bool ModelSummaryView::selectPoint(const QString& pointName) {
    // One expert's own point ("layers.1.mlp.experts.5.down_proj.input") is its layer's experts row.
    const auto [row, expert] = FormWidgets::expertItem(pointName);
    for (int i = 0; i < m_tree->topLevelItemCount(); ++i) {
        QTreeWidgetItem* layer = m_tree->topLevelItem(i);
        for (int j = 0; j < layer->childCount(); ++j)
            if (layer->child(j)->data(0, Qt::UserRole).toString() == row) {
                if (expert >= layer->child(j)->data(0, kExpertsRole).toInt()) return false; // no such expert
                if (expert < 0) {
                    m_tree->setCurrentItem(layer->child(j)); // announced by currentItemChanged
                    return true;
                }
                {
                    const QSignalBlocker quiet(m_tree); // announced with the expert's number instead
                    m_tree->setCurrentItem(layer->child(j));
                }
                emit pointSelected(pointName);
                return true;
            }
    }
    return false;
}

void ModelSummaryView::setPointMetric(const QString& metric, const QMap<QString, double>& values) {
    if (metric != m_metricName) {
        m_metricName = metric;
        m_metric.clear();
    }
    for (auto it = values.begin(); it != values.end(); ++it)
        if (std::isfinite(it.value()) && it.value() > 0) m_metric[it.key()] = it.value();
    if (m_metric.isEmpty()) return;
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (double v : m_metric) {
        lo = std::min(lo, std::log10(v));
        hi = std::max(hi, std::log10(v));
    }
    setHeader();
    m_tree->header()->setSectionResizeMode(3, QHeaderView::ResizeToContents);
    for (int i = 0; i < m_tree->topLevelItemCount(); ++i) {
        QTreeWidgetItem* layer = m_tree->topLevelItem(i);
        for (int j = 0; j < layer->childCount(); ++j) {
            QTreeWidgetItem* item = layer->child(j);
            const auto it = m_metric.find(item->data(0, Qt::UserRole).toString());
            if (it == m_metric.end()) {
                item->setText(3, QString());
                for (int c = 0; c < 4; ++c) item->setBackground(c, QBrush());
                continue;
            }
            const double t = hi > lo ? (std::log10(it.value()) - lo) / (hi - lo) : 0.0;
            // Green (low) → red (high), pale enough for dark text on both themes.
            const QColor colour = QColor::fromHsvF((1.0 - t) / 3.0, 0.45, 0.95);
            item->setText(3, QString::number(it.value(), 'g', 3));
            item->setData(3, Qt::UserRole, it.value());
            item->setTextAlignment(3, Qt::AlignRight | Qt::AlignVCenter);
            for (int c = 0; c < 4; ++c) {
                item->setBackground(c, colour);
                item->setForeground(c, QColor(Qt::black));
            }
        }
    }
}

double ModelSummaryView::pointMetricShown(const QString& pointName) const {
    const QTreeWidgetItem* item = pointItem(pointName);
    return item && !item->text(3).isEmpty() ? item->data(3, Qt::UserRole).toDouble() : std::numeric_limits<double>::quiet_NaN();
}

// Point, Width, Format, and the metric once one is shown.
void ModelSummaryView::setHeader() {
    QStringList labels{tr("Point"), tr("Width"), tr("Format")};
    if (!m_metricName.isEmpty()) labels << m_metricName;
    m_tree->setColumnCount(int(labels.size()));
    m_tree->setHeaderLabels(labels);
    m_tree->headerItem()->setToolTip(2, tr("The format of the linears reading the point in the run the Calibration tab "
                                          "describes: its Format, or a Mixed precision rule's; bf16: kept"));
}

void ModelSummaryView::setPointFormats(const QMap<QString, QString>& formats) {
    m_formats = formats;
    for (int i = 0; i < m_tree->topLevelItemCount(); ++i) {
        QTreeWidgetItem* layer = m_tree->topLevelItem(i);
        for (int j = 0; j < layer->childCount(); ++j) {
            QTreeWidgetItem* item = layer->child(j);
            item->setText(2, formats.value(item->data(0, Qt::UserRole).toString()));
        }
    }
}

QString ModelSummaryView::pointFormatShown(const QString& pointName) const {
    const QTreeWidgetItem* item = pointItem(pointName);
    return item ? item->text(2) : QString();
}

} // namespace latmix::gui
