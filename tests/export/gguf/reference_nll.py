import sys, json, math, torch
sys.path.insert(0, "/work/shared/bench")
import llama_eager as L
torch.set_num_threads(2)
d = sys.argv[1]; ids = [int(x) for x in open(sys.argv[2]).read().strip().split(",")]
cfg = json.load(open(d + "/config.json"))
W = L.load_weights(d)
logits = L.forward(cfg, W, ids).double()
lp = torch.log_softmax(logits, -1)
nll = -sum(lp[i, ids[i+1]].item() for i in range(len(ids)-1))
p0 = lp[0].exp()
top = torch.topk(p0, 5)
print(json.dumps({"n": len(ids)-1, "nll": nll, "ppl": math.exp(nll/(len(ids)-1)), "first": [[int(i), float(v)] for v, i in zip(top.values, top.indices)]}))
torch.save(lp, "/tmp/nlc/ref_lp.pt")
