#include "AtenHeaders.h"

#include "metrics/TransformMetrics.h"
#include "TrainingDashboard.h"

#include "LayerErrorPlot.h"

#include "PlotInteraction.h"
#include "ElidedLabel.h"
#include "PlotStyle.h"

#include <qcustomplot.h>

#include <QDoubleSpinBox>
#include <QEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QResizeEvent>
#include <QScrollArea>
#include <QTimer>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <exception>
#include <map>

namespace latmix::gui {

namespace {

using latmix::train::DistillStep;

struct Quantity {
    const char* name;
    const char* label;
    double DistillStep::*field;
    bool smoothed;   // loss, KL and vol follow the smoothing; lr and the matrix metrics do not
    bool rightAxis;  // condition numbers: right axis (another scale)
    Qt::PenStyle style;
    const char* shortLabel = nullptr; // after a run's name in the legend of several runs
};

const std::vector<Quantity>& quantityTable() {
    static const std::vector<Quantity> q = {
        {"loss", "loss", &DistillStep::loss, true, false, Qt::SolidLine},
        {"objective", "objective (KL, CE or MSE)", &DistillStep::objective, true, false, Qt::DashLine, "objective"},
        {"vol", "volume term", &DistillStep::vol, true, false, Qt::SolidLine},
        {"lr", "learning rate", &DistillStep::lr, false, false, Qt::SolidLine},
        {"a1_orth", "‖AᵀA − I‖", &DistillStep::a1Orthogonality, false, false, Qt::SolidLine},
        {"a1_offblock", "off-block", &DistillStep::a1OffBlock, false, false, Qt::DashLine},
        {"a1_cond", "κ (right)", &DistillStep::a1Condition, false, true, Qt::DotLine},
        {"a2_orth", "‖AᵀA − I‖", &DistillStep::a2Orthogonality, false, false, Qt::SolidLine},
        {"a2_offblock", "off-block", &DistillStep::a2OffBlock, false, false, Qt::DashLine},
        {"a2_cond", "κ (right)", &DistillStep::a2Condition, false, true, Qt::DotLine},
        // Paper Table 2: the folded FP model's perplexity every k steps (DistillOptions::foldedEval).
        {"folded_ppl", "folded FP ppl (right)", &DistillStep::foldedPerplexity, false, true, Qt::DashDotLine, "folded ppl"},
    };
    return q;
}

const QColor kRunColors[] = {QColor(0x1f, 0x77, 0xb4), QColor(0xd6, 0x27, 0x28), QColor(0x2c, 0xa0, 0x2c),
                             QColor(0x94, 0x67, 0xbd), QColor(0xff, 0x7f, 0x0e), QColor(0x8c, 0x56, 0x4b)};

QCustomPlot* makePlot(QWidget* parent, const QString& objectName, const QString& title, const QString& yLabel) {
    auto* p = new QCustomPlot(parent);
    p->setObjectName(objectName);
    // 190 px tall: room for two labels on the y axis below the title and the legend (less read as
    // one number, tst_plotlayout); the dashboard scrolls down when the window is lower.
    p->setMinimumSize(160, 190);
    p->plotLayout()->insertRow(0);
    p->plotLayout()->addElement(0, 0, new QCPTextElement(p, title, QFont(p->font().family(), 9, QFont::Bold)));
    p->xAxis->setLabel(QObject::tr("step"));
    PlotStyle::integerTicks(p->xAxis);
    p->yAxis->setLabel(yLabel);
    p->legend->setVisible(true);
    p->legend->setFont(QFont(p->font().family(), 7));
    PlotStyle::placeLegendAbove(p);
    PlotInteraction::enable(p);
    return p;
}

QString etaText(double seconds) {
    if (seconds < 0 || !std::isfinite(seconds)) return QObject::tr("ETA unknown");
    const int s = static_cast<int>(std::lround(seconds));
    if (s >= 3600) return QObject::tr("ETA %1 h %2 min").arg(s / 3600).arg((s % 3600) / 60);
    if (s >= 60) return QObject::tr("ETA %1 min %2 s").arg(s / 60).arg(s % 60);
    return QObject::tr("ETA %1 s").arg(s);
}

// Average-pools a square matrix to at most `cells` per side for display (A1 of a 4096-wide model
// would be 16 M cells); returns float64 CPU.
at::Tensor forDisplay(const at::Tensor& m, int cells) {
    at::Tensor d = m.to(at::kDouble);
    const int64_t n = d.size(0);
    if (n <= cells) return d;
    const int64_t f = (n + cells - 1) / cells, padded = f * ((n + f - 1) / f);
    if (padded != n) d = at::constant_pad_nd(d, {0, padded - n, 0, padded - n}, 0.0);
    return d.reshape({padded / f, f, padded / f, f}).mean({1, 3});
}

} // namespace

QStringList TrainingDashboard::quantities() {
    QStringList r;
    for (const auto& q : quantityTable()) r << QString::fromLatin1(q.name);
    return r;
}

TrainingDashboard::TrainingDashboard(QWidget* parent) : QWidget(parent) {
    setObjectName(QStringLiteral("trainingDashboard"));
    auto* root = new QVBoxLayout(this);
    root->addLayout(createHeader());
    root->addLayout(createOptionsRow());
    root->addWidget(createPlots(), 1);

    m_replotTimer = new QTimer(this);
    m_replotTimer->setSingleShot(true);
    m_replotTimer->setInterval(100);
    connect(m_replotTimer, &QTimer::timeout, this, [this] {
        for (QCustomPlot* p : {m_lossPlot, m_volPlot, m_lrPlot, m_a1Plot, m_a2Plot}) p->replot(QCustomPlot::rpQueuedReplot);
    });
    m_heatmapTimer = new QTimer(this);
    m_heatmapTimer->setSingleShot(true);
    connect(m_heatmapTimer, &QTimer::timeout, this, &TrainingDashboard::drawHeatmaps);
    m_heatmapClock.start();
    applyTheme();
    rebuildGraphs();
}

// Header: run, progress with ETA, pause, cancel.
QLayout* TrainingDashboard::createHeader() {
    auto* header = new QHBoxLayout;
    m_title = new ElidedLabel(this);
    m_title->setObjectName(QStringLiteral("dashboardTitle"));
    QFont bold = m_title->font();
    bold.setBold(true);
    m_title->setFont(bold);
    m_title->setFullText(tr("Calibration — no run yet"));
    m_title->setMinimumWidth(120);
    header->addWidget(m_title, 3); // the run's name before a wider bar
    m_progress = new QProgressBar(this);
    m_progress->setObjectName(QStringLiteral("trainingProgress"));
    m_progress->setRange(0, 1000);
    m_progress->setTextVisible(true);
    m_progress->setFormat(QStringLiteral("%p%"));
    header->addWidget(m_progress, 2);
    m_pause = new QPushButton(tr("&Pause"), this);
    m_pause->setObjectName(QStringLiteral("pauseButton"));
    m_pause->setCheckable(true);
    m_pause->setEnabled(false);
    m_pause->setToolTip(tr("Hold the run at its next step; press again to go on"));
    header->addWidget(m_pause);
    m_cancel = new QPushButton(tr("&Cancel"), this);
    m_cancel->setObjectName(QStringLiteral("cancelButton"));
    m_cancel->setEnabled(false);
    m_cancel->setToolTip(tr("Stop the run after its current step; its run file keeps every finished step, and Run "
                            "with the same run folder and settings continues it"));
    header->addWidget(m_cancel);
    connect(m_pause, &QPushButton::toggled, this, [this](bool paused) {
        m_pause->setText(paused ? tr("&Resume") : tr("&Pause"));
        emit pauseToggled(paused);
    });
    // A step can take a minute on a large model: say that the run stops at the end of it.
    connect(m_cancel, &QPushButton::clicked, this, [this] {
        m_cancel->setEnabled(false);
        m_pause->setEnabled(false);
        const double step = lastStepSeconds();
        m_status->setText(step > 0 ? tr("Cancelling: the run stops when its current step ends (a step took %1 s)")
                                         .arg(step, 0, 'f', step < 10 ? 1 : 0)
                                   : tr("Cancelling: the run stops at its next safe point"));
        emit cancelRequested();
    });
    return header;
}

// Status, smoothing and the overlays of finished runs.
QLayout* TrainingDashboard::createOptionsRow() {
    auto* options = new QHBoxLayout;
    m_status = new QLabel(this);
    m_status->setObjectName(QStringLiteral("dashboardStatus"));
    m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
    // Long paths must not widen the window: the label shrinks (clipped), the tooltip has it all.
    m_status->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
    options->addWidget(m_status, 1);
    options->addWidget(new QLabel(tr("Smoothing:"), this));
    m_smoothingBox = new QDoubleSpinBox(this);
    m_smoothingBox->setObjectName(QStringLiteral("smoothingBox"));
    m_smoothingBox->setRange(0.0, 0.99);
    m_smoothingBox->setSingleStep(0.1);
    m_smoothingBox->setDecimals(2);
    m_smoothingBox->setToolTip(tr("Exponential moving average of loss, KL and volume term (0: raw values)"));
    options->addWidget(m_smoothingBox);
    auto* overlay = new QPushButton(tr("Add run &file…"), this);
    overlay->setObjectName(QStringLiteral("addOverlayButton"));
    overlay->setToolTip(tr("Overlay the curves of a finished run (its train.h5)"));
    options->addWidget(overlay);
    auto* clear = new QPushButton(tr("Clear overlays"), this);
    clear->setObjectName(QStringLiteral("clearOverlaysButton"));
    options->addWidget(clear);
    connect(m_smoothingBox, qOverload<double>(&QDoubleSpinBox::valueChanged), this, &TrainingDashboard::setSmoothing);
    connect(overlay, &QPushButton::clicked, this, [this] {
        const QString f = QFileDialog::getOpenFileName(this, tr("Overlay a run"), QString(), tr("Run files (train.h5 *.h5)"));
        if (f.isEmpty()) return;
        QString error;
        if (!addOverlay(f, &error)) m_status->setText(error);
    });
    connect(clear, &QPushButton::clicked, this, &TrainingDashboard::clearOverlays);
    return options;
}

// The curves (loss, volume, learning rate, A1 and A2 metrics) and A1's heat maps, in a grid that
// reflows to the width and scrolls down: the window's minimum width does not grow with the plots
// (issue 71: the Calibration tab held the window at 1187 px).
QWidget* TrainingDashboard::createPlots() {
    auto* scroll = new QScrollArea(this);
    scroll->setObjectName(QStringLiteral("dashboardScroll"));
    scroll->setFrameShape(QFrame::NoFrame);
    scroll->setWidgetResizable(true);
    scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAsNeeded);
    m_plotArea = new QWidget(scroll);
    m_plotArea->setObjectName(QStringLiteral("dashboardPlots"));
    m_lossPlot = makePlot(m_plotArea, QStringLiteral("lossPlot"), tr("Loss, objective"), tr("loss"));
    m_lossPlot->yAxis->setScaleType(QCPAxis::stLogarithmic);
    m_lossPlot->yAxis->setTicker(PlotStyle::logTicker());
    m_lossPlot->yAxis2->setLabel(tr("folded FP perplexity"));
    m_volPlot = makePlot(m_plotArea, QStringLiteral("volumePlot"), tr("Volume term"), tr("vol"));
    m_lrPlot = makePlot(m_plotArea, QStringLiteral("lrPlot"), tr("Learning rate"), tr("lr"));
    m_a1Plot = makePlot(m_plotArea, QStringLiteral("a1MetricsPlot"), tr("A1 metrics"), tr("norm"));
    m_a2Plot = makePlot(m_plotArea, QStringLiteral("a2MetricsPlot"), tr("A2 metrics (layer 0)"), tr("norm"));
    for (QCustomPlot* p : {m_a1Plot, m_a2Plot}) {
        p->yAxis2->setVisible(true);
        p->yAxis2->setLabel(tr("condition number"));
    }
    m_layerErrors = new LayerErrorPlot(
        makePlot(m_plotArea, QStringLiteral("layerErrorPlot"), tr("Quantization error per layer"), tr("relative error")), this);
    m_layerErrors->plot()->setToolTip(tr("Each layer's linears as the run quantizes them: their error against the FP "
                                         "weights, in output space over the calibration windows (GPTQ), in weight "
                                         "space for RTN; a layer's experts averaged per kind"));
    m_heatPlot = makePlot(m_plotArea, QStringLiteral("a1HeatmapPlot"), tr("A1"), tr("row"));
    m_offPlot = makePlot(m_plotArea, QStringLiteral("a1OffBlockPlot"), tr("A1 off-block"), tr("row"));
    for (QCustomPlot* p : {m_heatPlot, m_offPlot}) {
        p->setMinimumWidth(110);
        PlotStyle::integerTicks(p->xAxis); // rows and columns of A1
        PlotStyle::integerTicks(p->yAxis);
        p->xAxis->ticker()->setTickCount(3);
        p->yAxis->ticker()->setTickCount(3);
        p->xAxis->setLabel(tr("column"));
        p->legend->setVisible(false);
        p->yAxis->setRangeReversed(true); // row 0 at the top, as a matrix is read
    }
    m_heatCell = new QWidget(m_plotArea);
    auto* heat = new QHBoxLayout(m_heatCell);
    heat->setContentsMargins(0, 0, 0, 0);
    heat->addWidget(m_heatPlot);
    heat->addWidget(m_offPlot);
    m_plotGrid = new QGridLayout(m_plotArea);
    m_plotGrid->setContentsMargins(0, 0, 0, 0);
    reflowPlots(3 * 10000); // three columns until the first resize says otherwise
    scroll->setWidget(m_plotArea);
    scroll->viewport()->installEventFilter(this);
    return scroll;
}

