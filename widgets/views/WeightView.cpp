#include "AtenHeaders.h"

#include "WeightView.h"

#include "FormWidgets.h"
#include "JobRunner.h"
#include "PlotStyle.h"

#include "model/QuantizationPoints.h"
#include "model/ModelConfig.h"
#include "model/TensorNames.h"
#include "mx/MxFormat.h"
#include "analysis/ModelAnalysis.h"

#include <qcustomplot.h>

#include <QComboBox>
#include <QDir>
#include <QFileInfo>
#include <QFormLayout>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QRegularExpression>
#include <QSpinBox>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>

namespace latmix::gui {

namespace {

using PlotStyle::values;

const QColor kBefore(140, 140, 140);
const QColor kAfter(31, 119, 180);

QCPGraph* addGraph(QCustomPlot* p, const QString& name, const QColor& colour, QCPGraph::LineStyle style) {
    auto* g = p->addGraph();
    g->setName(name);
    g->setPen(QPen(colour, 1.4));
    g->setLineStyle(style);
    return g;
}

// Which linear the weights view shows for an activation point: the first one reading it.
const char* firstLinearOf(model::PointKind k) {
    switch (k) {
    case model::PointKind::QkvInput: return model::names::kQProj;
    case model::PointKind::OProjInput: return model::names::kOProj;
    case model::PointKind::GateUpInput: return model::names::kGateProj;
    case model::PointKind::DownProjInput: return model::names::kDownProj;
    }
    return model::names::kQProj;
}

} // namespace

QStringList WeightView::linears() {
    QStringList l;
    for (const char* n : model::names::kBlockLinears) l << QString::fromLatin1(n);
    return l;
}

WeightView::WeightView(QWidget* parent) : AnalysisView(parent, tr("The weights are still being loaded")) {
    setObjectName(QStringLiteral("weightView"));

    auto* form = new QWidget(this);
    form->setFixedWidth(260);
    auto* column = new QVBoxLayout(form);
    column->setContentsMargins(0, 0, 0, 0);
    auto* box = new QGroupBox(tr("Weights"), form);
    auto* f = new QFormLayout(box);
    m_layer = FormWidgets::spin(box, "weightLayerSpin", 0, 0, 0);
    f->addRow(tr("&Layer:"), m_layer);
    m_linear = new QComboBox(box);
    m_linear->setObjectName(QStringLiteral("weightLinearCombo"));
    m_linear->addItems(linears());
    f->addRow(tr("L&inear:"), m_linear);
    m_expert = FormWidgets::spin(box, "weightExpertSpin", 0, 0, 0);
    m_expert->setToolTip(tr("The expert whose linear is shown (mixture-of-experts models)"));
    f->addRow(tr("E&xpert:"), m_expert);
    m_format = FormWidgets::formatCombo(box, "weightFormatCombo");
    f->addRow(tr("&Format:"), m_format);
    addUpdateOnChange(f, QStringLiteral("weightAutoCheck"), [this] { analyze(); });
    column->addWidget(box);
    m_runLabel = new QLabel(form);
    m_runLabel->setObjectName(QStringLiteral("weightRunLabel"));
    m_runLabel->setWordWrap(true);
    column->addWidget(m_runLabel);
    const auto footer = FormWidgets::addFormFooter(form, column, QStringLiteral("weight"), tr("&Show weights"));
    m_analyze = footer.button;
    m_summary = footer.summary;
    setStatusLine(footer.status);

    auto plot = [this](const char* name, const QString& title) { return PlotStyle::newPlot(this, name, title); };
    // Linear axes: a weight's column norms and group errors span far less than activations do
    // (no massive channels), and a log axis over half a decade labels the same power twice.
    m_channelPlot = plot("weightChannelPlot", tr("Input channel norm ‖W[:, j]‖₂"));
    m_channelPlot->xAxis->setLabel(tr("input channel"));
    m_groupPlot = plot("weightGroupPlot", tr("MX error per group (row mean)"));
    m_groupPlot->xAxis->setLabel(tr("group of input channels"));
    m_groupPlot->yAxis->setNumberFormat(QStringLiteral("gb"));
    m_heatBefore = plot("weightHeatmapBefore", tr("Group error: original"));
    m_heatAfter = plot("weightHeatmapAfter", tr("Group error: folded"));
    for (QCustomPlot* p : {m_heatBefore, m_heatAfter}) {
        p->xAxis->setLabel(tr("group of input channels"));
        p->yAxis->setLabel(tr("output row"));
        p->yAxis->setRangeReversed(true); // row 0 on top, as in the matrix
    }
    for (QCustomPlot* p : {m_channelPlot, m_groupPlot, m_heatBefore, m_heatAfter}) {
        PlotStyle::integerTicks(p->xAxis); // channels, groups
        p->xAxis->ticker()->setTickCount(5);
    }
    for (QCustomPlot* p : {m_heatBefore, m_heatAfter}) PlotStyle::integerTicks(p->yAxis); // rows

    auto* grid = new QGridLayout;
    grid->addWidget(m_channelPlot, 0, 0);
    grid->addWidget(m_groupPlot, 0, 1);
    grid->addWidget(m_heatBefore, 1, 0);
    grid->addWidget(m_heatAfter, 1, 1);
    auto* layout = new QHBoxLayout(this);
    layout->addWidget(form);
    layout->addLayout(grid, 1);

    connect(m_analyze, &QPushButton::clicked, this, [this] { analyze(); });
    auto changed = [this] { analyzeIfAutomatic(); };
    connect(m_layer, qOverload<int>(&QSpinBox::valueChanged), this, changed);
    connect(m_linear, &QComboBox::currentTextChanged, this, changed);
    connect(m_expert, qOverload<int>(&QSpinBox::valueChanged), this, changed);
    connect(m_format, &QComboBox::currentTextChanged, this, changed);
    setPlots({m_channelPlot, m_groupPlot, m_heatBefore, m_heatAfter});
    setModelDir(QString());
    setRun(QString());
}

void WeightView::fillLinears(const latmix::model::ModelConfig* c) {
    const QSignalBlocker block(m_linear), blockExpert(m_expert);
    const QString current = m_linear->currentText();
    m_linear->clear();
    const bool moe = c && c->moe;
    if (!moe) {
        m_linear->addItems(linears());
    } else {
        namespace names = model::names;
        for (const char* n : {names::kQProj, names::kKProj, names::kVProj, names::kOProj}) m_linear->addItem(QString::fromLatin1(n));
        m_linear->addItem(QString::fromStdString(names::routerModule(*c)));
        for (auto kind : {names::ExpertLinear::Gate, names::ExpertLinear::Up, names::ExpertLinear::Down}) {
            // "mlp.experts.E.up_proj": the chosen expert's linear of that kind
            m_linear->addItem(FormWidgets::expertItem(QString::fromStdString(names::expertModule(*c, 0, kind))).item,
                              int(kind));
        }
        m_expert->setRange(0, c->moe->numExperts - 1);
    }
    m_expert->setEnabled(moe);
    const int i = m_linear->findText(current);
    m_linear->setCurrentIndex(std::max(i, 0));
}

void WeightView::setModelDir(const QString& dir) {
    m_modelDir = dir;
    m_config.reset();
    int layers = 0;
    if (!dir.isEmpty()) {
        try {
            m_config = latmix::model::ModelConfig::fromFile(QDir(dir).filePath(QStringLiteral("config.json")).toStdString());
            layers = m_config->numLayers;
        } catch (const std::exception& e) {
            statusLine()->setText(QString::fromLocal8Bit(e.what()));
        }
    }
    fillLinears(m_config ? &*m_config : nullptr);
    {
        const QSignalBlocker block(m_layer);
        m_layer->setRange(0, std::max(layers - 1, 0));
    }
    m_analyze->setEnabled(layers > 0);
    m_analyze->setToolTip(layers > 0 ? QString() : tr("Open a model first"));
}

void WeightView::setRun(const QString& runDir) {
    m_runKept.clear();
    m_runName = QDir(runDir).dirName();
    try { // the run's model config names the linears it kept in bf16
        const QString config = QDir(runDir).filePath(QStringLiteral("model/config.json"));
        if (!runDir.isEmpty() && QFileInfo::exists(config)) {
            const auto c = latmix::model::ModelConfig::fromFile(config.toStdString());
            if (c.latmix)
                for (const auto& k : c.latmix->keptLinears) m_runKept << QString::fromStdString(k);
        }
    } catch (const std::exception&) {
        // an unreadable config: the folded side says why when it is asked for
    }
    const bool usable = !runDir.isEmpty() && QFileInfo::exists(QDir(runDir).filePath(QStringLiteral("transforms.h5")));
    m_runDir = usable ? runDir : QString();
    m_runLabel->setText(usable ? tr("Folded: the weights of run %1 (its T1/T2/T3 folded in)").arg(QDir(runDir).dirName())
                               : tr("Open a run with learned or fixed transforms (File › Open run) to see its folded weights"));
    m_runLabel->setToolTip(usable ? QDir::toNativeSeparators(runDir) : QString());
}

bool WeightView::selectLinear(int layer, const QString& linear) {
    // An expert's linear ("mlp.experts.5.up_proj") is its kind's item and the expert's number.
    const auto [item, expert] = FormWidgets::expertItem(linear);
    if (expert > m_expert->maximum()) return false;
    const int i = m_linear->findText(item);
    if (i < 0 || layer < m_layer->minimum() || layer > m_layer->maximum()) return false;
    {
        // One analysis for the pair, not one per field.
        const QSignalBlocker a(m_layer), b(m_linear), c(m_expert);
        m_layer->setValue(layer);
        m_linear->setCurrentIndex(i);
        if (expert >= 0) m_expert->setValue(expert);
    }
    analyzeIfAutomatic();
    return true;
}

void WeightView::analyzeIfAutomatic() {
    if (!m_modelDir.isEmpty()) settingChanged();
}

bool WeightView::selectPoint(const QString& point) {
    static const QRegularExpression re(QStringLiteral("^layers\\.(\\d+)\\."));
    const auto m = re.match(point);
    if (!m.hasMatch()) return false;
    const int layer = m.captured(1).toInt();
    // An expert's own down_proj input (or its layer's experts item, for the expert shown): that
    // expert's down_proj (Mixtral's w2).
    const auto [item, number] = FormWidgets::expertItem(point);
    const QString downInputs = FormWidgets::expertItem(
                                   QString::fromStdString(model::expertPointName(layer, 0, model::PointKind::DownProjInput)))
                                   .item;
    if (item == downInputs && m_config && m_config->moe) {
        const int expert = number >= 0 ? number : m_expert->value();
        return selectLinear(layer, QString::fromStdString(
                                       model::names::expertModule(*m_config, expert, model::names::ExpertLinear::Down)));
    }
    for (auto k : {model::PointKind::QkvInput, model::PointKind::OProjInput, model::PointKind::GateUpInput,
                   model::PointKind::DownProjInput})
        if (point == QString::fromStdString(model::pointName(layer, k))) return selectLinear(layer, QString::fromLatin1(firstLinearOf(k)));
    return false;
}

int WeightView::layer() const { return m_layer->value(); }
QString WeightView::linear() const {
    const QVariant kind = m_linear->currentData();
    if (!kind.isValid() || !m_config || !m_config->moe) return m_linear->currentText();
    return QString::fromStdString(
        model::names::expertModule(*m_config, m_expert->value(), static_cast<model::names::ExpertLinear>(kind.toInt())));
}
void WeightView::setFormat(const QString& format) { m_format->setCurrentText(format); }

bool WeightView::analyze(QString* error) {
    auto fail = [&](const QString& why) { return refuse(why, error); };
    if (m_modelDir.isEmpty()) return fail(tr("Open a model first"));
    if (refusedWhileBusy(error)) return false;
    latmix::metrics::WeightProfileOptions options;
    try {
        options.format = latmix::mx::makeConfig(latmix::mx::parseFormat(m_format->currentText().toStdString()));
        options.format.validate();
    } catch (const std::exception& e) {
        return fail(tr("Invalid settings: %1").arg(QString::fromLocal8Bit(e.what())));
    }
    const std::string dir = m_modelDir.toStdString(), lin = linear().toStdString();
    const std::string transforms =
        m_runDir.isEmpty() ? std::string() : QDir(m_runDir).filePath(QStringLiteral("transforms.h5")).toStdString();
    const int l = layer();
    const std::string name = "layers." + std::to_string(l) + "." + lin;
    auto out = std::make_shared<latmix::metrics::WeightProfile>();
    auto work = [=](latmix::JobContext& job) {
        job.progress(0.0, transforms.empty() ? "loading " + name : "loading and folding " + name);
        const auto w = latmix::analysis::loadLinearWeights(dir, l, lin, transforms);
        job.checkCancelled();
        job.progress(0.5, "measuring the MX error of " + name);
        *out = latmix::metrics::profileWeights(w.original, w.folded, options, name);
        job.progress(1.0, name);
    };
    auto ended = [this, out](bool ok, const QString& status) {
        if (ok) {
            m_profile = std::move(*out);
            showProfile();
        }
        emit profileFinished(ok, status);
    };
    return startJob({tr("Weights of %1").arg(QString::fromStdString(name)), std::move(work), tr("Loading…"), tr("Weights failed"), {m_analyze}},
                    std::move(ended), error);
}

void WeightView::showHeatmap(QCustomPlot* p, const latmix::metrics::WeightSide* side, double lo, double hi) {
    PlotStyle::clearHeatmap(p);
    if (!side) {
        p->replot();
        return;
    }
    const auto& e = side->groupError;
    const int bands = static_cast<int>(e.size(0)), groups = static_cast<int>(e.size(1));
    const auto rows = values(e.reshape({-1}));
    auto* map = PlotStyle::addHeatmap(p, groups, bands, tr("group error"), true);
    map->setName(tr("MX error per group"));
    // Cell k spans the band's rows; its centre sits at the band's middle row (bands are equal to
    // within one row).
    const auto& start = side->bandStart;
    const double first = (start[0] + start[1] - 1) / 2.0, last = (start[start.size() - 2] + start.back() - 1) / 2.0;
    map->data()->setRange(QCPRange(0, std::max(groups - 1, 0)), QCPRange(first, bands > 1 ? last : first + 1));
    for (int k = 0; k < bands; ++k)
        for (int g = 0; g < groups; ++g) map->data()->setCell(g, k, std::max(rows[k * groups + g], kErrorFloor));
    map->colorScale()->axis()->setNumberFormat(QStringLiteral("eb"));
    map->colorScale()->axis()->setNumberPrecision(1);
    // Both maps on one colour range, so that a colour means the same error in each.
    map->setDataRange(QCPRange(lo, hi));
    PlotStyle::apply(p, palette());
    p->rescaleAxes();
    p->replot();
}

void WeightView::showProfile() {
    const auto& p = m_profile;
    const QString before = tr("original"), after = tr("folded (run %1)").arg(QDir(m_runDir).dirName());
    {
        auto* plot = m_channelPlot;
        plot->clearGraphs();
        plot->clearItems();
        const auto b = values(p.before.inputChannelNorm);
        const auto a = p.hasAfter ? values(p.after.inputChannelNorm) : QVector<double>();
        QVector<double> x(b.size());
        for (int i = 0; i < x.size(); ++i) x[i] = i;
        addGraph(plot, before, kBefore, QCPGraph::lsImpulse)->setData(x, b, true);
        if (p.hasAfter) addGraph(plot, after, kAfter, QCPGraph::lsLine)->setData(x, a, true);
        QVector<QPointF> at;
        QStringList names;
        for (const auto c : p.before.topChannels) {
            at << QPointF(double(c), b[int(c)]);
            names << QString::number(c);
        }
        PlotStyle::addPeakLabels(plot, at, names, palette().color(QPalette::Text));
        plot->rescaleAxes();
        double top = 0;
        for (const auto* v : {&b, &a})
            for (double y : *v) top = std::max(top, y);
        plot->yAxis->setRange(0, top > 0 ? top * 1.15 : 1); // room above for the names
        plot->replot();
    }
    {
        auto* plot = m_groupPlot;
        plot->clearGraphs();
        const auto b = values(p.before.columnGroupError);
        const auto a = p.hasAfter ? values(p.after.columnGroupError) : QVector<double>();
        QVector<double> x(b.size());
        for (int i = 0; i < x.size(); ++i) x[i] = i;
        addGraph(plot, before, kBefore, QCPGraph::lsStepCenter)->setData(x, b, true);
        if (p.hasAfter) addGraph(plot, after, kAfter, QCPGraph::lsStepCenter)->setData(x, a, true);
        plot->rescaleAxes();
        plot->yAxis->setRangeLower(0);
        plot->replot();
    }
    // One colour range over both maps: the smallest positive and the largest group error.
    double lo = std::numeric_limits<double>::infinity(), hi = 0;
    for (const auto* side : {&p.before, p.hasAfter ? &p.after : nullptr}) {
        if (!side) continue;
        for (double v : values(side->groupError)) {
            if (v > 0) lo = std::min(lo, v);
            hi = std::max(hi, v);
        }
    }
    if (!std::isfinite(lo)) lo = kErrorFloor;
    if (hi <= lo) hi = lo * 10;
    showHeatmap(m_heatBefore, &p.before, lo, hi);
    showHeatmap(m_heatAfter, p.hasAfter ? &p.after : nullptr, lo, hi);
    if (auto* t = qobject_cast<QCPTextElement*>(m_heatAfter->plotLayout()->element(0, 0)))
        t->setText(p.hasAfter ? tr("Group error: folded") : tr("Group error: folded (open a run)"));
    const int bands = static_cast<int>(p.before.groupError.size(0));
    QStringList topNames;
    for (auto c : p.before.topChannels) topNames << QString::number(c);
    QString text = tr("%1: %2 × %3 (out × in), %4, %5 groups a row\nRelative MX error ‖W − Q(W)‖²/‖W‖²: %6 original")
                       .arg(QString::fromStdString(p.name))
                       .arg(p.rows)
                       .arg(p.cols)
                       .arg(QString::fromStdString(p.format.describe()))
                       .arg(p.groups)
                       .arg(p.before.relativeError, 0, 'g', 4);
    if (p.hasAfter) {
        const double ratio = p.after.relativeError > 0 ? p.before.relativeError / p.after.relativeError
                                                       : std::numeric_limits<double>::infinity();
        text += tr(", %1 folded (%2× %3)")
                    .arg(p.after.relativeError, 0, 'g', 4)
                    .arg(ratio >= 1 ? ratio : 1 / ratio, 0, 'g', 3)
                    .arg(ratio >= 1 ? tr("lower") : tr("higher"));
    }
    const QString module = QStringLiteral("model.") + QString::fromStdString(p.name);
    if (m_runKept.contains(module))
        text += tr("\nKept in bf16 by run %1 (--keep): neither this weight nor its input is quantized there")
                    .arg(m_runName);
    text += tr("\nLargest input channels: %1\nHeat maps: %2 bands of output rows (each the mean of its rows)")
                .arg(topNames.join(QStringLiteral(", ")))
                .arg(bands);
    m_summary->setText(text);
}

} // namespace latmix::gui
