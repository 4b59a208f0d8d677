// Linked into every test binary (latmix_add_test): QStandardPaths' test mode from before main,
// so QSettings("LATMiX", "Workbench") and the per-user data folders (the demo model) resolve
// under ~/.qttest. A test that clears the settings or provisions the demo model then never
// touches the user's real workbench configuration or ~/.local/share.
#include <QStandardPaths>

namespace {

const bool testModeEnabled = [] {
    QStandardPaths::setTestModeEnabled(true);
    return true;
}();

} // namespace
