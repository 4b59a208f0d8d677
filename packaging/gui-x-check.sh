#!/bin/sh
# The workbench in a real X window, driven as a user drives it (issue 71): Xvfb with a window
# manager (openbox), keyboard input synthesized with xdotool, no offscreen platform (which hides
# sizes and focus). Two rounds, each a fresh start of latmix-workbench on its built-in demo model
# with its own settings and data folders:
#   1024x700  compare transforms at a point, run a short LATMiX-LU calibration, then
#             --layout-report (widgets/shell/LayoutCheck.h: the window's minimum, both docks open, no
#             name cut, every axis readable) must be empty and the window manager's minimum size
#             must fit; then File > Export quantized model... (Ctrl+Shift+E) exports the run to each
#             target through the dialog's fields (Alt+F the format, Alt+D the destination, Alt+E
#             Export), and each export must appear;
#   1280x800  the same run opened again, the comparison again, the layout report empty.
# Screenshots of each round land in OUT (with ImageMagick's `import`; skipped without it).
#     sh packaging/gui-x-check.sh BIN_DIR OUT_DIR
# BIN_DIR holds latmix-workbench. Exit status 0 when everything held; what failed is printed.
# CTest runs it as gui_x_check where Xvfb, xdotool, openbox and xprop are installed (install-deps does).
set -eu
BIN=$(cd "${1:?usage: gui-x-check.sh BIN_DIR OUT_DIR}" && pwd)
OUT=${2:?usage: gui-x-check.sh BIN_DIR OUT_DIR}
rm -rf "$OUT"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
for tool in Xvfb xdotool openbox xprop; do
  command -v "$tool" > /dev/null || { echo "gui-x-check: $tool is missing (packaging/install-deps.sh installs it)" >&2; exit 2; }
done

fail() {
  echo "gui-x-check: FAILED: $*" >&2
  if [ -n "${DISPLAY:-}" ] && command -v import > /dev/null; then import -window root "$OUT/failure.png" 2> /dev/null || true; fi
  exit 1
}
# wait_for SECONDS COMMAND...: polls COMMAND every 0.2 s until it succeeds; false after SECONDS.
wait_for() {
  limit=$1; shift
  end=$(( $(date +%s) + limit ))
  until "$@"; do
    [ "$(date +%s)" -lt "$end" ] || return 1
    sleep 0.2
  done
}

# An X server of our own on a free display, and a window manager on it.
exec 3> "$OUT/display"
Xvfb -displayfd 3 -screen 0 1400x900x24 -nolisten tcp > "$OUT/xvfb.log" 2>&1 &
XVFB=$!
APP=
cleanup() {
  [ -z "$APP" ] || kill "$APP" 2> /dev/null || true
  kill "$XVFB" 2> /dev/null || true
}
trap cleanup EXIT INT TERM
wait_for 30 test -s "$OUT/display" || fail "Xvfb did not start (xvfb.log: $(tail -n 3 "$OUT/xvfb.log"))"
DISPLAY=:$(head -n 1 "$OUT/display")
export DISPLAY
openbox > "$OUT/openbox.log" 2>&1 &
wait_for 10 xprop -root _NET_SUPPORTING_WM_CHECK > /dev/null 2>&1 || fail "openbox did not start"

# The user's settings, runs and demo model live here, not in the caller's home.
export XDG_CONFIG_HOME="$OUT/home/config" XDG_DATA_HOME="$OUT/home/data" XDG_CACHE_HOME="$OUT/home/cache"
export QT_QPA_PLATFORM=xcb
POINT=layers.1.mlp.down_proj.input

# start_workbench SIZE ARGS...: the workbench at SIZE with a layout report to write; sets APP, WIN.
start_workbench() {
  size=$1; shift
  rm -f "$OUT/layout-$size.txt"
  "$BIN/latmix-workbench" --size "$size" --layout-report "$OUT/layout-$size.txt" "$@" > "$OUT/workbench-$size.log" 2>&1 &
  APP=$!
  wait_for 120 sh -c "xdotool search --onlyvisible --name 'LATMiX Workbench' > '$OUT/window'" ||
    fail "no workbench window at $size (workbench-$size.log: $(tail -n 5 "$OUT/workbench-$size.log"))"
  WIN=$(tail -n 1 "$OUT/window")
  xdotool windowmove --sync "$WIN" 0 0 || true # whole on the screen, for the screenshots
}

