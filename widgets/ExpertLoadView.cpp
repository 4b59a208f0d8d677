// Qt's `slots` macro breaks ATen's headers: ATen first.
#include <ATen/ATen.h>

#include "ExpertLoadView.h"

#include "CalibrationView.h" // builtInCalibrationText
#include "FormWidgets.h"
#include "JobRunner.h"
#include "PlotStyle.h"

#include "model/ModelConfig.h"
#include "run/ModelAnalysis.h"
#include "run/quantize/LayerQuantizer.h" // kStarvedShare

#include <qcustomplot.h>

#include <QDir>
#include <QEvent>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QSpinBox>
#include <QVBoxLayout>

#include <algorithm>
#include <memory>

namespace latmix::gui {

ExpertLoadView::ExpertLoadView(QWidget* parent) : QWidget(parent) {
    setObjectName(QStringLiteral("expertLoadView"));
    m_runner = new JobRunner(this);
    auto* form = new QWidget(this);
    form->setFixedWidth(260);
    auto* column = new QVBoxLayout(form);
    column->setContentsMargins(0, 0, 0, 0);
    auto* box = new QGroupBox(tr("Calibration windows"), form);
    auto* f = new QFormLayout(box);
    m_windows = FormWidgets::spin(box, "expertWindowsSpin", 1, 4096, 16, tr("Windows of the built-in calibration text"));
    f->addRow(tr("&Windows:"), m_windows);
    m_seqLen = FormWidgets::spin(box, "expertSeqLenSpin", 2, 8192, 256, tr("Tokens per window"));
    f->addRow(tr("&Tokens each:"), m_seqLen);
    column->addWidget(box);
    const auto footer = FormWidgets::addFormFooter(form, column, QStringLiteral("expert"), tr("&Measure expert load"));
    m_measure = footer.button;
    m_summary = footer.summary;
    m_status = footer.status;

    m_plot = PlotStyle::newPlot(this, "expertLoadPlot", tr("Tokens per expert / balanced share"));
    m_plot->xAxis->setLabel(tr("expert"));
    m_plot->yAxis->setLabel(tr("layer"));
    m_plot->yAxis->setRangeReversed(true); // layer 0 on top, as in the block diagram
    auto* layout = new QHBoxLayout(this);
    layout->addWidget(form);
    layout->addWidget(m_plot, 1);
    connect(m_measure, &QPushButton::clicked, this, [this] { measure(); });
    m_runner->showProgressIn(m_status);
    PlotStyle::restyle({m_plot}, palette());
    setModelDir(QString());
}

void ExpertLoadView::changeEvent(QEvent* event) {
    QWidget::changeEvent(event);
    if (event->type() == QEvent::PaletteChange) PlotStyle::restyle({m_plot}, palette());
}

void ExpertLoadView::setModelDir(const QString& dir) {
    m_modelDir = dir;
    m_moe = false;
    QString why = tr("Open a mixture-of-experts model (Qwen3-MoE, Mixtral) to see its expert load");
    if (!dir.isEmpty()) {
        try {
            const auto c = latmix::model::ModelConfig::fromFile(QDir(dir).filePath(QStringLiteral("config.json")).toStdString());
            m_moe = c.moe.has_value();
            if (!m_moe) why = tr("%1 has no experts: the expert load is a mixture-of-experts model's")
                                  .arg(QString::fromStdString(c.architectureName));
        } catch (const std::exception& e) {
            why = QString::fromLocal8Bit(e.what());
        }
    }
    m_measure->setEnabled(m_moe);
    m_measure->setToolTip(m_moe ? QString() : why);
    m_status->setText(m_moe ? QString() : why);
}

bool ExpertLoadView::measure(QString* error) {
    auto fail = [&](const QString& why) {
        if (error) *error = why;
        m_status->setText(why);
        emit errorOccurred(why);
        return false;
    };
    if (!m_moe) return fail(m_measure->toolTip().isEmpty() ? tr("Open a model first") : m_measure->toolTip());
    if (m_runner->isRunning()) return fail(tr("The expert load is still being measured"));
    const QByteArray builtIn = builtInCalibrationText();
    if (builtIn.isEmpty()) return fail(tr("The built-in calibration text is missing from this build"));
    latmix::run::ModelCapture request;
    request.modelDir = m_modelDir.toStdString();
    request.calibrationText = builtIn.toStdString();
    request.samples = m_windows->value();
    request.seqLen = m_seqLen->value();
    auto out = std::make_shared<latmix::eval::ExpertLoad>();
    const bool started = m_runner->start(tr("Expert load of %1").arg(QDir(m_modelDir).dirName()),
                                         [=](latmix::JobContext& job) { *out = latmix::run::measureModelExpertLoad(request, job); });
    if (!started) return fail(tr("The expert load is still being measured"));
    m_measure->setEnabled(false);
    m_status->setText(tr("Measuring…"));
    connect(m_runner, &JobRunner::finished, this, [this, out](bool ok, const QString& message) {
        disconnect(m_runner, &JobRunner::finished, this, nullptr);
        m_measure->setEnabled(m_moe);
        if (ok) {
            m_load = std::move(*out);
            m_status->clear();
            showLoad();
        } else {
            m_status->setText(tr("Expert load failed: %1").arg(message));
            if (message != QLatin1String("cancelled")) emit errorOccurred(m_status->text());
        }
        emit loadFinished(ok, m_status->text());
    });
    return true;
}

void ExpertLoadView::showLoad() {
    const auto& L = m_load;
    PlotStyle::clearHeatmap(m_plot);
    if (L.layers.empty()) {
        m_plot->replot();
        return;
    }
    const int layers = int(L.layers.size()), experts = int(L.tokens.front().size());
    const double balanced = double(L.tokensPerLayer) * L.expertsPerToken / experts;
    const double starvedBelow = latmix::run::kStarvedShare * double(L.tokensPerLayer);
    auto* map = PlotStyle::addHeatmap(m_plot, experts, layers, tr("tokens / balanced share"), true);
    map->setName(tr("tokens / balanced share"));
    map->data()->setRange(QCPRange(0, std::max(experts - 1, 1)), QCPRange(L.layers.front(), std::max(L.layers.back(), L.layers.front() + 1)));
    int idle = 0, starved = 0, worstLayer = L.layers.front(), worstStarved = -1;
    for (int i = 0; i < layers; ++i) {
        int starvedHere = 0;
        for (int e = 0; e < experts; ++e) {
            const auto n = L.tokens[std::size_t(i)][std::size_t(e)];
            map->data()->setCell(e, i, std::max(double(n) / balanced, kShareFloor));
            idle += n == 0 ? 1 : 0;
            starvedHere += double(n) < starvedBelow ? 1 : 0;
        }
        starved += starvedHere;
        if (starvedHere > worstStarved) worstStarved = starvedHere, worstLayer = L.layers[std::size_t(i)];
    }
    map->setDataRange(QCPRange(kShareFloor, std::max(10.0, map->data()->dataBounds().upper)));
    PlotStyle::apply(m_plot, palette());
    // Whole cells at the edges: cell centres sit on the expert and layer numbers.
    m_plot->xAxis->setRange(-0.5, experts - 0.5);
    m_plot->yAxis->setRange(L.layers.front() - 0.5, L.layers.back() + 0.5);
    m_plot->replot();
    m_summary->setText(tr("%1 layers × %2 experts, %3 tokens each through a layer (top %4). %5 expert-layers got no "
                          "token; %6 got under %7 % of a layer's tokens, which GPTQ rounds to nearest (most in layer %8: %9).")
                           .arg(layers)
                           .arg(experts)
                           .arg(L.tokensPerLayer)
                           .arg(L.expertsPerToken)
                           .arg(idle)
                           .arg(starved)
                           .arg(100 * latmix::run::kStarvedShare, 0, 'g', 2)
                           .arg(worstLayer)
                           .arg(worstStarved));
}

} // namespace latmix::gui
