#include "MxExplorerView.h"
#include "FormWidgets.h"

#include "PlotInteraction.h"
#include "PlotStyle.h"

#include "metrics/BlockError.h"
#include "mx/MxQuantizer.h"

#include "AtenHeaders.h"
#include <qcustomplot.h>

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QEvent>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QSplitter>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>

namespace latmix::gui {
namespace {

// Fixed series colours (matplotlib's tab10): they read on both light and dark backgrounds,
// so only axes, text and grid follow the palette.
const QColor kOriginalColor(0x1f, 0x77, 0xb4);
const QColor kDequantColor(0xff, 0x7f, 0x0e);
const QColor kErrorColor(0xd6, 0x27, 0x28);
const QColor kMseColor(0x2c, 0xa0, 0x2c);

// More bands than this turn the signal plot into noise (and cost an item each).
constexpr int kMaxBlockBands = 256;

QVector<double> valuesOf(const QCPGraph* graph) {
    QVector<double> v;
    if (!graph) return v;
    const auto data = graph->data();
    v.reserve(data->size());
    for (auto it = data->constBegin(); it != data->constEnd(); ++it) v.push_back(it->value);
    return v;
}

QString sci(double v) { return QString::number(v, 'g', 4); }

} // namespace

MxExplorerView::MxExplorerView(QWidget* parent) : QWidget(parent) {
    setObjectName(QStringLiteral("mxExplorerView"));

    m_signalPlot = new QCustomPlot(this);
    m_signalPlot->setObjectName(QStringLiteral("signalPlot"));
    m_errorPlot = new QCustomPlot(this);
    m_errorPlot->setObjectName(QStringLiteral("errorPlot"));
    setupSignalPlot();
    setupErrorPlot();
    PlotInteraction::enable(m_signalPlot);
    PlotInteraction::enable(m_errorPlot);

    auto* plots = new QSplitter(Qt::Vertical, this);
    plots->setObjectName(QStringLiteral("plotSplitter"));
    plots->addWidget(m_signalPlot);
    plots->addWidget(m_errorPlot);
    plots->setChildrenCollapsible(false);
    plots->setStretchFactor(0, 3);
    plots->setStretchFactor(1, 2);

    auto* layout = new QHBoxLayout(this);
    layout->addWidget(buildControls());
    layout->addWidget(plots, 1);

    applyPlotTheme();
    recompute();
}

QWidget* MxExplorerView::buildControls() {
    auto* panel = new QWidget(this);
    panel->setObjectName(QStringLiteral("explorerControls"));
    // Wide enough for "mxfp6_e2m3" and the summary, narrow enough to leave the plots room.
    panel->setFixedWidth(270);
    auto* column = new QVBoxLayout(panel);
    column->setContentsMargins(0, 0, 0, 0);

    auto* title = new QLabel(tr("<b>MX format explorer</b>"), panel);
    title->setObjectName(QStringLiteral("explorerTitle"));
    column->addWidget(title);

    auto* quant = new QGroupBox(tr("Quantization"), panel);
    auto* qform = new QFormLayout(quant);
    m_formatCombo = FormWidgets::formatCombo(quant, "formatCombo", QString());
    m_formatCombo->setToolTip(tr("Element format of the MX block (nvfp4: E2M1 with E4M3 block scales)"));
    qform->addRow(tr("&Format:"), m_formatCombo);

    m_blockCombo = new QComboBox(quant);
    m_blockCombo->setObjectName(QStringLiteral("blockCombo"));
    for (int b : {8, 16, 32, 64, 128, 256}) m_blockCombo->addItem(QString::number(b));
    m_blockCombo->setCurrentText(m_userBlock);
    qform->addRow(tr("&Block size:"), m_blockCombo);

    m_scaleModeCombo = new QComboBox(quant);
    m_scaleModeCombo->setObjectName(QStringLiteral("scaleModeCombo"));
    for (auto m : {latmix::mx::ScaleMode::Floor, latmix::mx::ScaleMode::Ceil, latmix::mx::ScaleMode::Even,
                   latmix::mx::ScaleMode::FourOverSix})
        m_scaleModeCombo->addItem(QString::fromStdString(latmix::mx::scaleModeName(m)));
    m_scaleModeCombo->setToolTip(tr("How the shared E8M0 exponent is chosen from the block maximum"));
    qform->addRow(tr("&Scale mode:"), m_scaleModeCombo);
    column->addWidget(quant);

    auto* synth = new QGroupBox(tr("Synthetic activations"), panel);
    auto* sform = new QFormLayout(synth);
    m_lengthSpin = new QSpinBox(synth);
    m_lengthSpin->setObjectName(QStringLiteral("lengthSpin"));
    m_lengthSpin->setRange(1, 65536);
    m_lengthSpin->setValue(256);
    m_lengthSpin->setToolTip(tr("Channels in the vector; a length that is not a multiple of the "
                                "block size leaves a partial last block"));
    sform->addRow(tr("&Length:"), m_lengthSpin);

    const latmix::mx::SyntheticSpec defaults;
    m_outlierCountSpin = new QSpinBox(synth);
    m_outlierCountSpin->setObjectName(QStringLiteral("outlierCountSpin"));
    m_outlierCountSpin->setRange(0, 64);
    m_outlierCountSpin->setValue(defaults.outlierChannels);
    sform->addRow(tr("&Outliers:"), m_outlierCountSpin);

    m_outlierScaleSpin = new QDoubleSpinBox(synth);
    m_outlierScaleSpin->setObjectName(QStringLiteral("outlierScaleSpin"));
    m_outlierScaleSpin->setRange(0.0, 10000.0);
    m_outlierScaleSpin->setDecimals(1);
    m_outlierScaleSpin->setSingleStep(5.0);
    m_outlierScaleSpin->setValue(defaults.outlierScale);
    m_outlierScaleSpin->setToolTip(tr("Outlier magnitude in standard deviations of the Gaussian bulk"));
    sform->addRow(tr("Outlier s&cale:"), m_outlierScaleSpin);

    m_seedSpin = new QSpinBox(synth);
    m_seedSpin->setObjectName(QStringLiteral("seedSpin"));
    m_seedSpin->setRange(0, std::numeric_limits<int>::max());
    m_seedSpin->setValue(static_cast<int>(defaults.seed));
    sform->addRow(tr("S&eed:"), m_seedSpin);
    column->addWidget(synth);

    m_logScaleCheck = new QCheckBox(tr("&Logarithmic error axis"), panel);
    m_logScaleCheck->setObjectName(QStringLiteral("logScaleCheck"));
    m_logScaleCheck->setChecked(true); // errors span decades: outlier blocks dwarf the rest
    column->addWidget(m_logScaleCheck);

    m_summaryLabel = new QLabel(panel);
    m_summaryLabel->setObjectName(QStringLiteral("summaryLabel"));
    m_summaryLabel->setWordWrap(true);
    m_summaryLabel->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_summaryLabel->setAlignment(Qt::AlignTop | Qt::AlignLeft);
    column->addWidget(m_summaryLabel);
    column->addStretch(1);

    offerScaleModes(m_formatCombo->currentText() == QLatin1String("nvfp4"));
    connect(m_formatCombo, &QComboBox::currentIndexChanged, this, &MxExplorerView::onFormatChanged);
    connect(m_blockCombo, &QComboBox::currentIndexChanged, this, &MxExplorerView::recompute);
    connect(m_scaleModeCombo, &QComboBox::currentIndexChanged, this, &MxExplorerView::recompute);
    connect(m_lengthSpin, &QSpinBox::valueChanged, this, &MxExplorerView::recompute);
    connect(m_outlierCountSpin, &QSpinBox::valueChanged, this, &MxExplorerView::recompute);
    connect(m_outlierScaleSpin, &QDoubleSpinBox::valueChanged, this, &MxExplorerView::recompute);
    connect(m_seedSpin, &QSpinBox::valueChanged, this, &MxExplorerView::recompute);
    connect(m_logScaleCheck, &QCheckBox::toggled, this, [this] {
        applyErrorScale();
        m_errorPlot->replot();
    });
    return panel;
}

void MxExplorerView::setupSignalPlot() {
    auto* p = m_signalPlot;
    p->setMinimumHeight(220);
    p->xAxis->setLabel(tr("channel"));
    p->yAxis->setLabel(tr("activation value"));

    m_originalGraph = p->addGraph();
    m_originalGraph->setName(tr("original"));
    m_originalGraph->setPen(QPen(kOriginalColor, 1.2));

    // Dequantized values as dots without a line: the eye sees which grid point each value
    // snapped to, and the original line stays visible underneath.
    m_dequantizedGraph = p->addGraph();
    m_dequantizedGraph->setName(tr("dequantized"));
    m_dequantizedGraph->setLineStyle(QCPGraph::lsNone);
    m_dequantizedGraph->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, kDequantColor, 4.0));
    m_dequantizedGraph->setPen(QPen(kDequantColor));

    PlotStyle::addTitleAndLegend(p, tr("Original vs dequantized values"), font());
}

