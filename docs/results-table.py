#!/usr/bin/env python3
"""Prints the docs/results.md table from the latmix.json files of a results.sh run folder.
Usage: python3 docs/results-table.py RUNS_DIR"""
import json
import pathlib
import sys

METHODS = ["rtn", "quarot-rtn", "gptq", "quarot", "mr-gptq", "spinquant", "latmix-lu", "latmix-qr"]
runs = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "runs/results")
print("| format | method | W4A4 ppl | recovery | weights-only ppl | folded FP ppl | first → final KL | train s | quantize s | total s |")
print("|---|---|---:|---:|---:|---:|---|---:|---:|---:|")
fp = None
for fmt in ["mxfp4", "mxint4"]:
    for m in METHODS:
        f = runs / f"{fmt}-{m}" / "latmix.json"
        if not f.exists():
            continue
        j = json.loads(f.read_text())
        p, s, t = j["perplexity"], j["seconds"], j.get("training") or {}
        fp = p["fp"]
        folded = f"{p['folded_fp']:.2f}" if p.get("folded_fp") else ""
        kl = f"{t['first_kl']:.4f} → {t['final_kl']:.4f}" if t else ""
        print(f"| {fmt} | {m} | {p['w4a4']:.2f} | {100 * p['fp'] / p['w4a4']:.1f}% | {p['weights_only']:.2f} | {folded} "
              f"| {kl} | {s['train']:.0f} | {s['quantize']:.0f} | {s['total']:.0f} |")
if fp:
    print(f"\nFP (unquantized) perplexity: {fp:.2f}")
