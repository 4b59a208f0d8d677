#include "MainWindow.h"

// Core headers first (they include ATen/core/Tensor.h only, safe next to Qt's keywords).
#include "model/Checkpoint.h"
#include "report/Report.h"
#include "run/UnfinishedRun.h"
#include "util/Runtime.h"

#include "ActivationView.h"
#include "BlockDiagramView.h"
#include "CalibrationView.h"
#include "ComparisonView.h"
#include "ExportDialog.h"
#include "JobRunner.h"
#include "JobsDock.h"
#include "ModelSummaryView.h"
#include "MxExplorerView.h"
#include "RunsView.h"
#include "TrainingDashboard.h"
#include "WeightView.h"
#include "ExpertLoadView.h"
#include "SensitivityView.h"
#include "WorkbenchSettings.h"

#include <QAction>
#include <QActionGroup>
#include <QApplication>
#include <QCloseEvent>
#include <QDir>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QMimeData>
#include <QTabWidget>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QFrame>
#include <QHBoxLayout>
#include <QImageReader>
#include <QJsonArray>
#include <QJsonDocument>
#include <QKeySequence>
#include <QLabel>
#include <QMenu>
#include <QMenuBar>
#include <QMessageBox>
#include <QPalette>
#include <QSaveFile>
#include <QSettings>
#include <QStatusBar>
#include <QStyle>
#include <QToolButton>
#include <QVBoxLayout>

#include <exception>

// Resources live in the static latmix_widgets library, whose rcc object the linker would drop
// unless something references it; Q_INIT_RESOURCE must be used outside any namespace.
static void initWorkbenchResources() { Q_INIT_RESOURCE(resources); }

namespace latmix::gui {
namespace {

// The workbench's views in tab order, one row each: the name --view and scripted sessions use,
// the tab's title and tool tip, and the view. Tabs, `latmix-workbench --view` (its help and its
// error) read this table.
struct ViewRow {
    const char* name;
    const char* title;   // translated in MainWindow's context
    const char* toolTip; // or null
    QWidget* (*widget)(const MainWindow&);
};

const ViewRow kViews[] = {
    // Titles short enough that every tab shows at 1024 px with the Model dock open.
    {"explorer", QT_TRANSLATE_NOOP("latmix::gui::MainWindow", "MX explorer"),
     QT_TRANSLATE_NOOP("latmix::gui::MainWindow", "MX format explorer: what one MX format does to a vector with outliers"),
     [](const MainWindow& w) -> QWidget* { return w.explorerView(); }},
    {"activations", QT_TRANSLATE_NOOP("latmix::gui::MainWindow", "Activations"), nullptr,
     [](const MainWindow& w) -> QWidget* { return w.activationView(); }},
    {"weights", QT_TRANSLATE_NOOP("latmix::gui::MainWindow", "Weights"), nullptr,
     [](const MainWindow& w) -> QWidget* { return w.weightView(); }},
    {"experts", QT_TRANSLATE_NOOP("latmix::gui::MainWindow", "Experts"),
     QT_TRANSLATE_NOOP("latmix::gui::MainWindow", "Mixture-of-experts models: the calibration tokens the router sends to each expert"),
     [](const MainWindow& w) -> QWidget* { return w.expertLoadView(); }},
    {"diagram", QT_TRANSLATE_NOOP("latmix::gui::MainWindow", "Block diagram"),
     QT_TRANSLATE_NOOP("latmix::gui::MainWindow", "Where T1, T2, T3 and the four quantization points sit in a decoder layer (SPEC §4)"),
     [](const MainWindow& w) -> QWidget* { return w.blockDiagramView(); }},
    {"comparison", QT_TRANSLATE_NOOP("latmix::gui::MainWindow", "Transforms"),
     QT_TRANSLATE_NOOP("latmix::gui::MainWindow", "Transform comparison: Hadamard, block-Hadamard, orthogonal and learned transforms at one point"),
     [](const MainWindow& w) -> QWidget* { return w.comparisonView(); }},
    {"sensitivity", QT_TRANSLATE_NOOP("latmix::gui::MainWindow", "Sensitivity"),
     QT_TRANSLATE_NOOP("latmix::gui::MainWindow", "Mixed precision: the KL each layer's groups cost, and the scheme a bit budget buys"),
     [](const MainWindow& w) -> QWidget* { return w.sensitivityView(); }},
    {"calibration", QT_TRANSLATE_NOOP("latmix::gui::MainWindow", "Calibration"), nullptr,
     [](const MainWindow& w) -> QWidget* { return w.calibrationView(); }},
    {"runs", QT_TRANSLATE_NOOP("latmix::gui::MainWindow", "Runs"), nullptr,
     [](const MainWindow& w) -> QWidget* { return w.runsView(); }},
};

} // namespace

QStringList MainWindow::viewNames() {
    QStringList names;
    for (const ViewRow& v : kViews) names << QString::fromLatin1(v.name);
    return names;
}

QString MainWindow::viewNameList() {
    QStringList names = viewNames();
    const QString last = names.takeLast();
    return names.join(QStringLiteral(", ")) + QStringLiteral(" or ") + last;
}

QWidget* MainWindow::view(const QString& name) const {
    for (const ViewRow& v : kViews)
        if (name == QLatin1String(v.name)) return v.widget(*this);
    return nullptr;
}

QIcon MainWindow::applicationIcon() {
    initWorkbenchResources();
    QIcon icon;
    // The SVG needs Qt's svg plugin (libqt6svg6), not a hard dependency; PNGs always work.
    if (QImageReader::supportedImageFormats().contains("svg"))
        icon.addFile(QStringLiteral(":/icons/latmix-workbench.svg"));
    for (int size : {16, 32, 64, 128, 256})
        icon.addFile(QStringLiteral(":/icons/latmix-workbench-%1.png").arg(size), QSize(size, size));
    return icon;
}

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
    setObjectName(QStringLiteral("mainWindow"));
    setWindowTitle(tr("LATMiX Workbench"));
    setWindowIcon(applicationIcon());
    applyStoredDataFolder(); // before any view reads the data folder

