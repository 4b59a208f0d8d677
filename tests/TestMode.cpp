// Linked into every test binary (latmix_add_test): from before main, each test binary gets a
// home of its own for QSettings("LATMiX", "Workbench"), the per-user data folder (the demo model)
// and the caches: XDG_CONFIG_HOME, XDG_DATA_HOME, XDG_CACHE_HOME and XDG_STATE_HOME point into
// $TMPDIR/latmix-test-home-UID/BINARY (exported as LATMIX_TEST_HOME). So
// - a test that clears the settings or provisions the demo model never touches the user's real
//   workbench configuration or ~/.local/share;
// - two test binaries never share a settings file, and `ctest -j` may run GUI tests side by side
//   (QStandardPaths' test mode, used before, put every binary in the same ~/.qttest);
// - the `latmix` and `latmix-workbench` processes a test starts inherit the same folders.
#include <cerrno>
#include <cstdlib>
#include <string>

#include <unistd.h>

namespace {

std::string testHomeFolder() {
    const char* tmp = std::getenv("TMPDIR");
    std::string root = (tmp != nullptr && *tmp != '\0') ? tmp : "/tmp";
    // program_invocation_short_name (glibc): the binary's file name, known before main.
    return root + "/latmix-test-home-" + std::to_string(::getuid()) + "/" + program_invocation_short_name;
}

const bool testHomeSet = [] {
    const std::string home = testHomeFolder();
    ::setenv("LATMIX_TEST_HOME", home.c_str(), 1);
    ::setenv("XDG_CONFIG_HOME", (home + "/config").c_str(), 1);
    ::setenv("XDG_DATA_HOME", (home + "/data").c_str(), 1);
    ::setenv("XDG_CACHE_HOME", (home + "/cache").c_str(), 1);
    ::setenv("XDG_STATE_HOME", (home + "/state").c_str(), 1);
    return true;
}();

} // namespace
