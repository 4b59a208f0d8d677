#include "AtenHeaders.h"

#include "ComparisonView.h"
#include "FormWidgets.h"

#include "AnalysisPlots.h"
#include "CalibrationView.h"
#include "JobRunner.h"
#include "PlotInteraction.h"
#include "PlotStyle.h"

#include "model/Checkpoint.h"
#include "analysis/ModelAnalysis.h"
#include "tokenizer/Tokenizer.h"
#include "mx/MxFormat.h"

#include <qcustomplot.h>

#include <algorithm>

#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QListWidget>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>

#include <cmath>
#include <memory>
#include <stdexcept>

namespace latmix::gui {

namespace {

// A table cell that sorts by its number, not its text: 3 significant digits (the tooltip has 10).
class NumberItem : public QTableWidgetItem {
public:
    explicit NumberItem(double v, const QString& text) : QTableWidgetItem(std::isfinite(v) ? text : QStringLiteral("—")) {
        setToolTip(QString::number(v, 'g', 10));
        setData(Qt::UserRole, v);
        setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
    }
    explicit NumberItem(double v) : NumberItem(v, QString::number(v, 'g', 3)) {}
    bool operator<(const QTableWidgetItem& other) const override {
        return data(Qt::UserRole).toDouble() < other.data(Qt::UserRole).toDouble();
    }
};

// Seconds to 10 ms, at most five characters ("0.03", "12.41", "1234"): the time a machine takes
// must not widen the table ('g' wrote "0.0291" here and "0.00874" on a faster CI machine, which
// pushed the last column behind a scroll bar at 1280 px).
QString secondsText(double s) { return QString::number(s, 'f', s < 100 ? 2 : 0); }

// Short headers (their long names are the tooltips) and 3 significant digits (the tooltip has 10):
// all eight columns, the names whole, fit beside the form at 1280×800 without a horizontal scroll
// bar (tst_plotlayout); narrower, the table scrolls sideways rather than cutting a name. No
// "mean E_B" column: when d is a multiple of B (every model we open) the mean of E_B^i = (1/B)Σ err²
// over the d/B blocks is (1/d)Σ err² = E(T), the same number twice (it took 89 px).
const char* const kColumns[] = {"Transform", "E(T)", "E_B max", "bound", "κ(A)", "‖AᵀA−I‖σ", "off-block", "s"};
const char* const kColumnTips[] = {"",
                                   "Transformation MSE E(T) (SPEC §3), also the mean of the per-block errors E_B",
                                   "Largest per-block error E_B",
                                   "Theorem 1's bound without its constant: ‖A⁻¹‖σ²/N_B · Σ M_i",
                                   "Condition number of A",
                                   "Orthogonality deviation",
                                   "Spectral norm of A outside its MX-block diagonal",
                                   "Seconds to build (and train) the transform"};

// "layers.3.mlp.down_proj.input" → "mlp.down_proj.input"
QString pointKind(const QString& point) {
    const int a = point.indexOf('.'), b = point.indexOf('.', a + 1);
    return b > 0 ? point.mid(b + 1) : point;
}


} // namespace

std::vector<int> ComparisonView::calibrationIds(const std::string& modelDir) {
    const QByteArray text = builtInCalibrationText();
    if (text.isEmpty()) throw std::runtime_error("the built-in calibration text is missing from this build");
    return latmix::tokenizer::Tokenizer::loadFromDir(modelDir)->encode(text.toStdString(), false);
}

ComparisonView::ComparisonView(QWidget* parent) : AnalysisView(parent, tr("A comparison is already running")) {
    setObjectName(QStringLiteral("comparisonView"));
    QWidget* form = createForm();
    createTable();
    QWidget* plots = createPlots();
    auto* layout = new QHBoxLayout(this);
    layout->addWidget(FormWidgets::scrollingForm(form));
    layout->addWidget(plots, 1);

    connect(m_compare, &QPushButton::clicked, this, [this] { compare(); });
    connect(m_acrossLayers, &QPushButton::clicked, this, [this] { compareAcrossLayers(m_heatmapKind->currentText()); });
    setPlots({m_perBlockPlot, m_sweepPlot, m_heatmapPlot});
    setModelDir(QString());
}


// The left column: the point and its format and windows, the transforms to compare, the map
// across layers, the status line.
QWidget* ComparisonView::createForm() {
    auto* form = new QWidget(this);
    form->setObjectName(QStringLiteral("comparisonForm"));
    form->setFixedWidth(260);
    auto* column = new QVBoxLayout(form);
    column->setContentsMargins(0, 0, 0, 0);
    auto* pointBox = new QGroupBox(tr("Quantization point"), form);
    auto* pf = new QFormLayout(pointBox);
    m_point = FormWidgets::PointPicker(pointBox, "pointCombo", "comparisonExpertSpin");
    // On a row of its own, as in the activation view: a point's name needs the box's width.
    auto* pointLabel = new QLabel(tr("&Point:"), pointBox);
    pointLabel->setBuddy(m_point.combo());
    pf->addRow(pointLabel);
    pf->addRow(m_point.combo());
    pf->addRow(tr("E&xpert:"), m_point.expert());
    m_format = FormWidgets::formatCombo(pointBox, "comparisonFormatCombo");
    pf->addRow(tr("&Format:"), m_format);
    m_samples = FormWidgets::spin(pointBox, "comparisonSamplesSpin", 1, 4096, 8);
    pf->addRow(tr("&Windows:"), m_samples);
    m_seqLen = FormWidgets::spin(pointBox, "comparisonSeqLenSpin", 8, 8192, 64);
    pf->addRow(tr("Window &length:"), m_seqLen);
    m_steps = FormWidgets::spin(pointBox, "comparisonStepsSpin", 1, 100000, 100, tr("Layer-local training steps of the learned kinds"));
    pf->addRow(tr("Learned &steps:"), m_steps);
    column->addWidget(pointBox);

    auto* kindsBox = new QGroupBox(tr("Transforms"), form);
    auto* kl = new QVBoxLayout(kindsBox);
    m_kinds = new QListWidget(kindsBox);
    m_kinds->setObjectName(QStringLiteral("transformList"));
    for (const auto& k : latmix::train::analysisKinds()) {
        auto* item = new QListWidgetItem(QString::fromStdString(k), m_kinds);
        item->setFlags(item->flags() | Qt::ItemIsUserCheckable);
        const bool on = k == "none" || k == "hadamard" || k == "block-hadamard" || k == "learned-affine-lu" || k == "wush";
        item->setCheckState(on ? Qt::Checked : Qt::Unchecked);
    }
    // Three rows at least, the rest scrolls: the form fits a 700-px-high window (tst_plotlayout).
    m_kinds->setMinimumHeight(3 * m_kinds->fontMetrics().height() + 8);
    kl->addWidget(m_kinds);
    column->addWidget(kindsBox, 1);
    m_compare = new QPushButton(tr("&Compare transforms"), form);
    m_compare->setObjectName(QStringLiteral("compareButton"));
    column->addWidget(m_compare);

    auto* layersBox = new QGroupBox(tr("Across layers"), form);
    auto* lf = new QFormLayout(layersBox);
    m_heatmapKind = new QComboBox(layersBox);
    m_heatmapKind->setObjectName(QStringLiteral("heatmapKindCombo"));
    m_heatmapKind->addItems({QStringLiteral("none"), QStringLiteral("hadamard"), QStringLiteral("block-hadamard"),
                             QStringLiteral("orthogonal"), QStringLiteral("block-orthogonal"), QString(latmix::train::kWushKind)});
    lf->addRow(tr("T&ransform:"), m_heatmapKind);
    m_acrossLayers = new QPushButton(tr("Per-block error of every &layer"), layersBox);
    m_acrossLayers->setObjectName(QStringLiteral("acrossLayersButton"));
    m_acrossLayers->setToolTip(tr("The current point's kind in every layer, with the transform above"));
    lf->addRow(m_acrossLayers);
    m_holdScale = new QCheckBox(tr("&Hold the colour scale"), layersBox);
    m_holdScale->setObjectName(QStringLiteral("heatmapHoldScaleCheck"));
    m_holdScale->setToolTip(tr("The next maps keep the colours of the map shown now (values beyond its range take the end "
                               "colours), so that two transforms' maps compare by colour"));
    connect(m_holdScale, &QCheckBox::toggled, this, [this](bool hold) { m_scaleHeld = hold && m_heatmapScale.first < m_heatmapScale.second; });
    lf->addRow(m_holdScale);
    column->addWidget(layersBox);
    auto* status = new QLabel(form);
    status->setObjectName(QStringLiteral("comparisonStatus"));
    status->setWordWrap(true);
    column->addWidget(status);
    setStatusLine(status);
    return form;
}

// The metrics of each transform, one row each, sortable.
void ComparisonView::createTable() {
    m_table = new QTableWidget(0, int(sizeof kColumns / sizeof kColumns[0]), this);
    m_table->setObjectName(QStringLiteral("metricsTable"));
    QStringList headers;
    for (const char* c : kColumns) headers << QString::fromUtf8(c);
    m_table->setHorizontalHeaderLabels(headers);
    for (int c = 0; c < m_table->columnCount(); ++c)
        m_table->horizontalHeaderItem(c)->setToolTip(QString::fromUtf8(kColumnTips[c]));
    m_table->setSortingEnabled(true);
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
    // Every column as wide as its contents, the transform's name whole (issue 71: stretched, it
    // read "le...d-a......" at 1024 px); the last column takes what is left, and a narrow window
    // scrolls the table sideways instead of cutting names.
    m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    m_table->setHorizontalScrollBarPolicy(Qt::ScrollBarAsNeeded);
    m_table->setTextElideMode(Qt::ElideMiddle);
    m_table->verticalHeader()->setVisible(false);

}

// The table above the per-block and block-size plots, the map across layers below.
QWidget* ComparisonView::createPlots() {
    auto plot = [this](const char* name) {
        auto* p = new QCustomPlot(this);
        p->setObjectName(QLatin1String(name));
        p->setMinimumSize(220, 180);
        PlotInteraction::enable(p);
        return p;
    };
    m_perBlockPlot = plot("perBlockPlot");
    m_sweepPlot = plot("sweepPlot");
    m_heatmapPlot = plot("layerHeatmapPlot");
    m_heatmapPlot->plotLayout()->insertRow(0);
    m_heatmapPlot->plotLayout()->addElement(0, 0, new QCPTextElement(m_heatmapPlot, tr("Per-block error across layers")));
    m_heatmapPlot->xAxis->setLabel(tr("MX block index"));
    m_heatmapPlot->yAxis->setLabel(tr("layer"));
    PlotStyle::integerTicks(m_heatmapPlot->xAxis); // block indices: a 128-wide point has 4
    // Empty until asked for (issue 71: in a real X window an empty frame read as a failure).
    auto* hint = new QCPItemText(m_heatmapPlot);
    hint->setObjectName(QStringLiteral("heatmapHint"));
    hint->position->setType(QCPItemPosition::ptAxisRectRatio);
    hint->position->setCoords(0.5, 0.5);
    hint->setText(tr("Empty until Across layers ›\n“Per-block error of every layer”"));
    hint->setColor(palette().color(QPalette::PlaceholderText));

    auto* plots = new QSplitter(Qt::Vertical, this);
    plots->addWidget(m_table);
    auto* row = new QSplitter(Qt::Horizontal, plots);
    row->addWidget(m_perBlockPlot);
    row->addWidget(m_sweepPlot);
    plots->addWidget(row);
    plots->addWidget(m_heatmapPlot);
    plots->setStretchFactor(0, 1);
    plots->setStretchFactor(1, 2);
    plots->setStretchFactor(2, 2);
    return plots;
}

// The last capture of this view, kept so that a comparison at one point after the across-layers
// map of its kind (or the same request again) reuses the activations instead of running the
// windows through the model again: at the Llama-3.2-1B shape that is 9 of the 25 decoder-layer
// passes of the two (docs/research/results.md, the workbench table). Same model, windows and length only.
struct ComparisonView::CaptureCache {
    std::string modelDir, regex;
    int samples = 0, seqLen = 0;
    latmix::train::PointActivations acts;