// The cells that show a training (curves, metrics, A1's maps), in grid order.
QList<QWidget*> TrainingDashboard::trainingCells() const {
    return {m_lossPlot, m_volPlot, m_lrPlot, m_a1Plot, m_a2Plot, m_heatCell};
}

void TrainingDashboard::reflowPlots(int width) {
    // The training's cells are hidden for a method that learns nothing (GPTQ, RTN, QuaRot): then
    // the layers' errors are all there is to watch, at the whole width.
    QList<QWidget*> cells;
    for (QWidget* c : QList<QWidget*>{m_layerErrors->plot()} + trainingCells())
        if (!c->isHidden()) cells << c;
    const int spacing = std::max(0, m_plotGrid->horizontalSpacing());
    // The most columns whose widest row fits: each cell at the minimum width it was given (the
    // heat maps' cell: both maps), not QCustomPlot's size hints, which grow with legends.
    auto least = [&](QWidget* cell) {
        return cell == m_heatCell ? m_heatPlot->minimumWidth() + m_offPlot->minimumWidth() + spacing : cell->minimumWidth();
    };
    auto needed = [&](int columns) {
        int widest = 0;
        for (int first = 0; first < int(cells.size()); first += columns) {
            int row = 0;
            for (int i = first; i < std::min<int>(first + columns, cells.size()); ++i)
                row += least(cells[i]) + (i > first ? spacing : 0);
            widest = std::max(widest, row);
        }
        return widest;
    };
    int columns = std::min<int>(3, std::max<int>(1, cells.size()));
    while (columns > 1 && needed(columns) > width) --columns;
    if (columns == m_plotColumns && cells.size() == m_plotCells) return;
    m_plotColumns = columns;
    m_plotCells = static_cast<int>(cells.size());
    for (QLayoutItem* item; (item = m_plotGrid->takeAt(0)) != nullptr;) delete item;
    for (int i = 0; i < int(cells.size()); ++i) m_plotGrid->addWidget(cells[i], i / columns, i % columns);
    for (int c = 0; c < 3; ++c) m_plotGrid->setColumnStretch(c, c < columns ? 1 : 0);
}