    m_explorer = new MxExplorerView(this);
    m_calibration = new CalibrationView(this);
    m_comparison = new ComparisonView(this);
    m_activations = new ActivationView(this);
    m_weights = new WeightView(this);
    m_experts = new ExpertLoadView(this);
    m_sensitivity = new SensitivityView(this);
    m_runs = new RunsView(this);
    m_diagram = new BlockDiagramView(this);
    setCentralWidget(createCentralArea());
    connect(this, &MainWindow::modelOpened, m_weights, &WeightView::setModelDir);
    connect(m_weights, &WeightView::errorOccurred, this, &MainWindow::showErrorBanner);
    connect(this, &MainWindow::modelOpened, m_experts, &ExpertLoadView::setModelDir);
    connect(m_experts, &ExpertLoadView::errorOccurred, this, &MainWindow::showErrorBanner);
    connect(this, &MainWindow::modelOpened, m_sensitivity, &SensitivityView::setModelDir);
    connect(m_sensitivity, &SensitivityView::errorOccurred, this, &MainWindow::showErrorBanner);
    connect(m_sensitivity, &SensitivityView::schemeChosen, this, [this](const QString& rules) {
        m_calibration->setScheme(rules);
        m_tabs->setCurrentWidget(m_calibration);
        say(tr("The scheme (%1 bits per weight) is in the Calibration form's Mixed precision field")
                .arg(m_sensitivity->plan().bits, 0, 'f', 3));
    });
    // The runs table lists the workbench's own runs folder; File › Add runs folder… adds more.
    m_runs->setFolders({RunsView::defaultFolder()});
    connect(m_runs, &RunsView::runActivated, this, &MainWindow::openRun);
    connect(this, &MainWindow::modelOpened, m_activations, &ActivationView::setModelDir);
    connect(m_activations, &ActivationView::errorOccurred, this, &MainWindow::showErrorBanner);
    connect(this, &MainWindow::modelOpened, m_comparison, &ComparisonView::setModelDir);
    connect(m_comparison, &ComparisonView::errorOccurred, this, &MainWindow::showErrorBanner);
    connect(m_comparison, &ComparisonView::pointMetricsKnown, this,
            [this](const QString& metric, const QMap<QString, double>& values) { m_summary->setPointMetric(metric, values); });
    setAcceptDrops(true);
    connect(this, &MainWindow::modelOpened, m_calibration, &CalibrationView::setModelDir);
    connect(m_calibration, &CalibrationView::errorOccurred, this, &MainWindow::showErrorBanner);
    connect(m_calibration, &CalibrationView::threadsChanged, this, [this] {
        if (m_threadsLabel) refreshRuntimeInfo();
    });
    connect(m_calibration, &CalibrationView::runFinished, this, [this](bool ok, const QString& dir, const QString& message) {
        say(message);
        if (ok) {
            setExportRun(dir);
            m_openRuns.removeAll(dir);
            m_openRuns << dir;
            // The run is listed at once: its folder joins the runs table unless a listed folder
            // holds it already (addFolder and refresh each scan the folders once).
            const QString parent = QFileInfo(dir).absolutePath();
            if (m_runs->folders().contains(parent) || QDir::cleanPath(dir).startsWith(RunsView::defaultFolder()))
                m_runs->refresh();
            else
                m_runs->addFolder(parent);
        }
    });
    createModelDock();
    // The Model dock estimates memory for the device runs use.
    m_summary->setDevice(m_calibration->device());
    // A point picked in the Model dock is selected in every view that shows points; from the
    // explorer (synthetic vectors only) the activation view comes forward to show it.
    connect(m_summary, &ModelSummaryView::pointSelected, this, [this](const QString& point) {
        m_activations->selectPoint(point);
        m_comparison->selectPoint(point);
        m_weights->selectPoint(point);
        m_diagram->selectPoint(point);
        if (m_tabs->currentWidget() == m_explorer) m_tabs->setCurrentWidget(m_activations);
    });
    // A marker clicked in the block diagram goes through the tree, which selects it everywhere
    // (the diagram stays the current view: the user is looking at it).
    connect(m_diagram, &BlockDiagramView::pointSelected, this, [this](const QString& point) { selectPoint(point); });
    connect(this, &MainWindow::modelOpened, this, [this] {
        if (m_model) m_diagram->setModel(m_model->config());
    });
    connect(m_calibration, &CalibrationView::deviceChanged, m_summary, &ModelSummaryView::setDevice);
    connect(m_calibration, &CalibrationView::pointFormatsChanged, m_summary, &ModelSummaryView::setPointFormats);
    connect(m_calibration, &CalibrationView::pointFormatsChanged, m_diagram, &BlockDiagramView::setPointFormats);
    // The Model dock's "keep in bf16" boxes are the Calibration form's --keep, for the model open.
    connect(m_summary, &ModelSummaryView::keptLinearsChanged, m_calibration,
            [this](const QStringList& modules) { m_calibration->setKeep(ModelSummaryView::keepRegex(modules)); });

