#pragma once
// The runs tab: every finished run under the runs folders (the workbench's own, and any folder
// added), one row each, read by core (run::scanRuns): method, format, block, steps, quantized
// (W4A4 when every run is 4-bit) / FP / folded-FP perplexity, recovery, zero-shot average, train
// time, date. Sortable by any column; selecting runs overlays their training curves (train.h5) and their per-linear weight errors
// (latmix.json); the table exports as CSV (run::runsCsv). The folders are watched: a run a CLI
// finishes elsewhere appears without a refresh.
#include "run/RunCatalog.h"

#include <QString>
#include <QStringList>
#include <QVector>
#include <QWidget>

class QCustomPlot;
class QFileSystemWatcher;
class QLabel;
class QPushButton;
class QSortFilterProxyModel;
class QStandardItemModel;
class QTableView;
class QTimer;

namespace latmix::gui {

class ElidedLabel;

class RunsView : public QWidget {
    Q_OBJECT

public:
    explicit RunsView(QWidget* parent = nullptr);

    // The folders scanned (and watched), in order; duplicates are dropped.
    void setFolders(const QStringList& folders);
    QStringList folders() const { return m_folders; }
    void addFolder(const QString& folder);
    // The workbench's own runs folder (where the Calibration tab writes by default).
    static QString defaultFolder();

    // Scans the folders again now (the watcher calls it, debounced).
    void refresh();
    // The folders whose changes trigger a rescan now (the folders and what lies below them to the
    // watched depth, as of the last scan).
    QStringList watchedFolders() const;
    const std::vector<latmix::run::RunSummary>& runs() const { return m_runs; }
    QStringList problems() const { return m_problems; }

    QTableView* table() const { return m_table; }
    // Table columns: core's displayed run columns (run/RunColumns.h), in their order; the run's
    // name ("dir") first.
    static int column(const std::string& key);
    static int columnCount();
    static constexpr int Name = 0;
    // Sort role: the number behind a cell (absent numbers sort below every present one).
    static constexpr int kSortRole = Qt::UserRole + 1;
    static constexpr int kDirRole = Qt::UserRole + 2;

    // Selects the runs with these folders (table order), replacing the selection.
    void selectRuns(const QStringList& dirs);
    QStringList selectedRuns() const; // their folders, in table order

    bool exportCsv(const QString& path, QString* error = nullptr) const;

signals:
    void runActivated(const QString& runDir); // double click: open it in the workbench
    void refreshed(int runs);

private:
    void createTable();
    QLayout* createButtonBar();
    QWidget* createPlots();
    void fillTable();
    void hideEmptyColumns();
    void showSelection();
    void watch();
    void restyle();

protected:
    void changeEvent(QEvent* event) override;

private:
    QStringList m_folders;
    std::vector<latmix::run::RunSummary> m_runs;
    QStringList m_problems;
    QStandardItemModel* m_model;
    QSortFilterProxyModel* m_proxy;
    QTableView* m_table;
    ElidedLabel* m_status;
    QPushButton* m_skipped; // "N folders skipped: why?", when a scan skipped some
    QCustomPlot* m_curves;
    QCustomPlot* m_weights;
    QFileSystemWatcher* m_watcher;
    QTimer* m_debounce;
};

} // namespace latmix::gui
