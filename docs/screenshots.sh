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
# Runs to look at: LATMiX-LU, 200 steps (a few minutes on 2 cores), and three methods that learn
# nothing, each evaluated on 8 windows of 256 tokens of WikiText-2 test.
LATMIX=${LATMIX:-build/bin/latmix}
EVAL="--eval-seqlen 256 --eval-windows 8"
"$LATMIX" quantize --model "$MODEL" --method latmix-lu --format mxfp4 --steps 200 --calib-samples 32 --seqlen 128 \
  --batch 2 $EVAL --out "$TMP/runs/latmix-lu" >/dev/null
for m in rtn quarot mr-gptq; do
  "$LATMIX" quantize --model "$MODEL" --method $m --format mxfp4 --calib-samples 32 --seqlen 128 $EVAL \
    --out "$TMP/runs/$m" >/dev/null
done
"$BIN" "$MODEL" --open-run "$TMP/runs/latmix-lu" --activations layers.2.mlp.down_proj.input --transform run \
  --screenshot "$OUT/activations.png"
"$BIN" "$MODEL" --open-run "$TMP/runs/latmix-lu" --weights layers.1.mlp.down_proj --screenshot "$OUT/weights.png"
"$BIN" "$MODEL" --runs-folder "$TMP/runs" --screenshot "$OUT/runs.png"
"$BIN" "$MODEL" --point layers.2.mlp.down_proj.input --view diagram --screenshot "$OUT/diagram.png"
"$BIN" "$MODEL" --compare layers.2.mlp.down_proj.input --screenshot "$OUT/comparison.png"
"$BIN" "$MODEL" --calibrate latmix-lu --steps 60 --screenshot "$OUT/calibration.png"
# The experts tab needs a mixture of experts: a random Qwen3-MoE of 8 layers × 32 experts with the
# demo model's tokenizer.
"$LATMIX" demo-model "$TMP/demo" >/dev/null
cat > "$TMP/moe.json" <<'JSON'
{"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 8,
 "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 300, "max_position_embeddings": 1024,
 "num_experts": 32, "num_experts_per_tok": 4, "moe_intermediate_size": 128, "norm_topk_prob": true,
 "bos_token_id": 1, "eos_token_id": 2}
JSON
"$LATMIX" demo-model "$TMP/moe-small" --config "$TMP/moe.json" --tokenizer "$TMP/demo" --dtype float32 >/dev/null
"$BIN" "$TMP/moe-small" --experts 16 --screenshot "$OUT/experts.png"