    // The activations of the request, if this capture holds them.
    bool serve(const std::string& dir, int n, int len, const std::string& wantRegex, const std::string& onePoint,
               latmix::train::PointActivations& out) const {
        if (acts.empty() || dir != modelDir || n != samples || len != seqLen) return false;
        if (wantRegex == regex) return out = acts, true;
        if (onePoint.empty()) return false;
        for (const auto& [name, t] : acts)
            if (name == onePoint) return out = {{name, t}}, true;
        return false;
    }
};

void ComparisonView::setModelDir(const QString& dir) {
    m_modelDir = dir;
    m_captureCache = std::make_shared<CaptureCache>(); // another model: the old activations go
    try {
        m_point.setModelDir(dir);
    } catch (const std::exception& e) {
        statusLine()->setText(QString::fromLocal8Bit(e.what()));
    }
    const bool can = !m_point.isEmpty();
    m_compare->setEnabled(can);
    m_acrossLayers->setEnabled(can);
    m_compare->setToolTip(can ? QString() : tr("Open a model first"));
}

bool ComparisonView::selectPoint(const QString& point) {
    return m_point.select(point);
}

void ComparisonView::setTransforms(const QStringList& kinds) {
    for (int i = 0; i < m_kinds->count(); ++i)
        m_kinds->item(i)->setCheckState(kinds.contains(m_kinds->item(i)->text()) ? Qt::Checked : Qt::Unchecked);
}

void ComparisonView::setFormat(const QString& format) { m_format->setCurrentText(format); }

void ComparisonView::setCalibration(int samples, int seqLen, int steps) {
    m_samples->setValue(samples);
    m_seqLen->setValue(seqLen);
    m_steps->setValue(steps);
}

QString ComparisonView::currentPoint() const { return m_point.current(); } // empty without a model
int ComparisonView::samples() const { return m_samples->value(); }
int ComparisonView::seqLen() const { return m_seqLen->value(); }

QStringList ComparisonView::checkedTransforms() const {
    QStringList r;
    for (int i = 0; i < m_kinds->count(); ++i)
        if (m_kinds->item(i)->checkState() == Qt::Checked) r << m_kinds->item(i)->text();
    return r;
}

latmix::train::AnalysisOptions ComparisonView::analysisOptions() const {
    latmix::train::AnalysisOptions o;
    o.mx = latmix::mx::makeConfig(latmix::mx::parseFormat(m_format->currentText().toStdString()));
    for (const QString& k : checkedTransforms()) o.kinds.push_back(k.toStdString());
    o.transform.blockSize = o.mx.blockSize;
    o.training.mx = o.mx;
    o.training.steps = m_steps->value();
    // Learned kinds as large as the method's transform at the point (T2's head_dim blocks).
    if (!m_modelDir.isEmpty())
        o.headDim = latmix::model::ModelConfig::fromFile(QDir(m_modelDir).filePath(QStringLiteral("config.json")).toStdString()).headDim;
    return o;
}

bool ComparisonView::runAnalysis(const QString& title, const QString& failure, const std::string& regex,
                                 const std::string& onePoint, const std::function<void(latmix::train::AnalysisOptions&)>& adjust, QString* error,
                                 std::function<void(latmix::train::AnalysisResult&&)> done) {
    auto fail = [&](const QString& why) { return refuse(why, error); };
    if (m_modelDir.isEmpty() || currentPoint().isEmpty()) return fail(tr("Open a model first"));
    if (refusedWhileBusy(error)) return false;
    latmix::train::AnalysisOptions options;
    try {
        options = analysisOptions();
        if (adjust) adjust(options);
        if (options.kinds.empty()) throw std::invalid_argument("tick at least one transform");
        latmix::train::validateAnalysisOptions(options);
    } catch (const std::exception& e) {
        return fail(tr("Invalid settings: %1").arg(QString::fromLocal8Bit(e.what())));
    }
    const std::string modelDir = m_modelDir.toStdString();
    const int samples = m_samples->value(), seqLen = m_seqLen->value();
    const QByteArray builtIn = builtInCalibrationText();
    if (builtIn.isEmpty()) return fail(tr("The built-in calibration text is missing from this build"));
    const std::string calibrationText = builtIn.toStdString();
    auto result = std::make_shared<latmix::train::AnalysisResult>();
    const std::shared_ptr<CaptureCache> cache = m_captureCache;
    auto work = [=](latmix::JobContext& job) {
        latmix::train::PointActivations acts;
        if (!cache->serve(modelDir, samples, seqLen, regex, onePoint, acts)) {
            latmix::analysis::ModelCapture request;
            request.modelDir = modelDir;
            request.calibrationText = calibrationText;
            request.pointsRegex = regex;
            request.expertPoints = true; // the regexes are anchored: an expert's point only when chosen
            request.samples = samples;
            request.seqLen = seqLen;
            acts = latmix::analysis::captureModelActivations(request, job);
            *cache = {modelDir, regex, samples, seqLen, acts}; // tensors shared, not copied
        }
        auto withWeights = options;
        if (std::find(options.kinds.begin(), options.kinds.end(), latmix::train::kWushKind) != options.kinds.end()) {
            latmix::analysis::ModelCapture weights;
            weights.modelDir = modelDir;
            withWeights.pointWeights = latmix::analysis::capturedPointWeights(weights, acts);
        }
        *result = latmix::train::analyzeTransforms(acts, withWeights, job);
    };
    auto ended = [this, result, done](bool ok, const QString&) {
        if (ok) done(std::move(*result)); // says what was measured in the status line
        emit comparisonFinished(ok, statusLine()->text());
    };
    return startJob({title, std::move(work), tr("Comparing…"), failure, {m_compare, m_acrossLayers}}, std::move(ended), error);
}

bool ComparisonView::compare(QString* error) {
    return runAnalysis(tr("Compare transforms"), tr("Comparison failed"), FormWidgets::exactPointRegex(currentPoint()),
                       currentPoint().toStdString(), nullptr, error,
                       [this](latmix::train::AnalysisResult&& result) {
                           m_result = std::move(result);
                           showResult();
                           // The point's E(T) without a transform (or with the first one) joins the model tree.
                           const latmix::train::AnalysisEntry* chosen = nullptr;
                           for (const auto& e : m_result.entries)
                               if (e.error.empty() && (!chosen || e.kind == "none")) chosen = &e;
                           if (chosen)
                               emit pointMetricsKnown(tr("E(T), %1").arg(QString::fromStdString(chosen->kind)),
                                                      {{QString::fromStdString(chosen->point), chosen->report.mse}});
                           QString text = tr("Compared %1 transforms in %2 s")
                                              .arg(m_result.entries.size())
                                              .arg(m_result.seconds, 0, 'f', 1);
                           // Learned kinds at the size the method's transform has here (Blockwise.h).
                           for (const auto& e : m_result.entries)
                               if (e.learnedBlock > 0) {
                                   text += tr("; learned kinds in blocks of %1, the size of the method's transform here")
                                               .arg(e.learnedBlock);
                                   break;
                               }
                           statusLine()->setText(text);
                       });
}

void ComparisonView::showResult() {
    m_table->setSortingEnabled(false);
    m_table->setRowCount(0);
    PointCurves curves;
    for (const auto& e : m_result.entries) {
        const int row = m_table->rowCount();
        m_table->insertRow(row);
        auto* name = new QTableWidgetItem(QString::fromStdString(e.kind));
        name->setToolTip(QString::fromStdString(e.kind) + QStringLiteral(": ") +
                         (e.error.empty() ? QString::fromStdString(e.report.transform) : QString::fromStdString(e.error)));
        m_table->setItem(row, 0, name);
        const auto& r = e.report;
        const double nan = std::nan("");
        const bool ok = e.error.empty();
        const double values[] = {ok ? r.mse : nan,
                                 ok ? r.perBlockMax : nan,
                                 ok ? r.bound : nan,
                                 ok ? r.spectral.conditionNumber : nan,
                                 ok ? r.spectral.orthogonalityDeviation : nan,
                                 ok ? r.offBlockNorm : nan};
        for (int c = 0; c < 6; ++c) m_table->setItem(row, c + 1, new NumberItem(values[c]));
        m_table->setItem(row, 7, new NumberItem(e.seconds, secondsText(e.seconds)));
        if (!ok) continue;
        curves.point = QString::fromStdString(e.point);
        curves.format = QString::fromStdString(r.config.describe());
        TransformCurves tc;
        tc.transform = QString::fromStdString(e.kind);
        tc.perBlockError = PlotStyle::values(r.perBlock);
        for (const auto& s : r.sweep) {
            tc.sweepBlocks << s.blockSize;
            tc.sweepMse << s.mse;
        }
        curves.transforms << tc;
    }
    m_table->setSortingEnabled(true);
    AnalysisPlots::drawPerBlockError(m_perBlockPlot, curves);
    AnalysisPlots::drawBlockSizeSweep(m_sweepPlot, curves);
    // Short titles: the point and format are in the form beside the plots.
    const QString shortTitles[] = {tr("Per-block error E_B vs block index"), tr("E(T) vs MX block size")};
    int i = 0;
    for (QCustomPlot* p : {m_perBlockPlot, m_sweepPlot}) {
        PlotStyle::setTitle(p, shortTitles[i]);
        ++i;
        p->yAxis->setLabel(QString());
        p->legend->setFont(QFont(font().family(), 7));
        PlotStyle::apply(p, palette());
        p->replot();
    }
}

bool ComparisonView::compareAcrossLayers(const QString& kind, QString* error) {
    const auto oneFixedKind = [&kind](latmix::train::AnalysisOptions& o) {
        o.kinds = {kind.toStdString()};
        o.sweepBlocks.clear(); // the heatmap needs the per-block errors only
    };
    QString pattern = pointKind(currentPoint());
    pattern.replace(QLatin1Char('.'), QStringLiteral("\\."));
    const std::string regex = ("^layers\\.[0-9]+\\." + pattern + "$").toStdString();
    return runAnalysis(tr("Per-block error across layers"), tr("Across layers failed"), regex, std::string(), oneFixedKind, error,
                       [this, kind](latmix::train::AnalysisResult&& result) {
                           QStringList points;
                           QVector<QVector<double>> rows;
                           QMap<QString, double> mse;
                           for (const auto& e : result.entries) {
                               if (!e.error.empty()) continue;
                               points << QString::fromStdString(e.point);
                               rows << PlotStyle::values(e.report.perBlock);
                               mse[QString::fromStdString(e.point)] = e.report.mse;
                           }
                           emit pointMetricsKnown(tr("E(T), %1").arg(kind), mse);
                           showHeatmap(points, rows, kind);
                           statusLine()->setText(tr("Per-block error of %1 points with %2").arg(points.size()).arg(kind));
                       });
}

void ComparisonView::showHeatmap(const QStringList& points, const QVector<QVector<double>>& rows, const QString& kind) {
    m_heatmapPoints = points;
    QCustomPlot* p = m_heatmapPlot;
    PlotStyle::clearHeatmap(p);
    for (int i = 0; i < p->itemCount(); ++i)
        if (p->item(i)->objectName() == QLatin1String("heatmapHint")) p->item(i)->setVisible(rows.isEmpty());
    if (rows.isEmpty()) {
        p->replot();
        return;
    }
    const int blocks = rows.first().size(), layers = rows.size();
    auto* map = PlotStyle::addHeatmap(p, blocks, layers, tr("log10 E_B"), false);
    map->setName(tr("log10 per-block error, %1").arg(kind));
    map->data()->setRange(QCPRange(0, blocks - 1), QCPRange(0, layers - 1));
    for (int l = 0; l < layers; ++l)
        for (int b = 0; b < blocks && b < rows[l].size(); ++b)
            map->data()->setCell(b, l, std::log10(std::max(rows[l][b], 1e-30)));
    map->rescaleDataRange(true);
    // Held: the scale of the map shown when the box was ticked (or of this one, the first since).
    if (m_holdScale->isChecked() && m_scaleHeld) map->setDataRange(QCPRange(m_heatmapScale.first, m_heatmapScale.second));
    m_heatmapScale = {map->dataRange().lower, map->dataRange().upper};
    m_scaleHeld = m_holdScale->isChecked();
    PlotStyle::setTitle(p, tr("Per-block error across layers: %1, %2").arg(pointKind(points.first()), kind));
    // Whole cells: each is centred on its block and row.
    p->xAxis->setRange(-0.5, blocks - 0.5);
    p->yAxis->setRange(-0.5, layers - 0.5);
    // Row r is the layer of points[r]: every layer for a dense point, only the sparse layers for an
    // expert's own point (dense layers among them: mlp_only_layers, decoder_sparse_step).
    QSharedPointer<QCPAxisTickerText> layerNumbers(new QCPAxisTickerText);
    const int step = std::max(1, (layers + 9) / 10);
    for (int r = 0; r < layers; r += step) layerNumbers->addTick(r, points[r].section(QLatin1Char('.'), 1, 1));
    p->yAxis->setTicker(layerNumbers);
    p->replot();
    m_heatmapRows = rows;
}

QVector<QVector<double>> ComparisonView::heatmapRows() const { return m_heatmapRows; }

void ComparisonView::setHoldColourScale(bool hold) { m_holdScale->setChecked(hold); }

} // namespace latmix::gui
