#include "AtenHeaders.h"

#include "ActivationView.h"

#include "CalibrationView.h"
#include "FormWidgets.h"
#include "JobRunner.h"
#include "PlotStyle.h"

#include "model/ModelConfig.h"
#include "mx/MxFormat.h"
#include "analysis/ModelAnalysis.h"
#include "transforms/AffineTransform.h"
#include "transforms/LearnedTransforms.h"

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
#include <QSpinBox>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>

namespace latmix::gui {

namespace {

// Captures kept in memory (a 14336-wide point of 8 windows × 64 tokens is 29 MB).
constexpr int kMaxCachedCaptures = 8;

using PlotStyle::values;

QVector<double> indices(int n, double offset = 0) {
    QVector<double> v(n);
    for (int i = 0; i < n; ++i) v[i] = i + offset;
    return v;
}

// The log axes need positive values: zeros (an all-zero channel, an exact block) are drawn at
// the axis floor instead of vanishing.
QVector<double> positive(QVector<double> v, double floor) {
    for (double& x : v) x = std::max(x, floor);
    return v;
}

double positiveFloor(const QVector<double>& a, const QVector<double>& b) {
    double m = std::numeric_limits<double>::infinity();
    for (const auto* v : {&a, &b})
        for (double x : *v)
            if (x > 0) m = std::min(m, x);
    return std::isfinite(m) ? m / 2 : 1e-12;
}

void setLogY(QCustomPlot* p) {
    p->yAxis->setScaleType(QCPAxis::stLogarithmic);
    p->yAxis->setTicker(PlotStyle::logTicker(4));
    p->yAxis->setNumberFormat(QStringLiteral("eb"));
    p->yAxis->setNumberPrecision(0);
}

QCPGraph* addGraph(QCustomPlot* p, const QString& name, const QColor& colour, QCPGraph::LineStyle style,
                   QCPScatterStyle::ScatterShape shape = QCPScatterStyle::ssNone) {
    auto* g = p->addGraph();
    g->setName(name);
    g->setPen(QPen(colour, 1.4));
    g->setLineStyle(style);
    if (shape != QCPScatterStyle::ssNone) g->setScatterStyle(QCPScatterStyle(shape, colour, 4));
    return g;
}

const QColor kBefore(140, 140, 140);
const QColor kAfter(31, 119, 180);
const QColor kQuantized(214, 39, 40);

} // namespace

QStringList ActivationView::transformKinds() {
    return {QStringLiteral("none"), QStringLiteral("hadamard"), QStringLiteral("block-hadamard"), QStringLiteral("orthogonal"),
            QStringLiteral("block-orthogonal")};
}

ActivationView::ActivationView(QWidget* parent) : AnalysisView(parent, tr("The activations are still being captured")) {
    setObjectName(QStringLiteral("activationView"));

    auto* form = new QWidget(this);
    form->setFixedWidth(260);
    auto* column = new QVBoxLayout(form);
    column->setContentsMargins(0, 0, 0, 0);
    auto* box = new QGroupBox(tr("Activations"), form);
    auto* f = new QFormLayout(box);
    m_point = FormWidgets::PointPicker(box, "activationPointCombo", "activationExpertSpin");
    // On a row of its own: "layers.27.self_attn.o_proj.input" needs the box's whole width.
    auto* pointLabel = new QLabel(tr("&Point:"), box);
    pointLabel->setBuddy(m_point.combo());
    f->addRow(pointLabel);
    f->addRow(m_point.combo());
    f->addRow(tr("E&xpert:"), m_point.expert());
    m_transform = new QComboBox(box);
    m_transform->setObjectName(QStringLiteral("activationTransformCombo"));
    m_transform->addItems(transformKinds());
    m_transform->setCurrentText(QStringLiteral("hadamard"));
    m_transform->setToolTip(tr("Applied to the captured activations (seed 0, block = the format's block)"));
    f->addRow(tr("&Transform:"), m_transform);
    m_format = FormWidgets::formatCombo(box, "activationFormatCombo");
    f->addRow(tr("&Format:"), m_format);
    m_windows = FormWidgets::spin(box, "activationWindowsSpin", 1, 4096, 4);
    f->addRow(tr("&Windows:"), m_windows);
    m_seqLen = FormWidgets::spin(box, "activationSeqLenSpin", 8, 8192, 64);
    f->addRow(tr("Window &length:"), m_seqLen);
    m_token = FormWidgets::spin(box, "activationTokenSpin", 0, 4 * 64 - 1, 0,
                                tr("The captured token whose MX blocks are shown (windows × length tokens)"));
    f->addRow(tr("To&ken:"), m_token);
    addUpdateOnChange(f, QStringLiteral("activationAutoCheck"), [this] { analyze(); });
    column->addWidget(box);
    const auto footer = FormWidgets::addFormFooter(form, column, QStringLiteral("activation"), tr("&Show activations"));
    m_analyze = footer.button;
    m_summary = footer.summary;
    setStatusLine(footer.status);

    auto plot = [this](const char* name, const QString& title) { return PlotStyle::newPlot(this, name, title); };
    m_channelPlot = plot("activationChannelPlot", tr("Per-channel max |x| over tokens"));
    m_channelPlot->xAxis->setLabel(tr("channel"));
    setLogY(m_channelPlot);
    m_tokenNormPlot = plot("activationTokenNormPlot", tr("Per-token norm ‖x‖₂"));
    m_tokenNormPlot->xAxis->setLabel(tr("token"));
    m_histogramPlot = plot("activationHistogramPlot", tr("Histogram of values"));
    m_histogramPlot->xAxis->setLabel(tr("value"));
    setLogY(m_histogramPlot);
    m_blocksPlot = plot("activationBlocksPlot", tr("MX blocks of one token (after)"));
    m_blocksPlot->xAxis->setLabel(tr("channel (after the transform)"));
    m_blocksPlot->xAxis2->setVisible(true);
    m_blocksPlot->xAxis2->setLabel(tr("block: log₂ shared scale"));
    m_blocksPlot->yAxis2->setVisible(true);
    m_blocksPlot->yAxis2->setLabel(tr("block error E_B"));
    m_blocksPlot->yAxis2->setTickLabels(true);
    m_blocksPlot->yAxis2->ticker()->setTickCount(4);
    for (QCustomPlot* p : {m_channelPlot, m_tokenNormPlot, m_blocksPlot}) PlotStyle::integerTicks(p->xAxis); // channels, tokens
    for (QCustomPlot* p : {m_channelPlot, m_tokenNormPlot, m_histogramPlot, m_blocksPlot}) p->xAxis->ticker()->setTickCount(5);

    auto* grid = new QGridLayout;
    grid->addWidget(m_channelPlot, 0, 0);
    grid->addWidget(m_tokenNormPlot, 0, 1);
    grid->addWidget(m_histogramPlot, 1, 0);
    grid->addWidget(m_blocksPlot, 1, 1);
    auto* layout = new QHBoxLayout(this);
    layout->addWidget(form);
    layout->addLayout(grid, 1);

    connect(m_analyze, &QPushButton::clicked, this, [this] { analyze(); });
    auto changed = [this] {
        if (!m_modelDir.isEmpty()) settingChanged();
    };
    connect(m_transform, &QComboBox::currentTextChanged, this, changed);
    connect(m_format, &QComboBox::currentTextChanged, this, changed);
    connect(m_token, qOverload<int>(&QSpinBox::valueChanged), this, changed);
    // The tokens a point can have: every captured token, until a capture shows fewer (an
    // expert's own point has the tokens routed to it).
    auto tokens = [this] { m_token->setMaximum(m_windows->value() * m_seqLen->value() - 1); };
    connect(m_windows, qOverload<int>(&QSpinBox::valueChanged), this, tokens);
    connect(m_seqLen, qOverload<int>(&QSpinBox::valueChanged), this, tokens);
    connect(m_point.combo(), &QComboBox::currentTextChanged, this, tokens);
    connect(m_point.expert(), qOverload<int>(&QSpinBox::valueChanged), this, tokens);
    connect(m_point.combo(), &QComboBox::currentTextChanged, this, changed);
    connect(m_point.expert(), qOverload<int>(&QSpinBox::valueChanged), this, changed);
    setPlots({m_channelPlot, m_tokenNormPlot, m_histogramPlot, m_blocksPlot});
    setModelDir(QString());
}

void ActivationView::setModelDir(const QString& dir) {
    m_modelDir = dir;
    m_cache.clear();
    m_cacheOrder.clear();
    m_activations = at::Tensor();
    try {
        m_point.setModelDir(dir);
    } catch (const std::exception& e) {
        statusLine()->setText(QString::fromLocal8Bit(e.what()));
    }
    m_analyze->setEnabled(!m_point.isEmpty());
    m_analyze->setToolTip(!m_point.isEmpty() ? QString() : tr("Open a model first"));
}

bool ActivationView::selectPoint(const QString& point) { return m_point.select(point); }

QString ActivationView::currentPoint() const { return m_point.current(); } // empty without a model

void ActivationView::setRun(const QString& runDir) {
    const QString transforms = QDir(runDir).filePath(QStringLiteral("transforms.h5"));
    const bool usable = !runDir.isEmpty() && QFileInfo::exists(transforms);
    const int at = m_transform->findText(runTransformName());
    const bool wasCurrent = at >= 0 && m_transform->currentIndex() == at;
    {
        const QSignalBlocker block(m_transform);
        if (at >= 0) m_transform->removeItem(at);
        m_runDir = usable ? runDir : QString();
        if (usable) {
            m_transform->addItem(runTransformName(), transforms);
            m_transform->setItemData(m_transform->count() - 1,
                                     tr("The point captured from the model of the run %1 (its T1/T2/T3 folded in): "
                                        "what that run's quantizers see")
                                         .arg(QDir::toNativeSeparators(runDir)),
                                     Qt::ToolTipRole);
            if (wasCurrent) m_transform->setCurrentIndex(m_transform->count() - 1);
        }
    }
    if (wasCurrent && !usable) m_transform->setCurrentIndex(0);
}

bool ActivationView::setTransform(const QString& kind) {
    const int i = m_transform->findText(kind);
    if (i >= 0) m_transform->setCurrentIndex(i);
    return i >= 0;
}

QString ActivationView::transform() const { return m_transform->currentText(); }
void ActivationView::setFormat(const QString& format) { m_format->setCurrentText(format); }

void ActivationView::setCalibration(int windows, int seqLen) {
    m_windows->setValue(windows);
    m_seqLen->setValue(seqLen);
}

void ActivationView::setToken(int token) { m_token->setValue(token); }
int ActivationView::windows() const { return m_windows->value(); }
int ActivationView::seqLen() const { return m_seqLen->value(); }
int ActivationView::token() const { return m_token->value(); }

QString ActivationView::cacheKey() const {
    return QStringLiteral("%1|%2|%3|%4").arg(m_modelDir, currentPoint()).arg(m_windows->value()).arg(m_seqLen->value());
}

bool ActivationView::analyze(QString* error) {
    auto fail = [&](const QString& why) { return refuse(why, error); };
    if (m_modelDir.isEmpty() || currentPoint().isEmpty()) return fail(tr("Open a model first"));
    if (refusedWhileBusy(error)) return false;
    latmix::metrics::ActivationProfileOptions options;
    latmix::transforms::TransformOptions to;
    try {
        options.format = latmix::mx::makeConfig(latmix::mx::parseFormat(m_format->currentText().toStdString()));
        options.format.validate();
    } catch (const std::exception& e) {
        return fail(tr("Invalid settings: %1").arg(QString::fromLocal8Bit(e.what())));
    }
    options.token = m_token->value();
    to.blockSize = options.format.blockSize;
    const std::string kind = m_transform->currentText().toStdString();
    const std::string runTransforms = m_transform->currentData().toString().toStdString(); // empty: a fixed kind
    const QString key = cacheKey(), runKey = key + QStringLiteral("|") + QString::fromStdString(runTransforms);
    const at::Tensor cached = m_cache.value(key);
    const at::Tensor cachedRun = runTransforms.empty() ? at::Tensor() : m_cache.value(runKey);
    const QByteArray builtIn = builtInCalibrationText();
    if (!cached.defined() && builtIn.isEmpty()) return fail(tr("The built-in calibration text is missing from this build"));
    latmix::analysis::ModelCapture request;
    request.modelDir = m_modelDir.toStdString();
    request.calibrationText = builtIn.toStdString();
    request.pointsRegex = FormWidgets::exactPointRegex(currentPoint());
    request.expertPoints = true;
    request.samples = m_windows->value();
    request.seqLen = m_seqLen->value();
    const std::string point = currentPoint().toStdString();
    struct Out {
        at::Tensor activations, runActivations;
        latmix::metrics::ActivationProfile profile;
    };
    auto out = std::make_shared<Out>();
    out->activations = cached;
    out->runActivations = cachedRun;
    const std::string runLabel = runTransformName().toStdString(); // the legend's name; the summary names the run
    auto work = [=](latmix::JobContext& job) {
        const bool twice = !runTransforms.empty() && !out->runActivations.defined();
        auto capture = [&](const std::string& transformsFile, double begin, double end) {
            latmix::SubJob sub(job, begin, end, transformsFile.empty() ? "" : "run's model: ");
            auto r = request;
            r.transformsFile = transformsFile;
            const auto acts = latmix::analysis::captureModelActivations(r, sub);
            if (acts.empty()) throw std::runtime_error("no activations were captured at " + point);
            return acts.front().second;
        };
        if (!out->activations.defined()) out->activations = capture("", 0.0, twice ? 0.5 : 1.0);
        if (twice) out->runActivations = capture(runTransforms, cached.defined() ? 0.0 : 0.5, 1.0);
        job.checkCancelled();
        // An expert's own point has the tokens routed to it: the token shown is at most its last.
        auto o = options;
        o.token = std::min<std::int64_t>(o.token, out->activations.size(0) - 1);
        if (!runTransforms.empty()) {
            if (out->runActivations.size(0) != out->activations.size(0))
                throw std::runtime_error(point + " gets " + std::to_string(out->activations.size(0)) +
                                         " tokens in the model and " + std::to_string(out->runActivations.size(0)) +
                                         " in the run's (the router chose otherwise on a near-tie): choose another expert");
            out->profile = latmix::metrics::profileActivationPair(out->activations, out->runActivations, runLabel, o, point);
        } else {
            const auto t = latmix::transforms::makeTransform(kind, out->activations.size(1), to);
            out->profile = latmix::metrics::profileActivations(out->activations, *t, o, point);
        }
    };
    const QString shownPoint = currentPoint();
    const int capturedTokens = m_windows->value() * m_seqLen->value();
    auto ended = [this, out, key, runKey, runTransforms, shownPoint, capturedTokens](bool ok, const QString& status) {
        auto keep = [this](const QString& k, const at::Tensor& t) {
            if (!t.defined() || m_cache.contains(k)) return;
            m_cache.insert(k, t);
            m_cacheOrder << k;
            while (m_cacheOrder.size() > kMaxCachedCaptures) m_cache.remove(m_cacheOrder.takeFirst());
        };
        keep(key, out->activations);
        if (!runTransforms.empty()) keep(runKey, out->runActivations);
        if (ok) {
            m_activations = out->activations;
            m_profile = std::move(out->profile);
            m_profilePoint = shownPoint;
            m_profileTokens = capturedTokens;
            if (shownPoint == currentPoint() && capturedTokens == m_windows->value() * m_seqLen->value()) {
                // The point's own tokens (fewer for an expert's point): a token above them was
                // shown as the last, which the box now says (quietly: this profile is of it).
                const QSignalBlocker quiet(m_token);
                m_token->setMaximum(int(m_activations.size(0)) - 1);
            }
            showProfile();
        }
        emit profileFinished(ok, status);
    };
    return startJob({tr("Activations of %1").arg(currentPoint()), std::move(work), cached.defined() ? tr("Analysing…") : tr("Capturing…"),
                     tr("Activations failed"), {m_analyze}},
                    std::move(ended), error);
}

void ActivationView::showProfile() {
    drawChannelMaxima();
    drawTokenNorms();
    drawHistograms();
    drawTokenBlocks();
    showSummary();
}

// Channel maxima, log scale, the largest channels of the untransformed activations named.
void ActivationView::drawChannelMaxima() {
    const auto& p = m_profile;
    const QString before = tr("no transform"), after = QString::fromStdString(p.transform);
    auto* plot = m_channelPlot;
    plot->clearGraphs();
    plot->clearItems();
    const auto b = values(p.before.channelAbsMax), a = values(p.after.channelAbsMax);
    const double floor = positiveFloor(b, a);
    addGraph(plot, before, kBefore, QCPGraph::lsImpulse)->setData(indices(b.size()), positive(b, floor), true);
    addGraph(plot, after, kAfter, QCPGraph::lsLine)->setData(indices(a.size()), positive(a, floor), true);
    // At most five names that fit without overlapping (PlotStyle::addPeakLabels); the summary
    // lists the top channels in full.
    QVector<QPointF> at;
    QStringList names;
    for (const auto c : p.before.topChannels) {
        at << QPointF(double(c), std::max(b[int(c)], floor));
        names << QString::number(c);
    }
    PlotStyle::addPeakLabels(plot, at, names, palette().color(QPalette::Text));
    plot->rescaleAxes();
    const double top = *std::max_element(b.begin(), b.end());
    plot->yAxis->setRange(floor / 1.5, std::max(top, floor) * 4); // room above for the names
    plot->replot();
}

// Each token's norm before and after the transform.
void ActivationView::drawTokenNorms() {
    const auto& p = m_profile;
    const QString before = tr("no transform"), after = QString::fromStdString(p.transform);
    auto* plot = m_tokenNormPlot;
    plot->clearGraphs();
    const auto b = values(p.before.tokenNorm), a = values(p.after.tokenNorm);
    // Wide and light under the transformed curve: an orthogonal T keeps every norm, and the
    // two curves then lie on each other.
    auto* g = addGraph(plot, before, kBefore, QCPGraph::lsLine);
    g->setPen(QPen(kBefore.lighter(130), 4));
    g->setData(indices(b.size()), b, true);
    addGraph(plot, after, kAfter, QCPGraph::lsLine)->setData(indices(a.size()), a, true);
    plot->rescaleAxes();
    plot->replot();
}

// The value histograms of both sides.
void ActivationView::drawHistograms() {
    const auto& p = m_profile;
    const QString before = tr("no transform"), after = QString::fromStdString(p.transform);
    auto* plot = m_histogramPlot;
    plot->clearGraphs();
    for (const auto* side : {&p.before, &p.after}) {
        const auto edges = values(side->histogramEdges), counts = values(side->histogramCounts);
        QVector<double> centres(counts.size());
        for (int i = 0; i < counts.size(); ++i) centres[i] = (edges[i] + edges[i + 1]) / 2;
        // Empty bins at the floor below 1: a log axis has no zero.
        addGraph(plot, side == &p.before ? before : after, side == &p.before ? kBefore : kAfter, QCPGraph::lsStepCenter)
            ->setData(centres, positive(counts, 0.5), true);
    }
    plot->rescaleAxes();
    plot->yAxis->setRangeLower(0.5);
    plot->replot();
}

// One token's values, their MX values and each block's error and scale exponent.
void ActivationView::drawTokenBlocks() {
    const auto& p = m_profile;
    auto* plot = m_blocksPlot;
    plot->clearGraphs();
    const auto y = values(p.after.tokenValues), q = values(p.after.tokenQuantized);
    const auto err = values(p.after.tokenBlockError), scale = values(p.after.tokenScaleLog2);
    addGraph(plot, tr("T(x)"), kAfter, QCPGraph::lsNone, QCPScatterStyle::ssDisc)
        ->setData(indices(y.size()), y, true);
    addGraph(plot, tr("MX"), kQuantized, QCPGraph::lsImpulse)->setData(indices(q.size()), q, true);
    const int block = p.format.blockSize;
    QVector<double> centres(err.size());
    for (int i = 0; i < err.size(); ++i) centres[i] = i * block + (std::min<double>(block, y.size() - i * block) - 1) / 2;
    auto* e = plot->addGraph(plot->xAxis, plot->yAxis2);
    e->setName(tr("E_B"));
    e->setPen(QPen(palette().color(QPalette::Text), 1, Qt::DashLine));
    e->setLineStyle(QCPGraph::lsStepCenter);
    e->setData(centres, err, true);
    // The shared scale exponent above each block.
    QSharedPointer<QCPAxisTickerText> top(new QCPAxisTickerText);
    for (int i = 0; i < scale.size(); ++i)
        top->addTick(centres[i], std::isfinite(scale[i]) ? QString::number(scale[i], 'g', 3) : QStringLiteral("NaN"));
    plot->xAxis2->setTicker(top);
    plot->rescaleAxes();
    // Four blocks are readable value by value: those around the token's worst block (the
    // whole token stays a drag or a wheel away).
    const int shown = std::min<int>(4, static_cast<int>(err.size()));
    const int worst = static_cast<int>(std::max_element(err.begin(), err.end()) - err.begin());
    const int first = std::clamp(worst - shown / 2, 0, static_cast<int>(err.size()) - shown);
    plot->xAxis->setRange(first * block - 0.5, std::min<double>(y.size(), (first + shown) * block) - 0.5);
    plot->xAxis2->setRange(plot->xAxis->range());
    connect(plot->xAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), plot->xAxis2, qOverload<const QCPRange&>(&QCPAxis::setRange),
            Qt::UniqueConnection);
    plot->axisRect()->setRangeDrag(Qt::Horizontal);
    plot->axisRect()->setRangeZoom(Qt::Horizontal);
    m_blocksShown = QPair<int, int>(first, first + shown - 1);
    plot->replot();
}

