import sys, json, math, torch
sys.path.insert(0, "/work/shared/bench")
import llama_eager as L
torch.set_num_threads(2)
d, t3file, idsf = sys.argv[1], sys.argv[2], sys.argv[3]
ids = [int(x) for x in open(idsf).read().strip().split(",")]
cfg = json.load(open(d + "/config.json"))
W = L.load_weights(d)
import struct, numpy as np
def load64(path):
    out = {}
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); data = f.read()
    for k, m in h.items():
        if k == "__metadata__": continue
        a, b = m["data_offsets"]; dt = {"F64": np.float64, "F32": np.float32}[m["dtype"]]
        out[k] = torch.from_numpy(np.frombuffer(data[a:b], dtype=dt).copy().reshape(m["shape"]))
    return out
T = load64(t3file)
print({k: tuple(v.shape) for k, v in T.items()}, file=sys.stderr)
blocks = T["blocks"] if "blocks" in T else None
for k in list(W):
    if k.endswith("mlp.down_proj.weight"):
        w = W[k].double(); n = w.shape[1]; B = blocks.shape[-1]
        out = torch.empty_like(w)
        for j in range(n // B):
            out[:, j*B:(j+1)*B] = w[:, j*B:(j+1)*B] @ blocks[j].double()
        W[k] = out.float()
logits = L.forward(cfg, W, ids).double()
lp = torch.log_softmax(logits, -1)
nll = -sum(lp[i, ids[i+1]].item() for i in range(len(ids)-1))
print(json.dumps({"n": len(ids)-1, "nll": nll, "ppl": math.exp(nll/(len(ids)-1))}))