void MxExplorerView::setupErrorPlot() {
    auto* p = m_errorPlot;
    p->setMinimumHeight(180);
    p->xAxis->setLabel(tr("MX block index"));
    p->yAxis->setLabel(tr("mean squared error E_B"));

    PlotStyle::integerTicks(p->xAxis); // there is no block 0.5

    m_errorBars = new QCPBars(p->xAxis, p->yAxis);
    m_errorBars->setName(tr("E_B per block"));
    m_errorBars->setWidth(0.8);
    m_errorBars->setPen(QPen(kErrorColor.darker(130)));
    m_errorBars->setBrush(QColor(kErrorColor.red(), kErrorColor.green(), kErrorColor.blue(), 210));

    m_mseLine = p->addGraph();
    m_mseLine->setName(tr("overall MSE"));
    m_mseLine->setPen(QPen(kMseColor, 1.5, Qt::DashLine));

    PlotStyle::addTitleAndLegend(p, tr("Per-block squared error"), font());
}

latmix::mx::MxConfig MxExplorerView::config() const {
    latmix::mx::MxConfig c;
    c.format = latmix::mx::parseFormat(m_formatCombo->currentText().toStdString());
    c.blockSize = m_blockCombo->currentText().toInt();
    c.scaleMode = latmix::mx::parseScaleMode(m_scaleModeCombo->currentText().toStdString());
    return c;
}

