#include "AtenHeaders.h"

#include "ExpertLoadView.h"

#include "CalibrationView.h" // builtInCalibrationText
#include "FormWidgets.h"
#include "PlotStyle.h"

#include "model/ModelConfig.h"
#include "analysis/ModelAnalysis.h"
#include "run/quantize/LayerQuantizer.h" // kStarvedShare

#include <qcustomplot.h>

#include <QDir>
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

ExpertLoadView::ExpertLoadView(QWidget* parent) : AnalysisView(parent, tr("The expert load is still being measured")) {
    setObjectName(QStringLiteral("expertLoadView"));
    auto* form = new QWidget(this);
    form->setFixedWidth(260);
    auto* column = new QVBoxLayout(form);
    column->setContentsMargins(0, 0, 0, 0);
    const auto windows = FormWidgets::addWindowsBox(form, column, QStringLiteral("expert"), tr("Calibration windows"), 16, 256);
    m_windows = windows.windows;
    m_seqLen = windows.seqLen;
    const auto footer = FormWidgets::addFormFooter(form, column, QStringLiteral("expert"), tr("&Measure expert load"));
    m_measure = footer.button;
    m_summary = footer.summary;
    setStatusLine(footer.status);

    m_plot = PlotStyle::newPlot(this, "expertLoadPlot", tr("Tokens per expert / balanced share"));
    m_plot->xAxis->setLabel(tr("expert"));
    m_plot->yAxis->setLabel(tr("layer"));
    m_plot->yAxis->setRangeReversed(true); // layer 0 on top, as in the block diagram
    PlotStyle::integerTicks(m_plot->xAxis);
    PlotStyle::integerTicks(m_plot->yAxis);
    auto* layout = new QHBoxLayout(this);
    layout->addWidget(form);
    layout->addWidget(m_plot, 1);
    connect(m_measure, &QPushButton::clicked, this, [this] { measure(); });
    setPlots({m_plot});
    setModelDir(QString());
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
    statusLine()->setText(m_moe ? QString() : why);
}

bool ExpertLoadView::measure(QString* error) {
    if (!m_moe) return refuse(m_measure->toolTip().isEmpty() ? tr("Open a model first") : m_measure->toolTip(), error);
    if (refusedWhileBusy(error)) return false;
    const QByteArray builtIn = builtInCalibrationText();
    if (builtIn.isEmpty()) return refuse(tr("The built-in calibration text is missing from this build"), error);
    latmix::analysis::ModelCapture request;
    request.modelDir = m_modelDir.toStdString();
    request.calibrationText = builtIn.toStdString();
    request.samples = m_windows->value();
    request.seqLen = m_seqLen->value();
    auto out = std::make_shared<latmix::eval::ExpertLoad>();
    auto work = [=](latmix::JobContext& job) { *out = latmix::analysis::measureModelExpertLoad(request, job); };
    auto ended = [this, out](bool ok, const QString& status) {
        m_measure->setEnabled(m_moe); // the model may have changed while it ran
        if (ok) {
            m_load = std::move(*out);
            showLoad();
        }
        emit loadFinished(ok, status);
    };
    return startJob({tr("Expert load of %1").arg(QDir(m_modelDir).dirName()), std::move(work), tr("Measuring…"),
                     tr("Expert load failed"), {m_measure}},
                    std::move(ended), error);
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
