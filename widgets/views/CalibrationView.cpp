#include "AtenHeaders.h"

#include "CalibrationView.h"
#include "FormWidgets.h"

#include "JobRunner.h"
#include "TrainingDashboard.h"
#include "WorkbenchSettings.h"

#include "eval/Perplexity.h"
#include "model/Checkpoint.h"
#include "model/ConfigJson.h"
#include "model/ModelConfig.h"
#include "run/quantize/MemoryEstimate.h"
#include "run/FormatScheme.h"
#include "run/PrepareRun.h"
#include "run/quantize/OptionTable.h"
#include "util/Runtime.h"
#include "util/Text.h"
#include "mx/MxFormat.h"

#include <nlohmann/json.hpp>

#include <QComboBox>
#include <QDateTime>
#include <QDir>
#include <QDoubleSpinBox>
#include <QEvent>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QCheckBox>
#include <QLabel>
#include <QLineEdit>
#include <QPointer>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QSettings>
#include <QHash>
#include <QSpinBox>
#include <QStandardPaths>
#include <QToolButton>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <stdexcept>

// The resources live in the static widgets library: make sure they are registered (outside
// any namespace, as Q_INIT_RESOURCE requires).
static void initCalibrationResources() { Q_INIT_RESOURCE(resources); }

namespace latmix::gui {

QByteArray builtInCalibrationText() {
    initCalibrationResources();
    QFile f(QStringLiteral(":/text/calibration.txt"));
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

namespace {

QVariant controlValue(const QWidget* w);
nlohmann::ordered_json controlJson(const QWidget* w); // both below, beside the settings

using FormWidgets::dspin;
using FormWidgets::spin;

} // namespace

// The method, the format and what is checked before a run.
QGroupBox* CalibrationView::createMethodBox(QWidget* parent) {
    auto* methodBox = new QGroupBox(tr("Method"), parent);
    auto* mf = new QFormLayout(methodBox);
    m_method = new QComboBox(methodBox);
    m_method->setObjectName(QStringLiteral("methodCombo"));
    for (const auto& m : latmix::run::methods()) {
        m_method->addItem(QString::fromStdString(m.name), QString::fromStdString(m.name));
        m_method->setItemData(m_method->count() - 1, QString::fromStdString(m.description), Qt::ToolTipRole);
    }
    m_method->setCurrentText(QStringLiteral("latmix-lu"));
    mf->addRow(tr("&Method:"), m_method);
    m_format = FormWidgets::formatCombo(methodBox, "formatCombo");
    m_format->setToolTip(tr("MX format of weights and activations, as the paper's W4A4 for the 4-bit ones (block 32, "
                            "floor scales; nvfp4: block 16)"));
    mf->addRow(tr("&Format:"), m_format);
    m_block = new QComboBox(methodBox);
    m_block->setObjectName(QStringLiteral("blockCombo"));
    m_block->addItem(tr("format default"), 0);
    for (int b : {8, 16, 32, 64, 128}) m_block->addItem(QString::number(b), b);
    m_block->setToolTip(tr("MX block size (default: 32; 16 for nvfp4)"));
    mf->addRow(tr("&Block size:"), m_block);
    m_scaleMode = new QComboBox(methodBox);
    m_scaleMode->setObjectName(QStringLiteral("scaleModeCombo"));
    for (const std::string& mode : latmix::util::splitList(latmix::mx::scaleModeNameList()))
        m_scaleMode->addItem(QString::fromStdString(mode));
    m_scaleMode->setToolTip(tr("Shared-scale rounding: floor (OCP), ceil, even (torchao); nvfp4: floor (maxima to 6) "
                               "or four-over-six (to 4 or 6, whichever errs less)"));
    mf->addRow(tr("S&cale mode:"), m_scaleMode);
    m_keep = new QLineEdit(methodBox);
    m_keep->setObjectName(QStringLiteral("keepEdit"));
    m_keep->setPlaceholderText(tr("none (a regex, e.g. layers\\.0\\.|down_proj)"));
    m_keep->setToolTip(tr("Block linears whose module name this regex finds keep their weights and inputs in bf16 "
                          "(--keep). The Model dock's \"keep in bf16\" boxes write it."));
    mf->addRow(tr("&Keep in bf16:"), m_keep);
    m_scheme = new QLineEdit(methodBox);
    m_scheme->setObjectName(QStringLiteral("schemeEdit"));
    m_scheme->setPlaceholderText(tr("none: every linear in the format above"));
    m_scheme->setToolTip(tr("Mixed precision (--scheme): rules 'REGEX = FORMAT' separated by ';', or a scheme file "
                            "from latmix plan; each fusion group a rule takes gets its format (mxfp4, nvfp4, mxint4, "
                            "mxfp8, mxint8, bf16), the rest the format above. Every method but WUSH's reads it."));
    mf->addRow(tr("Mi&xed precision:"), m_scheme);
    m_schemeInfo = new QLabel(methodBox);
    m_schemeInfo->setObjectName(QStringLiteral("schemeInfo"));
    m_schemeInfo->setWordWrap(true);
    mf->addRow(QString(), m_schemeInfo);
    connect(m_scheme, &QLineEdit::textChanged, this, &CalibrationView::updateSchemePreview);
    m_t1Bias = new QComboBox(methodBox);
    m_t1Bias->setObjectName(QStringLiteral("t1BiasCombo"));
    m_t1Bias->addItem(tr("Auto"), QStringLiteral("auto")); // its text says what auto chose (updateT1BiasAuto)
    m_t1Bias->addItem(tr("On (the paper)"), true);
    m_t1Bias->addItem(tr("Off (v1 = 0)"), false);
    m_t1Bias->setToolTip(tr("T1's bias v1. On: the paper's recipe. Off: v1 = 0, the deployable variant (Qwen3's hf "
                            "exports and every GGUF export need it: the biases v1 folds into have no place there). "
                            "Auto: on where the model's hf and compressed-tensors exports load them, else off"));
    mf->addRow(tr("Learned T1 &bias:"), m_t1Bias);
    m_skipExportCheck = new QCheckBox(tr("Skip export check"), methodBox);
    m_skipExportCheck->setObjectName(QStringLiteral("skipExportCheck"));
    m_skipExportCheck->setToolTip(tr("Run even when no Hugging Face / vLLM runtime could load the folded biases "
                                     "(the run still evaluates here; export refuses it)"));
    mf->addRow(QString(), m_skipExportCheck);
    return methodBox;
}

// The training recipe of the learned methods and what the dashboard follows.
QGroupBox* CalibrationView::createTrainingBox(QWidget* parent) {
    auto* trainBox = new QGroupBox(tr("Training (learned methods)"), parent);
    auto* tf = new QFormLayout(trainBox);
    m_steps = spin(trainBox, "stepsSpin", 1, 100000, 100, tr("Optimizer steps (the paper uses 1000)"));
    tf->addRow(tr("&Steps:"), m_steps);
    m_batch = spin(trainBox, "batchSpin", 1, 64, 2, tr("Calibration windows per step"));
    tf->addRow(tr("&Batch:"), m_batch);
    m_lr = dspin(trainBox, "lrSpin", 1e-6, 1.0, 1e-3, 5, tr("AdamW learning rate (peak of the cosine schedule)"));
    tf->addRow(tr("&Learning rate:"), m_lr);
    m_temperature = dspin(trainBox, "temperatureSpin", 0.1, 10.0, 1.5, 2, tr("Distillation temperature τ"));
    tf->addRow(tr("&Temperature:"), m_temperature);
    m_volumeWeight = dspin(trainBox, "volumeWeightSpin", 0.0, 10.0, 0.1, 3, tr("Weight λ of the volume term"));
    tf->addRow(tr("&Volume weight:"), m_volumeWeight);
    m_metricsEvery = spin(trainBox, "metricsEverySpin", 1, 1000, 10, tr("Matrix metrics and heatmaps every k steps"));
    tf->addRow(tr("Metrics every:"), m_metricsEvery);
    m_trackedLayer = spin(trainBox, "trackedLayerSpin", 0, 0, 0, tr("Layer whose T2 (A2) the dashboard follows"));
    tf->addRow(tr("A2 of &layer:"), m_trackedLayer);
    return trainBox;
}

// The calibration data, the evaluation, the device and the run folder.
QGroupBox* CalibrationView::createDataBox(QWidget* parent) {
    auto* dataBox = new QGroupBox(tr("Data and device"), parent);
    auto* df = new QFormLayout(dataBox);
    auto* textRow = new QHBoxLayout;
    m_calibText = new QLineEdit(dataBox);
    m_calibText->setObjectName(QStringLiteral("calibrationTextEdit"));
    m_calibText->setPlaceholderText(tr("built-in text"));
    m_calibText->setToolTip(tr("Calibration text (a training-side split, e.g. wiki.valid.tokens; never the test text)"));
    auto* browseText = new QToolButton(dataBox);
    browseText->setText(QStringLiteral("…"));
    connect(browseText, &QToolButton::clicked, this, [this] {
        const QString f = QFileDialog::getOpenFileName(this, tr("Calibration text"), m_calibText->text());
        if (!f.isEmpty()) m_calibText->setText(f);
    });
    textRow->addWidget(m_calibText);
    textRow->addWidget(browseText);
    df->addRow(tr("Text:"), textRow);
    m_samples = spin(dataBox, "samplesSpin", 1, 4096, 16, tr("Calibration windows drawn from the text"));
    df->addRow(tr("&Windows:"), m_samples);
    m_seqLen = spin(dataBox, "seqLenSpin", 8, 8192, 64, tr("Tokens per calibration window"));
    df->addRow(tr("Window &length:"), m_seqLen);
    m_seed = spin(dataBox, "seedSpin", 0, 1 << 30, 0, tr("Seed of the windows, the initial transforms and T3"));
    df->addRow(tr("S&eed:"), m_seed);
    m_evalWindows = spin(dataBox, "evalWindowsSpin", 0, 100000, 0,
                         tr("WikiText-2 test windows for perplexity after quantization (0: none): the evaluation "
                            "text below, or wikitext-2/wiki.test.raw in the data folder (File › Data folder…)"));
    df->addRow(tr("E&val windows:"), m_evalWindows);
    auto* evalRow = new QHBoxLayout;
    m_evalText = new QLineEdit(dataBox);
    m_evalText->setObjectName(QStringLiteral("evaluationTextEdit"));
    m_evalText->setPlaceholderText(tr("WikiText-2 test in the data folder"));
    m_evalText->setToolTip(tr("The text perplexity is measured on: WikiText-2's raw test split (wiki.test.raw); empty: "
                              "the one in the data folder (File › Data folder…, or LATMIX_DATA_DIR)"));
    auto* browseEval = new QToolButton(dataBox);
    browseEval->setObjectName(QStringLiteral("evaluationTextBrowse"));
    browseEval->setText(QStringLiteral("…"));
    connect(browseEval, &QToolButton::clicked, this, [this] {
        const QString f = QFileDialog::getOpenFileName(this, tr("Evaluation text (WikiText-2 test, raw)"), m_evalText->text());
        if (!f.isEmpty()) m_evalText->setText(f);
    });
    evalRow->addWidget(m_evalText);
    evalRow->addWidget(browseEval);
    df->addRow(tr("Eval text:"), evalRow);
    m_foldedEvery = spin(dataBox, "foldedEvalEverySpin", 0, 100000, 0,
                         tr("Perplexity of the folded, unquantized model on the eval windows before training, after "
                            "step 1 and every N steps: folding the transforms must leave the model as it was (paper "
                            "Table 2). Plotted on the loss plot's right axis. 0: never; needs eval windows"));
    df->addRow(tr("&Folded check every:"), m_foldedEvery);
    m_device = new QComboBox(dataBox);
    m_device->setObjectName(QStringLiteral("deviceCombo"));
    for (const auto& d : latmix::availableDevices()) m_device->addItem(QString::fromStdString(d));
    m_device->setToolTip(tr("Where training and GPTQ run"));
    df->addRow(tr("&Device:"), m_device);
    connect(m_device, &QComboBox::currentTextChanged, this, &CalibrationView::deviceChanged);
    m_defaultThreads = latmix::threadCount();
    m_threads = spin(dataBox, "threadsSpin", 1, 1024, m_defaultThreads, tr("libtorch CPU threads"));
    df->addRow(tr("T&hreads:"), m_threads);
    connect(m_threads, qOverload<int>(&QSpinBox::valueChanged), this, [this](int n) {
        latmix::configureThreads(n);
        emit threadsChanged(latmix::threadCount());
    });
    auto* dirRow = new QHBoxLayout;
    m_runDirEdit = new QLineEdit(dataBox);
    m_runDirEdit->setObjectName(QStringLiteral("runDirEdit"));
    m_runDirEdit->setPlaceholderText(tr("new folder under the data location"));
    auto* browseDir = new QToolButton(dataBox);
    browseDir->setText(QStringLiteral("…"));
    connect(browseDir, &QToolButton::clicked, this, [this] {
        const QString d = QFileDialog::getExistingDirectory(this, tr("Run folder"), m_runDirEdit->text());
        if (!d.isEmpty()) m_runDirEdit->setText(d);
    });
    dirRow->addWidget(m_runDirEdit);
    dirRow->addWidget(browseDir);
    df->addRow(tr("Run folder:"), dirRow);
    return dataBox;
}

CalibrationView::CalibrationView(QWidget* parent) : QWidget(parent) {
    setObjectName(QStringLiteral("calibrationView"));
    m_runner = new JobRunner(this);
    m_dashboard = new TrainingDashboard(this);

    auto* form = new QWidget(this);
    form->setObjectName(QStringLiteral("calibrationForm"));
    auto* column = new QVBoxLayout(form);
    column->setContentsMargins(0, 0, 0, 0);

    column->addWidget(createMethodBox(form));
    column->addWidget(createTrainingBox(form));
    column->addWidget(createDataBox(form));
    // Each control of a run option says which (run/quantize/OptionTable.h): its label is the
    // table's, the name the run's messages give it ("Learned T1 bias: off"); tst_calibrationview
    // checks that the two agree.
    const std::pair<QWidget*, const char*> optionControls[] = {
        {m_method, "method"},          {m_format, "format"},
        {m_block, "block"},            {m_scaleMode, "scale_mode"},
        {m_keep, "keep"},              {m_scheme, "scheme"},
        {m_t1Bias, "t1_bias"},         {m_skipExportCheck, "skip_export_check"},
        {m_steps, "steps"},            {m_batch, "batch"},
        {m_lr, "lr"},                  {m_temperature, "temperature"},
        {m_volumeWeight, "volume_weight"}, {m_metricsEvery, "metrics_every"},
        {m_trackedLayer, "tracked_layer"}, {m_samples, "calib_samples"},
        {m_seqLen, "seqlen"},          {m_seed, "seed"},
        {m_evalWindows, "eval_windows"}, {m_foldedEvery, "folded_eval_every"},
        {m_device, "device"}};
    for (const auto& [control, key] : optionControls) control->setProperty("optionKey", QString::fromLatin1(key));

    m_memory = new QLabel(form);
    m_memory->setObjectName(QStringLiteral("memoryEstimateLabel"));
    m_memory->setWordWrap(true);
    column->insertWidget(1, m_memory); // under the method, where it is seen before Run
    for (QComboBox* c : {m_method, m_format, m_block, m_device})
        connect(c, &QComboBox::currentTextChanged, this, &CalibrationView::updateMemoryEstimate);
    for (QComboBox* c : {m_format, m_block})
        connect(c, &QComboBox::currentTextChanged, this, &CalibrationView::updateSchemePreview);
    for (QSpinBox* sp : {m_batch, m_samples, m_seqLen, m_evalWindows})
        connect(sp, qOverload<int>(&QSpinBox::valueChanged), this, &CalibrationView::updateMemoryEstimate);

    column->addStretch(1);
    // Below the form's scroll area, not in it: seen whatever the window's height (issue 71: at
    // 1280x800 it was below the fold).
    m_run = new QPushButton(tr("&Run calibration"), this);
    m_run->setObjectName(QStringLiteral("runButton"));
    m_run->setEnabled(false);
    m_run->setToolTip(tr("Open a model first"));

    m_formScroll = new QScrollArea(this);
    m_formScroll->setWidget(form);
    m_formScroll->setWidgetResizable(true);
    m_formScroll->setFrameShape(QFrame::NoFrame);
    m_formScroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    form->installEventFilter(this);
    fitFormWidth();

    auto* left = new QVBoxLayout;
    left->addWidget(m_formScroll, 1);
    left->addWidget(m_run);
    auto* row = new QHBoxLayout(this);
    row->addLayout(left);
    row->addWidget(m_dashboard, 1);

    connect(m_run, &QPushButton::clicked, this, [this] { start(); });
    connect(m_dashboard, &TrainingDashboard::pauseToggled, m_runner, &JobRunner::setPaused);
    connect(m_dashboard, &TrainingDashboard::cancelRequested, m_runner, &JobRunner::cancel);
    connect(m_runner, &JobRunner::progressed, m_dashboard, &TrainingDashboard::setProgress);
    connect(m_runner, &JobRunner::finished, this, [this](bool ok, const QString& error) {
        const QString dir = m_activeRunDir;
        const QString message = ok ? tr("Finished: %1").arg(QDir::toNativeSeparators(dir))
                                   : error == QLatin1String("cancelled")
                                         ? tr("Cancelled; the run file keeps the finished steps: Run with the same "
                                              "run folder and settings continues it (%1)")
                                               .arg(dir)
                                         : tr("Calibration failed: %1").arg(error);
        m_dashboard->finishRun(ok, message);
        m_run->setEnabled(!m_modelDir.isEmpty());
        if (!ok && error != QLatin1String("cancelled")) emit errorOccurred(message);
        emit runFinished(ok, dir, message);
    });
    loadSettings();
}

CalibrationView::~CalibrationView() { saveSettings(); }

// The form's scroll area as wide as the form needs beside its vertical scroll bar: it scrolls
// down, never sideways, and no control or wrapped line (the memory estimate) is cut at the right
// edge. Again whenever the form's layout changes (a control's longer text: "Auto (off)").
void CalibrationView::fitFormWidth() {
    QWidget* form = m_formScroll->widget();
    m_formScroll->setFixedWidth(
        std::max(260, form->minimumSizeHint().width() + m_formScroll->verticalScrollBar()->sizeHint().width()));
}

bool CalibrationView::eventFilter(QObject* watched, QEvent* event) {
    if (m_formScroll && watched == m_formScroll->widget() && event->type() == QEvent::LayoutRequest) fitFormWidth();
    return QWidget::eventFilter(watched, event);
}

void CalibrationView::setModelDir(const QString& dir) {
    if (dir != m_modelDir) { // they name the previous model's linears
        m_keep->clear();
        m_scheme->clear();
    }
    m_modelDir = dir;
    int layers = 1;
    try {
        if (!dir.isEmpty())
            layers = latmix::model::ModelConfig::fromFile((QDir(dir).filePath(QStringLiteral("config.json"))).toStdString()).numLayers;
    } catch (const std::exception&) {
        // A folder MainWindow opened has a readable config; nothing to do otherwise.
    }
    m_trackedLayer->setMaximum(std::max(0, layers - 1));
    const bool can = !dir.isEmpty() && !m_runner->isRunning();
    m_run->setEnabled(can);
    m_run->setToolTip(dir.isEmpty() ? tr("Open a model first") : tr("Quantize %1 with the settings above").arg(dir));
    m_storedBytes = 0;
    try {
        if (!dir.isEmpty()) {
            const auto ck = latmix::model::Checkpoint::load(dir.toStdString());
            m_config = ck.config();
            m_storedBytes = latmix::run::storedElementBytes(ck.weightBytes(), ck.parameterCount());
        }
    } catch (const std::exception&) {
        // Shown by whoever opened the folder; the estimate just stays empty.
    }
    updateT1BiasAuto();
    updateMemoryEstimate();
    updateSchemePreview();
}

// The scheme on the open model, before Run: its bits per weight under the field (or why it does
// not resolve, the rule named), each point's format to the Model dock.
void CalibrationView::updateSchemePreview() {
    if (!m_schemeInfo) return;
    QMap<QString, QString> formats;
    if (m_storedBytes > 0) {
        latmix::run::SchemePreview p;
        try {
            const auto o = options();
            p = latmix::run::previewScheme(m_config, o.scheme, o.format);
        } catch (const std::exception& e) { // a form value the option table refuses
            p.error = e.what();
        }
        for (const auto& [point, format] : p.pointFormats) formats.insert(QString::fromStdString(point), QString::fromStdString(format));
        m_schemeInfo->setText(!p.error.empty() ? QString::fromStdString(p.error)
                              : scheme().isEmpty() ? QString()
                                                   : tr("%1 bits per weight on average").arg(p.bits, 0, 'f', 2));
        m_schemeInfo->setStyleSheet(p.error.empty() ? QString() : QStringLiteral("color: #c0392b;"));
    }
    m_schemeInfo->setVisible(!m_schemeInfo->text().isEmpty());
    emit pointFormatsChanged(formats);
}

// What --t1-bias auto resolves to for the open model (run/quantize/Preflight.cpp's rule), shown
// in the control itself before the run.
void CalibrationView::updateT1BiasAuto() {
    const std::string problem = m_storedBytes > 0 ? latmix::model::hfBiasProblem(m_config, true) : std::string();
    m_t1Bias->setItemText(0, m_storedBytes == 0 ? tr("Auto") : problem.empty() ? tr("Auto (on)") : tr("Auto (off)"));
    m_t1Bias->setItemData(0, problem.empty() ? QString() : QString::fromStdString(problem), Qt::ToolTipRole);
}

// The estimated peak memory of the run the form describes (run/quantize/MemoryEstimate.h), shown before
// Run: the host's for a CPU run, the GPU's for a run on a GPU (the one the run is checked
// against); the table of stages in the tooltip. The run itself refuses a peak above what the
// device has (the CLI's --force).
void CalibrationView::updateMemoryEstimate() {
    if (!m_memory) return;
    if (m_storedBytes == 0) {
        m_memory->setText(tr("Memory: open a model to see the estimate"));
        m_memory->setToolTip(QString());
        return;
    }
    try {
        const auto o = options();
        const auto m = latmix::run::estimateRunMemory(m_config, m_storedBytes, o, latmix::run::runMethod(o));
        const bool cpu = m.checkedDevice == "cpu";
        const latmix::run::MemoryEstimate& e = cpu ? m.host : m.gpu; // the workbench has no --offload: one device
        const auto available = latmix::run::checkedDeviceMemory(m);
        const bool over = !latmix::run::memoryProblem(m, available, o).empty();
        const QString gib = QString::fromStdString(latmix::run::gibText(e.peakBytes));
        const QString of = available > 0 ? (cpu ? tr(" of %1 available") : tr(" of %1"))
                                               .arg(QString::fromStdString(latmix::run::gibText(available)))
                                         : QString();
        m_memory->setText(cpu ? tr("Memory: about %1 at peak (%2)%3").arg(gib, QString::fromStdString(e.peakStage), of)
                              : tr("GPU memory (%1): about %2 at peak (%3)%4")
                                    .arg(QString::fromStdString(m.checkedDevice), gib,
                                         QString::fromStdString(e.peakStage), of));
        m_memory->setStyleSheet(over ? QStringLiteral("color: #c0392b;") : QString());
        m_memory->setToolTip(QStringLiteral("<pre>%1</pre>")
                                 .arg(QString::fromStdString(latmix::run::memoryTable(e, available)).toHtmlEscaped()));
    } catch (const std::exception& ex) {
        m_memory->setText(tr("Memory: %1").arg(QString::fromLocal8Bit(ex.what())));
    }
}

// The run the form describes: each option control's value set through the option table, in the
// table's order and with its checks (as the CLI's flags and a sweep's keys are). The workbench
// evaluates on windows of 256 tokens; without windows there is no folded check either.
latmix::run::RunConfig CalibrationView::options() const {
    QHash<QString, const QWidget*> controls;
    for (const QWidget* w : findChildren<QWidget*>()) {
        const QString key = w->property("optionKey").toString();
        if (!key.isEmpty()) controls.insert(key, w);
    }
    latmix::run::RunConfig o;
    for (const auto& field : latmix::run::optionFields())
        if (const QWidget* w = controls.value(QString::fromLatin1(field.key)))
            latmix::run::setOption(o, field.key, controlJson(w), "Calibration form");
    o.evalSeqLen = o.evalWindows > 0 ? 256 : 0;
    if (o.evalWindows == 0) o.foldedEvalEvery = 0;
    return o;
}

void CalibrationView::setMethod(const QString& method) { m_method->setCurrentText(method); }
void CalibrationView::setKeep(const QString& regex) { m_keep->setText(regex); }
QString CalibrationView::keep() const { return m_keep->text().trimmed(); }
void CalibrationView::setScheme(const QString& rules) { m_scheme->setText(rules); }
QString CalibrationView::scheme() const { return m_scheme->text().trimmed(); }
void CalibrationView::setFormat(const QString& format) { m_format->setCurrentText(format); }
void CalibrationView::setSteps(int steps) { m_steps->setValue(steps); }
void CalibrationView::setCalibration(int samples, int seqLen, int batch) {
    m_samples->setValue(samples);
    m_seqLen->setValue(seqLen);
    m_batch->setValue(batch);
}
void CalibrationView::setEvalWindows(int windows) { m_evalWindows->setValue(windows); }
void CalibrationView::setTrackedLayer(int layer) { m_trackedLayer->setValue(layer); }
void CalibrationView::setCalibrationText(const QString& path) { m_calibText->setText(path); }
void CalibrationView::setRunDir(const QString& dir) { m_runDirEdit->setText(dir); }
QString CalibrationView::runDir() const { return m_runDirEdit->text(); }
QString CalibrationView::device() const { return m_device->currentText(); }

QString CalibrationView::defaultRunDir() const {
    const QString base = QStandardPaths::writableLocation(QStandardPaths::AppLocalDataLocation) + QStringLiteral("/runs");
    return base + QLatin1Char('/') + QFileInfo(m_modelDir).fileName() + QLatin1Char('-') + m_method->currentText() +
           QLatin1Char('-') + m_format->currentText() + QLatin1Char('-') +
           QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-HHmmss"));
}

void CalibrationView::setEvaluationText(const QString& path) { m_evalText->setText(path); }

bool CalibrationView::start(QString* error) {
    auto fail = [&](const QString& why) {
        if (error) *error = why;
        emit errorOccurred(why);
        return false;
    };
    if (m_modelDir.isEmpty()) return fail(tr("Open a model before running a calibration"));
    if (m_runner->isRunning()) return fail(tr("A calibration is already running; cancel it first"));
    QString dir = m_runDirEdit->text().trimmed();
    if (dir.isEmpty()) dir = defaultRunDir();
    // The run as the CLI and a sweep's cells get theirs ready (run/PrepareRun.h): every check, then
    // the folder's state: a run folder left unfinished (cancelled, failed, or its process killed:
    // run/UnfinishedRun.h) continues when the method and model are the same, from the last
    // checkpoint of its train.h5; a finished run or another run's folder is refused.
    latmix::run::RunRequest request;
    request.modelDir = m_modelDir.toStdString();
    request.runDir = QDir(dir).absolutePath().toStdString();
    request.resume = latmix::run::ResumeRule::IfUnfinished;
    request.commandLine = "latmix-workbench calibration";
    const QString textPath = m_calibText->text().trimmed();
    latmix::run::PreparedRun prepared;
    try {
        request.config = options();
        if (textPath.isEmpty()) { // the built-in text (resources)
            request.calibText = builtInCalibrationText().toStdString();
            if (request.calibText.empty()) return fail(tr("The built-in calibration text is missing from this build"));
            request.config.calibSource = latmix::run::kBuiltInCalibrationText;
        } else {
            request.config.calibSource = QFileInfo(textPath).absoluteFilePath().toStdString();
        }
        const QString evalPath = m_evalText->text().trimmed();
        if (!evalPath.isEmpty()) request.config.evalSource = QFileInfo(evalPath).absoluteFilePath().toStdString();
        prepared = latmix::run::prepareRun(request);
    } catch (const latmix::run::RunRefused& e) { // the remedies in the names of this form's controls
        return fail(tr("Cannot run: %1").arg(QString::fromStdString(e.message(latmix::run::Face::Workbench))));
    } catch (const std::invalid_argument& e) {
        return fail(tr("Invalid settings: %1").arg(QString::fromLocal8Bit(e.what())));
    } catch (const std::exception& e) {
        return fail(QString::fromLocal8Bit(e.what()));
    }
    if (!QDir().mkpath(dir)) return fail(tr("Cannot create the run folder %1").arg(dir));
    m_activeRunDir = QDir(dir).absolutePath();
    saveSettings();

    const latmix::run::QuantizeOptions& o = prepared.options;
    m_dashboard->beginRun(QFileInfo(m_activeRunDir).fileName(), prepared.resolved.method.learned ? o.steps : 0,
                          o.format.blockSize);
    m_dashboard->setTrackedLayer(o.trackedLayer);
    QPointer<TrainingDashboard> board = m_dashboard;
    latmix::run::RunHooks hooks;
    hooks.onMatrices = [board](int step, const at::Tensor& a1, const at::Tensor& a2) {
        QMetaObject::invokeMethod(
            board, [board, step, a1, a2] { if (board) board->setMatrices(step, a1, a2); }, Qt::QueuedConnection);
    };
    hooks.onStep = [board](const latmix::train::DistillStep& s) {
        QMetaObject::invokeMethod(
            board, [board, s] { if (board) board->addStep(s); }, Qt::QueuedConnection);
    };
    hooks.onLayerQuantized = [board](int layer, const std::vector<std::pair<std::string, double>>& errors) {
        QMetaObject::invokeMethod(
            board, [board, layer, errors] { if (board) board->addLayerErrors(layer, errors); }, Qt::QueuedConnection);
    };
    const bool started = m_runner->start(tr("Calibration %1").arg(m_method->currentText()), [=](latmix::JobContext& job) {
        latmix::run::runQuantize(prepared, latmix::run::loadRunInputs(prepared), job, hooks);
    });
    if (!started) return fail(tr("A calibration is already running; cancel it first"));
    m_run->setEnabled(false);
    return true;
}

namespace {

// The form's controls of run options (their "optionKey" property), saved under the option table's
// keys; tracked_layer (its range is the open model's) and skip_export_check (a one-off decision)
// are not remembered.
QList<QWidget*> rememberedControls(const QWidget* form) {
    QList<QWidget*> out;
    for (QWidget* w : form->findChildren<QWidget*>()) {
        const QString key = w->property("optionKey").toString();
        // keep and scheme name one model's linears: the Model dock sets keep for the model open.
        if (!key.isEmpty() && key != QLatin1String("tracked_layer") && key != QLatin1String("skip_export_check") &&
            key != QLatin1String("keep") && key != QLatin1String("scheme"))
            out << w;
    }
    return out;
}

QVariant controlValue(const QWidget* w) {
    if (auto* c = qobject_cast<const QComboBox*>(w)) return c->currentData().isValid() ? c->currentData() : c->currentText();
    if (auto* b = qobject_cast<const QSpinBox*>(w)) return b->value();
    if (auto* b = qobject_cast<const QDoubleSpinBox*>(w)) return b->value();
    if (auto* b = qobject_cast<const QCheckBox*>(w)) return b->isChecked();
    if (auto* e = qobject_cast<const QLineEdit*>(w)) return e->text().trimmed();
    return {};
}

// A control's value as the option table's JSON value.
nlohmann::ordered_json controlJson(const QWidget* w) {
    const QVariant v = controlValue(w);
    if (v.userType() == QMetaType::Int) return v.toInt();
    if (v.userType() == QMetaType::Double) return v.toDouble();
    if (v.userType() == QMetaType::Bool) return v.toBool();
    return v.toString().toStdString();
}

void setControlValue(QWidget* w, const QVariant& v) {
    if (!v.isValid()) return;
    if (auto* c = qobject_cast<QComboBox*>(w)) {
        int i = c->findData(v);
        if (i < 0) i = c->findText(v.toString());
        if (i >= 0) c->setCurrentIndex(i);
    } else if (auto* b = qobject_cast<QSpinBox*>(w)) {
        b->setValue(v.toInt());
    } else if (auto* b = qobject_cast<QDoubleSpinBox*>(w)) {
        b->setValue(v.toDouble());
    } else if (auto* b = qobject_cast<QCheckBox*>(w)) {
        b->setChecked(v.toBool());
    }
}

// Settings written before the form used the option table's keys.
QString earlierKey(const QString& key) {
    static const QHash<QString, QString> earlier = {
        {"calib_samples", "samples"},       {"seqlen", "seqLen"},           {"volume_weight", "volumeWeight"},
        {"metrics_every", "metricsEvery"}, {"eval_windows", "evalWindows"}, {"folded_eval_every", "foldedEvalEvery"},
        {"scale_mode", "scaleMode"}};
    return earlier.value(key, key);
}

} // namespace

void CalibrationView::saveSettings() const {
    QSettings s = workbenchSettings();
    s.beginGroup(QStringLiteral("calibration"));
    for (const QWidget* w : rememberedControls(this)) s.setValue(w->property("optionKey").toString(), controlValue(w));
    // Only a count the user chose is remembered: otherwise LATMIX_THREADS / the core count decide.
    if (m_threads->value() != m_defaultThreads)
        s.setValue(QStringLiteral("threads"), m_threads->value());
    else
        s.remove(QStringLiteral("threads"));
    s.setValue(QStringLiteral("calibrationText"), m_calibText->text());
    s.endGroup();
}

void CalibrationView::loadSettings() {
    QSettings s = workbenchSettings();
    s.beginGroup(QStringLiteral("calibration"));
    for (QWidget* w : rememberedControls(this)) {
        const QString key = w->property("optionKey").toString();
        setControlValue(w, s.value(s.contains(key) ? key : earlierKey(key)));
    }
    // A thread count chosen earlier applies again (latmix-workbench --threads N overrides it).
    if (s.contains(QStringLiteral("threads"))) m_threads->setValue(s.value(QStringLiteral("threads")).toInt());
    m_calibText->setText(s.value(QStringLiteral("calibrationText")).toString());
    s.endGroup();
}

} // namespace latmix::gui
