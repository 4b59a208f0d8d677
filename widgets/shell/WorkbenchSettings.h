#pragma once
// The one QSettings store of the workbench ("LATMiX", "Workbench"), named explicitly so that
// tests and tools without QCoreApplication's organisation name read the same file.
#include <QSettings>

namespace latmix::gui {

inline QSettings workbenchSettings() { return QSettings(QStringLiteral("LATMiX"), QStringLiteral("Workbench")); }

} // namespace latmix::gui
