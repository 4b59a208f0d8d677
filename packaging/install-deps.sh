#!/bin/sh
# Installs the Debian 12 packages that LATMiX Workbench builds, tests and runs with.
# Uses sudo when not run as root; does nothing when everything is already installed.
set -eu
PACKAGES="g++ cmake ninja-build ccache pkg-config \
  qt6-base-dev qt6-svg-dev libqcustomplot-dev libqcustomplot2.1-qt6 libgl-dev \
  libtorch-dev libopenblas0-pthread libhdf5-dev nlohmann-json3-dev libcli11-dev libsentencepiece-dev libpcre2-dev \
  xvfb xauth dpkg-dev file"

missing=""
for p in $PACKAGES; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing$missing"
$SUDO apt-get update -q
# shellcheck disable=SC2086
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing
