# Peers of bench/device-rollout.mjs on the same shapes: HF transformers `generate` and, when it
# imports, vLLM, on the same random Qwen3-0.6B-shaped folder, the same prompts (the same LCG as the
# Node side), n samples each, up to MAX_NEW new tokens, the same stop ids; plus the device's copy
# bandwidth (for the weight-bandwidth floor). One JSON line per result on stdout.
#   python3 bench/rollout_peer.py MODEL_DIR PROMPTS N MAX_NEW STOP_EVERY [BUDGET_S]
# BUDGET_S (default 150) bounds each peer: HF stops after the batch that passes it; vLLM takes the
# first VLLM_PROMPTS prompts (one generate call) so it fits.
import json
import sys
import time

model_dir, P, N, MAX_NEW, STOP_EVERY = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
BUDGET_S = float(sys.argv[6]) if len(sys.argv) > 6 else 150.0  # per peer: tokens/s over the prompts done by then
VLLM_PROMPTS = min(P, 128)


def emit(**kw):
    print(json.dumps(kw), flush=True)


try:
    import torch
except Exception as e:
    emit(peer="hf-transformers", error=f"torch not importable: {e}")
    sys.exit(0)
if not torch.cuda.is_available():
    emit(peer="hf-transformers", error="torch has no CUDA")
    sys.exit(0)

# copy bandwidth: read + write of a 1 GiB buffer, counted as bytes read
src = torch.empty(1 << 28, dtype=torch.float32, device="cuda")
dst = torch.empty_like(src)
for _ in range(3):
    dst.copy_(src)
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(10):
    dst.copy_(src)
torch.cuda.synchronize()
emit(copyGBs=src.numel() * 4 * 10 / (time.perf_counter() - t0) / 1e9)
del src, dst

config = json.load(open(f"{model_dir}/config.json"))
V = config["vocab_size"]
x = 12345


def rnd():
    global x
    x = (x * 1664525 + 1013904223) % (1 << 32)
    return x / 2**32


prompts = []
for _ in range(P):
    length = 16 + int(rnd() * 240)
    prompts.append([int(rnd() * min(V, 32000)) for _ in range(length)])
stop_ids = [i * STOP_EVERY + 1 for i in range(V // STOP_EVERY)]
stop_set = set(stop_ids)


def generated_length(ids):
    for i, t in enumerate(ids):
        if t in stop_set:
            return i + 1
    return len(ids)


# ---------------------------------------------------------------- HF transformers
try:
    import transformers
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.bfloat16).cuda().eval()
    chunk = 32  # prompts per generate call (× N sequences)
    done_prompts = generated = 0
    t0 = time.perf_counter()
    with torch.no_grad():
        for c0 in range(0, P, chunk):
            batch = prompts[c0 : c0 + chunk]
            width = max(len(p) for p in batch)
            ids = torch.tensor([[0] * (width - len(p)) + p for p in batch], device="cuda")
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch], device="cuda")
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                                 max_new_tokens=MAX_NEW, num_return_sequences=N, eos_token_id=stop_ids, pad_token_id=0)
            new = out[:, width:].tolist()
            generated += sum(generated_length(s) for s in new)
            done_prompts += len(batch)
            if time.perf_counter() - t0 > BUDGET_S:
                break
    torch.cuda.synchronize()
    s = time.perf_counter() - t0
    emit(peer="hf-transformers", version=transformers.__version__, tokensPerSecond=generated / s, generated=generated, seconds=s,
         prompts=done_prompts, note="left-padded batches of %d prompts × n" % chunk)
    del model
    torch.cuda.empty_cache()
except Exception as e:
    emit(peer="hf-transformers", error=f"{type(e).__name__}: {e}"[:500])

# ---------------------------------------------------------------- vLLM
try:
    import vllm
    from vllm import LLM, SamplingParams
except Exception as e:
    emit(peer="vllm", error=f"not importable: {e}"[:300])
    sys.exit(0)
try:
    llm = LLM(model=model_dir, dtype="bfloat16", gpu_memory_utilization=0.6, skip_tokenizer_init=True)
    sp = SamplingParams(n=N, temperature=1.0, top_p=1.0, max_tokens=MAX_NEW, stop_token_ids=stop_ids, detokenize=False)
    t0 = time.perf_counter()
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts[:VLLM_PROMPTS]], sp, use_tqdm=False)
    s = time.perf_counter() - t0
    generated = sum(len(o.token_ids) for r in outs for o in r.outputs)
    emit(peer="vllm", version=vllm.__version__, tokensPerSecond=generated / s, generated=generated, seconds=s, prompts=VLLM_PROMPTS)
except Exception as e:
    emit(peer="vllm", error=f"{type(e).__name__}: {e}"[:500])
