#!/bin/sh
# Runs a command (default: the README's test command) in a minimal Debian chroot made with
# debootstrap, on a copy of this working tree, with ../shared beside it:
#     sudo sh packaging/chroot.sh trixie             # Debian 13 (libtorch 2.6, Qt 6.8, GCC 14): the README's test command
#     sudo sh packaging/chroot.sh trixie 'cd build && ctest -R tst_fold'   # anything else
#     sudo sh packaging/chroot.sh bookworm '...'     # Debian 12 (packaging/device-rehearsal.sh)
# CI runs the trixie one after the Debian 12 run on the host (packaging/debian13-chroot.sh), and
# the device check's rehearsal in a bookworm one.
# Needs root (debootstrap, mount, chroot). The chroot is kept between local runs in
# $LATMIX_CHROOT (default ~/.cache/latmix/SUITE-chroot): its packages, its build folder and
# its ccache survive, so a second run rebuilds only what changed. With CI=true (CI starts
# clean) a fresh chroot is made in a temporary folder and removed at the end.
# Environment: LATMIX_CHROOT (folder), LATMIX_MIRROR (Debian mirror, default deb.debian.org),
# LATMIX_CHROOT_CARRY (ignored folders of the tree copied too, e.g. ".gpu"); LATMIX_REQUIRE_DATA and
# LATMIX_MX_KERNEL are passed into the chroot.
set -eu
SUITE=${1:?usage: chroot.sh bookworm|trixie [COMMAND]}
shift
SRC=$(cd "$(dirname "$0")/.." && pwd)
SHARED=$(cd "$SRC/.." && pwd)/shared
MIRROR=${LATMIX_MIRROR:-http://deb.debian.org/debian}
[ "$(id -u)" -eq 0 ] || { echo "chroot $SUITE: needs root (debootstrap, mount, chroot); run it with sudo" >&2; exit 2; }

if [ $# -gt 0 ]; then CMD="$*"; else CMD=$(sh "$SRC/packaging/readme-test-command.sh"); fi

if [ "${CI:-}" = true ]; then
  ROOT=$(mktemp -d /var/tmp/latmix-$SUITE.XXXXXX)
  KEEP=no
else
  ROOT=${LATMIX_CHROOT:-${HOME:-/root}/.cache/latmix/$SUITE-chroot}
  KEEP=yes
fi

mounted() { grep -q " $1 " /proc/mounts; }
cleanup() {
  status=$?
  for m in "$ROOT/work/shared" "$ROOT/dev/pts" "$ROOT/dev" "$ROOT/sys" "$ROOT/proc"; do
    mounted "$m" && { umount "$m" 2>/dev/null || umount -l "$m"; }
  done
  if [ "$KEEP" = no ]; then
    # Never remove a folder with anything still mounted below it (that would reach the host's
    # /dev or ../shared).
    if grep -q -e " $ROOT/" -e " $ROOT.part/" /proc/mounts; then
      echo "chroot $SUITE: mounts left under $ROOT, not removing it" >&2
    else
      rm -rf "$ROOT" "$ROOT.part" "$ROOT.debootstrap.log"
    fi
  fi
  exit $status
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if ! command -v debootstrap > /dev/null; then
  echo "chroot $SUITE: installing debootstrap"
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap
fi

# 1. A minimal Debian, made once (under a temporary name: an interrupted debootstrap is never
#    taken for a finished chroot).
if [ ! -f "$ROOT/etc/debian_version" ]; then
  echo "chroot $SUITE: debootstrap $SUITE into $ROOT"
  rm -rf "$ROOT.part"
  mkdir -p "$(dirname "$ROOT")"
  debootstrap --variant=minbase "$SUITE" "$ROOT.part" "$MIRROR" > "$ROOT.debootstrap.log" 2>&1 ||
    { tail -n 20 "$ROOT.debootstrap.log"; echo "chroot $SUITE: debootstrap failed (log: $ROOT.debootstrap.log)" >&2; exit 1; }
  rm -f "$ROOT.debootstrap.log"
  [ "$KEEP" = yes ] || rmdir "$ROOT"
  mv "$ROOT.part" "$ROOT"
  # No daemons start inside the chroot when packages are installed.
  printf '#!/bin/sh\nexit 101\n' > "$ROOT/usr/sbin/policy-rc.d"
  chmod +x "$ROOT/usr/sbin/policy-rc.d"
fi
cat /etc/resolv.conf > "$ROOT/etc/resolv.conf" 2>/dev/null || true
# The certificates the host trusts, for what downloads over TLS inside (npm, for tst_gguf_runtime's
# fixture): a host behind a TLS-inspecting proxy trusts its CA, a fresh chroot does not. Node.js
# adds them to its own (NODE_EXTRA_CA_CERTS below); apt uses the plain-HTTP mirror.
HOST_CA=""
if [ -r /etc/ssl/certs/ca-certificates.crt ]; then
  cp /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/latmix-host-ca-certificates.crt"
  HOST_CA=/etc/latmix-host-ca-certificates.crt
fi

# 2. This working tree (tracked and untracked-not-ignored files) at /work/main, by content: a
#    file whose content changed gets a new time (so ninja rebuilds what depends on it), one that
#    did not keeps its old one (so the kept build folder rebuilds only what changed); files gone
#    here are deleted there. ../shared is mounted read-only at /work/shared, where the tests look
#    by default. Build folders (build*/, ignored by git) stay.
if ! command -v rsync > /dev/null; then
  echo "chroot $SUITE: installing rsync"
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends rsync
fi
mkdir -p "$ROOT/work/main" "$ROOT/work/shared"
(cd "$SRC" && { git ls-files --cached --others --exclude-standard; for c in ${LATMIX_CHROOT_CARRY:-}; do find "$c" -type f; done; } |
  while IFS= read -r f; do [ -e "$f" ] && printf '%s\n' "$f"; done | sort -u) \
  > "$ROOT/work/.files"
rsync --checksum --files-from="$ROOT/work/.files" "$SRC/" "$ROOT/work/main/"
(cd "$ROOT/work/main" && find . -path './build*' -prune -o -type f -print | sed 's|^\./||' | sort) |
  comm -23 - "$ROOT/work/.files" | (cd "$ROOT/work/main" && xargs -r -d '\n' rm -f --)
rm -f "$ROOT/work/.files"

mount --bind /proc "$ROOT/proc"
mount --bind /sys "$ROOT/sys"
mount --bind /dev "$ROOT/dev"
mount --bind /dev/pts "$ROOT/dev/pts"
if [ -d "$SHARED" ]; then
  mount --bind "$SHARED" "$ROOT/work/shared"
  mount -o remount,bind,ro "$ROOT/work/shared"
else
  echo "chroot $SUITE: no $SHARED: tests that need its data will skip"
fi

echo "chroot $SUITE: $(cat "$ROOT/etc/debian_version") in $ROOT: $CMD"
chroot "$ROOT" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  LANG=C.UTF-8 ${CI:+CI=$CI} TERM=dumb CCACHE_DIR=/root/.cache/ccache LATMIX_REQUIRE_DATA="${LATMIX_REQUIRE_DATA:-}" \
  LATMIX_MX_KERNEL="${LATMIX_MX_KERNEL:-}" ${HOST_CA:+NODE_EXTRA_CA_CERTS=$HOST_CA} \
  /bin/sh -c "cd /work/main && $CMD"
