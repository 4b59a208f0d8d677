#pragma once
// The workbench's main window: menus (File, View, Help), the views as tabs (MX format explorer,
// activations, weights, block diagram, transform comparison, calibration, runs), the open
// checkpoint's summary in the "Model" dock, the application's jobs in the "Jobs" dock, an error
// banner above the central view, and a status bar with the runtime facts (device, threads,
// libtorch version) and the jobs' summary (a click shows the Jobs dock).
#include <QIcon>
#include <QJsonObject>
#include <QMainWindow>
#include <QStringList>

#include <memory>

class QAction;
class QActionGroup;
class QDockWidget;
class QFrame;
class QLabel;
class QMenu;
class QTabWidget;

namespace latmix::model {
class Checkpoint;
}

namespace latmix::gui {

class ActivationView;
class BlockDiagramView;
class CalibrationView;
class ComparisonView;
class ExportDialog;
class JobRunner;
class JobStatusIndicator;
class JobsDock;
class ModelSummaryView;
class MxExplorerView;
class RunsView;
class WeightView;
class ExpertLoadView;
class SensitivityView;

class MainWindow : public QMainWindow {
    Q_OBJECT

public:
    enum class Theme { System, Light, Dark };

    explicit MainWindow(QWidget* parent = nullptr);

    // The application icon from the compiled-in resources (PNG renditions of the SVG).
    static QIcon applicationIcon();

    MxExplorerView* explorerView() const { return m_explorer; }
    CalibrationView* calibrationView() const { return m_calibration; }
    ComparisonView* comparisonView() const { return m_comparison; }
    ActivationView* activationView() const { return m_activations; }
    WeightView* weightView() const { return m_weights; }
    ExpertLoadView* expertLoadView() const { return m_experts; }
    SensitivityView* sensitivityView() const { return m_sensitivity; }
    RunsView* runsView() const { return m_runs; }
    BlockDiagramView* blockDiagramView() const { return m_diagram; }
    QTabWidget* viewTabs() const { return m_tabs; }
    // The views by the names `--view` takes, in tab order (MainWindow.cpp's table of views):
    // "explorer", "activations", …; view() gives nullptr for another name.
    static QStringList viewNames();
    static QString viewNameList(); // "explorer, activations, … or runs"
    QWidget* view(const QString& name) const;
    // The run folder File › Export quantized model… exports (the last finished or opened run).
    QString exportRunDir() const { return m_exportRunDir; }

    // The open checkpoint (nullptr before the first successful openCheckpoint) and its folder.
    std::shared_ptr<const latmix::model::Checkpoint> currentModel() const { return m_model; }
    QString currentModelDir() const { return m_modelDir; }

    // The error banner above the central view: shown by a failed open (or showErrorBanner),
    // hidden by its close button and by the next successful open.
    bool isErrorBannerShown() const;
    QString errorBannerText() const;

    // Recently opened checkpoint folders, newest first, as kept in QSettings
    // ("LATMiX", "Workbench", key recent/checkpoints).
    QStringList recentCheckpoints() const;
    static constexpr int kMaxRecent = 10;

    // The session (File › Save session…, and on close for the next start): window geometry and
    // dock layout, the open model, the selected quantization point, the open runs in the order
    // they were opened, the view shown. JSON: {"latmix_session": 1, "model": ..., ...}.
    QJsonObject session() const;
    // Restores what it can: a model or run folder that is gone is named in the banner and
    // skipped, the rest restored. False (and *error) when the object is not a session.
    bool restoreSession(const QJsonObject& session, QString* error = nullptr);
    // To a file (written to a temporary name and renamed) / from one; false and *error naming the file.
    bool saveSessionFile(const QString& path, QString* error = nullptr) const;
    bool openSessionFile(const QString& path, QString* error = nullptr);
    // The session saved when the window last closed (QSettings session/last); empty when none.
    static QJsonObject lastSession();
    QStringList openRuns() const { return m_openRuns; }

