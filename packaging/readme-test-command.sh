#!/bin/sh
# Prints the README's test command: the line after its "# 2. build and run the test suite"
# comment. .ci/run and packaging/debian13-chroot.sh both run exactly this line, so the README,
# CI on the host (Debian 12) and CI in the Debian 13 chroot can never diverge.
set -eu
readme="$(dirname "$0")/../README.md"
cmd=$(grep -A1 '^# 2\. build and run the test suite' "$readme" | tail -n 1)
[ -n "$cmd" ] || { echo "readme-test-command: no test command after '# 2. build and run the test suite' in $readme" >&2; exit 2; }
printf '%s\n' "$cmd"
