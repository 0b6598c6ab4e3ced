# PyTorch peer of bench/device-methods.mjs --only memory: one training step of a Qwen3-shaped model
# (random init) on 8 × 1024 tokens, SFT loss on the completion tokens, backward, AdamW, as people
# run it: transformers' Qwen3ForCausalLM (sdpa), bf16 autocast over f32 weights, fused AdamW; with
# --lora R, PEFT LoRA adapters on the seven linears (base frozen) when peft is importable.
# Prints one JSON line per shape: peak device bytes (torch.cuda.max_memory_allocated) and step time.
#   python3 bench/train_memory_torch_cuda.py --shape qwen3-1.7b
#   python3 bench/train_memory_torch_cuda.py --shape qwen3-4b --lora 16
import argparse, json, sys, time

import torch
import torch.nn.functional as F

SHAPES = {  # hidden, intermediate, layers, heads, kv heads (head_dim 128, vocabulary 151,936, tied)
    "qwen3-1.7b": (2048, 6144, 28, 16, 8),
    "qwen3-4b": (2560, 9728, 36, 32, 8),
}
V, D = 151936, 128


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
    ap.add_argument("--lora", type=int, default=0)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--checkpointing", action="store_true")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print(json.dumps({"shape": a.shape, "error": "no CUDA"}))
        return
    H, I, L, NH, NKV = SHAPES[a.shape]
    try:
        from transformers import Qwen3Config, Qwen3ForCausalLM
    except Exception as e:
        print(json.dumps({"shape": a.shape, "error": f"transformers not importable: {e}"}))
        return
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=V, hidden_size=H, intermediate_size=I, num_hidden_layers=L, num_attention_heads=NH,
                      num_key_value_heads=NKV, head_dim=D, tie_word_embeddings=True, rope_theta=1e6,
                      max_position_embeddings=4096, attn_implementation="sdpa")
    model = Qwen3ForCausalLM(cfg).cuda().float().train()
    what = "transformers Qwen3ForCausalLM (sdpa)"
    if a.checkpointing:
        model.gradient_checkpointing_enable()
        what += " + gradient checkpointing"
    if a.lora:
        try:
            from peft import LoraConfig, get_peft_model
        except Exception as e:
            print(json.dumps({"shape": a.shape, "lora": a.lora, "error": f"peft not importable: {e}"}))
            return
        targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
        model = get_peft_model(model, LoraConfig(r=a.lora, lora_alpha=2 * a.lora, target_modules=targets, lora_dropout=0.0))
        what += f" + PEFT LoRA r={a.lora}"
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-5, fused=True)
    ids = torch.randint(0, V, (a.batch, a.seq), device="cuda")
    P = a.prompt
    targets = ids[:, P:]

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=ids[:, :-1]).logits
        loss = F.cross_entropy(logits[:, P - 1:].float().reshape(-1, V), targets.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()

    torch.cuda.reset_peak_memory_stats()
    try:
        step()
        torch.cuda.synchronize()
        times = []
        for _ in range(2):
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    except torch.cuda.OutOfMemoryError as e:
        print(json.dumps({"shape": a.shape, "lora": a.lora, "peer": what, "error": f"out of memory: {str(e)[:200]}"}))
        return
    t = min(times)
    print(json.dumps({"shape": a.shape, "lora": a.lora, "peer": what, "torch": torch.__version__, "batch": a.batch, "tokens": a.seq,
                      "peak_device_bytes": torch.cuda.max_memory_allocated(), "seconds_per_step": t,
                      "tokens_per_second": a.batch * (a.seq - 1) / t}))


main()