latmix::mx::SyntheticSpec MxExplorerView::syntheticSpec() const {
    latmix::mx::SyntheticSpec s;
    s.length = m_lengthSpin->value();
    s.outlierChannels = m_outlierCountSpin->value();
    s.outlierScale = m_outlierScaleSpin->value();
    s.seed = static_cast<std::uint64_t>(m_seedSpin->value());
    return s;
}

QVector<double> MxExplorerView::originalValues() const { return valuesOf(m_originalGraph); }

QVector<double> MxExplorerView::dequantizedValues() const { return valuesOf(m_dequantizedGraph); }

QVector<double> MxExplorerView::blockErrors() const {
    QVector<double> v;
    const auto data = m_errorBars->data();
    v.reserve(data->size());
    for (auto it = data->constBegin(); it != data->constEnd(); ++it) v.push_back(it->value);
    return v;
}

QString MxExplorerView::summaryText() const { return m_summaryLabel->text(); }

bool MxExplorerView::selectFormat(const QString& name) {
    const int i = m_formatCombo->findText(name);
    if (i < 0) return false;
    m_formatCombo->setCurrentIndex(i);
    return true;
}

void MxExplorerView::onFormatChanged() {
    const bool nvfp4 = m_formatCombo->currentText() == QLatin1String("nvfp4");
    {
        // One recompute per user action: the forced block change must not trigger its own.
        const QSignalBlocker blocker(m_blockCombo);
        if (nvfp4 && m_blockCombo->isEnabled()) {
            m_userBlock = m_blockCombo->currentText();
            m_blockCombo->setCurrentText(QStringLiteral("16"));
        } else if (!nvfp4 && !m_blockCombo->isEnabled()) {
            m_blockCombo->setCurrentText(m_userBlock);
        }
    }
    m_blockCombo->setEnabled(!nvfp4);
    offerScaleModes(nvfp4);
    m_blockCombo->setToolTip(nvfp4 ? tr("nvfp4 always uses blocks of 16 with E4M3 block scales") : tr("Values sharing one scale"));
    m_scaleModeCombo->setToolTip(nvfp4 ? tr("floor: each block's maximum maps to 6; four-over-six: to 4 or 6, whichever "
                                            "gives the block the smaller squared error")
                                       : tr("How the shared E8M0 exponent is chosen from the block maximum"));
    recompute();
}