bool TrainingDashboard::eventFilter(QObject* watched, QEvent* event) {
    if (event->type() == QEvent::Resize && m_plotArea && watched == m_plotArea->parentWidget())
        reflowPlots(static_cast<QResizeEvent*>(event)->size().width());
    return QWidget::eventFilter(watched, event);
}

void TrainingDashboard::beginRun(const QString& name, int totalSteps, int blockSize) {
    if (m_liveRun >= 0) m_runs.erase(m_runs.begin() + m_liveRun);
    Run r;
    r.name = name;
    r.live = true;
    r.color = kRunColors[m_runs.size() % (sizeof kRunColors / sizeof kRunColors[0])];
    m_runs.push_back(std::move(r));
    m_liveRun = static_cast<int>(m_runs.size()) - 1;
    m_running = true;
    m_totalSteps = totalSteps;
    m_blockSize = blockSize > 0 ? blockSize : 32;
    m_a1 = m_a2 = at::Tensor();
    m_matrixStep = m_heatmapStep = -1;
    m_title->setFullText(tr("Calibration — %1").arg(name));
    m_progress->setValue(0);
    m_status->setText(tr("starting…"));
    m_pause->setChecked(false);
    m_pause->setEnabled(true);
    m_cancel->setEnabled(true);
    for (QCustomPlot* p : {m_heatPlot, m_offPlot}) {
        p->clearPlottables();
        p->replot();
    }
    m_layerErrors->clear();
    rebuildGraphs();
}

