// The exact distribution one sampling step draws from, in float64, and a chi-square goodness-of-fit
// test, so that the native sampler's empirical token frequencies can be checked against it.
//
// One step, in this order (these semantics are the contract the native sampler follows):
//   1. repetition penalty r (HF): for each distinct id in `history` (prompt + generated),
//      z = z > 0 ? z / r : z * r
//   2. presence p and frequency f penalties (OpenAI): for each distinct id in `generated`,
//      z −= p + f · count(id)
//   3. temperature T: T == 0 → greedy, a one-hot on argmax z (lowest id on ties); else z /= T
//   4. top-k (k > 0): keep the k largest, ties at the boundary resolved toward lower ids
//   5. softmax over the kept tokens
//   6. top-p (p < 1): sort kept by probability descending (ties by lower id), keep the shortest
//      prefix whose cumulative probability ≥ p (at least one token)
//   7. min-p (m > 0): keep tokens with prob ≥ m · maxProb
//   8. renormalize over what is left
// Probabilities in steps 6 and 7 are those of step 5; min-p's test is a ratio to the largest kept
// probability, so renormalizing after top-p would not change which tokens it keeps.

import { sortedIds64 } from './stats64.js'

export interface SamplingParams64 {
  /** 0 = greedy; default 1. */
  temperature?: number
  /** 0 = off (default). */
  topK?: number
  /** 1 = off (default). */
  topP?: number
  /** 0 = off (default). */
  minP?: number
  /** 1 = off (default); HF semantics over prompt + generated ids. */
  repetitionPenalty?: number
  /** 0 = off (default); OpenAI semantics over generated ids. */
  presencePenalty?: number
  /** 0 = off (default); OpenAI semantics over generated ids. */
  frequencyPenalty?: number
}

/** Steps 1–2: the logits after repetition, presence and frequency penalties (a new array). */
export function penalizedLogits64(
  z: ArrayLike<number>,
  params: SamplingParams64,
  history: readonly number[] = [],
  generated: readonly number[] = [],
): Float64Array {
  const V = z.length
  const out = Float64Array.from(z)
  const r = params.repetitionPenalty ?? 1
  if (!(r > 0)) throw new Error(`repetitionPenalty must be > 0, got ${r}`)
  if (r !== 1) {
    for (const id of distinct(history, V)) out[id] = out[id] > 0 ? out[id] / r : out[id] * r
  }
  const presence = params.presencePenalty ?? 0
  const frequency = params.frequencyPenalty ?? 0
  if (presence !== 0 || frequency !== 0) {
    const counts = new Map<number, number>()
    for (const id of generated) {
      checkId(id, V)
      counts.set(id, (counts.get(id) ?? 0) + 1)
    }
    for (const [id, count] of counts) out[id] -= presence + frequency * count
  }
  return out
}

/** Index of the largest value, lowest index on ties. */
export function argmax64(z: ArrayLike<number>): number {
  let best = 0
  for (let i = 1; i < z.length; i++) if (z[i] > z[best]) best = i
  return best
}

/**
 * The probability of each token id (length V; 0 for removed tokens) that one sampling step with
 * `params` assigns, given raw logits z, the ids seen so far (`history`: prompt + generated) and the
 * ids generated so far (`generated`).
 */
