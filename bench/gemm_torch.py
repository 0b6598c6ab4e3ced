# PyTorch peer of bench/gemm.mjs: the same products on the same shapes and threads, each the call
# PyTorch's own Linear makes (forward F.linear(x, w); backward dX = dY @ W, dW = dYᵀ @ X), into a
# preallocated output (out=), so only the GEMM is timed. One warm-up, then `reps` timed calls.
# Reads {"threads", "reps", "cases": [{"variant", "rows", "cols", "depth"}]}; prints one JSON line.
import json, sys, time
import torch

cfg = json.loads(sys.argv[1])
torch.set_num_threads(cfg["threads"])
torch.manual_seed(0)


def product(variant, rows, cols, depth):
    """The timed call and its operands, in the engine's layouts (W stored [out, in])."""
    if variant == "nt":  # Y[rows × cols] = X[rows × depth] · W[cols × depth]ᵀ
        x, w, y = torch.rand(rows, depth) * 2 - 1, torch.rand(cols, depth) * 2 - 1, torch.empty(rows, cols)
        return lambda: torch.matmul(x, w.t(), out=y)
    if variant == "nn":  # Y[rows × cols] = X[rows × depth] · W[depth × cols]
        x, w, y = torch.rand(rows, depth) * 2 - 1, torch.rand(depth, cols) * 2 - 1, torch.empty(rows, cols)
        return lambda: torch.matmul(x, w, out=y)
    # tn: Y[rows × cols] = X[depth × rows]ᵀ · W[depth × cols]
    x, w, y = torch.rand(depth, rows) * 2 - 1, torch.rand(depth, cols) * 2 - 1, torch.empty(rows, cols)
    return lambda: torch.matmul(x.t(), w, out=y)


results = []
for c in cfg["cases"]:
    run = product(c["variant"], c["rows"], c["cols"], c["depth"])
    run()
    times = []
    for _ in range(cfg["reps"]):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    results.append({**c, "times": times})
    del run
print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(), "capability": torch.backends.cpu.get_cpu_capability(),
                  "mkl": torch.backends.mkl.is_available(), "results": results}))