# check_layout SIZE: the report written and empty, the window manager's minimum within SIZE.
check_layout() {
  size=$1
  wait_for 600 test -f "$OUT/layout-$size.txt" || fail "no layout report at $size (workbench-$size.log: $(tail -n 5 "$OUT/workbench-$size.log"))"
  [ ! -s "$OUT/layout-$size.txt" ] || fail "at $size the window shows: $(cat "$OUT/layout-$size.txt")"
  least=$(xprop -id "$WIN" WM_NORMAL_HINTS | sed -n 's/.*minimum size: \([0-9]*\) by \([0-9]*\).*/\1 \2/p')
  [ -n "$least" ] || fail "the window at $size names no minimum size"
  set -- $least
  [ "$1" -le "${size%x*}" ] && [ "$2" -le "${size#*x}" ] || fail "the window cannot be smaller than ${1}x$2 (wanted $size)"
  echo "gui-x-check: $size: layout report empty, minimum ${1}x$2"
  if command -v import > /dev/null; then import -window "$WIN" "$OUT/workbench-$size.png"; fi
}

quit_workbench() {
  xdotool windowactivate --sync "$WIN" key --clearmodifiers ctrl+q
  wait_for 60 sh -c "! kill -0 $APP 2> /dev/null" || fail "the workbench did not quit on Ctrl+Q"
  APP=
}

# export_to INDEX TARGET DEST: the export dialog's format at INDEX (the table's order: hf,
# compressed-tensors, gguf, gguf-f32), DEST typed into the destination, Export pressed; DEST must
# appear.
export_to() {
  index=$1 target=$2 dest=$3
  xdotool windowactivate --sync "$WIN" key --clearmodifiers ctrl+shift+e
  wait_for 30 sh -c "xdotool search --name 'Export quantized model' > '$OUT/dialog'" || fail "Ctrl+Shift+E opened no export dialog"
  dialog=$(tail -n 1 "$OUT/dialog")
  xdotool windowactivate --sync "$dialog"
  xdotool key --clearmodifiers alt+f Home
  i=0
  while [ "$i" -lt "$index" ]; do xdotool key --clearmodifiers Down; i=$((i + 1)); done
  xdotool key --clearmodifiers alt+d ctrl+a
  xdotool type --delay 5 "$dest"
  xdotool key --clearmodifiers alt+e
  wait_for 300 test -e "$dest" || fail "the $target export did not appear at $dest"
  case "$target" in gguf*) test -s "$dest" ;; *) test -f "$dest/config.json" ;; esac || fail "the $target export at $dest is incomplete"
  echo "gui-x-check: exported $target through the dialog to $dest"
  xdotool windowactivate --sync "$dialog" key --clearmodifiers alt+l
  wait_for 30 sh -c "! xdotool search --name 'Export quantized model' > /dev/null" || fail "the export dialog did not close"
}

# Round 1, 1024x700: compare, calibrate, report; then export to every target.
start_workbench 1024x700 --compare "$POINT" --compare-transforms none,hadamard,block-hadamard,learned-affine-lu \
  --across-layers off --calibrate latmix-lu --steps 3
check_layout 1024x700
export_to 0 hf "$OUT/export-hf"
export_to 1 compressed-tensors "$OUT/export-ct"
export_to 2 gguf "$OUT/export.gguf"
export_to 3 gguf-f32 "$OUT/export-f32.gguf"
quit_workbench

# Round 2, 1280x800: the run again, the comparison again.
RUN=$(ls -d "$XDG_DATA_HOME"/LATMiX/Workbench/runs/*/ | head -n 1)
[ -f "$RUN/latmix.json" ] || fail "the calibration left no finished run under $XDG_DATA_HOME/LATMiX/Workbench/runs"
start_workbench 1280x800 --open-run "$RUN" --compare "$POINT" --across-layers off
check_layout 1280x800
quit_workbench
echo "gui-x-check: passed"
