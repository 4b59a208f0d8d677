#!/bin/sh
# Reproduces docs/results.md: every method of SPEC §6 x {mxfp4, mxint4} on one model, then the
# table. Usage: sh docs/results.sh [MODEL_DIR] [OUT_DIR]   (LATMIX_DATA_DIR for the texts)
set -e
MODEL=${1:-${LATMIX_DATA_DIR:-../shared/data}/models/brownpy-13M}
OUT=${2:-runs/results}
LATMIX=${LATMIX:-build/bin/latmix}
STEPS=${STEPS:-100}
mkdir -p "$OUT"
COMMON="--calib-samples 32 --seqlen 128 --batch 2 --seed 0 --device cpu --eval-seqlen 256 --eval-windows 40"
for FORMAT in mxfp4 mxint4; do
  for METHOD in rtn quarot-rtn gptq quarot mr-gptq spinquant latmix-lu latmix-qr; do
    RUN=$OUT/$FORMAT-$METHOD
    [ -f "$RUN/latmix.json" ] && continue
    $LATMIX quantize --model "$MODEL" --method $METHOD --format $FORMAT --steps $STEPS $COMMON --out "$RUN" > "$RUN.log" 2>&1 ||
      { echo "failed: $RUN (see $RUN.log)"; exit 1; }
    tail -1 "$RUN.log"
  done
done
