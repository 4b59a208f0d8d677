#!/usr/bin/env bash
# The timed runs of packaging/device-check.sh (its step 'runs'; it sets BUILD, WORK, OUT,
# REHEARSE and LATMIX_DATA_DIR). The same commands on cuda and on cpu, then the numbers as
# markdown table rows ('|' lines, copied into summary.txt) and OUT/runs.json.
# On the GPU machine the CPU runs use all its cores; the rehearsal (no GPU) runs the cpu half only
# and fewer steps.
set -uo pipefail
L=$BUILD/bin/latmix
B=$LATMIX_DATA_DIR/models/brownpy-13M
R=$WORK/runs
rm -rf "$R" "$WORK/crashed"
mkdir -p "$R"
DEVICES="cuda cpu"
STEPS=20 SEQ=256 SAMPLES=16 EVAL_SEQ=512 EVAL_WINDOWS=16 FWD_SEQ=1024 STEPS_1B=5
# The rehearsal checks that the commands and the table work, not speeds (the chroot's libtorch
# runs on Debian's reference BLAS): the cpu half, small.
if [ "$REHEARSE" = yes ]; then DEVICES=cpu STEPS=2 SEQ=64 SAMPLES=4 EVAL_SEQ=64 EVAL_WINDOWS=2 FWD_SEQ=64; fi
fails=0
# The step's cap (STEP_CAP, from device-check.sh): runs that would start in its last 30 s are
# skipped, so that the table below is always printed.
END=$((SECONDS + ${STEP_CAP:-100000} - 30))
run() { # run NAME COMMAND...: prints the command and its output, records a failure
  local name=$1 t=$SECONDS
  shift
  if [ $SECONDS -ge $END ]; then echo "[$name: skipped, the step's time is up]"; fails=$((fails + 1)); return 1; fi
  echo "+ $*"
  "$@" > "$R/$name.txt" 2>&1
  local rc=$?
  cat "$R/$name.txt"
  echo "[$name: exit $rc, $((SECONDS - t)) s]"
  if [ $rc -ge 128 ] && command -v addr2line > /dev/null; then # a crash: name latmix's frames (util/CrashReport.h)
    echo "[$name: latmix's frames, in the report's order]"
    grep -o 'latmix(+0x[0-9a-f]*)' "$R/$name.txt" | grep -o '0x[0-9a-f]*' | xargs -r addr2line -f -C -i -e "$L" | paste - - | head -n 60
    echo "[$name: the libraries' frames, demangled]"
    grep -E '^  (instruction|return address|frame) ' "$R/$name.txt" | grep -v '/latmix(+' | c++filt | cut -c1-300 | head -n 30
  fi
  if [ $rc -ge 128 ] && [ -d "$R/$name" ]; then # how far a crashed quantize got: its folder and marker
    echo "[$name: the run folder]"
    ls -la "$R/$name" "$R/$name/model" 2> /dev/null | head -n 30
    cat "$R/$name/unfinished.json" 2> /dev/null | head -n 20
  fi
  [ $rc = 0 ] || fails=$((fails + 1))
  return $rc
}

