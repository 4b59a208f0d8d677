// MainWindow's data folder (File › Data folder…): where the workbench finds WikiText-2 and the
// other data of ../shared/data's layout (the calibration's default text, its evaluation, the
// zero-shot tasks). Core reads it from LATMIX_DATA_DIR (util/DataPath.h); the setting, kept with
// the workbench's others, sets that variable at start when the environment has none, so that
// nobody has to start the workbench from a shell that exports it (issue 71).
#include "MainWindow.h"

#include "WorkbenchSettings.h"

#include "util/DataPath.h"

#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QSettings>
#include <QtGlobal>

namespace latmix::gui {
namespace {
const char* const kDataFolderKey = "data/folder";
} // namespace

QString MainWindow::dataFolder() { return QString::fromStdString(latmix::util::dataDir()); }

void MainWindow::applyStoredDataFolder() {
    const QString stored = workbenchSettings().value(QLatin1String(kDataFolderKey)).toString();
    if (!stored.isEmpty() && qEnvironmentVariableIsEmpty("LATMIX_DATA_DIR")) qputenv("LATMIX_DATA_DIR", stored.toLocal8Bit());
}

bool MainWindow::setDataFolder(const QString& dir, QString* error) {
    const QString clean = QDir::cleanPath(QFileInfo(dir).absoluteFilePath());
    if (!QFileInfo(clean).isDir()) {
        if (error) *error = tr("%1 is not a folder").arg(QDir::toNativeSeparators(clean));
        return false;
    }
    QSettings settings = workbenchSettings();
    settings.setValue(QLatin1String(kDataFolderKey), clean);
    settings.sync();
    qputenv("LATMIX_DATA_DIR", clean.toLocal8Bit());
    const bool wiki = QFileInfo::exists(clean + QStringLiteral("/wikitext-2/wiki.test.raw"));
    say(wiki ? tr("Data folder: %1").arg(QDir::toNativeSeparators(clean))
             : tr("Data folder: %1 (it has no wikitext-2/wiki.test.raw: perplexity needs it, or an evaluation text "
                  "chosen in Calibration)")
                   .arg(QDir::toNativeSeparators(clean)));
    return true;
}

void MainWindow::chooseDataFolder() {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Data folder (wikitext-2/, zero-shot tasks)"), dataFolder());
    if (dir.isEmpty()) return;
    QString error;
    if (!setDataFolder(dir, &error)) showErrorBanner(error);
}

} // namespace latmix::gui
