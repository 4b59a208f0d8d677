#!/usr/bin/env python3
"""The PyTorch-eager peer of `latmix bench train`: one LATMiX distillation step written the way a
PyTorch user of SpinQuant / FlatQuant / FP-Quant writes it, on the same card, so that our step
is compared as a ratio measured in one sitting (docs/research/results.md). A measuring
instrument, not a reference: its numbers are times, and a loss to see that it trains.

The step (SPEC 4 and 5 in docs/spec.md): the teacher's forward (no graph), T1 (LU affine on the
hidden size) and one T2 per layer (LU affine on head_dim) folded into the gamma-folded weights,
the student's forward with MXFP4 fake quantization (straight-through gradient) at the four
points and the online block-Hadamard T3 before down_proj, KL(teacher || student) at tau plus
lambda * (sum log|s|)^2 per transform, backward, AdamW. T1 acts on the looked-up embedding rows
and T1^-1 on the final hidden states before the unchanged lm_head (the cheaper "online tables"
form; folding T1 into both vocabulary tables every step costs more). --precision bf16 runs the
forward under torch.autocast(bfloat16), as a PyTorch user would; fp32 without it; tf32 allows
TF32 matmuls on CUDA. Attention is F.scaled_dot_product_attention where this torch has it.

usage: peer-train-step.py MODEL_DIR [--device cuda] [--precision bf16|tf32|fp32] [--batch 4]
                                    [--seqlen 2048] [--steps 3]
prints one JSON line: every timed step's seconds (the first step warms up and is not timed), and
the KL of the folded student without quantization at the start (~0: the fold is right).
"""
import argparse
import json
import math
import os
import struct
import time

import torch
import torch.nn.functional as F

BLOCK = 32


