// Exact float64 statistics of one raw (pre-temperature) logits row z of length V: what the
// engine's one-pass logit-statistics kernel must reproduce (DESIGN.md, "One pass over the
// vocabulary"). Each statistic is its own small function, computed the obvious way, in as many
// passes as is clearest. p = softmax(z) throughout; q = softmax(y) for a reference row y.

/** max_i z_i (−Infinity for an empty row). */
export function maxLogit64(z: ArrayLike<number>): number {
  let m = -Infinity
  for (let i = 0; i < z.length; i++) if (z[i] > m) m = z[i]
  return m
}

/** log Σ_i exp(z_i), computed as m + log Σ exp(z_i − m) with m = max z. */
export function logsumexp64(z: ArrayLike<number>): number {
  const m = maxLogit64(z)
  if (m === -Infinity) return -Infinity
  return m + Math.log(sumExpShifted(z, m))
}

/**
 * log p_i for every i, as (z_i − m) − log Σ exp(z_j − m): subtracting the max first keeps the
 * result accurate to ulps of log p rather than of |z| (z_i − logsumexp(z) would lose digits when
 * the logits are large).
 */
export function logSoftmax64(z: ArrayLike<number>): Float64Array {
  const m = maxLogit64(z)
  const logS = Math.log(sumExpShifted(z, m))
  const out = new Float64Array(z.length)
  for (let i = 0; i < z.length; i++) out[i] = z[i] - m - logS
  return out
}

function sumExpShifted(z: ArrayLike<number>, m: number): number {
  let s = 0
  for (let i = 0; i < z.length; i++) s += Math.exp(z[i] - m)
  return s
}

/** Entropy in nats, H = −Σ p_i log p_i; tokens with p_i = 0 (z_i = −Infinity) contribute 0. */
export function entropy64(z: ArrayLike<number>): number {
  const logp = logSoftmax64(z)
  let h = 0
  for (let i = 0; i < logp.length; i++) {
    const p = Math.exp(logp[i])
    if (p > 0) h -= p * logp[i]
  }
  return h
}

/** log p_target = (z_target − m) − log Σ exp(z_j − m). */
export function chosenLogprob64(z: ArrayLike<number>, target: number): number {
  checkId(target, z.length, 'target')
  const m = maxLogit64(z)
  return z[target] - m - Math.log(sumExpShifted(z, m))
}

/**
 * The K largest logits, sorted by value descending, ties broken by lower token id first.
 * K is clamped to V.
 */
export function topK64(z: ArrayLike<number>, k: number): { ids: number[]; logits: number[] } {
  const order = sortedIds64(z)
  const ids = order.slice(0, Math.max(0, Math.min(k, z.length)))
  return { ids, logits: ids.map((i) => z[i]) }
}

/** All token ids ordered by logit descending, ties by lower id first. O(V log V). */
export function sortedIds64(z: ArrayLike<number>): number[] {
  const ids = Array.from({ length: z.length }, (_, i) => i)
  ids.sort((a, b) => (z[a] === z[b] ? a - b : z[b] - z[a]))
  return ids
}

/**
 * top1 − top2 as values: when the maximum occurs twice the margin is 0. A row of one token has
 * no runner-up; its margin is +Infinity.
 */
export function margin64(z: ArrayLike<number>): number {
  if (z.length < 2) return Infinity
  let first = -Infinity
  let second = -Infinity
  for (let i = 0; i < z.length; i++) {
    if (z[i] > first) {
      second = first
      first = z[i]
    } else if (z[i] > second) {
      second = z[i]
    }
  }
  return first - second
}

export interface KlEstimators64 {
  /** log p(target) under z (the policy). */
  logp: number
  /** log q(target) under y (the reference). */
  logq: number
  /** k1 = logp − logq. */
  k1: number
  /** k2 = ½ (logp − logq)². */
  k2: number
  /**
   * k3 as verl's `low_var_kl`: kl = clamp(logq − logp, −20, 20); k3 = clamp(exp(kl) − kl − 1, −10, 10).
   */
  k3: number
}

/** Per-token KL estimators of the sampled/target token between policy row z and reference row y. */
export function klEstimators64(z: ArrayLike<number>, y: ArrayLike<number>, target: number): KlEstimators64 {
  if (z.length !== y.length) throw new Error(`klEstimators64: rows differ in length (${z.length} vs ${y.length})`)
  const logp = chosenLogprob64(z, target)
  const logq = chosenLogprob64(y, target)
  const k1 = logp - logq
  const k2 = 0.5 * k1 * k1
  const kl = clamp(logq - logp, -20, 20)
  const k3 = clamp(Math.exp(kl) - kl - 1, -10, 10)
  return { logp, logq, k1, k2, k3 }
}

/** Exact KL(p‖q) = Σ_i p_i (log p_i − log q_i) over the whole vocabulary; p_i = 0 terms are 0. */
export function klExact64(z: ArrayLike<number>, y: ArrayLike<number>): number {
  if (z.length !== y.length) throw new Error(`klExact64: rows differ in length (${z.length} vs ${y.length})`)
  const logp = logSoftmax64(z)
  const logq = logSoftmax64(y)
  let kl = 0
  for (let i = 0; i < logp.length; i++) {
    const p = Math.exp(logp[i])
    if (p > 0) kl += p * (logp[i] - logq[i])
  }
  return kl
}

export interface LogitStats64 {
  maxLogit: number
  logsumexp: number
  entropy: number
  margin: number
  /** Present when `target` was given. */
  chosenLogprob?: number
  /** Present when `topK` > 0 was given. */
  topK?: { ids: number[]; logits: number[] }
  /** Present when `target` and `reference` were given. */
  kl?: KlEstimators64 & { exact: number }
}

/** Everything the one-pass kernel reports for one row, computed separately and exactly. */
export function logitStats64(
  z: ArrayLike<number>,
  options: { target?: number; topK?: number; reference?: ArrayLike<number> } = {},
): LogitStats64 {
  const stats: LogitStats64 = {
    maxLogit: maxLogit64(z),
    logsumexp: logsumexp64(z),
    entropy: entropy64(z),
    margin: margin64(z),
  }
  if (options.target !== undefined) stats.chosenLogprob = chosenLogprob64(z, options.target)
  if (options.topK !== undefined && options.topK > 0) stats.topK = topK64(z, options.topK)
  if (options.target !== undefined && options.reference !== undefined) {
    stats.kl = { ...klEstimators64(z, options.reference, options.target), exact: klExact64(z, options.reference) }
  }
  return stats
}

function clamp(x: number, lo: number, hi: number): number {
  return Math.min(hi, Math.max(lo, x))
}

function checkId(id: number, V: number, what: string): void {
  if (!Number.isInteger(id) || id < 0 || id >= V) throw new Error(`${what} ${id} out of range [0, ${V})`)
}