    m_weightCheck = new JobRunner(this);
    m_weightCheck->setObjectName(QStringLiteral("weightCheckRunner"));
    connect(m_weightCheck, &JobRunner::finished, this, [this](bool ok, const QString& error) {
        if (m_weightCheckPending) { // the check of the model opened since
            m_weightCheckPending = false;
            checkWeights();
        } else if (!ok && error != QLatin1String("cancelled")) {
            showErrorBanner(error);
        }
    });
    createJobsDock();
    createMenus();
    createStatusBar();
    rebuildRecentMenu();
    restoreTheme();
    resize(1280, 800);
    // After resize(): the dock's share is set against the final window width.
    resizeDocks({m_modelDock}, {280}, Qt::Horizontal);
}

QWidget* MainWindow::createCentralArea() {
    // The banner sits in the central area rather than in a dock or the status bar: it must be
    // seen at once, stay until dismissed and not cover the explorer's plots.
    auto* area = new QWidget(this);
    area->setObjectName(QStringLiteral("centralArea"));
    auto* column = new QVBoxLayout(area);
    column->setContentsMargins(0, 0, 0, 0);
    column->setSpacing(0);

    m_errorBanner = new QFrame(area);
    m_errorBanner->setObjectName(QStringLiteral("errorBanner"));
    // Fixed amber colours with dark text read the same on the light and the dark theme.
    m_errorBanner->setStyleSheet(QStringLiteral(
        "QFrame#errorBanner { background: #fff4e5; border: 1px solid #e8a33d; border-radius: 4px; }"
        "QFrame#errorBanner QLabel { color: #4d2f00; background: transparent; border: none; }"
        "QFrame#errorBanner QToolButton { color: #4d2f00; border: none; padding: 2px 6px; font-weight: bold; }"
        "QFrame#errorBanner QToolButton:hover { background: #f6d6a8; border-radius: 3px; }"));
    auto* row = new QHBoxLayout(m_errorBanner);
    row->setContentsMargins(8, 6, 4, 6);
    auto* icon = new QLabel(m_errorBanner);
    icon->setObjectName(QStringLiteral("errorBannerIcon"));
    icon->setPixmap(style()->standardIcon(QStyle::SP_MessageBoxWarning).pixmap(20, 20));
    icon->setAlignment(Qt::AlignTop);
    m_errorText = new QLabel(m_errorBanner);
    m_errorText->setObjectName(QStringLiteral("errorBannerText"));
    m_errorText->setTextFormat(Qt::PlainText); // paths and exception text, never markup
    m_errorText->setWordWrap(true);
    m_errorText->setTextInteractionFlags(Qt::TextSelectableByMouse); // for pasting into an issue
    auto* close = new QToolButton(m_errorBanner);
    close->setObjectName(QStringLiteral("errorBannerClose"));
    close->setText(QStringLiteral("\u2715"));
    close->setToolTip(tr("Dismiss"));
    close->setAutoRaise(true);
    connect(close, &QToolButton::clicked, this, &MainWindow::hideErrorBanner);
    row->addWidget(icon);
    row->addWidget(m_errorText, 1);
    row->addWidget(close, 0, Qt::AlignTop);
    m_errorBanner->hide();

    auto* bannerMargin = new QVBoxLayout;
    bannerMargin->setContentsMargins(6, 6, 6, 0);
    bannerMargin->addWidget(m_errorBanner);
    column->addLayout(bannerMargin);
    m_tabs = new QTabWidget(area);
    m_tabs->setObjectName(QStringLiteral("viewTabs"));
    m_tabs->setDocumentMode(true);
    for (const ViewRow& v : kViews) {
        const int i = m_tabs->addTab(v.widget(*this), tr(v.title));
        if (v.toolTip) m_tabs->setTabToolTip(i, tr(v.toolTip));
    }
    column->addWidget(m_tabs, 1);
    connect(m_tabs, &QTabWidget::currentChanged, this, [this] { statusBar()->clearMessage(); });
    return area;
}

