#!/bin/sh
# A time-boxed exploration with every fuzz harness (issue 71: CI only replayed the fixed corpus
# with a fixed seed): each runs SECONDS from libFuzzer's time-based seed over the seeds and the
# inputs it found before (FUZZ_DIR/explore-corpus, apart from the replays' corpus), so that each
# run searches somewhere new. A crash, leak or sanitizer report fails it, naming the harness; the
# input that did it is in FUZZ_DIR/findings/ (add it to tests/fuzz/corpus/ once fixed, and every
# run replays it from then on).
#     sh tests/fuzz/explore.sh FUZZ_DIR SOURCE_CORPUS_DIR [SECONDS]
set -u
FUZZ=${1:?usage: explore.sh FUZZ_DIR SOURCE_CORPUS_DIR [SECONDS]}
SEEDS=${2:?usage: explore.sh FUZZ_DIR SOURCE_CORPUS_DIR [SECONDS]}
SECONDS_EACH=${3:-6}
failed=
for h in "$FUZZ"/fuzz_*; do
  [ -x "$h" ] || continue
  name=$(basename "$h")
  corpus=${name#fuzz_}
  mkdir -p "$FUZZ/explore-corpus/$corpus" "$FUZZ/findings" "$FUZZ/tmp"
  if TMPDIR="$FUZZ/tmp" "$h" -max_total_time="$SECONDS_EACH" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1 \
       "-artifact_prefix=$FUZZ/findings/$corpus-explore-" "$FUZZ/explore-corpus/$corpus" "$SEEDS/$corpus" > "$FUZZ/tmp/$name-explore.log" 2>&1; then
    echo "explore: $name $(grep -E '^stat::number_of_executed_units' "$FUZZ/tmp/$name-explore.log" | awk '{ print $2 }') inputs in ${SECONDS_EACH} s"
  else
    echo "explore: $name FAILED; its log:" >&2
    tail -n 40 "$FUZZ/tmp/$name-explore.log" >&2
    failed="$failed $name"
  fi
done
[ -z "$failed" ] || { echo "explore: findings in$failed (inputs in $FUZZ/findings/)" >&2; exit 1; }