export function samplingDistribution64(
  z: ArrayLike<number>,
  params: SamplingParams64,
  history: readonly number[] = [],
  generated: readonly number[] = [],
): Float64Array {
  const V = z.length
  if (V === 0) throw new Error('samplingDistribution64: empty logits row')
  const logits = penalizedLogits64(z, params, history, generated)
  const dist = new Float64Array(V)

  const T = params.temperature ?? 1
  if (!(T >= 0)) throw new Error(`temperature must be ≥ 0, got ${T}`)
  if (T === 0) {
    dist[argmax64(logits)] = 1
    return dist
  }
  for (let i = 0; i < V; i++) logits[i] /= T

  // top-k: the first k ids by logit descending, lower id first on ties.
  let kept = sortedIds64(logits)
  const k = params.topK ?? 0
  if (k > 0 && k < V) kept = kept.slice(0, k)

  // softmax over the kept ids (prob[id] stays 0 for the others).
  const prob = new Float64Array(V)
  const max = logits[kept[0]]
  let sum = 0
  for (const id of kept) {
    prob[id] = Math.exp(logits[id] - max)
    sum += prob[id]
  }
  for (const id of kept) prob[id] /= sum

  // top-p: the shortest prefix, by probability descending (lower id first), reaching p.
  const p = params.topP ?? 1
  if (p < 1) {
    kept.sort((a, b) => (prob[a] === prob[b] ? a - b : prob[b] - prob[a]))
    let cum = 0
    let n = 0
    while (n < kept.length) {
      cum += prob[kept[n]]
      n++
      if (cum >= p) break
    }
    kept = kept.slice(0, n)
  }

  // min-p: relative to the most probable kept token.
  const m = params.minP ?? 0
  if (m > 0) {
    let maxProb = 0
    for (const id of kept) maxProb = Math.max(maxProb, prob[id])
    kept = kept.filter((id) => prob[id] >= m * maxProb)
  }

  // renormalize over what is left.
  let total = 0
  for (const id of kept) total += prob[id]
  for (const id of kept) dist[id] = prob[id] / total
  return dist
}

function distinct(ids: readonly number[], V: number): Set<number> {
  for (const id of ids) checkId(id, V)
  return new Set(ids)
}

function checkId(id: number, V: number): void {
  if (!Number.isInteger(id) || id < 0 || id >= V) throw new Error(`token id ${id} out of range [0, ${V})`)
}

// ----------------------------------------------------------------------------------------------
// Chi-square goodness of fit

export interface ChiSquareResult {
  /** Pearson's statistic Σ (observed − expected)² / expected over the merged bins. */
  stat: number
  /** Merged bins − 1. */
  dof: number
  /** P(χ²_dof ≥ stat): small means the counts do not fit the probabilities. */
  pValue: number
  /** Number of bins after merging. */
  bins: number
  /** Draws that fell on tokens of probability 0; any makes stat = Infinity and pValue = 0. */
  impossible: number
}

/**
 * Pearson's chi-square test of observed `counts` against `probs` (normalized to sum 1). Tokens of
 * probability 0 form no bin, but a draw on one is impossible and fails the test outright. Bins with
 * expected count < `minExpected` are pooled into one bin; if that pool is itself still below
 * `minExpected`, it is merged into the smallest remaining bin.
 */
export function chiSquareTest(counts: ArrayLike<number>, probs: ArrayLike<number>, minExpected = 5): ChiSquareResult {
  if (counts.length !== probs.length) throw new Error(`chiSquareTest: ${counts.length} counts vs ${probs.length} probabilities`)
  let n = 0
  let probSum = 0
  for (let i = 0; i < counts.length; i++) {
    if (!(probs[i] >= 0)) throw new Error(`chiSquareTest: probability ${probs[i]} at ${i}`)
    n += counts[i]
    probSum += probs[i]
  }
  if (!(probSum > 0)) throw new Error('chiSquareTest: probabilities sum to 0')

  let impossible = 0
  const bins: { observed: number; expected: number }[] = []
  const pool = { observed: 0, expected: 0 }
  for (let i = 0; i < counts.length; i++) {
    const expected = (n * probs[i]) / probSum
    if (expected === 0) {
      impossible += counts[i]
    } else if (expected < minExpected) {
      pool.observed += counts[i]
      pool.expected += expected
    } else {
      bins.push({ observed: counts[i], expected })
    }
  }
  if (pool.expected > 0) {
    if (pool.expected >= minExpected || bins.length === 0) {
      bins.push(pool)
    } else {
      let smallest = 0
      for (let b = 1; b < bins.length; b++) if (bins[b].expected < bins[smallest].expected) smallest = b
      bins[smallest].observed += pool.observed
      bins[smallest].expected += pool.expected
    }
  }

  const dof = Math.max(0, bins.length - 1)
  if (impossible > 0) return { stat: Infinity, dof, pValue: 0, bins: bins.length, impossible }
  let stat = 0
  for (const { observed, expected } of bins) stat += ((observed - expected) * (observed - expected)) / expected
  const pValue = dof === 0 ? 1 : chiSquareSf(stat, dof)
  return { stat, dof, pValue, bins: bins.length, impossible }
}

