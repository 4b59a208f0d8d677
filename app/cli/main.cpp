// latmix: the headless CLI (app/cli/Cli.cpp).
#include "cli/Cli.h"

int main(int argc, char** argv) { return latmix::cli::run(argc, argv, /*mayReexec=*/true); }