void MainWindow::createModelDock() {
    m_modelDock = new QDockWidget(tr("Model"), this);
    m_modelDock->setObjectName(QStringLiteral("modelDock"));
    m_modelDock->setAllowedAreas(Qt::LeftDockWidgetArea | Qt::RightDockWidgetArea);
    m_summary = new ModelSummaryView(m_modelDock);
    // Room for "Memory, bfloat16:  24.7 MiB on CPU" without squeezing the explorer's plots.
    m_summary->setMinimumWidth(260);
    m_modelDock->setWidget(m_summary);
    addDockWidget(Qt::LeftDockWidgetArea, m_modelDock);
}

void MainWindow::createJobsDock() {
    m_jobsDock = new QDockWidget(tr("Jobs"), this);
    m_jobsDock->setObjectName(QStringLiteral("jobsDock"));
    m_jobs = new JobsDock(m_jobsDock);
    m_jobsDock->setWidget(m_jobs);
    // Shown from the start, under the views (issue 71: the README sends users there for progress
    // and cancel, and it started hidden; on the right it held the window at 1515 px): every job
    // of every view listed, with its progress, ETA and Cancel. View › Jobs hides it.
    addDockWidget(Qt::BottomDockWidgetArea, m_jobsDock);
    resizeDocks({m_jobsDock}, {120}, Qt::Vertical);
}