// The scale modes a format takes (MxConfig::validate): nvfp4 its standard rule (floor) and
// four-over-six, the MX formats floor, ceil and even. A mode the format does not take is shown
// disabled, and a current one is replaced by floor without a recompute of its own.
void MxExplorerView::offerScaleModes(bool nvfp4) {
    auto* items = qobject_cast<QStandardItemModel*>(m_scaleModeCombo->model());
    for (int i = 0; i < m_scaleModeCombo->count(); ++i) {
        const auto m = latmix::mx::parseScaleMode(m_scaleModeCombo->itemText(i).toStdString());
        const bool takes = nvfp4 ? (m == latmix::mx::ScaleMode::Floor || m == latmix::mx::ScaleMode::FourOverSix)
                                 : m != latmix::mx::ScaleMode::FourOverSix;
        if (items) items->item(i)->setEnabled(takes);
    }
    const int current = m_scaleModeCombo->currentIndex();
    if (items && current >= 0 && !items->item(current)->isEnabled()) {
        const QSignalBlocker blocker(m_scaleModeCombo);
        m_scaleModeCombo->setCurrentIndex(0);
    }
}

void MxExplorerView::recompute() {
    try {
        const latmix::mx::MxConfig cfg = config();
        cfg.validate();
        std::vector<float> x = latmix::mx::syntheticActivations(syntheticSpec());
        const auto n = static_cast<std::int64_t>(x.size());
        // from_blob does not own x; clone so the tensor outlives the vector safely.
        const at::Tensor xt = at::from_blob(x.data(), {n}, at::kFloat).clone();
        const at::Tensor xq = latmix::mx::fakeQuantize(xt, cfg).to(at::kFloat).contiguous();
        const at::Tensor eb = latmix::metrics::perBlockError(xt, xq, cfg.blockSize).to(at::kDouble).contiguous();
        const latmix::metrics::ErrorSummary summary = latmix::metrics::errorSummary(xt, xq);
        const double mse = summary.mse;

        const float* xqp = xq.data_ptr<float>();
        const double* ebp = eb.data_ptr<double>();
        const std::int64_t nb = eb.numel();
        QVector<double> keys(n), orig(n), deq(n), blockKeys(nb), errs(nb);
        for (std::int64_t i = 0; i < n; ++i) {
            keys[i] = static_cast<double>(i);
            orig[i] = static_cast<double>(x[static_cast<size_t>(i)]);
            deq[i] = static_cast<double>(xqp[i]);
        }
        for (std::int64_t b = 0; b < nb; ++b) {
            blockKeys[b] = static_cast<double>(b);
            errs[b] = ebp[b];
        }
        const auto worst = std::max_element(errs.cbegin(), errs.cend());
        const double maxErr = worst == errs.cend() ? 0.0 : *worst;
        const auto worstBlock = worst == errs.cend() ? 0 : worst - errs.cbegin();

        m_originalGraph->setData(keys, orig, true);
        m_dequantizedGraph->setData(keys, deq, true);
        m_errorBars->setData(blockKeys, errs, true);
        m_mseLine->setData(QVector<double>{-0.5, static_cast<double>(nb) - 0.5}, QVector<double>{mse, mse}, true);
        m_mse = mse;

        m_signalPlot->xAxis->setRange(-0.5, static_cast<double>(n) - 0.5);
        m_signalPlot->yAxis->rescale();
        m_signalPlot->yAxis->scaleRange(1.08, m_signalPlot->yAxis->range().center());
        drawBlockBands(static_cast<int>(n), cfg.blockSize);
        m_errorPlot->xAxis->setRange(-0.6, static_cast<double>(nb) - 0.4);
        applyErrorScale();

        // Storage cost per value: element bits plus the 8-bit block scale spread over the block.
        const double bitsPerValue =
            latmix::mx::elementSpec(cfg.element()).bits + 8.0 / static_cast<double>(cfg.blockSize);
        const std::int64_t tail = n % cfg.blockSize;
        QString text = QStringLiteral("<b>%1</b><br>%2 bits/value<br>").arg(
            QString::fromStdString(cfg.describe()).toHtmlEscaped(), QString::number(bitsPerValue, 'g', 4));
        text += nb == 1 ? tr("1 block") : tr("%1 blocks").arg(nb);
        if (tail != 0) text += tr(" (last one partial: %1 values)").arg(tail);
        text += QStringLiteral("<br>") + tr("MSE: %1").arg(sci(mse));
        text += QStringLiteral("<br>") + tr("SQNR: %1").arg(std::isfinite(summary.sqnrDb)
                                                            ? QString::number(summary.sqnrDb, 'f', 2) + QStringLiteral(" dB")
                                                            : QStringLiteral("∞"));
        text += QStringLiteral("<br>") + tr("Max block error: %1 (block %2)").arg(sci(maxErr)).arg(worstBlock);
        m_summaryLabel->setText(text);
        m_hasError = false;
    } catch (const std::exception& e) {
        // Core reports bad input by throwing; the workbench shows why and keeps running.
        clearPlots();
        m_summaryLabel->setText(tr("<b>Cannot quantize:</b><br>%1").arg(QString::fromUtf8(e.what()).toHtmlEscaped()));
        m_hasError = true;
    }
    m_signalPlot->replot();
    m_errorPlot->replot();
    emit recomputed(!m_hasError);
}

