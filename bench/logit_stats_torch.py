# PyTorch peer of bench/logit-stats.mjs (PyTorch 2.x with MKL from bench/torch-venv.mjs): the same
# per-row statistics of a [rows × vocab] float32 logits matrix, written as a PyTorch user would
# (one op per quantity, each a pass over the data, under inference_mode): logsumexp,
# full-vocabulary entropy, the target's logprob, max logit and margin (top-2), top-K; with a
# reference row, KL estimators k1, k2, k3 and the exact KL.
# Prints one JSON line: median and min seconds over the reps.
import json, sys, time
import torch

cfg = json.loads(sys.argv[1])
torch.set_num_threads(cfg["threads"])
R, V, K, REF, REPS = cfg["rows"], cfg["vocab"], cfg["topK"], cfg["ref"], cfg["reps"]
g = torch.Generator().manual_seed(1234 + V)
x = torch.randn(R, V, generator=g) * 2
x[:, ::997] += 12 * torch.rand(R, x[:, ::997].shape[1], generator=g)
ref = x + 0.25 * torch.randn(R, V, generator=g) if REF else None
t = torch.tensor([(r * 7919) % V for r in range(R)])

def stats():
    with torch.inference_mode():
        lse = torch.logsumexp(x, -1)
        logp = x - lse[:, None]
        p = logp.exp()
        entropy = -(p * logp).sum(-1)
        chosen = logp.gather(1, t[:, None])[:, 0]
        top2 = x.topk(2, -1).values
        margin = top2[:, 0] - top2[:, 1]
        out = [lse, entropy, chosen, top2[:, 0], margin]
        if K > 0:
            out.append(x.topk(K, -1).indices)
        if ref is not None:
            logq = ref - torch.logsumexp(ref, -1)[:, None]
            d = chosen - logq.gather(1, t[:, None])[:, 0]  # log p/q at the target
            out += [d, 0.5 * d * d, torch.expm1(-d) + d, (p * (logp - logq)).sum(-1)]
        return out

stats()
times = []
for _ in range(REPS):
    t0 = time.perf_counter(); stats(); times.append(time.perf_counter() - t0)
times.sort()
print(json.dumps({"seconds": times[len(times) // 2], "best": times[0], "torch": torch.__version__}))
