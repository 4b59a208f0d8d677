// MainWindow's menus: File, View (with the theme) and Help.
#include "MainWindow.h"

#include "ActivationView.h"
#include "BlockDiagramView.h"
#include "CalibrationView.h"
#include "ComparisonView.h"
#include "MxExplorerView.h"
#include "RunsView.h"
#include "WeightView.h"

#include <QAction>
#include <QActionGroup>
#include <QApplication>
#include <QDockWidget>
#include <QKeySequence>
#include <QMenu>
#include <QMenuBar>
#include <QTabWidget>

namespace latmix::gui {

void MainWindow::createMenus() {
    createFileMenu();
    QMenu* view = createViewMenu();
    createThemeMenu(view);
    createHelpMenu();
}

// Open a checkpoint, a run, a runs folder, a session; recent checkpoints; export; quit.
void MainWindow::createFileMenu() {
    QMenu* file = menuBar()->addMenu(tr("&File"));
    file->setObjectName(QStringLiteral("menuFile"));
    // Without this, the disabled Export action's tooltip (why it is disabled) never shows.
    file->setToolTipsVisible(true);

    QAction* open = file->addAction(tr("&Open checkpoint…"), this, &MainWindow::chooseCheckpoint);
    open->setObjectName(QStringLiteral("actionOpen"));
    open->setShortcut(QKeySequence::Open);
    open->setStatusTip(tr("Choose a checkpoint folder (Hugging Face layout)"));

    QAction* openRun = file->addAction(tr("Open r&un…"), this, &MainWindow::chooseRun);
    openRun->setObjectName(QStringLiteral("actionOpenRun"));
    openRun->setStatusTip(tr("Open a finished run folder: its training curves and its export"));

    QAction* addRuns = file->addAction(tr("Add runs &folder…"), this, &MainWindow::chooseRunsFolder);
    addRuns->setObjectName(QStringLiteral("actionAddRunsFolder"));
    addRuns->setStatusTip(tr("List the runs under a folder (a sweep's output, a CLI's --out parent) in the Runs tab"));

    QAction* dataFolder = file->addAction(tr("&Data folder…"), this, &MainWindow::chooseDataFolder);
    dataFolder->setObjectName(QStringLiteral("actionDataFolder"));
    dataFolder->setStatusTip(tr("Where WikiText-2 (wikitext-2/wiki.test.raw, wiki.valid.tokens) and the zero-shot "
                                "tasks are: the data folder of LATMIX_DATA_DIR, remembered"));

    QAction* openSession = file->addAction(tr("Open &session…"), this, &MainWindow::chooseSessionToOpen);
    openSession->setObjectName(QStringLiteral("actionOpenSession"));
    openSession->setStatusTip(tr("Restore a saved session: model, point, runs, view and layout"));
    QAction* saveSession = file->addAction(tr("Save sess&ion…"), this, &MainWindow::chooseSessionToSave);
    saveSession->setObjectName(QStringLiteral("actionSaveSession"));
    saveSession->setStatusTip(tr("Save the model, point, open runs, view and layout to a file"));

    m_recentMenu = file->addMenu(tr("Open &recent"));
    m_recentMenu->setObjectName(QStringLiteral("menuRecent"));
    m_clearRecentAction = new QAction(tr("&Clear recent"), this);
    m_clearRecentAction->setObjectName(QStringLiteral("actionClearRecent"));
    connect(m_clearRecentAction, &QAction::triggered, this, &MainWindow::clearRecentCheckpoints);

    file->addSeparator();
    m_exportAction = file->addAction(tr("&Export quantized model…"), this, [this] { showExportDialog(); });
    m_exportAction->setObjectName(QStringLiteral("actionExport"));
    // Not Ctrl+E: on X11 every line edit takes Ctrl+E as "end of line" first, so the export would
    // not open while a text or number field has the focus (seen in a real X window).
    m_exportAction->setShortcut(QKeySequence(tr("Ctrl+Shift+E")));
    m_exportAction->setEnabled(false);
    m_exportAction->setToolTip(tr("Nothing to export yet: run a calibration (Calibration tab) or open a finished run"));
    m_exportAction->setStatusTip(m_exportAction->toolTip());
    m_exportReportAction = file->addAction(tr("Export &report…"), this, &MainWindow::chooseReportFile);
    m_exportReportAction->setObjectName(QStringLiteral("actionExportReport"));
    m_exportReportAction->setEnabled(false);
    m_exportReportAction->setToolTip(tr("No run to report yet: run a calibration or open a finished run"));
    m_exportReportAction->setStatusTip(m_exportReportAction->toolTip());

    file->addSeparator();
    QAction* quit = file->addAction(tr("&Quit"), this, &QWidget::close);
    quit->setObjectName(QStringLiteral("actionQuit"));
    quit->setShortcut(QKeySequence::Quit);
    quit->setMenuRole(QAction::QuitRole);
}

// One entry per tab, then the docks.
QMenu* MainWindow::createViewMenu() {
    QMenu* view = menuBar()->addMenu(tr("&View"));
    view->setObjectName(QStringLiteral("menuView"));
    const struct {
        const char* text;
        const char* name;
        QWidget* tab;
    } tabs[] = {
        {QT_TR_NOOP("MX format &explorer"), "actionShowExplorer", m_explorer},
        {QT_TR_NOOP("&Activations"), "actionShowActivations", m_activations},
        {QT_TR_NOOP("&Weights"), "actionShowWeights", m_weights},
        {QT_TR_NOOP("&Block diagram"), "actionShowBlockDiagram", m_diagram},
        {QT_TR_NOOP("&Transform comparison"), "actionShowComparison", m_comparison},
        {QT_TR_NOOP("&Calibration dashboard"), "actionShowCalibration", m_calibration},
        {QT_TR_NOOP("&Runs"), "actionShowRuns", m_runs},
    };
    for (const auto& t : tabs) {
        QAction* a = view->addAction(tr(t.text));
        a->setObjectName(QLatin1String(t.name));
        connect(a, &QAction::triggered, this, [this, tab = t.tab] { m_tabs->setCurrentWidget(tab); });
    }
    view->addSeparator();
    QAction* showModel = m_modelDock->toggleViewAction();
    showModel->setText(tr("&Model summary"));
    showModel->setObjectName(QStringLiteral("actionShowModel"));
    view->addAction(showModel);
    QAction* showJobs = m_jobsDock->toggleViewAction();
    showJobs->setText(tr("&Jobs"));
    showJobs->setObjectName(QStringLiteral("actionShowJobs"));
    view->addAction(showJobs);
    return view;
}

void MainWindow::createThemeMenu(QMenu* view) {
    QMenu* themeMenu = view->addMenu(tr("&Theme"));
    themeMenu->setObjectName(QStringLiteral("menuTheme"));
    m_themeGroup = new QActionGroup(this);
    m_themeGroup->setExclusive(true);
    const struct { Theme theme; const char* text; const char* name; } themes[] = {
        {Theme::System, QT_TR_NOOP("Follow &system"), "actionThemeSystem"},
        {Theme::Light, QT_TR_NOOP("&Light"), "actionThemeLight"},
        {Theme::Dark, QT_TR_NOOP("&Dark"), "actionThemeDark"},
    };
    for (const auto& t : themes) {
        QAction* a = themeMenu->addAction(tr(t.text));
        a->setObjectName(QLatin1String(t.name));
        a->setCheckable(true);
        a->setData(static_cast<int>(t.theme));
        m_themeGroup->addAction(a);
        connect(a, &QAction::triggered, this, [this, theme = t.theme] { setTheme(theme); });
    }
}

void MainWindow::createHelpMenu() {
    QMenu* help = menuBar()->addMenu(tr("&Help"));
    help->setObjectName(QStringLiteral("menuHelp"));
    QAction* about = help->addAction(tr("&About LATMiX Workbench"), this, &MainWindow::showAbout);
    about->setObjectName(QStringLiteral("actionAbout"));
    about->setMenuRole(QAction::AboutRole);
    QAction* aboutQt = help->addAction(tr("About &Qt"), qApp, &QApplication::aboutQt);
    aboutQt->setObjectName(QStringLiteral("actionAboutQt"));
    aboutQt->setMenuRole(QAction::AboutQtRole);
}

} // namespace latmix::gui
