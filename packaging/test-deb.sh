#!/bin/sh
# Builds the .deb from a build folder, installs it on this machine (dpkg -i, then apt-get -f
# install for anything missing) and runs both installed executables. Needs root or password-less
# sudo. Removes the package again unless it was installed before.
# Usage: sh packaging/test-deb.sh BUILD_DIR
set -eu
BUILD=$(cd "${1:?usage: test-deb.sh BUILD_DIR}" && pwd)
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo -n"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

(cd "$BUILD" && cpack -G DEB -B "$WORK/pkg" > "$WORK/cpack.log" 2>&1) || { cat "$WORK/cpack.log"; exit 1; }
DEB=$(ls "$WORK"/pkg/*.deb)
echo "test-deb: built $(basename "$DEB") ($(du -h "$DEB" | cut -f1))"
dpkg-deb --field "$DEB" Package Version Depends

was_installed=no
dpkg-query -W -f='${Status}' latmix-workbench 2>/dev/null | grep -q "ok installed" && was_installed=yes
if ! $SUDO dpkg -i "$DEB"; then
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -f install -y -q
fi
cleanup() {
  [ "$was_installed" = yes ] || $SUDO dpkg -r latmix-workbench > /dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

# Every Depends: of the package is satisfied (dpkg-shlibdeps named this release's packages):
# one alternative of each item installed or provided.
dpkg-deb --field "$DEB" Depends | tr ',' '\n' | while IFS= read -r item; do
  ok=no
  for alt in $(printf '%s\n' "$item" | tr '|' '\n' | sed 's/(.*//; s/ //g'); do
    dpkg-query -W -f='${Status}' "$alt" 2>/dev/null | grep -q "ok installed" && ok=yes
    [ $ok = yes ] || ! dpkg-query -W -f='${Provides}\n' | tr ',' '\n' | sed 's/(.*//; s/ //g' | grep -qx "$alt" || ok=yes
  done
  [ $ok = yes ] || { echo "test-deb: Depends item '$item' is not satisfied on this system"; exit 1; }
done || exit 1

# Both executables from /usr/bin, not from the build folder; latmix runs on the OpenMP OpenBLAS.
/usr/bin/latmix --version
/usr/bin/latmix --version | grep -q "BLAS .*/openblas-openmp/" || { echo "test-deb: /usr/bin/latmix does not load the OpenMP OpenBLAS"; exit 1; }
/usr/bin/latmix demo-model "$WORK/demo" > /dev/null
/usr/bin/latmix eval --model "$WORK/demo" --dataset "$WORK/demo/config.json" --seqlen 16 --max-windows 2
/usr/bin/latmix-workbench --version
QT_QPA_PLATFORM=offscreen HOME="$WORK/home" /usr/bin/latmix-workbench --screenshot "$WORK/shot.png"
file "$WORK/shot.png" | grep -q "PNG image data, 1280 x 800" || { echo "test-deb: bad screenshot"; exit 1; }
test -f /usr/share/applications/latmix-workbench.desktop
test -f /usr/share/metainfo/io.github.latmix.Workbench.metainfo.xml
test -f /usr/share/icons/hicolor/scalable/apps/latmix-workbench.svg
echo "test-deb: installed package runs (latmix, latmix-workbench)"
