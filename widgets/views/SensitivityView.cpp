#include "AtenHeaders.h"

#include "SensitivityView.h"

#include "CalibrationView.h" // builtInCalibrationText
#include "FormWidgets.h"
#include "PlotStyle.h"

#include "model/Checkpoint.h"
#include "run/PrepareRun.h" // kBuiltInCalibrationText
#include "tokenizer/Tokenizer.h"

#include <qcustomplot.h>

#include <QComboBox>
#include <QDir>
#include <QFileDialog>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSlider>
#include <QSpinBox>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <memory>

namespace latmix::gui {
namespace {

// The group kinds of the heat map's columns, in a layer's order: the part of a group's name after
// "layers.N." and the column's label.
const std::pair<const char*, const char*> kKinds[] = {{"self_attn.qkv", "qkv"},
                                                      {"self_attn.o_proj", "o_proj"},
                                                      {"mlp.gate_up", "gate_up"},
                                                      {"mlp.down_proj", "down_proj"},
                                                      {"mlp.experts", "experts"}};

int kindOf(const std::string& group) {
    const auto tail = group.substr(group.find('.', group.find('.') + 1) + 1); // after "layers.N."
    for (int k = 0; k < int(std::size(kKinds)); ++k)
        if (tail == kKinds[k].first) return k;
    return -1;
}

constexpr double kFloor = 1e-9; // a cell's least value on the log colour scale (bf16's 0)

} // namespace

SensitivityView::SensitivityView(QWidget* parent) : AnalysisView(parent, tr("The sensitivity is still being measured")) {
    setObjectName(QStringLiteral("sensitivityView"));
    auto* form = new QWidget(this);
    form->setFixedWidth(280);
    auto* column = new QVBoxLayout(form);
    column->setContentsMargins(0, 0, 0, 0);
    const auto windows =
        FormWidgets::addWindowsBox(form, column, QStringLiteral("sensitivity"), tr("Measure on calibration windows"), 8, 256);
    m_windows = windows.windows;
    m_seqLen = windows.seqLen;
    m_formats = new QLineEdit(QStringLiteral("mxfp4,mxfp8"), form);
    m_formats->setObjectName(QStringLiteral("sensitivityFormatsEdit"));
    m_formats->setToolTip(tr("Candidate formats, comma-separated: mxfp4, nvfp4, mxint4, mxfp8, mxint8 (bf16 is always one)"));
    windows.form->addRow(tr("&Formats:"), m_formats);

    auto* planBox = new QGroupBox(tr("Scheme under a bit budget"), form);
    auto* p = new QFormLayout(planBox);
    m_shown = new QComboBox(planBox);
    m_shown->setObjectName(QStringLiteral("sensitivityShownCombo"));
    m_shown->setToolTip(tr("The format whose KL the heat map shows"));
    p->addRow(tr("&Map of:"), m_shown);
    m_budget = new QSlider(Qt::Horizontal, planBox);
    m_budget->setObjectName(QStringLiteral("sensitivityBudgetSlider"));
    m_budget->setToolTip(tr("Average bits per weight of the block linears, scales counted (MXFP4 4.25, NVFP4 4.5, "
                            "MXFP8 8.25, bf16 16)"));
    p->addRow(tr("&Budget:"), m_budget);
    m_budgetText = new QLabel(planBox);
    m_budgetText->setObjectName(QStringLiteral("sensitivityBudgetLabel"));
    m_budgetText->setWordWrap(true);
    p->addRow(m_budgetText);
    m_use = new QPushButton(tr("&Use this scheme"), planBox);
    m_use->setObjectName(QStringLiteral("sensitivityUseButton"));
    m_use->setToolTip(tr("Put the scheme's rules in the Calibration form's Mixed precision field"));
    p->addRow(m_use);
    column->addWidget(planBox);

    m_open = new QPushButton(tr("&Open table…"), form);
    m_open->setObjectName(QStringLiteral("sensitivityOpenButton"));
    m_open->setToolTip(tr("A table `latmix sensitivity` wrote (JSON)"));
    column->addWidget(m_open);
    const auto footer = FormWidgets::addFormFooter(form, column, QStringLiteral("sensitivity"), tr("&Measure sensitivity"));
    m_measure = footer.button;
    m_summary = footer.summary;
    setStatusLine(footer.status);

    m_map = PlotStyle::newPlot(this, "sensitivityMap", tr("KL with one group quantized"));
    m_map->yAxis->setLabel(tr("layer"));
    m_map->yAxis->setRangeReversed(true); // layer 0 on top, as in the block diagram
    PlotStyle::integerTicks(m_map->yAxis);
    m_front = PlotStyle::newPlot(this, "sensitivityFront", tr("Bits against predicted KL"));
    m_front->xAxis->setLabel(tr("bits per weight"));
    m_front->yAxis->setLabel(tr("predicted KL"));
    m_front->yAxis->setScaleType(QCPAxis::stLogarithmic);
    m_front->yAxis->setTicker(PlotStyle::logTicker());
    auto* plots = new QVBoxLayout;
    plots->addWidget(m_map, 3);
    plots->addWidget(m_front, 2);
    auto* layout = new QHBoxLayout(this);
    layout->addWidget(FormWidgets::scrollingForm(form));
    layout->addLayout(plots, 1);
    connect(m_measure, &QPushButton::clicked, this, [this] { measure(); });
    connect(m_open, &QPushButton::clicked, this, [this] {
        const QString path = QFileDialog::getOpenFileName(this, tr("Open a sensitivity table"), QString(), tr("JSON (*.json)"));
        if (!path.isEmpty()) loadTable(path);
    });
    connect(m_shown, &QComboBox::currentIndexChanged, this, [this] { showMap(); });
    connect(m_budget, &QSlider::valueChanged, this, [this] { showPlan(); });
    connect(m_use, &QPushButton::clicked, this, [this] { emit schemeChosen(schemeText()); });
    setPlots({m_map, m_front});
    m_budget->setEnabled(false);
    m_use->setEnabled(false);
    setModelDir(QString());
}

void SensitivityView::setModelDir(const QString& dir) {
    m_modelDir = dir;
    m_measure->setEnabled(!dir.isEmpty());
    m_measure->setToolTip(dir.isEmpty() ? tr("Open a model first") : QString());
}

bool SensitivityView::measure(QString* error) {
    if (m_modelDir.isEmpty()) return refuse(tr("Open a model first"), error);
    if (refusedWhileBusy(error)) return false;
    const QByteArray builtIn = builtInCalibrationText();
    if (builtIn.isEmpty()) return refuse(tr("The built-in calibration text is missing from this build"), error);
    latmix::run::SensitivityRequest request;
    request.modelDir = m_modelDir.toStdString();
    request.calibrationSource = latmix::run::kBuiltInCalibrationText;
    request.windows = m_windows->value();
    request.seqLen = m_seqLen->value();
    request.formats.clear();
    for (const QString& name : m_formats->text().split(QLatin1Char(','), Qt::SkipEmptyParts)) {
        try {
            latmix::run::parseSchemeFormat(name.trimmed().toStdString());
        } catch (const std::exception& e) {
            return refuse(QString::fromLocal8Bit(e.what()), error);
        }
        request.formats.push_back(name.trimmed().toStdString());
    }
    const std::string text = builtIn.toStdString();
    auto out = std::make_shared<latmix::run::SensitivityTable>();
    auto work = [request, text, out](latmix::JobContext& job) mutable {
        request.calibrationIds = latmix::tokenizer::Tokenizer::loadFromDir(request.modelDir)->encode(text, false);
        *out = latmix::run::measureSensitivity(request, job);
    };
    auto ended = [this, out](bool ok, const QString& status) {
        if (ok) {
            m_table = std::move(*out);
            showTable();
        }
        emit tableReady(ok, status);
    };
    return startJob({tr("Sensitivity of %1").arg(QDir(m_modelDir).dirName()), std::move(work), tr("Measuring…"),
                     tr("Sensitivity failed"), {m_measure, m_open}},
                    std::move(ended), error);
}

bool SensitivityView::loadTable(const QString& path, QString* error) {
    if (refusedWhileBusy(error)) return false;
    try {
        m_table = latmix::run::readSensitivity(path.toStdString());
    } catch (const std::exception& e) {
        return refuse(QString::fromLocal8Bit(e.what()), error);
    }
    showTable();
    emit tableReady(true, QString());
    return true;
}

// A new table: its formats in the map's combo, the map, and the budget problem, front and slider
// (once per table: choosing another format to map keeps the budget).
void SensitivityView::showTable() {
    const auto& t = m_table;
    if (t.groups.empty()) return;
    {
        const QSignalBlocker block(m_shown);
        m_shown->clear();
        for (std::size_t k = 0; k + 1 < t.formats.size(); ++k) m_shown->addItem(QString::fromStdString(t.formats[k]));
    }
    showMap();
    showFront();
}

// The heat map of the format the combo names.
void SensitivityView::showMap() {
    const auto& t = m_table;
    if (t.groups.empty()) return;
    const bool measured = !t.kl.empty();
    const auto& score = measured ? t.kl : t.estimate;
    const int k = std::max(0, m_shown->currentIndex());
    // The heat map: a column per group kind the model has, a row per layer.
    std::vector<int> columnOf(std::size(kKinds), -1);
    int columns = 0, layers = 0;
    for (const auto& g : t.groups) {
        const int kind = kindOf(g.name);
        if (kind >= 0 && columnOf[std::size_t(kind)] < 0) columnOf[std::size_t(kind)] = 0;
        layers = std::max(layers, g.layer + 1);
    }
    auto ticker = QSharedPointer<QCPAxisTickerText>::create();
    for (std::size_t kind = 0; kind < columnOf.size(); ++kind)
        if (columnOf[kind] == 0) {
            ticker->addTick(columns, QString::fromLatin1(kKinds[kind].second));
            columnOf[kind] = columns++;
        }
    PlotStyle::clearHeatmap(m_map);
    const QString what = measured ? tr("KL, %1").arg(m_shown->currentText()) : tr("estimate, %1").arg(m_shown->currentText());
    auto* map = PlotStyle::addHeatmap(m_map, columns, layers, what, true);
    map->setName(what);
    map->data()->setRange(QCPRange(0, std::max(columns - 1, 1)), QCPRange(0, std::max(layers - 1, 1)));
    for (std::size_t g = 0; g < t.groups.size(); ++g) {
        const int kind = kindOf(t.groups[g].name);
        if (kind >= 0) map->data()->setCell(columnOf[std::size_t(kind)], t.groups[g].layer, std::max(score[g][std::size_t(k)], kFloor));
    }
    map->rescaleDataRange(true);
    m_map->xAxis->setTicker(ticker);
    PlotStyle::apply(m_map, palette());
    m_map->xAxis->setRange(-0.5, columns - 0.5);
    m_map->yAxis->setRange(-0.5, layers - 0.5);
    m_map->replot();
}

// The budget problem of the table (every group free), its Pareto front and the budget slider.
void SensitivityView::showFront() {
    const auto& t = m_table;
    const bool measured = !t.kl.empty();
    try {
        m_groups = latmix::run::resolveScheme(latmix::model::Checkpoint::load(t.model).config(), {}, std::nullopt);
        m_problem = latmix::run::budgetProblem(t, m_groups, 0, !measured);
    } catch (const std::exception& e) {
        statusLine()->setText(QString::fromLocal8Bit(e.what()));
        m_budget->setEnabled(false);
        m_use->setEnabled(false);
        return;
    }
    const auto range = latmix::quant::reachableBits(m_problem);
    const auto front = latmix::quant::paretoFront(m_problem);
    m_front->clearGraphs();
    auto* line = m_front->addGraph();
    line->setName(tr("least predicted KL at each bit count"));
    for (const auto& s : front)
        if (s.predictedKl > 0) line->addData(s.bits, s.predictedKl);
    line->setLineStyle(QCPGraph::lsStepLeft);
    line->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 3));
    auto* chosen = m_front->addGraph();
    chosen->setName(tr("the budget's scheme"));
    chosen->setLineStyle(QCPGraph::lsNone);
    chosen->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDiamond, QPen(Qt::red, 2), QBrush(Qt::red), 10));
    m_front->xAxis->setRange(range.least - 0.25, range.most + 0.25);
    m_front->rescaleAxes(true);
    m_front->xAxis->setRange(range.least - 0.25, range.most + 0.25);
    {
        const QSignalBlocker block(m_budget);
        m_budget->setRange(int(std::ceil(range.least * 100 - 1e-6)), int(std::floor(range.most * 100 + 1e-6)));
        m_budget->setValue(std::min(m_budget->maximum(), int(std::lround(range.least * 100)) + 100)); // a bit above the least
    }
    m_budget->setEnabled(true);
    m_summary->setText(tr("%1 fusion groups, %2 windows of %3 tokens of %4; %5")
                           .arg(t.groups.size())
                           .arg(t.windows)
                           .arg(t.seqLen)
                           .arg(QString::fromStdString(t.calibration))
                           .arg(measured ? tr("measured KL (the estimate beside it: see latmix sensitivity)")
                                         : tr("the first-order estimate only (no measured KL)")));
    showPlan();
}

void SensitivityView::setBudget(double bits) { m_budget->setValue(int(std::lround(bits * 100))); }
double SensitivityView::budget() const { return m_budget->value() / 100.0; }

void SensitivityView::showPlan() {
    if (m_groups.empty()) return;
    m_problem.budget = budget();
    try {
        m_plan = latmix::quant::solveBudget(m_problem);
    } catch (const std::exception& e) {
        m_budgetText->setText(QString::fromLocal8Bit(e.what()));
        m_use->setEnabled(false);
        return;
    }
    const bool measured = !m_table.kl.empty();
    m_budgetText->setText(tr("%1 bits: the scheme takes %2 bits per weight, predicted %3 %4")
                              .arg(budget(), 0, 'f', 2)
                              .arg(m_plan.bits, 0, 'f', 3)
                              .arg(measured ? tr("KL") : tr("score"))
                              .arg(m_plan.predictedKl, 0, 'g', 4));
    if (m_front->graphCount() > 1) {
        m_front->graph(1)->data()->clear();
        if (m_plan.predictedKl > 0) m_front->graph(1)->addData(m_plan.bits, m_plan.predictedKl);
        m_front->replot();
    }
    m_use->setEnabled(true);
}

QString SensitivityView::schemeText() const {
    if (m_groups.empty() || m_plan.choice.empty()) return QString();
    QStringList rules;
    for (const auto& r : latmix::run::rulesNamingEachGroup(latmix::run::chosenScheme(m_table, m_groups, m_plan)))
        rules << QString::fromStdString(r.pattern + " = " + r.format);
    return rules.join(QStringLiteral("; "));
}

} // namespace latmix::gui
