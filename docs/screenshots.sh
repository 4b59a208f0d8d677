#!/bin/sh
# Regenerates docs/screenshots/*.png: each view of the workbench rendered offscreen after real
# work on a real model (default: brownpy-13M from LATMIX_DATA_DIR).
# Usage: sh docs/screenshots.sh [MODEL_DIR]
set -eu
BIN=${BIN:-build/bin/latmix-workbench}
MODEL=${1:-${LATMIX_DATA_DIR:-../shared/data}/models/brownpy-13M}
OUT=docs/screenshots
mkdir -p "$OUT"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# Fresh settings and run folders, so the pictures do not depend on this user's history.
export QT_QPA_PLATFORM=offscreen XDG_CONFIG_HOME="$TMP/config" XDG_DATA_HOME="$TMP/data"
"$BIN" "$MODEL" --view explorer --format mxfp4 --screenshot "$OUT/explorer.png"
# A learned run to look at: LATMiX-LU, 200 steps (a few minutes on 2 cores), no evaluation.
LATMIX=${LATMIX:-build/bin/latmix}
"$LATMIX" quantize --model "$MODEL" --method latmix-lu --format mxfp4 --steps 200 --calib-samples 32 --seqlen 128 \
  --batch 2 --out "$TMP/run" >/dev/null
"$BIN" "$MODEL" --open-run "$TMP/run" --activations layers.2.mlp.down_proj.input --transform run \
  --screenshot "$OUT/activations.png"
"$BIN" "$MODEL" --compare layers.2.mlp.down_proj.input --screenshot "$OUT/comparison.png"
"$BIN" "$MODEL" --calibrate latmix-lu --steps 60 --screenshot "$OUT/calibration.png"
