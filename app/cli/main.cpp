// latmix: the headless CLI (app/cli/Cli.cpp).
#include "cli/Cli.h"
#include "util/CrashReport.h"
#include "util/Runtime.h"

int main(int argc, char** argv) {
    latmix::util::installCrashReport("latmix");
    latmix::configureAllocator();
    return latmix::cli::run(argc, argv, /*mayReexec=*/true);
}
