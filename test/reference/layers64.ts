// Float64 references of the per-layer kernels (native/kernels/*.h), forward only: the kernels'
// gradients are checked against central differences of these (test/kernels/layers.test.ts).
// Written to be read, like model64.ts, whose model these layers are.

/** RMSNorm of each row of x [rows × n]: y = x / sqrt(mean(x²) + eps) · w. */
export function rmsnormRows64(x: ArrayLike<number>, w: ArrayLike<number>, rows: number, n: number, eps: number): Float64Array {
  const y = new Float64Array(rows * n)
  for (let r = 0; r < rows; ++r) {
    let ss = 0
    for (let i = 0; i < n; ++i) ss += x[r * n + i] ** 2
    const inv = 1 / Math.sqrt(ss / n + eps)
    for (let i = 0; i < n; ++i) y[r * n + i] = x[r * n + i] * inv * w[i]
  }
  return y
}

/** RoPE (rotate_half layout) of each row of x [rows × d] with that row's cos/sin [rows × d/2]. */
export function ropeRows64(x: ArrayLike<number>, cos: ArrayLike<number>, sin: ArrayLike<number>, rows: number, d: number): Float64Array {
  const half = d / 2
  const y = new Float64Array(rows * d)
  for (let r = 0; r < rows; ++r)
    for (let i = 0; i < half; ++i) {
      const a = x[r * d + i]
      const b = x[r * d + i + half]
      const c = cos[r * half + i]
      const s = sin[r * half + i]
      y[r * d + i] = a * c - b * s
      y[r * d + i + half] = b * c + a * s
    }
  return y
}

/** SwiGLU: h = silu(gate) · up, silu(g) = g / (1 + e^(−g)). */
export function swiglu64(gate: ArrayLike<number>, up: ArrayLike<number>): Float64Array {
  return Float64Array.from({ length: gate.length }, (_, i) => (gate[i] / (1 + Math.exp(-gate[i]))) * up[i])
}

/** Causal attention of one query over n keys: Σ_j softmax(q·k_j·scale)_j v_j, k_j = keys[j·stride …]. */
export function attentionRow64(
  q: ArrayLike<number>,
  keys: ArrayLike<number>,
  values: ArrayLike<number>,
  stride: number,
  n: number,
  d: number,
  scale: number,
): Float64Array {
  const s = Float64Array.from({ length: n }, (_, j) => {
    let dot = 0
    for (let i = 0; i < d; ++i) dot += q[i] * keys[j * stride + i]
    return dot * scale
  })
  const m = Math.max(...s)
  let sum = 0
  for (let j = 0; j < n; ++j) sum += (s[j] = Math.exp(s[j] - m))
  const out = new Float64Array(d)
  for (let j = 0; j < n; ++j) for (let i = 0; i < d; ++i) out[i] += (s[j] / sum) * values[j * stride + i]
  return out
}
