# PyTorch eager peer of bench/train-step.mjs: the same Qwen3-shaped decoder, f32, same threads;
# forward + cross-entropy + backward + AdamW per step. Prints one JSON line.
import json, math, resource, sys, time
import torch

cfg = json.loads(sys.argv[1])
torch.set_num_threads(cfg["threads"])
torch.manual_seed(0)
H, I, L, NH, NKV, D, V = cfg["hidden"], cfg["intermediate"], cfg["layers"], cfg["heads"], cfg["kv_heads"], cfg["head_dim"], cfg["vocab"]
B, T = cfg["batch"], cfg["seq"]

class RMSNorm(torch.nn.Module):
    def __init__(self, n, eps=1e-6):
        super().__init__(); self.w = torch.nn.Parameter(torch.ones(n)); self.eps = eps
    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.w

def rope(x, cos, sin):
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)

class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = RMSNorm(H), RMSNorm(H)
        self.q = torch.nn.Linear(H, NH * D, bias=False); self.k = torch.nn.Linear(H, NKV * D, bias=False)
        self.v = torch.nn.Linear(H, NKV * D, bias=False); self.o = torch.nn.Linear(NH * D, H, bias=False)
        self.qn, self.kn = RMSNorm(D), RMSNorm(D)
        self.g = torch.nn.Linear(H, I, bias=False); self.u = torch.nn.Linear(H, I, bias=False); self.d = torch.nn.Linear(I, H, bias=False)
    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        h = self.n1(x)
        q = rope(self.qn(self.q(h).view(b, t, NH, D)).transpose(1, 2), cos, sin)
        k = rope(self.kn(self.k(h).view(b, t, NKV, D)).transpose(1, 2), cos, sin)
        v = self.v(h).view(b, t, NKV, D).transpose(1, 2)
        k = k.repeat_interleave(NH // NKV, 1); v = v.repeat_interleave(NH // NKV, 1)
        # torch 1.13 (Debian) has no scaled_dot_product_attention: the eager formula
        s = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        a = torch.softmax(s, -1) @ v
        x = x + self.o(a.transpose(1, 2).reshape(b, t, NH * D))
        h = self.n2(x)
        return x + self.d(torch.nn.functional.silu(self.g(h)) * self.u(h))

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(V, H); self.layers = torch.nn.ModuleList([Layer() for _ in range(L)]); self.norm = RMSNorm(H)
    def forward(self, ids):
        t = ids.shape[1]
        inv = 1.0 / (1e6 ** (torch.arange(0, D, 2).float() / D))
        ang = torch.arange(t).float()[:, None] * inv[None]
        cos, sin = ang.cos(), ang.sin()
        x = self.emb(ids)
        for l in self.layers: x = l(x, cos, sin)
        return self.norm(x) @ self.emb.weight.T  # tied head

model = Model()
opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
ids = torch.randint(0, V, (B, T + 1))
def step():
    logits = model(ids[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), ids[:, 1:].reshape(-1))
    opt.zero_grad(); loss.backward(); opt.step()
step()  # warm-up
times = []
for _ in range(cfg["reps"]):
    t0 = time.perf_counter(); step(); times.append(time.perf_counter() - t0)
times.sort()
print(json.dumps({"tokens_per_second": B * T / times[len(times) // 2], "times": times, "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "torch": torch.__version__}))