/** Survival function of the chi-square distribution: P(X ≥ x) for X ~ χ²(dof) = Q(dof/2, x/2). */
export function chiSquareSf(x: number, dof: number): number {
  if (!(dof > 0)) throw new Error(`chiSquareSf: dof must be > 0, got ${dof}`)
  return regularizedGammaQ(dof / 2, x / 2)
}

/** ln Γ(x) for x > 0: Lanczos approximation (g = 7, 9 terms), relative error ~1e-15. */
export function lnGamma(x: number): number {
  if (!(x > 0)) throw new Error(`lnGamma: x must be > 0, got ${x}`)
  if (x < 0.5) {
    // Reflection: Γ(x) Γ(1 − x) = π / sin(πx).
    return Math.log(Math.PI / Math.sin(Math.PI * x)) - lnGamma(1 - x)
  }
  const g = 7
  const c = [
    0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313, -176.61502916214059,
    12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7,
  ]
  const xm1 = x - 1
  let a = c[0]
  const t = xm1 + g + 0.5
  for (let i = 1; i < g + 2; i++) a += c[i] / (xm1 + i)
  return 0.5 * Math.log(2 * Math.PI) + (xm1 + 0.5) * Math.log(t) - t + Math.log(a)
}

/** Regularized lower incomplete gamma P(a, x) = γ(a, x) / Γ(a), for a > 0, x ≥ 0. */
export function regularizedGammaP(a: number, x: number): number {
  checkGammaArgs(a, x)
  if (x <= 0) return 0
  if (x === Infinity) return 1
  return x < a + 1 ? gammaSeriesP(a, x) : 1 - gammaContinuedFractionQ(a, x)
}

/**
 * Regularized upper incomplete gamma Q(a, x) = Γ(a, x) / Γ(a), for a > 0, x ≥ 0.
 * For x < a + 1 the series for P converges fast and Q = 1 − P (Q is not small there); otherwise
 * Q's continued fraction converges fast and keeps its relative precision far into the tail.
 */
export function regularizedGammaQ(a: number, x: number): number {
  checkGammaArgs(a, x)
  if (x <= 0) return 1
  if (x === Infinity) return 0
  return x < a + 1 ? 1 - gammaSeriesP(a, x) : gammaContinuedFractionQ(a, x)
}

const GAMMA_EPS = Number.EPSILON
const GAMMA_MAX_ITER = 100_000

/** log of x^a e^(−x) / Γ(a), the prefactor common to the series and the continued fraction. */
function logGammaPrefactor(a: number, x: number): number {
  return a * Math.log(x) - x - lnGamma(a)
}

/** P(a, x) = x^a e^(−x) / Γ(a) · Σ_{n≥0} x^n / (a (a+1) … (a+n)). */
function gammaSeriesP(a: number, x: number): number {
  let term = 1 / a
  let sum = term
  for (let n = 1; n < GAMMA_MAX_ITER; n++) {
    term *= x / (a + n)
    sum += term
    if (Math.abs(term) <= Math.abs(sum) * GAMMA_EPS) break
  }
  return sum * Math.exp(logGammaPrefactor(a, x))
}

/**
 * Q(a, x) = x^a e^(−x) / Γ(a) · 1/(x+1−a− 1·(1−a)/(x+3−a− 2·(2−a)/(x+5−a− …))), evaluated by the
 * modified Lentz method.
 */
function gammaContinuedFractionQ(a: number, x: number): number {
  const tiny = 1e-300
  let b = x + 1 - a
  let c = 1 / tiny
  let d = 1 / b
  let h = d
  for (let i = 1; i < GAMMA_MAX_ITER; i++) {
    const an = -i * (i - a)
    b += 2
    d = an * d + b
    if (Math.abs(d) < tiny) d = tiny
    c = b + an / c
    if (Math.abs(c) < tiny) c = tiny
    d = 1 / d
    const delta = d * c
    h *= delta
    if (Math.abs(delta - 1) <= GAMMA_EPS) break
  }
  return Math.exp(logGammaPrefactor(a, x)) * h
}

function checkGammaArgs(a: number, x: number): void {
  if (!(a > 0)) throw new Error(`incomplete gamma: a must be > 0, got ${a}`)
  if (!(x >= 0)) throw new Error(`incomplete gamma: x must be ≥ 0, got ${x}`)
}