void TrainingDashboard::addLayerErrors(int layer, const std::vector<std::pair<std::string, double>>& errors) {
    m_layerErrors->addLayer(layer, errors);
}

void TrainingDashboard::setTrackedLayer(int layer) {
    PlotStyle::setTitle(m_a2Plot, tr("A2 metrics (layer %1)").arg(layer));
    m_a2Plot->replot(QCustomPlot::rpQueuedReplot);
}

void TrainingDashboard::addStep(const DistillStep& step) {
    if (m_liveRun < 0) beginRun(tr("run"), 0, m_blockSize);
    m_runs[static_cast<size_t>(m_liveRun)].steps.push_back(step);
    rebuildGraphs();
}

void TrainingDashboard::setMatrices(int step, const at::Tensor& a1, const at::Tensor& a2) {
    m_a1 = a1;
    m_a2 = a2;
    m_matrixStep = step;
    // Throttled: at most one heatmap redraw per interval, the latest matrices always drawn.
    const qint64 since = m_heatmapClock.elapsed();
    if (m_heatmapStep < 0 || since >= m_heatmapIntervalMs) {
        m_heatmapTimer->stop();
        drawHeatmaps();
    } else if (!m_heatmapTimer->isActive()) {
        m_heatmapTimer->start(static_cast<int>(m_heatmapIntervalMs - since));
    }
}

