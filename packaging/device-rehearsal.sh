#!/bin/sh
# packaging/device-check.sh without a GPU, so that the GPU machine's minutes are not spent on
# typos: in a minimal Debian 12 chroot (packaging/chroot.sh bookworm) where none of the carried
# packages is installed, with Debian's libtorch 1.13 standing in for PyTorch's. It unpacks the
# carried .debs (packaging/gpu-prep.sh; run first), configures and builds against them, and runs
# the cpu half of the timed runs. Needs root, like chroot.sh.
#     sudo sh packaging/device-rehearsal.sh [OUT]      # OUT (default /tmp/latmix-rehearsal) gets the logs
# LATMIX_REHEARSAL_STEPS=configure or build-cli stops after that step (CI: build-cli, i.e. unpack,
# configure and build `latmix` against the carried packages). LATMIX_DEVICE_BUILD_TYPE goes through
# to device-check.sh (CI: None).
set -eu
SRC=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-/tmp/latmix-rehearsal}
[ -f "$SRC/.gpu/debs/MANIFEST" ] || { echo "device-rehearsal: no .gpu/debs: run packaging/gpu-prep.sh first" >&2; exit 2; }
# In the chroot: the compiler, CMake, ninja and Debian's libtorch; then every carried package that
# came with them is removed again (dpkg --force-depends), so that the check finds it only where the
# GPU machine would: in .gpu. Kept: the libraries that the chroot's own tools need (CMake links
# libcurl and its TLS chain, coreutils libpcre2-8, everything zlib), which any Ubuntu-class system
# has too; device-check.sh then uses the system's copy, as it would there. Done once per chroot
# (apt refuses to install more after the removal).
setup='export DEBIAN_FRONTEND=noninteractive
if [ ! -f /etc/latmix-rehearsal ]; then
apt-get update -q > /dev/null
apt-get install -y -q --no-install-recommends g++ cmake ninja-build python3 libtorch-dev binutils > /tmp/apt.log 2>&1 || { tail -n 20 /tmp/apt.log; exit 1; }
keep=" zlib1g libpcre2-8-0 libzstd1 libcurl4 libnghttp2-14 librtmp1 libssh2-1 libpsl5 libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1 libcom-err2 libldap-2.5-0 libsasl2-2 libbrotli1 libidn2-0 libunistring2 libgnutls30 libhogweed6 libnettle8 libgmp10 libp11-kit0 libtasn1-6 libffi8 libssl3 "
drop=
for p in $(ls .gpu/debs/*.deb | sed "s|.*/||; s|_.*||"); do
  case $keep in *" $p "*) continue ;; esac
  dpkg-query -W -f="\${db:Status-Abbrev}" "$p" 2>/dev/null | grep -q "^ii" && drop="$drop $p"
done
[ -z "$drop" ] || { echo "device-rehearsal: removing carried packages that came with libtorch-dev:$drop"; dpkg --purge --force-depends $drop > /dev/null 2>&1; }
touch /etc/latmix-rehearsal
fi
'
mkdir -p "$OUT"
LATMIX_CHROOT_CARRY=.gpu sh "$SRC/packaging/chroot.sh" bookworm \
  "$setup mkdir -p /work/out && LATMIX_DEVICE_CAP_SCALE=${LATMIX_DEVICE_CAP_SCALE:-4} LATMIX_DEVICE_DEADLINE=0 LATMIX_DEVICE_BISECT=1 LATMIX_DEVICE_STEPS=${LATMIX_REHEARSAL_STEPS:-all} LATMIX_DEVICE_BUILD_TYPE=${LATMIX_DEVICE_BUILD_TYPE:-Release} bash packaging/device-check.sh /work/out --rehearse; rc=\$?; exit \$rc" || rc=$?
root=${LATMIX_CHROOT:-${HOME:-/root}/.cache/latmix/bookworm-chroot}
[ "${CI:-}" = true ] || cp "$root/work/out/"* "$OUT/" 2>/dev/null || true
exit ${rc:-0}
