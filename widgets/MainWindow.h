#pragma once
// The workbench's main window: menus (File, View, Help), the MX format explorer as central
// view and a status bar with the runtime facts (device, threads, libtorch version).
#include <QIcon>
#include <QMainWindow>
#include <QStringList>

class QAction;
class QActionGroup;
class QLabel;
class QMenu;

namespace latmix::gui {

class MxExplorerView;

class MainWindow : public QMainWindow {
    Q_OBJECT

public:
    enum class Theme { System, Light, Dark };

    explicit MainWindow(QWidget* parent = nullptr);

    // The application icon from the compiled-in resources (PNG renditions of the SVG).
    static QIcon applicationIcon();

    MxExplorerView* explorerView() const { return m_explorer; }

    // Recently opened checkpoint folders, newest first, as kept in QSettings
    // ("LATMiX", "Workbench", key recent/checkpoints).
    QStringList recentCheckpoints() const;
    static constexpr int kMaxRecent = 10;

    Theme theme() const { return m_theme; }
    // The About box's text (version, libtorch, device); separate so it can be tested.
    QString aboutText() const;

public slots:
    // Records path in Recent and says in the status bar that loading comes in a later version.
    void openCheckpoint(const QString& path);
    void addRecentCheckpoint(const QString& path);
    void clearRecentCheckpoints();
    void setTheme(latmix::gui::MainWindow::Theme theme);
    // Re-reads device, thread count and libtorch version into the status bar labels.
    void refreshRuntimeInfo();

private slots:
    void chooseCheckpoint();
    void showAbout();
    void rebuildRecentMenu();

private:
    void createMenus();
    void createStatusBar();
    void storeRecent(const QStringList& paths);

    MxExplorerView* m_explorer = nullptr;
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
