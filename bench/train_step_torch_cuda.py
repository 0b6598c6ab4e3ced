# PyTorch peer of the device check's training bench on a GPU: a Qwen3-0.6B-shaped model (random
# init), 8 sequences × 512 tokens, SFT loss on the 480 completion tokens, backward, AdamW — the
# usual mixed precision (f32 weights and AdamW state, bf16 autocast, fused AdamW, SDPA attention).
# Hugging Face transformers' Qwen3ForCausalLM when importable (the model people train), else
# the same decoder written out with F.scaled_dot_product_attention. Prints one JSON line.
import json, sys, time

import torch
import torch.nn.functional as F

V, H, I, L, NH, NKV, D = 151936, 1024, 3072, 28, 16, 8, 128
B, T, P = 8, 512, 32
PEAK = 989e12


def hf_model():
    from transformers import Qwen3Config, Qwen3ForCausalLM
    cfg = Qwen3Config(vocab_size=V, hidden_size=H, intermediate_size=I, num_hidden_layers=L, num_attention_heads=NH,
                      num_key_value_heads=NKV, head_dim=D, tie_word_embeddings=True, rope_theta=1e6,
                      max_position_embeddings=4096, attn_implementation="sdpa")
    m = Qwen3ForCausalLM(cfg)
    return m, "transformers Qwen3ForCausalLM (sdpa)", lambda ids: m(input_ids=ids).logits


class RMSNorm(torch.nn.Module):
    def __init__(self, n, eps=1e-6):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.w


def rope(x, cos, sin):
    h = x.shape[-1] // 2
    return torch.cat([x[..., :h] * cos - x[..., h:] * sin, x[..., h:] * cos + x[..., :h] * sin], -1)


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2, self.qn, self.kn = RMSNorm(H), RMSNorm(H), RMSNorm(D), RMSNorm(D)
        lin = lambda i, o: torch.nn.Linear(i, o, bias=False)
        self.q, self.k, self.v, self.o = lin(H, NH * D), lin(H, NKV * D), lin(H, NKV * D), lin(NH * D, H)
        self.g, self.u, self.d = lin(H, I), lin(H, I), lin(I, H)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        h = self.n1(x)
        q = rope(self.qn(self.q(h).view(b, t, NH, D)).transpose(1, 2), cos, sin)
        k = rope(self.kn(self.k(h).view(b, t, NKV, D)).transpose(1, 2), cos, sin)
        v = self.v(h).view(b, t, NKV, D).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, NH * D))
        h = self.n2(x)
        return x + self.d(F.silu(self.g(h)) * self.u(h))


class Plain(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(V, H)
        self.layers = torch.nn.ModuleList([Layer() for _ in range(L)])
        self.norm = RMSNorm(H)

    def forward(self, ids):
        t = ids.shape[1]
        inv = 1.0 / (1e6 ** (torch.arange(0, D, 2, device=ids.device).float() / D))
        ang = torch.arange(t, device=ids.device).float()[:, None] * inv[None]
        cos, sin = ang.cos(), ang.sin()
        x = self.emb(ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.norm(x) @ self.emb.weight.T


def main():
    torch.manual_seed(0)
    try:
        model, what, forward = hf_model()
    except Exception as e:  # transformers missing or too old
        print(f"transformers unavailable ({type(e).__name__}: {e}); plain decoder", file=sys.stderr)
        model = Plain()
        what, forward = "plain decoder (F.scaled_dot_product_attention)", lambda ids: model(ids)
    model = model.cuda().float().train()
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    ids = torch.randint(0, V, (B, T), device="cuda")
    targets = ids[:, P:]  # the completion tokens: logits of rows P-1 … T-2 predict them

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = forward(ids[:, :-1])
        loss = F.cross_entropy(logits[:, P - 1:].float().reshape(-1, V), targets.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    for _ in range(2):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    times.sort()
    t = times[len(times) // 2]
    tokens = B * (T - 1)
    print(json.dumps({"peer": what, "torch": torch.__version__, "params": params, "ms_per_step": 1e3 * t,
                      "tokens_per_second": tokens / t, "mfu": 6 * params * tokens / t / PEAK,
                      "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30}))


main()
