#!/bin/sh
# Installs the Debian packages that LATMiX Workbench builds, tests and runs with, on Debian 12
# "bookworm" (libtorch 1.13, Qt 6.4) or Debian 13 "trixie" (libtorch 2.6, Qt 6.8, GCC 14).
# Uses sudo when not run as root; installs nothing when everything is there already.
#   sh packaging/install-deps.sh          CPU libtorch (libtorch-dev)
#   sh packaging/install-deps.sh --cuda   Debian 13 only: CUDA libtorch (libtorch-cuda-dev, from
#                                         contrib, enabled here where needed), then configures and
#                                         builds the CUDA variant in build-cuda/ (README, "GPU")
set -eu
CUDA=no
for a in "$@"; do
  case "$a" in
    --cuda) CUDA=yes ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "install-deps: unknown option '$a' (use --cuda or nothing)" >&2; exit 2 ;;
  esac
done

. /etc/os-release
case "${VERSION_CODENAME:-}" in
  bookworm|trixie) ;;
  *) echo "install-deps: this is ${PRETTY_NAME:-an unknown system}; the package names here are Debian 12 (bookworm) and 13 (trixie) ones. Install the equivalents of the PACKAGES list in this script by hand." >&2
     exit 2 ;;
esac

TORCH=libtorch-dev
if [ "$CUDA" = yes ]; then
  if [ "$VERSION_CODENAME" != trixie ]; then
    echo "install-deps: Debian 12 has no CUDA build of libtorch. Use PyTorch's libtorch with -DTorch_DIR (README, \"GPU\"), or Debian 13's libtorch-cuda-dev." >&2
    exit 2
  fi
  # CUDA 12.4 build of libtorch 2.6, in contrib (it replaces libtorch-dev). libtorch's CMake
  # package needs the CUDA toolkit (nvcc) to configure, hence nvidia-cuda-toolkit (non-free).
  # nvidia-cudnn, which it depends on, downloads cuDNN from NVIDIA while installing.
  TORCH="libtorch-cuda-dev nvidia-cuda-toolkit"
fi
# lld links the ~80 test executables several times faster than GNU ld (CMakeLists.txt, "The linker").
# Same package names on both releases, except what the release's own versions pick
# (libtorch1.13 / libtorch2.6, libhdf5-cpp-103-1 / -310, ... come in as dependencies).
PACKAGES="g++ lld cmake ninja-build ccache pkg-config \
  qt6-base-dev qt6-svg-dev libqcustomplot-dev libgl-dev \
  $TORCH libgloo-dev libopenblas0-openmp libhdf5-dev zlib1g-dev nlohmann-json3-dev libcli11-dev libsentencepiece-dev libpcre2-dev \
  xvfb xauth xdotool openbox x11-utils dpkg-dev file"
# clang and libFuzzer for the fuzz smoke runs (ctest -L fuzz, tests/fuzz). CI runs them once, on
# Debian 12; on Debian 13 add them by hand (same names) to run them there too.
if [ "$VERSION_CODENAME" = bookworm ]; then PACKAGES="$PACKAGES clang libclang-rt-dev"; fi
# Node.js >= 20 and npm for tst_gguf_runtime (llama.cpp through node-llama-cpp). Debian 13 has them;
# Debian 12's Node.js is 18, too old: the test then skips (fails under LATMIX_REQUIRE_DATA=1) until
# Node.js 20 is installed from nodejs.org or NodeSource.
if [ "$VERSION_CODENAME" = trixie ]; then
  PACKAGES="$PACKAGES nodejs npm"
elif ! node --version 2>/dev/null | grep -qE '^v(2[0-9]|[3-9][0-9])\.'; then
  echo "install-deps: tst_gguf_runtime needs Node.js >= 20 and npm, which Debian 12 does not have (its nodejs is 18):" \
       "install Node.js 20 from nodejs.org or NodeSource to run it; the other tests do not need it" >&2
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

missing=""
for p in $PACKAGES; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done

if [ -n "$missing" ]; then
  if [ "$CUDA" = yes ] && ! apt-cache policy libtorch-cuda-dev 2>/dev/null | grep -q "Candidate: [0-9]"; then
    # libtorch-cuda-dev and the CUDA libraries it needs are in contrib and non-free.
    echo "install-deps: enabling contrib and non-free for libtorch-cuda-dev"
    mirror=$(grep -hoE 'https?://[^ ]+' /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -n 1)
    echo "deb ${mirror:-http://deb.debian.org/debian} trixie contrib non-free non-free-firmware" |
      $SUDO tee /etc/apt/sources.list.d/latmix-contrib.list > /dev/null
  fi
  echo "install-deps: installing$missing"
  $SUDO apt-get update -q
  # shellcheck disable=SC2086
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing
fi

if [ "$CUDA" = yes ]; then
  SRC=$(cd "$(dirname "$0")/.." && pwd)
  echo "install-deps: building the CUDA variant in $SRC/build-cuda"
  cmake -S "$SRC" -B "$SRC/build-cuda" -G Ninja
  cmake --build "$SRC/build-cuda"
fi