bool MainWindow::selectPoint(const QString& pointName) {
    if (m_summary->selectPoint(pointName)) return true; // its pointSelected reaches every view
    // No open model (the diagram shows the generic block): only the diagram knows the name.
    return !m_model && m_diagram->selectPoint(pointName);
}

void MainWindow::createStatusBar() {
    auto makeLabel = [this](const char* name, const QString& tip) {
        auto* label = new QLabel(this);
        label->setObjectName(QLatin1String(name));
        label->setToolTip(tip);
        statusBar()->addPermanentWidget(label);
        return label;
    };
    statusBar()->setObjectName(QStringLiteral("statusBar"));
    m_jobIndicator = new JobStatusIndicator(this);
    m_jobIndicator->setObjectName(QStringLiteral("jobIndicator"));
    statusBar()->addPermanentWidget(m_jobIndicator);
    connect(m_jobIndicator, &JobStatusIndicator::showJobsRequested, this, [this] {
        m_jobsDock->show();
        m_jobsDock->raise();
    });
    m_deviceLabel = makeLabel("deviceLabel", tr("Compute device libtorch uses"));
    m_threadsLabel = makeLabel("threadsLabel", tr("libtorch intra-op threads (--threads, LATMIX_THREADS)"));
    m_libtorchLabel = makeLabel("libtorchLabel", tr("libtorch version"));
    refreshRuntimeInfo();
}

void MainWindow::refreshRuntimeInfo() {
    m_deviceLabel->setText(tr("Device: %1").arg(QString::fromStdString(latmix::deviceDescription())));
    m_threadsLabel->setText(tr("Threads: %1").arg(latmix::threadCount()));
    m_libtorchLabel->setText(tr("libtorch %1").arg(QString::fromStdString(latmix::libtorchVersion())));
}

QString MainWindow::aboutText() const {
    return tr("<h3>LATMiX Workbench %1</h3>"
              "<p>Analysis of MX (microscaling) quantization of large language models: "
              "learnable affine transforms, MX formats and their per-block error.</p>"
              "<p>libtorch %2<br>Device: %3<br>Threads: %4<br>Qt %5</p>")
        .arg(QString::fromStdString(latmix::latmixVersion()), QString::fromStdString(latmix::libtorchVersion()),
             QString::fromStdString(latmix::deviceDescription()).toHtmlEscaped(),
             QString::number(latmix::threadCount()), QString::fromLatin1(qVersion()));
}

void MainWindow::showAbout() { QMessageBox::about(this, tr("About LATMiX Workbench"), aboutText()); }

void MainWindow::chooseCheckpoint() {
    const QStringList recent = recentCheckpoints();
    const QString start = recent.isEmpty() ? QDir::homePath() : recent.first();
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Open checkpoint folder"), start);
    if (!dir.isEmpty()) openCheckpoint(dir);
}

bool MainWindow::openCheckpoint(const QString& path, bool remember) {
    // One spelling per folder: Recent, the title and modelOpened all see the same path.
    const QString dir = path.isEmpty() ? QString() : QDir::cleanPath(QFileInfo(path).absoluteFilePath());
    std::shared_ptr<const latmix::model::Checkpoint> checkpoint;
    // Restores the cursor on every way out, exceptions included.
    struct BusyCursor {
        BusyCursor() { QGuiApplication::setOverrideCursor(Qt::WaitCursor); }
        ~BusyCursor() { QGuiApplication::restoreOverrideCursor(); }
    } busy;
    try {
        // Memory-maps the safetensors and checks every tensor's shape: fast even for 8B models,
        // so it runs here rather than in a job.
        checkpoint = std::make_shared<const latmix::model::Checkpoint>(
            latmix::model::Checkpoint::load(dir.toStdString()));
    } catch (const std::exception& e) {
        const QString why = QString::fromStdString(e.what());
        // Core's messages name the folder already; say it here only where one does not.
        showErrorBanner(!dir.isEmpty() && why.contains(dir)
                            ? tr("Could not open the model: %1").arg(why)
                            : tr("Could not open %1: %2").arg(QDir::toNativeSeparators(dir), why));
        return false;
    }
    m_model = checkpoint;
    m_modelDir = dir;
    m_summary->setCheckpoint(checkpoint); // also reads the tokenizer: still busy
    // The Experts tab is for mixtures of experts only (issue 71: it showed for dense models).
    m_tabs->setTabVisible(m_tabs->indexOf(m_experts), checkpoint->config().moe.has_value());

    const QString name = QFileInfo(dir).fileName();
    setWindowTitle(tr("%1 — LATMiX Workbench").arg(name));
    if (remember) addRecentCheckpoint(dir);
    hideErrorBanner(); // an earlier failure no longer describes what is shown
    m_modelDock->show();
    say(tr("Opened %1: %2, %3 layers, %4 parameters")
                                 .arg(QDir::toNativeSeparators(dir),
                                      QString::fromStdString(checkpoint->config().architectureName))
                                 .arg(checkpoint->config().numLayers)
                                 .arg(ModelSummaryView::formatCount(checkpoint->parameterCount())));
    emit modelOpened(dir);
    checkWeights();
    return true;
}

