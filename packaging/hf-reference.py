#!/usr/bin/env python3
"""Hugging Face transformers as the independent client of a checkpoint: the perplexity of the token
windows `latmix eval --tokens-out FILE` evaluated (a window a line, the same ids), with
transformers' own model class for the folder (Llama, Qwen3, Qwen3-MoE, Mixtral ...), and the
tokens/s of its forward. Run on the GPU machine, whose python3 has torch and transformers
(packaging/device-runs.sh compares it with `latmix eval` of the same folder and windows).

Perplexity as SPEC 7 (docs/spec.md) takes it: each window predicts its tokens 2..L from the ones
before, exp of the mean cross-entropy over all predicted tokens. The logits are taken in float32
from the model's output, whatever --dtype the weights run in.

usage: hf-reference.py MODEL_DIR TOKENS_FILE [--device cuda] [--dtype bfloat16|float32]
prints one JSON line: perplexity, mean_nll, tokens, windows, tokens_per_second, versions.
"""
import argparse
import json
import math
import time

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("tokens")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    a = ap.parse_args()
    import transformers  # only here: --help works without it

    windows = [[int(t) for t in line.split()] for line in open(a.tokens) if line.strip()]
    if not windows or len({len(w) for w in windows}) != 1:
        raise SystemExit("hf-reference.py: %s must hold windows of one length, a window a line" % a.tokens)
    dtype = torch.bfloat16 if a.dtype == "bfloat16" else torch.float32
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(a.model, dtype=dtype)
    except TypeError:  # transformers 4.x names it torch_dtype
        model = transformers.AutoModelForCausalLM.from_pretrained(a.model, torch_dtype=dtype)
    model.to(a.device).eval()
    sync = torch.cuda.synchronize if a.device.startswith("cuda") else (lambda: None)
    nll, count = 0.0, 0
    with torch.no_grad():
        ids = torch.tensor(windows[:1], device=a.device)
        model(ids)  # warm-up: kernels chosen, memory allocated
        sync()
        t0 = time.perf_counter()
        for w in windows:
            ids = torch.tensor([w], device=a.device)
            logits = model(ids).logits[0, :-1].float()
            nll += F.cross_entropy(logits, ids[0, 1:], reduction="sum").item()
            count += len(w) - 1
        sync()
        seconds = time.perf_counter() - t0
    out = {"client": "transformers", "model": a.model, "dtype": a.dtype, "device": a.device,
           "perplexity": math.exp(nll / count), "mean_nll": nll / count, "tokens": count, "windows": len(windows),
           "tokens_per_second": len(windows) * len(windows[0]) / seconds, "transformers": transformers.__version__,
           "torch": torch.__version__}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