# The brownpy-13M shape on one device: evaluation, then latmix-lu and mr-gptq end to end.
brownpy_runs() {
  local d=$1 m
  run "eval-$d" "$L" eval --model "$B" --device "$d" --seqlen "$EVAL_SEQ" --max-windows "$EVAL_WINDOWS" --json "$R/eval-$d.json"
  for m in latmix-lu mr-gptq; do
    run "$m-$d" "$L" quantize --model "$B" --method "$m" --device "$d" --steps "$STEPS" --warmup 1 --batch 4 \
      --calib-samples "$SAMPLES" --seqlen "$SEQ" --eval-seqlen "$EVAL_SEQ" --eval-windows 8 --metrics-every 0 --out "$R/$m-$d"
  done
}
crashed() { grep -q 'crashed (signal' "$R"/*.txt 2> /dev/null; }

# transformers (this machine's python3) as the client of a folder: `latmix eval` writes the token
# windows it evaluated, packaging/hf-reference.py evaluates the same ids with transformers' model
# class; both in bfloat16 on cuda (the table compares their perplexities and tokens/s).
hf_pair() { # hf_pair NAME MODEL_DIR SEQLEN WINDOWS
  run "eval-$1" "$L" eval --model "$2" --device cuda --dtype bfloat16 --seqlen "$3" --max-windows "$4" \
    --json "$R/eval-$1.json" --tokens-out "$R/tokens-$1.txt" &&
    run "hf-$1" sh -c 'python3 "$0" "$1" "$2" --device cuda --dtype bfloat16 > "$3"; r=$?; cat "$3"; exit $r' \
      "$SRC/packaging/hf-reference.py" "$2" "$R/tokens-$1.txt" "$R/hf-$1.json"
}
# The reference checks: brownpy-13M as it is and its latmix-lu run's hf export, and a small
# Qwen3-MoE (16 experts, 2 layers) as it is and its rtn run's hf export.
hf_checks() {
  local moe=$WORK/qwen3-moe-small
  hf_pair brownpy "$B" "$EVAL_SEQ" "$EVAL_WINDOWS"
  [ -d "$R/latmix-lu-cuda/model" ] && run export-lu "$L" export "$R/latmix-lu-cuda" --format hf --out "$R/hf-lu" --overwrite &&
    hf_pair brownpy-lu "$R/hf-lu" "$EVAL_SEQ" "$EVAL_WINDOWS"
  python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c.update(hidden_size=512, num_hidden_layers=2, num_attention_heads=8,
num_key_value_heads=4, head_dim=64, num_experts=16, num_experts_per_tok=4, moe_intermediate_size=256, intermediate_size=1024,
vocab_size=32000, bos_token_id=1, eos_token_id=2, max_position_embeddings=4096); json.dump(c, open(sys.argv[2], "w"))' \
    "$SRC/resources/configs/qwen3-moe-scaled.json" "$WORK/qwen3-moe-small.json" &&
    run moe-model "$L" demo-model --config "$WORK/qwen3-moe-small.json" --tokenizer "$LATMIX_DATA_DIR/models/brownpy-13M" "$moe" &&
    hf_pair moe "$moe" "$EVAL_SEQ" 8 &&
    run moe-rtn "$L" quantize --model "$moe" --method rtn --device cuda --eval-seqlen 0 --out "$R/moe-rtn" &&
    run export-moe "$L" export "$R/moe-rtn" --format hf --out "$R/hf-moe" --overwrite &&
    hf_pair moe-rtn "$R/hf-moe" "$EVAL_SEQ" 8
}

# The order puts first what no visit has measured yet: the GPU half of the small runs, then the
# whole pipeline at the 1B widths (training, GPTQ of 4 layers, the run model and its evaluation:
# the end-to-end peak GPU memory beside the --dry-run estimate, GPTQ's seconds per layer); then
# the CPU half and the bench rows, which earlier visits measured (docs/research/results.md, "GPU"). What
# the step's time cannot reach is reported as skipped.
[ "$REHEARSE" = no ] && brownpy_runs cuda
[ "$REHEARSE" = no ] && hf_checks
if [ "$REHEARSE" = no ]; then
  M=$WORK/llama-1b M4=$WORK/llama-1b-4layers # the end-to-end runs on 4 layers of the same widths
  run dry-1b-lu "$L" quantize --model "$M4" --method latmix-lu --device cuda --batch 4 --seqlen 2048 --calib-samples 8 \
    --out "$R/1b-lu" --dry-run
  run dry-1b-gptq "$L" quantize --model "$M4" --method mr-gptq --device cuda --seqlen 2048 --calib-samples 16 \
    --out "$R/1b-gptq" --dry-run
  # sized against this GPU, nothing run; Qwen3 with the deployable T1 (no MLP biases to fold into)
  for cfg in llama-3.1-8b qwen3-32b; do
    run "dry-$cfg" "$L" quantize --model "$SRC/resources/configs/$cfg.json" --method latmix-lu --device cuda --batch 4 \
      --seqlen 2048 --calib-samples 128 --out "$R/dry-$cfg" --dry-run $([ $cfg = qwen3-32b ] && echo --t1-bias off)
  done
  run eval-1b-bfloat16 "$L" eval --model "$M" --device cuda --dtype bfloat16 --seqlen 2048 --max-windows 8 --json "$R/eval-1b-bfloat16.json" \
    --tokens-out "$R/tokens-1b.txt" &&
    run hf-1b sh -c 'python3 "$0" "$1" "$2" --device cuda --dtype bfloat16 > "$3"; r=$?; cat "$3"; exit $r' \
      "$SRC/packaging/hf-reference.py" "$M" "$R/tokens-1b.txt" "$R/hf-1b.json"
  # Few evaluation windows: three evaluations of all 166 test windows of 2048 tokens would take
  # longer than the runs themselves.
  if ! crashed; then
    run 1b-lu "$L" quantize --model "$M4" --method latmix-lu --device cuda --steps $STEPS_1B --warmup 1 --batch 4 --seqlen 2048 \
      --calib-samples 8 --eval-seqlen 2048 --eval-windows 4 --metrics-every 0 --checkpoint-every 1000 --out "$R/1b-lu"
    run 1b-gptq "$L" quantize --model "$M4" --method mr-gptq --device cuda --calib-samples 16 --seqlen 2048 --eval-seqlen 2048 --eval-windows 4 \
      --out "$R/1b-gptq"
  else echo "[1b-lu, 1b-gptq: skipped, a brownpy-13M run crashed]"; fi
  run eval-1b-float32 "$L" eval --model "$M" --device cuda --dtype float32 --seqlen 2048 --max-windows 8 --json "$R/eval-1b-float32.json"
fi
brownpy_runs cpu

# A crashed quantize run (exit >= 128) is narrowed down at once, on the smallest case (brownpy-13M,
# rtn/mr-gptq on the CPU, a few seconds each): which of evaluation, GPTQ, the MX kernel's path,
# ATen's CPU path or the thread count it needs. LATMIX_DEVICE_BISECT=1 runs it regardless.
if [ "${LATMIX_DEVICE_BISECT:-0}" = 1 ] || crashed; then
  echo "=== a quantize run crashed: variants of the smallest one"
  base=("$L" quantize --model "$B" --device cpu --steps 2 --batch 4 --calib-samples 4 --seqlen 64 --metrics-every 0)
  run bisect-gptq-eval "${base[@]}" --method mr-gptq --eval-seqlen 64 --eval-windows 2 --out "$R/b1"
  run bisect-gptq-noeval "${base[@]}" --method mr-gptq --out "$R/b2"
  run bisect-rtn-noeval "${base[@]}" --method rtn --out "$R/b3"
  LATMIX_MX_KERNEL=baseline run bisect-mxbaseline "${base[@]}" --method rtn --out "$R/b4"
  ATEN_CPU_CAPABILITY=default run bisect-atendefault "${base[@]}" --method rtn --out "$R/b5"
  OMP_NUM_THREADS=1 LATMIX_THREADS=1 run bisect-1thread "${base[@]}" --method rtn --out "$R/b6"
  for b in "$R"/bisect-*.txt; do echo "bisect: $(basename "$b" .txt): $(grep -c 'crashed (signal' "$b") crash(es)"; done | tee "$R/bisect.txt"
  # The smallest crashing command, for device-check.sh's asan step (without --out: it adds its own).
  printf '%s ' "${base[@]:1}" --method rtn > "$WORK/crashed"
  grep -q 'crashed (signal' "$R/bisect-rtn-noeval.txt" 2> /dev/null ||
    printf '%s ' "${base[@]:1}" --method mr-gptq --eval-seqlen 64 --eval-windows 2 > "$WORK/crashed"
fi

for d in $DEVICES; do
  run "bench-train-$d" "$L" bench train --model "$B" --device "$d" --batch 4 --seqlen "$SEQ" --repeat 3
done
if [ "$REHEARSE" = no ]; then # bf16 (the default on cuda) beside TF32, and the 1B training step's peak beside dry-1b-lu's estimate
  run bench-train-1b "$L" bench train --model "$WORK/llama-1b" --device cuda --batch 4 --seqlen 2048 --repeat 2
  run bench-train-1b-tf32 "$L" bench train --model "$WORK/llama-1b" --device cuda --batch 4 --seqlen 2048 --repeat 2 --precision tf32
  run bench-train-cuda-tf32 "$L" bench train --model "$B" --device cuda --batch 4 --seqlen "$SEQ" --repeat 3 --precision tf32
  # The PyTorch-eager peer of the same step on the same card: bf16 autocast, then TF32 (float32 weights).
  for p in bf16 tf32; do
    run "peer-train-1b-$p" python3 "$SRC/packaging/peer-train-step.py" "$WORK/llama-1b" --device cuda --precision "$p" \
      --batch 4 --seqlen 2048 --steps 2
  done
  # The Llama-3.1-8B widths on 2 layers (random bf16 weights): a training step and GPTQ's seconds
  # per layer, from which the 32-layer job (1000 steps + GPTQ) is extrapolated.
  python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c["num_hidden_layers"]=2; json.dump(c, open(sys.argv[2], "w"))' \
    "$SRC/resources/configs/llama-3.1-8b.json" "$WORK/llama-8b-2layers.json" &&
    run model-8b "$L" demo-model --config "$WORK/llama-8b-2layers.json" --tokenizer "$GPU/data/models/brownpy-13M-src" \
      "$WORK/llama-8b-2layers" &&
    run bench-train-8b "$L" bench train --model "$WORK/llama-8b-2layers" --device cuda --batch 4 --seqlen 2048 --repeat 2 &&
    run 8b-gptq "$L" quantize --model "$WORK/llama-8b-2layers" --method mr-gptq --device cuda --calib-samples 16 --seqlen 2048 \
      --eval-seqlen 0 --out "$R/8b-gptq"
fi
for d in $DEVICES; do
  run "bench-forward-$d" "$L" bench forward --model "$B" --device "$d" --seqlen "$FWD_SEQ" --repeat 3
  run "bench-gptq-$d" "$L" bench gptq --device "$d" --repeat "$([ "$REHEARSE" = yes ] && echo 1 || echo 3)"
done
run bench-mx "$L" bench mx --repeat 3 $([ "$REHEARSE" = yes ] && echo --elements 1048576)

# The numbers, from the JSON files the runs wrote; the comparisons with a bound are checks (issue
# 71): a failed one is printed as "CHECK FAILED" and counts as a failed run.
python3 - "$R" "$OUT/runs.json" "$STEPS" "$SEQ" "$EVAL_SEQ" "$EVAL_WINDOWS" "$STEPS_1B" << 'EOF' || fails=$((fails + 1))
import json, os, sys
failed = []
def check(name, value, bound):
    """value <= bound, or a failure named with both; a value not measured is not checked."""
    if value is not None and not value <= bound:
        failed.append("%s: %.3g > %.3g" % (name, value, bound))
R, out, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
seq, eseq, ewin = sys.argv[4:7]
steps1b = int(sys.argv[7])
def load(p):
    try:
        with open(os.path.join(R, p)) as f: return json.load(f)
    except Exception: return None
def run(name):
    j = load(name + "/latmix.json")
    if not j: return None
    s, p = j.get("seconds", {}), j.get("perplexity", {})
    lin = j.get("linears", [])
    return {"train_s": s.get("train"), "quantize_s": s.get("quantize"), "total_s": s.get("total"),
            "w4a4": p.get("w4a4"), "fp": p.get("fp"), "peak_gpu_mb": j.get("peak_gpu_mb"), "peak_rss_mb": j.get("peak_rss_mb"),
            "peak_gpu_mb_by_stage": j.get("peak_gpu_mb_by_stage"),
            "gptq_s_by_linear": {l["linear"]: round(sum(x["seconds"] for x in lin if x["linear"] == l["linear"]), 3) for l in lin}}
res = {"eval": {d: load(f"eval-{d}.json") for d in ("cuda", "cpu")},
       "latmix-lu": {d: run(f"latmix-lu-{d}") for d in ("cuda", "cpu")},
       "mr-gptq": {d: run(f"mr-gptq-{d}") for d in ("cuda", "cpu")},
       "1b": {"eval-bf16": load("eval-1b-bfloat16.json"), "eval-fp32": load("eval-1b-float32.json"),
              "latmix-lu": run("1b-lu"), "mr-gptq": run("1b-gptq")},
       "8b-2layers": {"mr-gptq": run("8b-gptq")}}
with open(out, "w") as f: json.dump(res, f, indent=1)
def g(x, *k):
    for key in k:
        if not isinstance(x, dict) or x.get(key) is None: return None
        x = x[key]
    return x
def fmt(x, f="%.4g"): return "-" if x is None else f % x
def rel(a, b): return None if a is None or b is None else abs(a - b) / abs(b)
e = res["eval"]
print("| brownpy-13M shape (random weights) | cuda | cpu | cuda vs cpu |")
print("|---|---|---|---|")
print("| eval ppl, seqlen %s x %s | %s | %s | rel. diff %s (tst_perplexity: < 1e-4) |" % (eseq, ewin,
    fmt(g(e, "cuda", "perplexity"), "%.6f"), fmt(g(e, "cpu", "perplexity"), "%.6f"),
    fmt(rel(g(e, "cuda", "perplexity"), g(e, "cpu", "perplexity")), "%.1e")))
# float32 on both: tst_perplexity's bound for the same forward on another device.
check("eval perplexity, cuda vs cpu (float32)", rel(g(e, "cuda", "perplexity"), g(e, "cpu", "perplexity")), 1e-4)
print("| eval tokens/s | %s | %s | x%s |" % (fmt(g(e, "cuda", "tokens_per_second"), "%.0f"), fmt(g(e, "cpu", "tokens_per_second"), "%.0f"),
    fmt(None if not g(e, "cpu", "tokens_per_second") or g(e, "cuda", "tokens_per_second") is None else g(e, "cuda", "tokens_per_second") / g(e, "cpu", "tokens_per_second"), "%.1f")))
for m in ("latmix-lu", "mr-gptq"):
    c, p = res[m]["cuda"], res[m]["cpu"]
    if m == "latmix-lu":
        st = lambda r: None if not r or r["train_s"] is None else r["train_s"] / steps
        print("| %s step time (s), batch 4 x %s | %s | %s | x%s |" % (m, seq, fmt(st(c)), fmt(st(p)),
              fmt(None if not st(c) or st(p) is None else st(p) / st(c), "%.1f")))
    print("| %s quantize (GPTQ) s | %s | %s | |" % (m, fmt(g(c, "quantize_s")), fmt(g(p, "quantize_s"))))
    print("| %s W4A4 ppl | %s | %s | rel. diff %s |" % (m, fmt(g(c, "w4a4"), "%.4f"), fmt(g(p, "w4a4"), "%.4f"),
          fmt(rel(g(c, "w4a4"), g(p, "w4a4")), "%.1e")))
    print("| %s peak memory MiB (GPU / host RSS) | %s / %s | - / %s | |" % (m, fmt(g(c, "peak_gpu_mb"), "%.0f"),
          fmt(g(c, "peak_rss_mb"), "%.0f"), fmt(g(p, "peak_rss_mb"), "%.0f")))
b = res["1b"]
if any(v for v in b.values()):
    print("| Llama-3.2-1B shape (random weights), cuda | value | | |")
    print("|---|---|---|---|")
    for k, name in (("eval-bf16", "bfloat16"), ("eval-fp32", "float32")):
        print("| eval tokens/s, seqlen 2048 x 8, %s | %s | peak GPU %s MiB | |" % (name, fmt(g(b, k, "tokens_per_second"), "%.0f"),
              fmt(g(b, k, "peak_gpu_mib"), "%.0f")))
    lu = b["latmix-lu"]
    print("| latmix-lu step time (s), batch 4 x 2048, 4 layers of the 1B shape | %s | peak GPU %s MiB | |" % (fmt(None if not lu or lu["train_s"] is None else lu["train_s"] / steps1b),
          fmt(g(lu, "peak_gpu_mb"), "%.0f")))
    gq = b["mr-gptq"]
    print("| mr-gptq s per layer (4 layers of the 1B shape) | %s | peak GPU %s MiB | |" % (fmt(None if not gq or gq["quantize_s"] is None else gq["quantize_s"] / 4),
          fmt(g(gq, "peak_gpu_mb"), "%.0f")))
    # Each stage's measured GPU peak beside --dry-run's estimate of it (dry-1b-*.txt, GPU table).
    def estimates(name):
        try: lines = open(os.path.join(R, name)).read().split("GPU memory", 1)[1].splitlines()
        except Exception: return {}
        est = {}
        for l in lines:
            w = l.split()
            if len(w) >= 3 and w[2] == "GiB" and w[0] in ("train", "quantize", "eval"): est[w[0]] = float(w[1]) * 1024
        return est
    stage_of = {"training": "train", "quantizing": "quantize", "evaluating": "eval"}
    for run_name, dry in (("latmix-lu", "dry-1b-lu.txt"), ("mr-gptq", "dry-1b-gptq.txt")):
        est = estimates(dry)
        for stage, mib in (g(b, run_name, "peak_gpu_mb_by_stage") or {}).items():
            e = est.get(stage_of.get(stage, ""))
            print("| 1B %s, stage %s: peak GPU MiB | %.0f | estimate %s MiB | %s |" % (run_name, stage, mib, fmt(e, "%.0f"),
                  "" if not e else "estimate/measured %.2f" % (e / mib)))
        byl = g(b, run_name, "gptq_s_by_linear")
        if byl: print("| 1B %s, GPTQ seconds by linear (4 layers) | %s | | |" % (run_name, ", ".join("%s %.1f" % kv for kv in byl.items())))
gq8 = res["8b-2layers"]["mr-gptq"]
if gq8:
    print("| Llama-3.1-8B widths, 2 layers, cuda: mr-gptq s per layer | %s | peak GPU %s MiB | by linear: %s |" % (
          fmt(None if gq8["quantize_s"] is None else gq8["quantize_s"] / 2), fmt(gq8.get("peak_gpu_mb"), "%.0f"),
          ", ".join("%s %.1f" % kv for kv in (gq8.get("gptq_s_by_linear") or {}).items())))
# transformers beside latmix eval on the same token windows, both bf16 on cuda (hf-reference.py).
pairs = [("brownpy", "eval-brownpy"), ("brownpy-lu", "eval-brownpy-lu"), ("moe", "eval-moe"), ("moe-rtn", "eval-moe-rtn"),
         ("1b", "eval-1b-bfloat16")]
if any(load("hf-%s.json" % n) for n, _ in pairs):
    print("| transformers vs latmix eval, same windows, bf16, cuda | latmix ppl (tokens/s) | transformers ppl (tokens/s) | rel. diff |")
    print("|---|---|---|---|")
    for n, ev in pairs:
        a, h = load(ev + ".json"), load("hf-%s.json" % n)
        print("| %s | %s (%s) | %s (%s) | %s |" % (n, fmt(g(a, "perplexity"), "%.5f"), fmt(g(a, "tokens_per_second"), "%.0f"),
              fmt(g(h, "perplexity"), "%.5f"), fmt(g(h, "tokens_per_second"), "%.0f"), fmt(rel(g(a, "perplexity"), g(h, "perplexity")), "%.1e")))
        # Both bf16 on the same windows: log-perplexity is a mean of NLLs, each moving by at most
        # its largest logit's change; the two stores round each logit's inputs by bf16's unit
        # roundoff 2^-8 and their sums in other orders, so 4 x 2^-8 of relative perplexity bounds
        # two implementations of one function, and a wrong weight, bias or rope is far beyond it.
        check("transformers vs latmix eval, %s (bf16)" % n, rel(g(a, "perplexity"), g(h, "perplexity")), 4 * 2 ** -8)
# Our training step beside the PyTorch-eager peer's, 1B shape, 4 x 2048, same card.
def step_of(name):
    try:
        for l in open(os.path.join(R, name + ".txt")):
            w = l.split()
            if len(w) >= 2 and w[0] == "step": return float(w[1])
    except Exception: return None
def peer(p):
    try: return json.loads(open(os.path.join(R, "peer-train-1b-%s.txt" % p)).read().strip().splitlines()[-1])
    except Exception: return None
if peer("bf16") or peer("tf32"):
    print("| training step, 1B shape, 4 x 2048, cuda | latmix s | PyTorch eager s (every round) | latmix / eager |")
    print("|---|---|---|---|")
    for p, ours in (("bf16", "bench-train-1b"), ("tf32", "bench-train-1b-tf32")):
        e, o = peer(p), step_of(ours)
        print("| %s | %s | %s (%s) | %s |" % (p, fmt(o, "%.3f"), fmt(g(e, "step_s_median"), "%.3f"), g(e, "step_s"),
              fmt(None if o is None or not g(e, "step_s_median") else o / g(e, "step_s_median"), "%.2f")))
for f in failed: print("CHECK FAILED: " + f)
sys.exit(1 if failed else 0)
EOF
cat "$R/bisect.txt" 2> /dev/null | sed 's/^/| /; s/$/ | | | |/'
grep -H -e '^peak' -e '^fits' -e '^does not fit' "$R"/dry-*.txt 2>/dev/null | sed "s|^$R/||; s/^/| /; s/\$/ | | | |/"
grep -H -e '^step ' -e '^loss over' -e '^peak GPU' -e '^minor page' "$R"/bench-train-*.txt 2>/dev/null | sed "s|^$R/||; s/^/| /; s/\$/ | | | |/"
echo "runs failed: $fails"
[ $fails = 0 ]