double TrainingDashboard::lastStepSeconds() const {
    if (m_liveRun < 0) return 0;
    const auto& steps = m_runs[static_cast<size_t>(m_liveRun)].steps;
    return steps.empty() ? 0 : steps.back().seconds;
}

void TrainingDashboard::setProgress(double fraction, const QString& message, double etaSeconds) {
    m_progress->setValue(static_cast<int>(std::lround(std::clamp(fraction, 0.0, 1.0) * 1000)));
    if (!m_cancel->isEnabled() && m_running) return; // "Cancelling: …" stays until the run has stopped
    QString text = message + QStringLiteral(" — ") + (isPaused() ? tr("paused") : etaText(etaSeconds));
    const double step = lastStepSeconds();
    if (step > 0) text += QStringLiteral(" — ") + tr("%1 s a step").arg(step, 0, 'f', step < 10 ? 2 : 1);
    m_status->setText(text);
}

void TrainingDashboard::finishRun(bool ok, const QString& message) {
    m_running = false;
    m_pause->setChecked(false);
    m_pause->setEnabled(false);
    m_cancel->setEnabled(false);
    if (ok) m_progress->setValue(1000);
    m_status->setText(message);
    m_status->setToolTip(message);
    if (m_heatmapTimer->isActive()) {
        m_heatmapTimer->stop();
        drawHeatmaps();
    }
}

bool TrainingDashboard::addOverlay(const QString& runFile, QString* error) {
    Run r;
    try {
        r.steps = latmix::train::readDistillSeries(runFile.toStdString());
    } catch (const std::exception& e) {
        if (error) *error = tr("Cannot overlay %1: %2").arg(runFile, QString::fromLocal8Bit(e.what()));
        return false;
    }
    if (r.steps.empty()) {
        if (error) *error = tr("Cannot overlay %1: the run file holds no training steps").arg(runFile);
        return false;
    }
    const QFileInfo fi(runFile);
    r.file = fi.absoluteFilePath();
    // A run is named by its folder (every run's series is train.h5).
    r.name = fi.fileName() == QLatin1String("train.h5") ? fi.dir().dirName() : fi.dir().dirName() + QLatin1Char('/') + fi.fileName();
    if (m_liveRun < 0) m_title->setFullText(tr("Calibration — opened %1").arg(r.name));
    // The same file again (a run opened twice) replaces its curves rather than doubling them.
    for (Run& old : m_runs)
        if (!old.live && old.file == r.file) {
            old.steps = std::move(r.steps);
            rebuildGraphs();
            return true;
        }
    r.color = kRunColors[m_runs.size() % (sizeof kRunColors / sizeof kRunColors[0])];
    m_runs.push_back(std::move(r));
    rebuildGraphs();
    return true;
}

void TrainingDashboard::clearOverlays() {
    std::vector<Run> keep;
    for (auto& r : m_runs)
        if (r.live) keep.push_back(std::move(r));
    m_runs = std::move(keep);
    m_liveRun = m_runs.empty() ? -1 : 0;
    if (m_runs.empty()) m_title->setFullText(tr("Calibration — no run yet"));
    rebuildGraphs();
}

