// Scalar float64 oracles of two training losses, written straight from the papers' equations:
// the weighted-SFT loss (UID Eq. 8) and the Bradley–Terry loss (JZ Eq. 13). The production
// objectives (src/train/objectives/sft.ts, bradley-terry.ts) are checked against them in
// test/train/objectives.test.ts; they are not used by the library.

// UID Eq. 8: L = −(1/N) Σ_i (w_i/T_i) Σ_t log π(y_{i,t} | ·), T_i = scored tokens of response i.
export function weightedSftLoss(
  weights: ArrayLike<number>,
  tokenLogprobs: ReadonlyArray<ArrayLike<number>>,
  masks?: ReadonlyArray<ArrayLike<number | boolean> | undefined>,
): number {
  const N = tokenLogprobs.length
  if (weights.length !== N) throw new RangeError(`${weights.length} weights for ${N} responses`)
  if (N === 0) return NaN
  let total = 0
  for (let i = 0; i < N; i++) {
    const lp = tokenLogprobs[i]
    const mask = masks?.[i]
    if (mask !== undefined && mask.length !== lp.length) throw new RangeError(`mask ${i} length differs from its logprobs`)
    let s = 0
    let T = 0
    for (let t = 0; t < lp.length; t++) {
      if (mask === undefined || mask[t]) {
        s += lp[t]
        T++
      }
    }
    if (T > 0) total += (weights[i] / T) * s
  }
  return -total / N
}

/** log σ(x), computed without overflow. */
export function logSigmoid(x: number): number {
  return x >= 0 ? -Math.log1p(Math.exp(-x)) : x - Math.log1p(Math.exp(x))
}

// JZ Eq. 13: L_J = −E[log σ(J(x, y+) − J(x, y−))] over preference pairs.
export function bradleyTerryLoss(chosen: ArrayLike<number>, rejected: ArrayLike<number>): number {
  if (chosen.length !== rejected.length) throw new RangeError('chosen and rejected differ in length')
  if (chosen.length === 0) return NaN
  let s = 0
  for (let i = 0; i < chosen.length; i++) s += logSigmoid(chosen[i] - rejected[i])
  return 0 - s / chosen.length
}
