#include "AtenHeaders.h"
#include "train/Distillation.h"

#include "RunsView.h"

#include "run/RunColumns.h"

#include "ElidedLabel.h"

#include "PlotStyle.h"
#include "run/quantize/OptionTable.h"
#include "util/AtomicFile.h"

#include <qcustomplot.h>

#include <QDateTime>
#include <QDir>
#include <QRegularExpression>
#include <QDirIterator>
#include <QEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QFileSystemWatcher>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QMessageBox>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QStandardItemModel>
#include <QStandardPaths>
#include <QTableView>
#include <QTimer>
#include <QVBoxLayout>

#include <cmath>
#include <limits>
#include <set>

namespace latmix::gui {

namespace {

// The run's options that differ from the defaults, as the workbench names them ("Steps: 250");
// empty for records written before latmix.json kept its options.
QString settingsLine(const latmix::run::RunSummary& r) {
    if (!r.options) return {};
    QStringList settings;
    for (const auto& s : latmix::run::changedSettings(*r.options, latmix::run::Face::Workbench))
        settings << QString::fromStdString(s);
    return settings.isEmpty() ? QString() : QStringLiteral("\n") + settings.join(QStringLiteral(", "));
}

// Folders below a runs folder that are watched: a sweep's cells sit two levels down
// (OUT/cells/NAME); deeper trees are rescanned when a watched folder above them changes.
constexpr int kWatchDepth = 3;

QStandardItem* textItem(const QString& text, const QString& tip = QString()) {
    auto* item = new QStandardItem(text);
    item->setData(text, RunsView::kSortRole);
    if (!tip.isEmpty()) item->setToolTip(tip);
    item->setEditable(false);
    return item;
}

// A number cell of a run column: shown as core writes it (run::cellText: its scale and digits),
// sorted by value; absent (as core's RunSummary::hasValue says) shows "–" and sorts below every value.
QStandardItem* numberItem(const latmix::run::RunColumn& column, const latmix::run::RunSummary& run) {
    const auto v = column.number(run);
    auto* item = new QStandardItem(v ? QString::fromStdString(latmix::run::cellText(column, run)) : QStringLiteral("–"));
    item->setData(v ? *v : -std::numeric_limits<double>::infinity(), RunsView::kSortRole);
    item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
    item->setEditable(false);
    return item;
}

// The run's name in the table: its folder, with the sweep it belongs to when it is a cell.
QString runName(const QString& dir) {
    const QFileInfo f(dir);
    const QString parent = f.dir().dirName();
    if (parent == QLatin1String("cells")) return QFileInfo(f.dir().absolutePath()).dir().dirName() + QLatin1Char('/') + f.fileName();
    return f.fileName();
}

// The table's name: the folder without the workbench's "-YYYYMMDD-HHMMSS" stamp, which the Date
// column shows (with it a 1B model's run name alone filled half a 1280 px window; issue 71).
QString tableName(const QString& dir) {
    static const QRegularExpression stamp(QStringLiteral("-\\d{8}-\\d{6}$"));
    QString name = runName(dir);
    name.remove(stamp);
    return name;
}

} // namespace

QString RunsView::defaultFolder() {
    return QStandardPaths::writableLocation(QStandardPaths::AppLocalDataLocation) + QStringLiteral("/runs");
}

RunsView::RunsView(QWidget* parent) : QWidget(parent) {
    setObjectName(QStringLiteral("runsView"));
    createTable();
    QLayout* bar = createButtonBar();
    QWidget* plots = createPlots();
    auto* top = new QWidget(this);
    auto* topColumn = new QVBoxLayout(top);
    topColumn->setContentsMargins(0, 0, 0, 0);
    topColumn->addLayout(bar);
    topColumn->addWidget(m_table);
    auto* split = new QSplitter(Qt::Vertical, this);
    split->setObjectName(QStringLiteral("runsSplitter"));
    split->addWidget(top);
    split->addWidget(plots);
    split->setStretchFactor(0, 1);
    split->setStretchFactor(1, 1);
    auto* layout = new QVBoxLayout(this);
    layout->addWidget(split);

    m_watcher = new QFileSystemWatcher(this);
    m_debounce = new QTimer(this);
    m_debounce->setSingleShot(true);
    // A run writes its folder in steps (train.h5 while training, latmix.json at the end, renamed
    // into place): one rescan after the writes settle.
    m_debounce->setInterval(400);
    connect(m_debounce, &QTimer::timeout, this, &RunsView::refresh);
    connect(m_watcher, &QFileSystemWatcher::directoryChanged, m_debounce, qOverload<>(&QTimer::start));
    connect(m_table->selectionModel(), &QItemSelectionModel::selectionChanged, this, &RunsView::showSelection);
    connect(m_table, &QTableView::doubleClicked, this, [this](const QModelIndex& index) {
        emit runActivated(m_proxy->data(index.siblingAtColumn(Name), kDirRole).toString());
    });
    restyle();
    fillTable();
}


// The runs, one row each, sortable by every column (the quantized perplexity first).
void RunsView::createTable() {
    m_model = new QStandardItemModel(0, columnCount(), this);
    const auto columns = latmix::run::displayedRunColumns();
    for (int c = 0; c < columnCount(); ++c) {
        auto* header = new QStandardItem(tr(columns[std::size_t(c)]->label.c_str()));
        header->setToolTip(tr(columns[std::size_t(c)]->description.c_str()));
        m_model->setHorizontalHeaderItem(c, header);
    }
    m_proxy = new QSortFilterProxyModel(this);
    m_proxy->setSourceModel(m_model);
    m_proxy->setSortRole(kSortRole);
    m_table = new QTableView(this);
    m_table->setObjectName(QStringLiteral("runsTable"));
    m_table->setModel(m_proxy);
    m_table->setSortingEnabled(true);
    m_table->sortByColumn(column("w4a4_ppl"), Qt::AscendingOrder);
    m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_table->setSelectionMode(QAbstractItemView::ExtendedSelection);
    m_table->verticalHeader()->hide();
    // Every column as wide as its contents, the run's name whole (issue 71: stretched, it was cut
    // first); a narrow window scrolls the table sideways.
    m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    m_table->horizontalHeader()->setStretchLastSection(true);
    m_table->setWordWrap(false);
    m_table->setTextElideMode(Qt::ElideLeft); // a cell's name is at the end of its path
}

// Status, rescan, add a folder, export the table.
QLayout* RunsView::createButtonBar() {
    auto* add = new QPushButton(tr("&Add folder…"), this);
    add->setObjectName(QStringLiteral("runsAddFolderButton"));
    auto* csv = new QPushButton(tr("E&xport CSV…"), this);
    csv->setObjectName(QStringLiteral("runsExportCsvButton"));
    auto* rescan = new QPushButton(tr("&Rescan"), this);
    rescan->setObjectName(QStringLiteral("runsRescanButton"));
    m_status = new ElidedLabel(this); // "N runs in <folders>": long paths must not widen the window
    m_status->setObjectName(QStringLiteral("runsStatus"));
    // The folders a scan skipped, and why (unfinished runs, damaged records): one click away.
    m_skipped = new QPushButton(this);
    m_skipped->setObjectName(QStringLiteral("runsSkippedButton"));
    m_skipped->setFlat(true);
    m_skipped->hide();
    connect(m_skipped, &QPushButton::clicked, this, [this] {
        QMessageBox box(QMessageBox::Information, tr("Folders skipped"),
                        tr("These folders hold no finished run the table can show:"), QMessageBox::Ok, this);
        box.setObjectName(QStringLiteral("runsSkippedDialog"));
        box.setInformativeText(m_problems.join(QStringLiteral("\n\n")));
        box.exec();
    });
    auto* bar = new QHBoxLayout;
    bar->addWidget(m_status, 1);
    bar->addWidget(m_skipped);
    bar->addWidget(rescan);
    bar->addWidget(add);
    bar->addWidget(csv);

    connect(add, &QPushButton::clicked, this, [this] {
        const QString dir = QFileDialog::getExistingDirectory(this, tr("Add a folder of runs"));
        if (!dir.isEmpty()) addFolder(dir);
    });
    connect(csv, &QPushButton::clicked, this, [this] {
        const QString path = QFileDialog::getSaveFileName(this, tr("Export the runs table"), QStringLiteral("runs.csv"),
                                                          tr("CSV (*.csv)"));
        QString error;
        if (!path.isEmpty() && !exportCsv(path, &error)) m_status->setFullText(error);
    });
    connect(rescan, &QPushButton::clicked, this, &RunsView::refresh);
    return bar;
}

// The selected runs' training curves and weight errors, side by side.
QWidget* RunsView::createPlots() {
    auto plot = [this](const char* name, const QString& title) { return PlotStyle::newPlot(this, name, title); };
    m_curves = plot("runsCurvesPlot", tr("Training loss of the selected runs"));
    m_curves->xAxis->setLabel(tr("step"));
    PlotStyle::integerTicks(m_curves->xAxis);
    m_curves->yAxis->setLabel(tr("loss"));
    m_weights = plot("runsWeightErrorPlot", tr("Weight error per linear of the selected runs"));
    m_weights->xAxis->setLabel(tr("linear (layer-major: q k v o gate up down)"));
    PlotStyle::integerTicks(m_weights->xAxis);
    m_weights->yAxis->setLabel(tr("relative error"));
    m_weights->yAxis->setScaleType(QCPAxis::stLogarithmic);
    m_weights->yAxis->setTicker(PlotStyle::logTicker(4));
    m_weights->yAxis->setNumberFormat(QStringLiteral("eb"));
    m_weights->yAxis->setNumberPrecision(0);
    auto* plots = new QWidget(this);
    auto* plotRow = new QHBoxLayout(plots);
    plotRow->setContentsMargins(0, 0, 0, 0);
    plotRow->addWidget(m_curves);
    plotRow->addWidget(m_weights);
    return plots;
}

void RunsView::changeEvent(QEvent* event) {
    QWidget::changeEvent(event);
    if (event->type() == QEvent::PaletteChange) restyle();
}

void RunsView::restyle() {
    PlotStyle::restyle({m_curves, m_weights}, palette());
}

void RunsView::setFolders(const QStringList& folders) {
    m_folders.clear();
    for (const QString& f : folders) {
        const QString clean = QDir::cleanPath(f);
        if (!clean.isEmpty() && !m_folders.contains(clean)) m_folders << clean;
    }
    refresh();
}

void RunsView::addFolder(const QString& folder) { setFolders(m_folders + QStringList{folder}); }

void RunsView::refresh() {
    const QStringList selected = selectedRuns();
    m_runs.clear();
    m_problems.clear();
    std::set<std::string> seen; // a folder reachable from two runs folders is listed once
    for (const QString& folder : m_folders) {
        if (!QFileInfo(folder).isDir()) continue; // not made yet (no run finished here): nothing to list
        std::vector<std::string> problems;
        try {
            for (auto& r : latmix::run::scanRuns(folder.toStdString(), &problems))
                if (seen.insert(QFileInfo(QString::fromStdString(r.dir)).canonicalFilePath().toStdString()).second)
                    m_runs.push_back(std::move(r));
        } catch (const std::exception& e) {
            problems.push_back(e.what());
        }
        for (const auto& p : problems) m_problems << QString::fromStdString(p);
    }
    fillTable();
    selectRuns(selected);
    watch();
    emit refreshed(static_cast<int>(m_runs.size()));
}

QStringList RunsView::watchedFolders() const { return m_watcher->directories(); }

void RunsView::watch() {
    QStringList dirs;
    for (const QString& folder : m_folders) {
        if (!QFileInfo(folder).isDir()) continue;
        dirs << folder;
        const int base = folder.count(QLatin1Char('/'));
        QDirIterator it(folder, QDir::Dirs | QDir::NoDotAndDotDot, QDirIterator::Subdirectories);
        while (it.hasNext()) {
            const QString d = it.next();
            const QString name = it.fileName();
            if (d.count(QLatin1Char('/')) - base > kWatchDepth || name == QLatin1String("model") || name.startsWith(QLatin1Char('.')))
                continue;
            if (d.contains(QLatin1String("/model/"))) continue;
            dirs << d;
        }
    }
    const QStringList old = m_watcher->directories();
    if (!old.isEmpty()) m_watcher->removePaths(old);
    if (!dirs.isEmpty()) m_watcher->addPaths(dirs);
}

// A column no run has a value for (zero-shot before any run evaluated tasks, KL before any run
// measured it) says nothing and takes room the others need: hidden until a run fills it.
int RunsView::column(const std::string& key) {
    const auto columns = latmix::run::displayedRunColumns();
    for (std::size_t c = 0; c < columns.size(); ++c)
        if (columns[c]->key == key) return static_cast<int>(c);
    throw std::logic_error("the Runs view shows no column '" + key + "'");
}

int RunsView::columnCount() { return static_cast<int>(latmix::run::displayedRunColumns().size()); }

void RunsView::hideEmptyColumns() {
    for (int c = Name + 1; c < columnCount(); ++c) {
        bool empty = m_model->rowCount() > 0;
        for (int r = 0; r < m_model->rowCount() && empty; ++r)
            empty = m_model->item(r, c)->data(kSortRole).toDouble() == -std::numeric_limits<double>::infinity();
        m_table->setColumnHidden(c, empty);
    }
}

void RunsView::fillTable() {
    const bool sorting = m_table->isSortingEnabled();
    m_table->setSortingEnabled(false);
    m_model->removeRows(0, m_model->rowCount());
    using latmix::run::RunSummary;
    const std::string precision = latmix::run::precisionLabel(m_runs); // W4A4 when every run is 4-bit
    m_model->horizontalHeaderItem(column("w4a4_ppl"))
        ->setText(precision == "quantized" ? tr("Quantized") : QString::fromStdString(precision));
    for (const auto& r : m_runs) {
        const QString dir = QString::fromStdString(r.dir);
        QList<QStandardItem*> row;
        for (const latmix::run::RunColumn* c : latmix::run::displayedRunColumns()) {
            if (c->key == "dir") {
                auto* name = textItem(tableName(dir), QDir::toNativeSeparators(dir) + QStringLiteral("\n") +
                                                        QString::fromStdString(r.command) + settingsLine(r));
                name->setData(dir, kDirRole);
                row << name;
            } else if (c->key == "method") {
                row << textItem(QString::fromStdString(r.method), QString::fromStdString(r.methodDescription));
            } else if (c->key == "created") {
                const QDateTime created = QDateTime::fromString(QString::fromStdString(r.created), Qt::ISODate);
                // Two-digit years keep the row inside a 1280-pixel window; it sorts by the full ISO time.
                auto* date = textItem(created.isValid() ? created.toString(QStringLiteral("yy-MM-dd HH:mm"))
                                                        : QString::fromStdString(r.created),
                                      QString::fromStdString(r.created));
                date->setData(QString::fromStdString(r.created), kSortRole);
                row << date;
            } else if (c->text) {
                row << textItem(QString::fromStdString(c->text(r)));
            } else {
                row << numberItem(*c, r);
            }
        }
        m_model->appendRow(row);
    }
    hideEmptyColumns();
    m_table->setSortingEnabled(sorting);
    // English plurals written out: the workbench ships no translation that would resolve "%n".
    const int runs = static_cast<int>(m_runs.size());
    const QString where = m_folders.isEmpty() ? tr("no folder") : m_folders.join(QStringLiteral(", "));
    const QString status = runs == 1 ? tr("1 run in %1").arg(where) : tr("%1 runs in %2").arg(runs).arg(where);
    m_status->setFullText(status);
    m_skipped->setVisible(!m_problems.isEmpty());
    m_skipped->setText(m_problems.size() == 1 ? tr("1 folder skipped: why?")
                                              : tr("%1 folders skipped: why?").arg(m_problems.size()));
    m_skipped->setToolTip(m_problems.join(QLatin1Char('\n')));
    showSelection();
}

void RunsView::selectRuns(const QStringList& dirs) {
    QItemSelection selection;
    for (int row = 0; row < m_proxy->rowCount(); ++row) {
        const QModelIndex index = m_proxy->index(row, Name);
        if (dirs.contains(m_proxy->data(index, kDirRole).toString()))
            selection.select(index, m_proxy->index(row, columnCount() - 1));
    }
    m_table->selectionModel()->select(selection, QItemSelectionModel::ClearAndSelect);
}

QStringList RunsView::selectedRuns() const {
    QStringList dirs;
    for (int row = 0; row < m_proxy->rowCount(); ++row)
        if (m_table->selectionModel()->isRowSelected(row, QModelIndex()))
            dirs << m_proxy->data(m_proxy->index(row, Name), kDirRole).toString();
    return dirs;
}

void RunsView::showSelection() {
    m_curves->clearGraphs();
    m_weights->clearGraphs();
    int colour = 0;
    QStringList noSeries;
    for (const QString& dir : selectedRuns()) {
        const auto it = std::find_if(m_runs.begin(), m_runs.end(), [&](const auto& r) { return QString::fromStdString(r.dir) == dir; });
        if (it == m_runs.end()) continue;
        const QColor c = PlotStyle::seriesColour(colour++);
        const QString name = runName(dir);
        if (it->hasTrainSeries) {
            try {
                QVector<double> steps, loss;
                for (const auto& s : latmix::train::readDistillSeries(it->trainFile())) {
                    steps << s.step;
                    loss << s.loss;
                }
                auto* g = m_curves->addGraph();
                g->setName(name);
                g->setPen(QPen(c, 1.4));
                g->setData(steps, loss, true);
            } catch (const std::exception& e) {
                noSeries << QStringLiteral("%1 (%2)").arg(name, QString::fromLocal8Bit(e.what()));
            }
        }
        if (!it->linears.empty()) {
            // The linears --keep left in bf16 are a graph of their own (crosses, no line): their
            // error is bf16's rounding, not the format's.
            QVector<double> x, y, keptX, keptY;
            for (std::size_t i = 0; i < it->linears.size(); ++i) {
                const double e = std::max(it->linears[i].relativeError, 1e-12); // log axis: an exact linear at the floor
                x << double(i);
                y << (it->linears[i].kept ? std::numeric_limits<double>::quiet_NaN() : e);
                if (it->linears[i].kept) keptX << double(i), keptY << e;
            }
            auto* g = m_weights->addGraph();
            g->setName(name);
            g->setPen(QPen(c, 1.2));
            g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, c, 3));
            g->setData(x, y, true);
            if (!keptX.isEmpty()) {
                auto* k = m_weights->addGraph();
                k->setName(tr("%1: kept in bf16 (%2)").arg(name).arg(keptX.size()));
                k->setLineStyle(QCPGraph::lsNone);
                k->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCross, c, 6));
                k->setData(keptX, keptY, true);
            }
        }
    }
    // Runs that learn nothing (rtn, gptq, quarot, ...) have no curve: the title says so rather
    // than leave empty axes unexplained.
    PlotStyle::setTitle(m_curves, m_curves->graphCount() > 0 || selectedRuns().isEmpty()
                                      ? tr("Training loss of the selected runs")
                                      : tr("Training loss: none of the selected runs trains"));
    for (QCustomPlot* p : {m_curves, m_weights}) {
        p->rescaleAxes();
        p->replot();
    }
    if (!noSeries.isEmpty()) m_status->setFullText(tr("No training series for %1").arg(noSeries.join(QStringLiteral("; "))));
}

bool RunsView::exportCsv(const QString& path, QString* error) const {
    try {
        latmix::util::writeFileAtomically(path.toStdString(), latmix::run::runsCsv(m_runs));
        return true;
    } catch (const std::exception& e) {
        if (error) *error = tr("Could not write %1: %2").arg(QDir::toNativeSeparators(path), QString::fromLocal8Bit(e.what()));
        return false;
    }
}

} // namespace latmix::gui
