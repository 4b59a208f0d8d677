// MainWindow's File › Recent checkpoints, kept in the settings.
#include "MainWindow.h"

#include "WorkbenchSettings.h"

#include <QAction>
#include <QDir>
#include <QMenu>
#include <QSettings>

namespace latmix::gui {
namespace {
const char* const kRecentKey = "recent/checkpoints";
} // namespace

QStringList MainWindow::recentCheckpoints() const {
    return workbenchSettings().value(QLatin1String(kRecentKey)).toStringList();
}

void MainWindow::storeRecent(const QStringList& paths) {
    QSettings settings = workbenchSettings();
    settings.setValue(QLatin1String(kRecentKey), paths);
    settings.sync();
    rebuildRecentMenu();
}

void MainWindow::addRecentCheckpoint(const QString& path) {
    if (path.isEmpty()) return;
    const QString clean = QDir::cleanPath(path);
    QStringList paths = recentCheckpoints();
    paths.removeAll(clean);
    paths.prepend(clean);
    while (paths.size() > kMaxRecent) paths.removeLast();
    storeRecent(paths);
}

void MainWindow::clearRecentCheckpoints() { storeRecent({}); }

void MainWindow::rebuildRecentMenu() {
    m_recentMenu->clear(); // deletes the entries it owns; the Clear action belongs to us
    const QStringList paths = recentCheckpoints();
    for (int i = 0; i < paths.size(); ++i) {
        const QString label = QStringLiteral("&%1 %2").arg(i + 1).arg(QDir::toNativeSeparators(paths[i]));
        QAction* a = m_recentMenu->addAction(label);
        a->setObjectName(QStringLiteral("recentCheckpointAction"));
        a->setData(paths[i]);
        connect(a, &QAction::triggered, this, [this, p = paths[i]] { openCheckpoint(p); });
    }
    if (paths.isEmpty()) {
        QAction* none = m_recentMenu->addAction(tr("No recent checkpoints"));
        none->setEnabled(false);
    }
    m_recentMenu->addSeparator();
    m_recentMenu->addAction(m_clearRecentAction);
    m_clearRecentAction->setEnabled(!paths.isEmpty());
}

} // namespace latmix::gui
