#!/usr/bin/env bash
# The CUDA rows of the device-generic tests (the tests that include tests/DeviceRows.h), so that a
# GPU visit checks every one of them and none can vanish unnoticed between visits.
#   cuda-rows.sh tests            the device-generic tests, one line
#   cuda-rows.sh count BIN_DIR    "TEST ROWS" per test, from each built test's -datatags (no GPU needed)
#   cuda-rows.sh check BIN_DIR    the counts equal packaging/cuda-rows.txt's (ctest cuda_rows_listed);
#                                 a row added or removed fails until the list says so
#   cuda-rows.sh expected         the listed total: packaging/device-check.sh fails below it
# After adding or removing CUDA rows: `bash packaging/cuda-rows.sh count build/bin > packaging/cuda-rows.txt`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(dirname "$here")
list=$here/cuda-rows.txt

tests() { (cd "$src/tests" && grep -rl --include='tst_*.cpp' '"DeviceRows.h"' . | xargs -n1 basename | sed 's/\.cpp$//' | sort | tr '\n' ' '); }

count() {
  local bin=$1 t n
  for t in $(tests); do
    [ -x "$bin/$t" ] || { echo "cuda-rows.sh: $bin/$t is not built" >&2; return 2; }
    n=$("$bin/$t" -datatags | grep -c 'cuda:[0-9]' || true)
    echo "$t $n"
  done
}

case "${1:-}" in
  tests) tests; echo ;;
  count) count "${2:?usage: cuda-rows.sh count BIN_DIR}" ;;
  check)
    got=$(count "${2:?usage: cuda-rows.sh check BIN_DIR}")
    if [ "$got" != "$(cat "$list")" ]; then
      echo "The CUDA rows of the built tests differ from packaging/cuda-rows.txt (left: listed, right: built):"
      diff <(cat "$list") <(echo "$got") || true
      echo "If rows were added or removed on purpose: bash packaging/cuda-rows.sh count BIN_DIR > packaging/cuda-rows.txt"
      exit 1
    fi
    echo "$(awk '{ s += $2 } END { print s }' "$list") CUDA rows in $(wc -l < "$list") tests, as listed"
    ;;
  expected) awk '{ s += $2 } END { print s }' "$list" ;;
  *) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
