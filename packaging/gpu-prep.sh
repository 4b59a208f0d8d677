#!/bin/sh
# Prepares what packaging/device-check.sh needs on the GPU machine and cannot find there, in one
# ignored folder (default .gpu/ in the repository root, excluded through .gitignore):
#   .gpu/debs/   Debian 12 packages (as .deb files, fetched with `apt-get download`): the headers,
#                CMake and pkg-config files and shared libraries of HDF5 (C++), nlohmann_json,
#                CLI11, sentencepiece, PCRE2, pkg-config and Qt 6 Core/Test + moc, with the shared
#                libraries those need (HDF5's libcurl/libcrypto chain, ICU, ...). The GPU machine
#                (Ubuntu 24.04-class, glibc 2.39) runs Debian 12's libraries (they need glibc
#                <= 2.35); Debian 13's would not (glibc 2.41). So this runs on Debian 12.
#   .gpu/debs/MANIFEST  soname -> package, so that a library missing there is named with its package.
#   .gpu/data/   the test data the CUDA rows and the timed runs read: WikiText-2 (raw test, tokenized
#                valid), stories260K-hf, and brownpy-13M's config.json + tokenizer.model. Its
#                weights (50 MB) do not travel: device-check.sh makes a random checkpoint of the
#                same shape there (`latmix demo-model --config`), which times the same.
# Usage (Debian 12, network access to its mirror; no root needed):
#     sh packaging/gpu-prep.sh            # then: run packaging/device-check.sh with carry [".gpu"]
# Environment: LATMIX_GPU_DIR (folder, default .gpu), LATMIX_DATA_DIR (default ../shared/data).
set -eu
SRC=$(cd "$(dirname "$0")/.." && pwd)
GPU=${LATMIX_GPU_DIR:-$SRC/.gpu}
DATA=${LATMIX_DATA_DIR:-$SRC/../shared/data}
die() { echo "gpu-prep: $*" >&2; exit 1; }

# The packages, by what they are for (docs/developer/gpu.md explains the list). libc6, libstdc++6,
# libgcc-s1 and libgomp1 are not carried: the GPU machine's g++ brings newer ones.
BUILD="libhdf5-dev zlib1g-dev nlohmann-json3-dev libcli11-dev libsentencepiece-dev libpcre2-dev
  qt6-base-dev qt6-base-dev-tools qmake6 pkgconf pkgconf-bin libpkgconf3"
RUNTIME_CORE="libhdf5-103-1 libhdf5-cpp-103-1 libaec0 libsz2 zlib1g libsentencepiece0 libpcre2-8-0 libpcre2-16-0"
RUNTIME_CURL="libcurl4 libnghttp2-14 librtmp1 libssh2-1 libpsl5 libgssapi-krb5-2 libkrb5-3 libk5crypto3
  libkrb5support0 libkeyutils1 libcom-err2 libldap-2.5-0 libsasl2-2 libbrotli1 libidn2-0 libunistring2
  libgnutls30 libhogweed6 libnettle8 libgmp10 libp11-kit0 libtasn1-6 libffi8 libssl3 libzstd1"
RUNTIME_QT="libqt6core6 libqt6test6 libicu72 libdouble-conversion3 libb2-1 libglib2.0-0"
PACKAGES=$(echo $BUILD $RUNTIME_CORE $RUNTIME_CURL $RUNTIME_QT)

[ -r /etc/os-release ] && . /etc/os-release
[ "${VERSION_CODENAME:-}" = bookworm ] ||
  die "run this on Debian 12 (bookworm): the GPU machine's glibc runs Debian 12's libraries, not those of '${PRETTY_NAME:-this system}'"
command -v apt-get > /dev/null && command -v dpkg-deb > /dev/null || die "needs apt-get and dpkg-deb"
for f in wikitext-2/wiki.test.raw wikitext-2/wiki.valid.tokens models/stories260K-hf/config.json \
         models/brownpy-13M/config.json models/brownpy-13M/tokenizer.model; do
  [ -f "$DATA/$f" ] || die "missing $DATA/$f (set LATMIX_DATA_DIR to the project's shared data folder)"
done

# 1. The packages, into a temporary folder renamed when complete (an interrupted download is never
#    taken for a finished one).
mkdir -p "$GPU"
rm -rf "$GPU/debs.part"
mkdir -p "$GPU/debs.part"
echo "gpu-prep: downloading $(echo $PACKAGES | wc -w) Debian 12 packages"
# apt-get download as root warns that _apt cannot write the folder; the download itself works.
(cd "$GPU/debs.part" && apt-get download $PACKAGES 2>&1 | grep -v -e '^Get:' -e 'unsandboxed' -e '^Fetched' >&2 || true)
for p in $PACKAGES; do
  ls "$GPU/debs.part/${p}_"*.deb > /dev/null 2>&1 || die "apt-get download did not fetch $p (apt-get update? network?)"
done
# soname -> package, for device-check.sh's messages.
for d in "$GPU/debs.part"/*.deb; do
  pkg=$(dpkg-deb -f "$d" Package)
  dpkg-deb -c "$d" | awk '{print $NF}' | grep -o '[^/]*\.so\.[0-9][0-9.]*$' | sort -u | sed "s/\$/ $pkg/"
done > "$GPU/debs.part/MANIFEST"
rm -rf "$GPU/debs"
mv "$GPU/debs.part" "$GPU/debs"

# 2. The data (small files only; see the header).
rm -rf "$GPU/data"
mkdir -p "$GPU/data/wikitext-2" "$GPU/data/models/brownpy-13M-src"
cp "$DATA/wikitext-2/wiki.test.raw" "$DATA/wikitext-2/wiki.valid.tokens" "$GPU/data/wikitext-2/"
cp -r "$DATA/models/stories260K-hf" "$GPU/data/models/"
cp "$DATA/models/brownpy-13M/config.json" "$DATA/models/brownpy-13M/tokenizer.model" "$GPU/data/models/brownpy-13M-src/"

debs=$(du -sm "$GPU/debs" | cut -f1)
data=$(du -sm "$GPU/data" | cut -f1)
tree=$(cd "$SRC" && git ls-files -z | xargs -0 du -cm 2>/dev/null | tail -n 1 | cut -f1)
echo "gpu-prep: $GPU: debs ${debs} MiB ($(ls "$GPU/debs"/*.deb | wc -l) packages), data ${data} MiB; tracked tree ${tree} MiB"
[ $((debs + data + tree)) -le 60 ] || die "together $((debs + data + tree)) MiB: over the 64 MiB a device call carries"