void MainWindow::say(const QString& message) { statusBar()->showMessage(message, 15000); }

void MainWindow::checkWeights() {
    if (!m_model) return;
    if (m_weightCheck->isRunning()) { // it checks the previous model: stop it, then check this one
        m_weightCheckPending = true;
        m_weightCheck->cancel();
        return;
    }
    // Opening maps the files and checks their headers at once; reading every weight for NaN/Inf
    // costs about as much as reading the model (~1 s for a 1B bfloat16 model here), so it runs as
    // a one-thread job and says what it found in the banner.
    auto model = m_model;
    m_weightCheck->start(tr("Checking the weights of %1 for NaN/Inf").arg(QFileInfo(m_modelDir).fileName()),
                         [model](latmix::JobContext& job) { latmix::model::checkWeightsFinite(*model, job); }, 1);
}

void MainWindow::showErrorBanner(const QString& message) {
    m_errorText->setText(message);
    m_errorBanner->show();
    say(message);
}

void MainWindow::hideErrorBanner() { m_errorBanner->hide(); }

bool MainWindow::isErrorBannerShown() const { return m_errorBanner->isVisibleTo(this); }

QString MainWindow::errorBannerText() const { return m_errorText->text(); }

void MainWindow::chooseRun() {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Open run folder"), m_exportRunDir);
    if (!dir.isEmpty()) openRun(dir);
}

bool MainWindow::openRun(const QString& runDir) {
    const QString dir = QDir::cleanPath(QFileInfo(runDir).absoluteFilePath());
    if (!QFileInfo::exists(dir + QStringLiteral("/latmix.json"))) {
        if (latmix::run::hasUnfinishedMarker(dir.toStdString()))
            showErrorBanner(QString::fromStdString(latmix::run::describeUnfinishedRun(dir.toStdString())) +
                            tr(". Continue it in Calibration with this run folder and its method, or with "
                               "`latmix quantize --resume` and its options; until then it has no results to show"));
        else
            showErrorBanner(tr("%1 is not a finished run: it has no latmix.json (runs are written by Calibration or "
                               "`latmix quantize --out RUN_DIR`)")
                                .arg(QDir::toNativeSeparators(dir)));
        return false;
    }
    const QString trainFile = dir + QStringLiteral("/train.h5");
    if (QFileInfo::exists(trainFile)) {
        QString error;
        if (!m_calibration->dashboard()->addOverlay(trainFile, &error)) {
            showErrorBanner(error);
            return false;
        }
        m_tabs->setCurrentWidget(m_calibration);
    }
    setExportRun(dir);
    m_openRuns.removeAll(dir);
    m_openRuns << dir;
    hideErrorBanner();
    say(tr("Opened run %1").arg(QDir::toNativeSeparators(dir)));
    return true;
}

