#!/bin/sh
# The README's test command (or the command given) on Debian 13 "trixie" (libtorch 2.6, Qt 6.8,
# GCC 14) in a minimal chroot: packaging/chroot.sh trixie, which says how.
#     sudo sh packaging/debian13-chroot.sh [COMMAND]
exec sh "$(dirname "$0")/chroot.sh" trixie "$@"
