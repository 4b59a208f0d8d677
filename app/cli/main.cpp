// latmix: the headless CLI (app/cli/Cli.cpp).
#include "cli/Cli.h"
#include "util/CrashReport.h"

int main(int argc, char** argv) {
    latmix::util::installCrashReport("latmix");
    return latmix::cli::run(argc, argv, /*mayReexec=*/true);
}