void MainWindow::setExportRun(const QString& runDir) {
    m_exportRunDir = runDir;
    m_activations->setRun(runDir); // its transforms join the activation view's choices
    m_weights->setRun(runDir);     // and its folded weights the weights view
    m_exportAction->setEnabled(!runDir.isEmpty());
    m_exportAction->setToolTip(runDir.isEmpty() ? tr("Nothing to export yet")
                                                : tr("Export the run %1").arg(QDir::toNativeSeparators(runDir)));
    m_exportAction->setStatusTip(m_exportAction->toolTip());
    if (m_exportReportAction) {
        m_exportReportAction->setEnabled(!runDir.isEmpty());
        m_exportReportAction->setToolTip(runDir.isEmpty() ? tr("No run to report yet")
                                                          : tr("Write the report of the run %1 as one HTML page")
                                                                .arg(QDir::toNativeSeparators(runDir)));
        m_exportReportAction->setStatusTip(m_exportReportAction->toolTip());
    }
}

bool MainWindow::exportReport(const QString& outHtml, QString* error) {
    QString why;
    if (m_exportRunDir.isEmpty()) {
        why = tr("no run to report: run a calibration or open a finished run (File › Open run…)");
    } else if (outHtml.isEmpty()) {
        why = tr("no file to write the report to");
    } else {
        try {
            // Reads latmix.json and train.h5 and writes a few hundred KiB: well under a second
            // even for long runs, so it runs here rather than as a job.
            latmix::report::writeRunReport(m_exportRunDir.toStdString(), outHtml.toStdString());
            say(tr("Wrote the report of %1 to %2")
                                         .arg(QDir::toNativeSeparators(m_exportRunDir), QDir::toNativeSeparators(outHtml)));
            return true;
        } catch (const std::exception& e) {
            why = tr("could not write the report %1: %2").arg(QDir::toNativeSeparators(outHtml), QString::fromStdString(e.what()));
        }
    }
    if (error) *error = why;
    return false;
}

void MainWindow::chooseReportFile() {
    if (m_exportRunDir.isEmpty()) return;
    const QString path = QFileDialog::getSaveFileName(this, tr("Export report"), m_exportRunDir + QStringLiteral("/report.html"),
                                                      tr("HTML pages (*.html)"));
    if (path.isEmpty()) return;
    QString error;
    if (!exportReport(path, &error)) showErrorBanner(error);
}

void MainWindow::chooseRunsFolder() {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Add runs folder"), QDir::homePath());
    if (dir.isEmpty()) return;
    m_runs->addFolder(dir);
    m_tabs->setCurrentWidget(m_runs);
}

ExportDialog* MainWindow::showExportDialog() {
    if (m_exportRunDir.isEmpty()) return nullptr;
    auto* dialog = new ExportDialog(m_exportRunDir, this);
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    connect(dialog, &ExportDialog::exportFinished, this, [this](bool ok, const QString& out, const QString& message) {
        say(ok ? tr("Exported to %1").arg(QDir::toNativeSeparators(out)) : message);
    });
    dialog->show();
    return dialog;
}

namespace {
// The folder a dropped URL names: a folder itself, or the folder of a .safetensors file.
QString droppedModelDir(const QMimeData* mime) {
    if (!mime || !mime->hasUrls() || mime->urls().size() != 1) return {};
    const QUrl url = mime->urls().first();
    if (!url.isLocalFile()) return {};
    const QFileInfo fi(url.toLocalFile());
    if (fi.isDir()) return fi.absoluteFilePath();
    if (fi.suffix().compare(QLatin1String("safetensors"), Qt::CaseInsensitive) == 0) return fi.absolutePath();
    return {};
}
} // namespace

void MainWindow::dragEnterEvent(QDragEnterEvent* event) {
    if (!droppedModelDir(event->mimeData()).isEmpty()) event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event) {
    const QString dir = droppedModelDir(event->mimeData());
    if (dir.isEmpty()) return;
    event->acceptProposedAction();
    // A run folder opens as a run, anything else as a checkpoint.
    if ((QFileInfo::exists(dir + QStringLiteral("/latmix.json")) && QFileInfo::exists(dir + QStringLiteral("/model"))) ||
        latmix::run::hasUnfinishedMarker(dir.toStdString()))
        openRun(dir);
    else
        openCheckpoint(dir);
}

} // namespace latmix::gui