void TrainingDashboard::setSmoothing(double alpha) {
    alpha = std::clamp(alpha, 0.0, 0.99);
    if (alpha == m_smoothing) return;
    m_smoothing = alpha;
    if (m_smoothingBox->value() != alpha) m_smoothingBox->setValue(alpha);
    rebuildGraphs();
}

static QCustomPlot* plotOf(const TrainingDashboard* d, const QString& q) {
    if (q == QLatin1String("loss") || q == QLatin1String("objective") || q == QLatin1String("folded_ppl")) return d->lossPlot();
    if (q == QLatin1String("vol")) return d->volumePlot();
    if (q == QLatin1String("lr")) return d->lrPlot();
    return q.startsWith(QLatin1String("a1")) ? d->a1Plot() : d->a2Plot();
}

void TrainingDashboard::rebuildGraphs() {
    bool training = m_totalSteps > 0;
    for (const Run& run : m_runs) training = training || !run.steps.empty();
    if (training == m_lossPlot->isHidden()) {
        for (QWidget* c : trainingCells()) c->setHidden(!training);
        reflowPlots(m_plotArea->parentWidget() ? m_plotArea->parentWidget()->width() : 3 * 10000);
    }
    for (QCustomPlot* p : {m_lossPlot, m_volPlot, m_lrPlot, m_a1Plot, m_a2Plot}) p->clearGraphs();
    for (size_t ri = 0; ri < m_runs.size(); ++ri) {
        const Run& run = m_runs[ri];
        for (const Quantity& q : quantityTable()) {
            const QString qn = QString::fromLatin1(q.name);
            QCustomPlot* p = plotOf(this, qn);
            QCPGraph* g = p->addGraph(p->xAxis, q.rightAxis ? p->yAxis2 : p->yAxis);
            // One run: the legend names the quantities (the run is in the title); several: run too.
            // A run's name ends in what tells runs apart (its time stamp); the legend keeps that end
            // and the quantity's short label, so an entry fits a plot of the narrowest column.
            QString runLabel = run.name;
            if (runLabel.size() > 16) runLabel = QStringLiteral("…") + runLabel.right(15);
            g->setName(m_runs.size() == 1 ? QString::fromUtf8(q.label)
                                          : runLabel + QStringLiteral(": ") + QString::fromUtf8(q.shortLabel ? q.shortLabel : q.label));
            g->setProperty("run", static_cast<int>(ri));
            g->setProperty("quantity", qn);
            QPen pen(run.color, run.live ? 1.6 : 1.0, q.style);
            g->setPen(pen);
            QVector<double> x, y;
            double ema = 0;
            bool first = true;
            for (const auto& s : run.steps) {
                const double v = s.*(q.field);
                if (!std::isfinite(v)) continue; // metrics exist only every k steps
                double shown = v;
                if (q.smoothed && m_smoothing > 0) {
                    ema = first ? v : m_smoothing * ema + (1 - m_smoothing) * v;
                    shown = ema;
                }
                first = false;
                x << s.step;
                y << shown;
            }
            g->setData(x, y, true);
            if (x.isEmpty() && qn == QLatin1String("folded_ppl")) g->removeFromLegend(); // tracked only on request
        }
    }
    // The loss plot's right axis holds the folded FP perplexity, shown when a run tracked it.
    bool folded = false;
    for (const Run& run : m_runs)
        for (const auto& s : run.steps) folded = folded || std::isfinite(s.foldedPerplexity);
    m_lossPlot->yAxis2->setVisible(folded);
    for (QCustomPlot* p : {m_lossPlot, m_volPlot, m_lrPlot, m_a1Plot, m_a2Plot}) {
        bool found = false;
        const QCPRange xr = p->graphCount() ? p->graph(0)->getKeyRange(found) : QCPRange();
        p->rescaleAxes();
        if (m_totalSteps > 0 && m_running) p->xAxis->setRange(0, std::max<double>(m_totalSteps, xr.upper));
        (void)found;
    }
    // The volume term, the learning rate and the matrices' norms are never negative: their axes
    // start at 0, which a reader can then read the curve against (and a short axis keeps two labels).
    for (QCustomPlot* p : {m_volPlot, m_lrPlot, m_a1Plot, m_a2Plot})
        if (p->yAxis->range().lower > 0) p->yAxis->setRangeLower(0);
    scheduleReplot();
}