    Theme theme() const { return m_theme; }
    // The About box's text (version, libtorch, device); separate so it can be tested.
    QString aboutText() const;

public slots:
    // Loads the Hugging Face model folder at path (config.json + safetensors, memory-mapped) and
    // makes it the current model: summary dock, window title, Recent, status bar, modelOpened.
    // On failure keeps the previous model, shows why in the error banner and the status bar
    // (never a modal dialog: scripted and offscreen runs must not block) and returns false.
    // remember=false keeps a successful open out of Recent (the demo model opened at start
    // would otherwise push the user's own folders down at every launch).
    bool openCheckpoint(const QString& path, bool remember = true);
    // Shows message in the non-modal error banner and the status bar.
    void showErrorBanner(const QString& message);
    void hideErrorBanner();
    void addRecentCheckpoint(const QString& path);
    void clearRecentCheckpoints();
    void setTheme(latmix::gui::MainWindow::Theme theme);
    // Re-reads device, thread count and libtorch version into the status bar labels.
    void refreshRuntimeInfo();
    // Opens a finished run folder (latmix.json, train.h5, model/): its training curves join the
    // dashboard as an overlay and it becomes what Export exports. False (banner) on a bad folder.
    bool openRun(const QString& runDir);
    // Makes runDir the export source: enables File › Export quantized model….
    void setExportRun(const QString& runDir);
    // Opens the (non-modal) export dialog for the current run; nullptr while there is none.
    ExportDialog* showExportDialog();
    // File › Export report…: the current run (exportRunDir) as one HTML page at outHtml
    // (report::writeRunReport: written under a temporary name, then renamed). False and *error
    // (naming the file) when there is no run or it cannot be read or written.
    bool exportReport(const QString& outHtml, QString* error = nullptr);
    // Selects the quantization point (core's name) in every view that shows points: the Model
    // dock's tree, the block diagram, the activation, comparison and weights views. False when
    // the open model has no such point.
    bool selectPoint(const QString& pointName);
    // File › Data folder… (MainWindowData.cpp): the folder core reads WikiText-2 and the zero-shot
    // tasks from (LATMIX_DATA_DIR), remembered in the settings and applied at once. False and
    // *error when dir is no folder.
    bool setDataFolder(const QString& dir, QString* error = nullptr);
    static QString dataFolder(); // the one in effect

signals:
    // A checkpoint was opened; dir is its cleaned absolute folder path.
    void modelOpened(const QString& dir);

protected:
    // Remembers the session for the next start (lastSession).
    void closeEvent(QCloseEvent* event) override;
    // Dropping a model folder or a .safetensors file (its folder is opened) onto the window.
    void dragEnterEvent(QDragEnterEvent* event) override;
    void dropEvent(QDropEvent* event) override;

private slots:
    void chooseCheckpoint();
    void chooseRun();
    void chooseSessionToOpen();
    void chooseSessionToSave();
    void chooseReportFile();
    void chooseRunsFolder();
    void chooseDataFolder();
    void showAbout();
    void rebuildRecentMenu();
    void restoreTheme(); // the theme the settings remember (MainWindowTheme.cpp)

private:
    // A message in the status bar until 15 s have passed or another view is shown (issue 71: a
    // message stayed after later actions, reading as if it described them).
    void say(const QString& message);
    // LATMIX_DATA_DIR from the settings when the environment has none (MainWindowData.cpp).
    static void applyStoredDataFolder();
    void createMenus();
    void createFileMenu();
    QMenu* createViewMenu();
    void createThemeMenu(QMenu* view);
    void createHelpMenu();
    void createStatusBar();
    void createModelDock();
    void createJobsDock();
    void checkWeights();
    QWidget* createCentralArea();
    void storeRecent(const QStringList& paths);

    MxExplorerView* m_explorer = nullptr;
    CalibrationView* m_calibration = nullptr;
    ComparisonView* m_comparison = nullptr;
    ActivationView* m_activations = nullptr;
    WeightView* m_weights = nullptr;
    ExpertLoadView* m_experts = nullptr;
    SensitivityView* m_sensitivity = nullptr;
    RunsView* m_runs = nullptr;
    BlockDiagramView* m_diagram = nullptr;
    JobsDock* m_jobs = nullptr;
    QDockWidget* m_jobsDock = nullptr;
    JobStatusIndicator* m_jobIndicator = nullptr;
    QAction* m_exportReportAction = nullptr;
    // Checks the open model's weights for NaN/Inf (model::checkWeightsFinite), started by every
    // successful openCheckpoint; a damaged tensor is named in the error banner.
    JobRunner* m_weightCheck = nullptr;
    bool m_weightCheckPending = false; // another model was opened while a check ran
    QTabWidget* m_tabs = nullptr;
    QString m_exportRunDir;
    QStringList m_openRuns; // opened or finished here, in order (the session's runs)
    ModelSummaryView* m_summary = nullptr;
    QDockWidget* m_modelDock = nullptr;
    QFrame* m_errorBanner = nullptr;
    QLabel* m_errorText = nullptr;
    std::shared_ptr<const latmix::model::Checkpoint> m_model;
    QString m_modelDir;
    QMenu* m_recentMenu = nullptr;
    QAction* m_clearRecentAction = nullptr;
    QAction* m_exportAction = nullptr;
    QActionGroup* m_themeGroup = nullptr;
    QLabel* m_deviceLabel = nullptr;
    QLabel* m_threadsLabel = nullptr;
    QLabel* m_libtorchLabel = nullptr;
    Theme m_theme = Theme::System;
};

} // namespace latmix::gui