// The numbers under the plots: sizes, format, the error with and without the transform.
void ActivationView::showSummary() {
    const auto& p = m_profile;
    const QString after = QString::fromStdString(p.transform);
    const bool runMode = QString::fromStdString(p.transform) == runTransformName();
    const double ratio = p.after.mse > 0 ? p.before.mse / p.after.mse : std::numeric_limits<double>::infinity();
    QStringList topNames;
    for (auto c : p.before.topChannels) topNames << QString::number(c);
    // For a run the two sides are two models' activations: each error is the MX error at the
    // point in its quantizer's coordinates (SPEC §3's E(T) needs one x and a T; see core).
    const QString errorName = runMode ? tr("MX error at the point") : tr("E(T)");
    // An expert's own point: its rows are the tokens the router sent it.
    const int expert = FormWidgets::expertItem(m_profilePoint).expert;
    const QString tokens = expert < 0 ? tr("%1 tokens").arg(p.rows)
                                      : tr("%1 tokens routed to expert %2 (of %3 captured)")
                                            .arg(p.rows)
                                            .arg(expert)
                                            .arg(m_profileTokens);
    m_summary->setText(tr("%1 × %2 channels, %3\n%14: %4 without a transform, %5 with %6 (%7× %8)\n"
                          "Largest channels: %9\nBlocks %10–%11 of %12 shown (token %13's worst in the middle)")
                           .arg(tokens)
                           .arg(p.dim)
                           .arg(QString::fromStdString(p.format.describe()))
                           .arg(p.before.mse, 0, 'g', 4)
                           .arg(p.after.mse, 0, 'g', 4)
                           .arg(runMode ? tr("the model of run %1").arg(QDir(m_runDir).dirName()) : after)
                           .arg(ratio >= 1 ? ratio : 1 / ratio, 0, 'g', 3)
                           .arg(ratio >= 1 ? tr("lower") : tr("higher"))
                           .arg(topNames.join(QStringLiteral(", ")))
                           .arg(m_blocksShown.first)
                           .arg(m_blocksShown.second)
                           .arg(p.after.blockError.numel())
                           .arg(p.token)
                           .arg(errorName));
}

} // namespace latmix::gui