void TrainingDashboard::scheduleReplot() {
    if (!m_replotTimer->isActive()) m_replotTimer->start();
}

void TrainingDashboard::drawHeatmaps() {
    if (!m_a1.defined()) return;
    m_heatmapClock.restart();
    m_heatmapStep = m_matrixStep;
    const at::Tensor a = forDisplay(m_a1, 256);
    // Off-block part: A1 with its B×B diagonal blocks zeroed (SPEC §3's off-block norm).
    const at::Tensor off = forDisplay(latmix::metrics::offBlockPart(m_a1, m_blockSize), 256);
    const int64_t n = m_a1.size(0);
    auto draw = [&](QCustomPlot* p, const at::Tensor& m, const QString& title) {
        p->clearPlottables();
        const int cells = static_cast<int>(m.size(0));
        auto* map = new QCPColorMap(p->xAxis, p->yAxis);
        map->setName(title);
        map->data()->setSize(cells, cells);
        map->data()->setRange(QCPRange(0, n - 1), QCPRange(0, n - 1));
        const at::Tensor c = m.contiguous();
        const double* v = c.data_ptr<double>();
        double mx = 0;
        for (int r = 0; r < cells; ++r)
            for (int col = 0; col < cells; ++col) {
                const double x = v[r * cells + col];
                map->data()->setCell(col, r, x);
                mx = std::max(mx, std::abs(x));
            }
        map->setGradient(QCPColorGradient::gpPolar);
        map->setDataRange(QCPRange(-std::max(mx, 1e-12), std::max(mx, 1e-12)));
        map->setInterpolate(false);
        p->rescaleAxes();
        if (auto* t = qobject_cast<QCPTextElement*>(p->plotLayout()->element(0, 0)))
            // Two lines: the heatmaps are narrow, "A1 off-block, step 60" on one line was cut.
            t->setText(QStringLiteral("%1\nstep %2").arg(title).arg(m_heatmapStep));
        p->setToolTip(tr("%1 at step %2; colour scale ±%3 (blue negative, red positive)").arg(title).arg(m_heatmapStep).arg(mx, 0, 'g', 3));
        p->replot(QCustomPlot::rpQueuedReplot);
    };
    draw(m_heatPlot, a, tr("A1"));
    draw(m_offPlot, off, tr("A1 off-block"));
}

// The graph drawing quantity for run (graphs carry both as properties), or nullptr.
static QCPGraph* graphOf(const TrainingDashboard* d, int run, const QString& quantity) {
    QCustomPlot* p = plotOf(d, quantity);
    for (int i = 0; i < p->graphCount(); ++i)
        if (p->graph(i)->property("run").toInt() == run && p->graph(i)->property("quantity").toString() == quantity)
            return p->graph(i);
    return nullptr;
}

QVector<double> TrainingDashboard::plottedValues(int run, const QString& quantity) const {
    QVector<double> r;
    if (const QCPGraph* g = graphOf(this, run, quantity))
        for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it) r << it->value;
    return r;
}

QVector<double> TrainingDashboard::plottedSteps(int run, const QString& quantity) const {
    QVector<double> r;
    if (const QCPGraph* g = graphOf(this, run, quantity))
        for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it) r << it->key;
    return r;
}

QVector<double> TrainingDashboard::heatmapValues(bool offBlock) const {
    QCustomPlot* p = offBlock ? m_offPlot : m_heatPlot;
    QVector<double> r;
    for (int i = 0; i < p->plottableCount(); ++i)
        if (auto* m = qobject_cast<QCPColorMap*>(p->plottable(i))) {
            QCPColorMapData* d = m->data();
            for (int y = 0; y < d->valueSize(); ++y)
                for (int x = 0; x < d->keySize(); ++x) r << d->cell(x, y);
        }
    return r;
}

QString TrainingDashboard::statusText() const { return m_status->text(); }
bool TrainingDashboard::isPaused() const { return m_pause->isChecked(); }

void TrainingDashboard::changeEvent(QEvent* event) {
    QWidget::changeEvent(event);
    if (event->type() == QEvent::PaletteChange) applyTheme();
}

void TrainingDashboard::applyTheme() {
    PlotStyle::restyle({m_layerErrors->plot(), m_lossPlot, m_volPlot, m_lrPlot, m_a1Plot, m_a2Plot, m_heatPlot, m_offPlot}, palette(),
                       true);
}

} // namespace latmix::gui
