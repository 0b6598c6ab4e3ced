# PyTorch peer of bench/train-step.mjs, written as a PyTorch user would write the Qwen3 decoder
# on CPU: nn.Linear / nn.RMSNorm / nn.Embedding, rotary embeddings, F.scaled_dot_product_attention
# (causal, grouped-query), the tied LM head, F.cross_entropy over the completion, and
# torch.optim.AdamW(fused=True) (fused on CPU since 2.4; foreach where it is not). f32, the
# benchmark's thread count. One warm-up step, then `reps` timed steps; prints one JSON line with
# every step's seconds, the peak RSS of this process, and what this torch build runs.
import json, resource, sys, time
import torch
import torch.nn.functional as F
from torch import nn

cfg = json.loads(sys.argv[1])
torch.set_num_threads(cfg["threads"])
torch.manual_seed(0)
H, I, L, NH, NKV, D, V = cfg["hidden"], cfg["intermediate"], cfg["layers"], cfg["heads"], cfg["kv_heads"], cfg["head_dim"], cfg["vocab"]
B, T = cfg["batch"], cfg["seq"]


def rotate(x, cos, sin):
    h = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., h:], x[..., :h]], -1) * sin


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.input_norm, self.post_norm = nn.RMSNorm(H, eps=1e-6), nn.RMSNorm(H, eps=1e-6)
        self.q, self.k, self.v = nn.Linear(H, NH * D, bias=False), nn.Linear(H, NKV * D, bias=False), nn.Linear(H, NKV * D, bias=False)
        self.o = nn.Linear(NH * D, H, bias=False)
        self.q_norm, self.k_norm = nn.RMSNorm(D, eps=1e-6), nn.RMSNorm(D, eps=1e-6)
        self.gate, self.up, self.down = nn.Linear(H, I, bias=False), nn.Linear(H, I, bias=False), nn.Linear(I, H, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        h = self.input_norm(x)
        q = rotate(self.q_norm(self.q(h).view(b, t, NH, D)).transpose(1, 2), cos, sin)
        k = rotate(self.k_norm(self.k(h).view(b, t, NKV, D)).transpose(1, 2), cos, sin)
        v = self.v(h).view(b, t, NKV, D).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=NH != NKV)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, NH * D))
        h = self.post_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, H)
        self.layers = nn.ModuleList([Layer() for _ in range(L)])
        self.norm = nn.RMSNorm(H, eps=1e-6)
        inv = 1.0 / (1e6 ** (torch.arange(0, D, 2).float() / D))
        angles = torch.arange(T + 1).float()[:, None] * inv[None]
        angles = torch.cat([angles, angles], -1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, ids):
        t = ids.shape[1]
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x, self.cos[:t], self.sin[:t])
        return F.linear(self.norm(x), self.embed.weight)  # tied LM head


model = Model()
try:
    opt, optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.0, fused=True), "AdamW fused"
except (RuntimeError, TypeError):
    opt, optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.0, foreach=True), "AdamW foreach"
# the same batch as ours: one prompt token, then `seq` completion tokens scored
ids = torch.randint(0, V, (B, T + 1))


def step():
    logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, V), ids[:, 1:].reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


step()  # warm-up
times = []
for _ in range(cfg["reps"]):
    t0 = time.perf_counter()
    step()
    times.append(time.perf_counter() - t0)
print(json.dumps({
    "times": times,
    "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    "torch": torch.__version__,
    "threads": torch.get_num_threads(),
    "optimizer": optimizer,
    "attention": "F.scaled_dot_product_attention",
    "capability": torch.backends.cpu.get_cpu_capability(),
    "mkl": torch.backends.mkl.is_available(),
}))
