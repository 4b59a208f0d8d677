// MainWindow's sessions: what is open (model, point, runs, view, layout) as JSON, saved to a
// file from the File menu and restored at start from the settings.
#include "MainWindow.h"

#include "WorkbenchSettings.h"

#include "ActivationView.h"
#include "ModelSummaryView.h"
#include "RunsView.h"

#include <QCloseEvent>
#include <QDir>
#include <QFileDialog>
#include <QJsonArray>
#include <QJsonDocument>
#include <QSaveFile>
#include <QSettings>
#include <QStatusBar>
#include <QTabWidget>

namespace latmix::gui {

namespace {
constexpr const char* kSessionKey = "session/last";
constexpr int kSessionVersion = 1;
} // namespace

QJsonObject MainWindow::session() const {
    QJsonObject s;
    s["latmix_session"] = kSessionVersion;
    s["geometry"] = QString::fromLatin1(saveGeometry().toBase64());
    s["state"] = QString::fromLatin1(saveState().toBase64());
    s["model"] = m_modelDir;
    s["point"] = m_activations->currentPoint();
    s["runs"] = QJsonArray::fromStringList(m_openRuns);
    s["run_folders"] = QJsonArray::fromStringList(m_runs->folders());
    s["view"] = m_tabs->currentWidget() ? m_tabs->currentWidget()->objectName() : QString();
    return s;
}

bool MainWindow::restoreSession(const QJsonObject& s, QString* error) {
    if (s.value("latmix_session").toInt() != kSessionVersion) {
        if (error) *error = tr("not a LATMiX Workbench session (no \"latmix_session\": %1)").arg(kSessionVersion);
        return false;
    }
    QStringList missing;
    const QString model = s.value("model").toString();
    if (!model.isEmpty() && !openCheckpoint(model, /*remember=*/false)) missing << errorBannerText();
    const QString point = s.value("point").toString();
    if (!point.isEmpty()) m_summary->selectPoint(point); // the tree selects it in every view
    for (const auto& r : s.value("runs").toArray()) {
        const QString dir = r.toString();
        if (!openRun(dir)) missing << errorBannerText();
    }
    if (s.contains("run_folders")) {
        QStringList folders;
        for (const auto& f : s.value("run_folders").toArray()) folders << f.toString();
        m_runs->setFolders(folders);
    }
    const QString view = s.value("view").toString();
    for (int i = 0; i < m_tabs->count(); ++i)
        if (m_tabs->widget(i)->objectName() == view) m_tabs->setCurrentIndex(i);
    // Last: opening a model shows the Model dock, the saved layout may have it hidden.
    restoreGeometry(QByteArray::fromBase64(s.value("geometry").toString().toLatin1()));
    restoreState(QByteArray::fromBase64(s.value("state").toString().toLatin1()));
    if (!missing.isEmpty())
        showErrorBanner(tr("Restored the session without what is gone: %1").arg(missing.join(QStringLiteral("; "))));
    return true;
}

bool MainWindow::saveSessionFile(const QString& path, QString* error) const {
    QSaveFile f(path); // a temporary name, renamed on commit: never a half-written session
    const QByteArray bytes = QJsonDocument(session()).toJson();
    if (!f.open(QIODevice::WriteOnly) || f.write(bytes) != bytes.size() || !f.commit()) {
        if (error) *error = tr("cannot write the session to %1: %2").arg(QDir::toNativeSeparators(path), f.errorString());
        return false;
    }
    return true;
}

bool MainWindow::openSessionFile(const QString& path, QString* error) {
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) {
        if (error) *error = tr("cannot read the session %1: %2").arg(QDir::toNativeSeparators(path), f.errorString());
        return false;
    }
    QJsonParseError parse;
    const QJsonDocument doc = QJsonDocument::fromJson(f.readAll(), &parse);
    QString why;
    if (!doc.isObject()) {
        why = tr("not JSON (%1 at offset %2)").arg(parse.errorString()).arg(parse.offset);
    } else if (restoreSession(doc.object(), &why)) {
        return true;
    }
    if (error) *error = tr("%1: %2").arg(QDir::toNativeSeparators(path), why);
    return false;
}

QJsonObject MainWindow::lastSession() {
    const QByteArray bytes = workbenchSettings().value(QLatin1String(kSessionKey)).toByteArray();
    const QJsonDocument doc = QJsonDocument::fromJson(bytes);
    return doc.isObject() ? doc.object() : QJsonObject();
}

void MainWindow::closeEvent(QCloseEvent* event) {
    workbenchSettings().setValue(QLatin1String(kSessionKey), QJsonDocument(session()).toJson(QJsonDocument::Compact));
    QMainWindow::closeEvent(event);
}

void MainWindow::chooseSessionToOpen() {
    const QString path = QFileDialog::getOpenFileName(this, tr("Open session"), QString(), tr("Workbench sessions (*.latmix-session)"));
    QString error;
    if (!path.isEmpty() && !openSessionFile(path, &error)) showErrorBanner(error);
}

void MainWindow::chooseSessionToSave() {
    QString path = QFileDialog::getSaveFileName(this, tr("Save session"), QString(), tr("Workbench sessions (*.latmix-session)"));
    if (path.isEmpty()) return;
    if (!path.endsWith(QLatin1String(".latmix-session"))) path += QLatin1String(".latmix-session");
    QString error;
    if (!saveSessionFile(path, &error))
        showErrorBanner(error);
    else
        say(tr("Saved the session to %1").arg(QDir::toNativeSeparators(path)));
}

} // namespace latmix::gui