def read_safetensors(folder):
    """Every tensor of a Hugging Face folder (one file or an index of shards), as float32 CPU tensors."""
    dtypes = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}
    index = os.path.join(folder, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    out = {}
    for name in files:
        with open(os.path.join(folder, name), "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
            data = bytearray(f.read())
        for key, t in header.items():
            if key == "__metadata__":
                continue
            a, b = t["data_offsets"]
            raw = torch.frombuffer(data[a:b], dtype=torch.uint8) if b > a else torch.empty(0, dtype=torch.uint8)
            out[key] = raw.view(dtypes[t["dtype"]]).reshape(t["shape"]).float()
    return out


def mxfp4(x):
    """MXFP4 fake quantization of the last dimension (blocks of 32, floor E8M0 scale, E2M1 round half
    to even, saturate at 6), computed in float32, returned in x's dtype; and where it did not clip."""
    n = x.shape[-1]
    pad = (-n) % BLOCK
    xf = F.pad(x.float(), (0, pad)).reshape(-1, BLOCK)
    amax = xf.abs().amax(1, keepdim=True)
    _, e = torch.frexp(amax)  # amax = m * 2^e, m in [0.5, 1): floor(log2 amax) = e - 1
    scale = torch.pow(2.0, (e - 1 - 2).clamp(-127, 127).float())  # largest E2M1 exponent: 2
    y = xf / scale
    a = y.abs()
    step = torch.where(a < 2, torch.full_like(a, 0.5), torch.where(a < 4, torch.ones_like(a), torch.full_like(a, 2.0)))
    q = torch.copysign(torch.clamp(torch.round(a / step) * step, max=6.0), y) * scale
    shape = x.shape[:-1] + (n + pad,)
    return q.reshape(shape)[..., :n].to(x.dtype), (a <= 6).reshape(shape)[..., :n]


class StraightThrough(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        q, inside = mxfp4(x)
        ctx.save_for_backward(inside)
        return q

    @staticmethod
    def backward(ctx, g):
        (inside,) = ctx.saved_tensors
        return g * inside


def sylvester(n, gen):
    """Random-sign normalised Hadamard of size n (a power of two), else the identity."""
    if n & (n - 1):
        return torch.eye(n)
    h = torch.ones(1, 1)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    signs = torch.randint(0, 2, (n, 1), generator=gen) * 2.0 - 1
    return signs * h / math.sqrt(n)


def block_diagonal_hadamard(d, gen, noise):
    sizes = [BLOCK] * (d // BLOCK) + ([d % BLOCK] if d % BLOCK else [])
    m = torch.block_diag(*[sylvester(b, gen) for b in sizes])
    off = torch.block_diag(*[torch.ones(b, b) for b in sizes]) == 0
    return m + noise * torch.randn(d, d, generator=gen) * off


class AffineLU(torch.nn.Module):
    """x -> A x + v with A = P L (U + diag(sign * exp(log_s))); P and the signs fixed."""

    def __init__(self, m):
        super().__init__()
        P, L, U = torch.linalg.lu(m)
        d = torch.diagonal(U)
        self.register_buffer("P", P)
        self.register_buffer("sign", torch.sign(d))
        self.L = torch.nn.Parameter(torch.tril(L, -1))
        self.U = torch.nn.Parameter(torch.triu(U, 1))
        self.log_s = torch.nn.Parameter(d.abs().log())
        self.v = torch.nn.Parameter(torch.zeros(m.shape[0]))

    def matrices(self):
        eye = torch.eye(self.L.shape[0], device=self.L.device)
        L = torch.tril(self.L, -1) + eye
        Us = torch.triu(self.U, 1) + torch.diag(self.sign * self.log_s.exp())
        inv = torch.linalg.solve_triangular(Us, torch.linalg.solve_triangular(L, self.P.T, upper=False, unitriangular=True), upper=True)
        return self.P @ L @ Us, inv, self.v

    def volume(self):
        return self.log_s.sum() ** 2


def rms(x, g, eps):
    x32 = x.float()
    y = (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return y if g is None else y * g


def rotate(x, cos, sin):
    h = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., h:], x[..., :h]], -1) * sin


def attention(q, k, v):
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T = q.shape[-2]
    mask = torch.full((T, T), float("-inf"), device=q.device).triu(1)
    return torch.softmax((q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1]) + mask, -1).to(v.dtype) @ v


def decoder(c, x, layers, quant, rope):
    B, T, _ = x.shape
    H, KV, hd = c["heads"], c["kv"], c["hd"]
    for w in layers:
        h = quant(rms(x, w["ln1"], c["eps"]))
        q = F.linear(h, w["q"], w["q_b"]).view(B, T, H, hd).transpose(1, 2)
        k = F.linear(h, w["k"], w["k_b"]).view(B, T, KV, hd).transpose(1, 2)
        v = F.linear(h, w["v"], w["v_b"]).view(B, T, KV, hd).transpose(1, 2)
        if w["qn"] is not None:
            q, k = rms(q, w["qn"], c["eps"]), rms(k, w["kn"], c["eps"])
        q, k = rotate(q, *rope), rotate(k, *rope)
        k, v = k.repeat_interleave(H // KV, 1), v.repeat_interleave(H // KV, 1)
        o = attention(q, k, v).transpose(1, 2).reshape(B, T, H * hd)
        x = x + F.linear(quant(o), w["o"], w["o_b"])
        h = quant(rms(x, w["ln2"], c["eps"]))
        u = F.silu(F.linear(h, w["gate"], w["gate_b"])) * F.linear(h, w["up"], w["up_b"])
        if w.get("t3") is not None:
            u = (u.reshape(-1, u.shape[-1] // BLOCK, BLOCK) @ w["t3"].T.to(u.dtype)).reshape(u.shape)
        x = x + F.linear(quant(u), w["down"], w["down_b"])
    return x


NAMES = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj",
         "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}


def layers_of(c, W):
    out = []
    for i in range(c["layers"]):
        p = "model.layers.%d." % i
        w = {"ln1": W[p + "input_layernorm.weight"], "ln2": W[p + "post_attention_layernorm.weight"],
             "qn": W.get(p + "self_attn.q_norm.weight"), "kn": W.get(p + "self_attn.k_norm.weight")}
        for k, n in NAMES.items():
            w[k], w[k + "_b"] = W[p + n + ".weight"], W.get(p + n + ".bias")
        out.append(w)
    return out


class Student(torch.nn.Module):
    def __init__(self, c, W, gen, device):
        super().__init__()
        self.c = c
        init = lambda d: block_diagonal_hadamard(d, gen, 1e-3)  # noqa: E731  paper Table 10's start
        self.t1 = AffineLU(init(c["hidden"]))
        self.t2 = torch.nn.ModuleList(AffineLU(init(c["hd"])) for _ in range(c["layers"]))
        t3 = sylvester(BLOCK, gen).to(device)  # one random-sign block for every block of the input
        self.base = []  # gamma folded into the next linears, T3's inverse (its transpose) into W_down
        for w in layers_of(c, W):
            n = w["down"].shape[1]
            b = dict(w, ln1=None, ln2=None, t3=t3 if n % BLOCK == 0 else None)
            if n % BLOCK == 0:
                b["down"] = (w["down"].view(-1, n // BLOCK, BLOCK) @ t3.T).reshape(w["down"].shape)
            for k in ("q", "k", "v"):
                b[k] = w[k] * w["ln1"]
            for k in ("gate", "up"):
                b[k] = w[k] * w["ln2"]
            self.base.append(b)
        self.to(device)

    def folded(self):
        c = self.c
        D, H, KV, hd = c["hidden"], c["heads"], c["kv"], c["hd"]
        A1, A1i, v1 = self.t1.matrices()
        layers = []
        for b, t2 in zip(self.base, self.t2):
            A2, A2i, v2 = t2.matrices()
            w = dict(b)
            for k in ("q", "k", "v", "gate", "up"):
                w[k] = b[k] @ A1i
                w[k + "_b"] = -(w[k] @ v1) + (0 if b[k + "_b"] is None else b[k + "_b"])
            w["v"] = (A2 @ w["v"].view(KV, hd, D)).reshape(KV * hd, D)
            w["v_b"] = (w["v_b"].view(KV, hd) @ A2.T + v2).reshape(-1)
            wo = (b["o"].view(D, H, hd) @ A2i).reshape(D, H * hd)
            bo = -(wo @ v2.repeat(H)) + (0 if b["o_b"] is None else b["o_b"])
            w["o"], w["o_b"] = A1 @ wo, A1 @ bo
            w["down"] = A1 @ b["down"]
            w["down_b"] = None if b["down_b"] is None else A1 @ b["down_b"]
            layers.append(w)
        return layers, A1, A1i, v1

    def volume(self):
        return self.t1.volume() + sum(t.volume() for t in self.t2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--precision", choices=["bf16", "tf32", "fp32"], default="bf16")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seqlen", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--tau", type=float, default=1.5)
    ap.add_argument("--lam", type=float, default=0.1)
    ap.add_argument("--lr", type=float, default=1e-3)
    a = ap.parse_args()
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = a.precision != "fp32"
    cfg = json.load(open(os.path.join(a.model, "config.json")))
    heads = cfg["num_attention_heads"]
    c = {"hidden": cfg["hidden_size"], "heads": heads, "kv": cfg.get("num_key_value_heads", heads),
         "hd": cfg.get("head_dim") or cfg["hidden_size"] // heads, "layers": cfg["num_hidden_layers"],
         "eps": cfg.get("rms_norm_eps", 1e-5), "vocab": cfg["vocab_size"]}
    W = {k: v.to(dev) for k, v in read_safetensors(a.model).items()}
    embed = W["model.embed_tokens.weight"]
    head = W.get("lm_head.weight", embed)
    gamma = W["model.norm.weight"]
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, c["vocab"], (a.batch, a.seqlen), generator=gen).to(dev)
    inv = 1.0 / (cfg.get("rope_theta", 10000.0) ** (torch.arange(0, c["hd"], 2).float() / c["hd"]))
    ang = torch.arange(a.seqlen).float()[:, None] * inv
    rope = (torch.cat([ang, ang], -1).cos().to(dev), torch.cat([ang, ang], -1).sin().to(dev))
    teacher_layers = layers_of(c, W)
    student = Student(c, W, gen, dev)
    opt = torch.optim.AdamW(student.parameters(), lr=a.lr)
    autocast = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.precision == "bf16")
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def teacher():
        with torch.no_grad(), autocast:
            h = rms(decoder(c, F.embedding(ids, embed), teacher_layers, lambda t: t, rope), gamma, c["eps"])
            return F.log_softmax(F.linear(h, head).float().reshape(-1, c["vocab"]) / a.tau, -1)

    def student_logits(quant):
        with autocast:
            layers, A1, A1i, v1 = student.folded()
            x = F.embedding(ids, embed) @ A1.T + v1
            h = rms(decoder(c, x, layers, quant, rope), None, c["eps"])
            return F.linear((h - v1) @ A1i.T, head * gamma)

    def kl(log_p, logits):
        log_q = F.log_softmax(logits.float().reshape(-1, c["vocab"]) / a.tau, -1)
        return F.kl_div(log_q, log_p, reduction="batchmean", log_target=True)

    # The fold checked before timing: without quantization the student is the teacher (KL ~ 0).
    with torch.no_grad():
        kl_unquantized = float(kl(teacher(), student_logits(lambda t: t)))

    def step():
        sync()
        t0 = time.perf_counter()
        log_p = teacher()
        sync()
        t1 = time.perf_counter()
        loss = kl(log_p, student_logits(StraightThrough.apply)) + a.lam * student.volume()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sync()
        return time.perf_counter() - t0, t1 - t0, float(loss)

    if cuda:
        torch.cuda.reset_peak_memory_stats(dev)
    rounds = [step() for _ in range(a.steps + 1)]
    timed = rounds[1:]
    out = {"peer": "pytorch-eager", "model": os.path.basename(os.path.normpath(a.model)), "device": str(dev),
           "precision": a.precision, "batch": a.batch, "seqlen": a.seqlen, "torch": torch.__version__,
           "step_s": [round(r[0], 4) for r in timed], "teacher_s": [round(r[1], 4) for r in timed],
           "step_s_median": sorted(r[0] for r in timed)[len(timed) // 2],
           "loss_first": rounds[0][2], "loss_last": rounds[-1][2], "kl_unquantized_start": kl_unquantized,
           "threads": torch.get_num_threads()}
    if cuda:
        out["peak_gpu_mib"] = torch.cuda.max_memory_allocated(dev) / 2**20
    print(json.dumps(out))


if __name__ == "__main__":
    main()
