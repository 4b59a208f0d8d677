#!/bin/sh
# docs/research/results.md, "Mixed precision under a bit budget" (issue 72): on one model, the
# sensitivity table (calibration text), the plans for a row of budgets, and quantize runs of each
# plan and of the common recipes with RTN and GPTQ, evaluated against the FP model on WikiText-2
# test. Writes OUT/results.csv (one row a run) for table.py and pareto.py.
#     sh docs/research/mixed-precision/measure.sh MODEL OUT
# Environment: LATMIX (the latmix binary, default build/bin/latmix), CALIB_SAMPLES (32), SEQLEN
# (128), EVAL_WINDOWS (40), EVAL_SEQLEN (256), SENS_SAMPLES (16), SENS_SEQLEN (256), METHODS
# ("rtn gptq"), BUDGETS ("4.5 5 5.25 5.5834 6 7"), ONLY (the scheme names to run, default all),
# EXTRA (more quantize flags, e.g. "--steps 100" for the learned methods).
set -eu
LATMIX=${LATMIX:-build/bin/latmix}
MODEL=${1:?usage: measure.sh MODEL OUT}
OUT=${2:?usage: measure.sh MODEL OUT}
mkdir -p "$OUT/runs"
layers=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['num_hidden_layers'])" "$MODEL/config.json")
last=$((layers - 1))

[ -f "$OUT/sensitivity.json" ] || "$LATMIX" sensitivity --model "$MODEL" --formats mxfp4,mxfp8 --device cpu \
  --samples "${SENS_SAMPLES:-16}" --seqlen "${SENS_SEQLEN:-256}" --out "$OUT/sensitivity.json" > "$OUT/sensitivity.txt"

# name|format|scheme: the recipes, then one plan per budget.
recipes="uniform-mxfp4|mxfp4|
attention-mxfp8|mxfp4|self_attn = mxfp8
first-last-mxfp8|mxfp4|layers\\.(0|$last)\\. = mxfp8
uniform-mxfp8|mxfp8_e4m3|"
for b in ${BUDGETS:-4.5 5 5.25 5.5834 6 7}; do
  "$LATMIX" plan --sensitivity "$OUT/sensitivity.json" --budget "$b" --out "$OUT/plan-$b.txt" > "$OUT/plan-$b.log"
  recipes="$recipes
plan-$b|mxfp4|$OUT/plan-$b.txt"
done

[ -f "$OUT/results.csv" ] || echo "model,method,scheme,bits,predicted_kl,kl,kl_stderr,delta_ppl,delta_ppl_stderr,ppl,fp_ppl" > "$OUT/results.csv"
for method in ${METHODS:-rtn gptq}; do
  printf '%s\n' "$recipes" | while IFS='|' read -r name format scheme; do
    case " ${ONLY:-$name} " in *" $name "*) ;; *) continue ;; esac
    run="$OUT/runs/$method-$name"
    if [ ! -f "$run/latmix.json" ]; then
      rm -rf "$run"
      set -- --model "$MODEL" --method "$method" --format "$format" --out "$run" --device cpu \
        --calib-samples "${CALIB_SAMPLES:-32}" --seqlen "${SEQLEN:-128}" \
        --eval-windows "${EVAL_WINDOWS:-40}" --eval-seqlen "${EVAL_SEQLEN:-256}"
      [ -z "$scheme" ] || set -- "$@" --scheme "$scheme"
      # shellcheck disable=SC2086 # EXTRA: flags, split on purpose
      set -- "$@" ${EXTRA:-}
      "$LATMIX" quantize "$@" > "$run.log" 2>&1 || { tail -n 3 "$run.log"; exit 1; }
    fi
    python3 - "$run/latmix.json" "$OUT/sensitivity.json" "$MODEL" "$method" "$name" "$format" "$scheme" >> "$OUT/results.csv" <<'PY'
import json, re, sys
path, sens_path, model, method, name, fmt, scheme = sys.argv[1:]
j = json.load(open(path))
p, s = j["perplexity"], json.load(open(sens_path))
bits = {"mxfp4": 4.25, "mxfp8_e4m3": 8.25}[fmt]
scheme_record = j["weight_quantization"].get("scheme")
if scheme_record: bits = scheme_record["bits_per_weight"]
# The predicted KL: a plan's own (its file's second line), else each group's measured
# sensitivity in the format the recipe gives it (the recipes keep nothing in bf16).
other = (scheme_record or {}).get("groups_in_other_formats", {})
col = {f: i for i, f in enumerate(s["formats"])}
pred = 0.0
plan = re.search(r"predicted KL ([0-9.e+-]+)", open(scheme).read()) if scheme.endswith(".txt") else None
if plan:
    pred = float(plan.group(1))
else:
    for g in s["groups"]:
        f = other.get(g["name"], fmt).split(",")[0]
        f = "mxfp8" if f.startswith("mxfp8") else f
        pred += g["kl"][col[f]]
kl = p["kl"]
print(",".join(str(x) for x in [model.rstrip("/").split("/")[-1], method, name, round(bits, 4), round(pred, 6), kl["mean"],
                                 kl["stderr"], kl["delta_ppl"], kl["delta_ppl_stderr"], p["w4a4"], p["fp"]]))
PY
  done
done
echo "wrote $OUT/results.csv"