void MxExplorerView::clearPlots() {
    m_originalGraph->data()->clear();
    m_dequantizedGraph->data()->clear();
    m_errorBars->data()->clear();
    m_mseLine->data()->clear();
    m_signalPlot->clearItems();
}

void MxExplorerView::drawBlockBands(int length, int blockSize) {
    // Shade every other block so the eye can tell which values share a scale.
    m_signalPlot->clearItems();
    const int blocks = (length + blockSize - 1) / blockSize;
    if (blocks < 2 || blocks > kMaxBlockBands) return;
    QColor band = palette().color(QPalette::Text);
    band.setAlpha(12);
    for (int b = 1; b < blocks; b += 2) {
        auto* rect = new QCPItemRect(m_signalPlot);
        rect->setLayer(QStringLiteral("background"));
        rect->setClipToAxisRect(true);
        rect->topLeft->setTypeX(QCPItemPosition::ptPlotCoords);
        rect->topLeft->setTypeY(QCPItemPosition::ptAxisRectRatio);
        rect->bottomRight->setTypeX(QCPItemPosition::ptPlotCoords);
        rect->bottomRight->setTypeY(QCPItemPosition::ptAxisRectRatio);
        rect->topLeft->setCoords(b * blockSize - 0.5, 0.0);
        rect->bottomRight->setCoords(std::min(length, (b + 1) * blockSize) - 0.5, 1.0);
        rect->setPen(Qt::NoPen);
        rect->setBrush(band);
        rect->setSelectable(false);
    }
}

void MxExplorerView::applyErrorScale() {
    auto* y = m_errorPlot->yAxis;
    const bool log = m_logScaleCheck->isChecked();
    if (log) {
        y->setScaleType(QCPAxis::stLogarithmic);
        y->setTicker(PlotStyle::logTicker());
        y->setNumberFormat(QStringLiteral("eb")); // 10^-3 style labels
        y->setNumberPrecision(0);
    } else {
        y->setScaleType(QCPAxis::stLinear);
        y->setTicker(QSharedPointer<QCPAxisTicker>::create());
        y->setNumberFormat(QStringLiteral("g"));
        y->setNumberPrecision(3);
    }
    // Range from the data by hand: a log axis cannot show zero errors (lossless blocks), so
    // only positive values decide its lower end; their bars simply leave the visible area.
    double lo = std::numeric_limits<double>::infinity(), hi = 0.0;
    const auto data = m_errorBars->data();
    for (auto it = data->constBegin(); it != data->constEnd(); ++it) {
        if (!std::isfinite(it->value)) continue;
        hi = std::max(hi, it->value);
        if (it->value > 0.0) lo = std::min(lo, it->value);
    }
    if (m_mse > 0.0 && std::isfinite(m_mse)) lo = std::min(lo, m_mse);
    if (log) {
        if (!(hi > 0.0)) y->setRange(1e-12, 1.0);
        else y->setRange(lo / 3.0, hi * 3.0);
    } else {
        y->setRange(0.0, hi > 0.0 ? hi * 1.1 : 1.0);
    }
    m_errorBars->setBaseValue(0.0);
}

void MxExplorerView::applyPlotTheme() {
    for (QCustomPlot* p : {m_signalPlot, m_errorPlot}) PlotStyle::apply(p, palette());
}

void MxExplorerView::changeEvent(QEvent* event) {
    QWidget::changeEvent(event);
    if (event->type() == QEvent::PaletteChange && m_signalPlot) {
        applyPlotTheme();
        if (!m_hasError) recompute(); // redraw block bands in the new text colour
    }
}

} // namespace latmix::gui
