// Training objectives: float64 loss and gradient coefficients (a_t = ∂L/∂logp_t, b_t = ∂L/∂H_t,
// ∂L/∂s) checked against central finite differences of the same loss, against verl's
// compute_policy_loss_vanilla / kl_penalty / agg_loss transcribed literally on padded matrices,
// and against hand-computed examples.
//
// Finite-difference bound: central differences with h = 1e-5 in float64; every coefficient g
// satisfies |fd − g| ≤ 1e-6·|g| + 1e-10 (relative 1e-6, absolute floor 1e-10 for the exact zeros
// of clipped and masked tokens: the loss terms are O(1), so float64 rounding in fd is ~1e-11).

import { describe, expect, it } from 'vitest'
import { InvalidArgumentError } from '../../src/engine/errors.js'
import { mulberry32 } from '../../src/util/prng.js'
import { bradleyTerryLoss, weightedSftLoss } from '../reference/offline-losses64.js'
import {
  LOSS_AGGREGATIONS,
  KL_ESTIMATORS,
  NonFiniteError,
  bradleyTerryObjective,
  createObjective,
  dpoObjective,
  getObjective,
  globalNormalizer,
  klK1,
  klK2,
  klK3,
  policyObjective,
  sftObjective,
  type BatchNormalizer,
  type DpoBatch,
  type LossAggregation,
  type PolicyBatch,
  type PolicyObjectiveConfig,
  type PolicySequence,
  type ScoreBatch,
  type SftBatch,
} from '../../src/train/index.js'

// ---------------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------------

/** mulberry32 (src/util/prng.ts): a tiny seeded PRNG, so every failure names a reproducible seed. */
const rng = mulberry32
const uni = (r: () => number, lo: number, hi: number) => lo + (hi - lo) * r()

const H = 1e-5
const REL = 1e-6
const ABS = 1e-10
// fixed seeds for reproducibility plus one fresh seed per run (printed on failure)
const FRESH = (Date.now() ^ (process.pid << 8)) >>> 0
const SEEDS = [1, 2, 3, 4, 5, FRESH]

function expectClose(fd: number, g: number, what: string) {
  const err = Math.abs(fd - g)
  expect(err <= REL * Math.abs(g) + ABS, `${what}: fd ${fd} vs analytic ${g} (err ${err})`).toBe(true)
}

/** Central difference of f with respect to arr[t] (arr must be a Float64Array). */
function centralDiff(arr: Float64Array, t: number, f: () => number): number {
  const x = arr[t]
  arr[t] = x + H
  const up = f()
  arr[t] = x - H
  const dn = f()
  arr[t] = x
  return (up - dn) / (2 * H)
}

const CLIP_LOW = 0.2
const CLIP_HIGH = 0.28
const DUAL = 3

/** Random policy batch; ratios spread across all clip regions but ≥ 1e-3 (relative) from every kink. */
function randomPolicyBatch(seed: number, opts: { perTokenAdv?: boolean } = {}): PolicyBatch {
  const r = rng(seed)
  const S = 2 + Math.floor(r() * 5)
  const sequences: PolicySequence[] = []
  const kinks = [1 - CLIP_LOW, 1 + CLIP_HIGH, DUAL]
  for (let i = 0; i < S; i++) {
    const T = i === 0 ? 0 : 1 + Math.floor(r() * 8) // one empty sequence
    const logp = new Float64Array(T)
    const oldLogp = new Float64Array(T)
    const refLogp = new Float64Array(T)
    const entropy = new Float64Array(T)
    const mask = new Uint8Array(T)
    const adv = new Float64Array(T)
    for (let t = 0; t < T; t++) {
      logp[t] = uni(r, -5, -0.01)
      let d: number
      do d = uni(r, -1.4, 1.4)
      while (kinks.some((k) => Math.abs(Math.exp(d) - k) < 1e-3 * k))
      oldLogp[t] = logp[t] - d
      refLogp[t] = logp[t] + uni(r, -1, 1)
      entropy[t] = uni(r, 0, 4)
      mask[t] = r() < 0.8 ? 1 : 0
      adv[t] = uni(r, -2, 2)
    }
    if (i === 1 && T > 0) mask.fill(0) // one fully masked sequence
    if (T > 0 && mask[T - 1] === 0) {
      logp[T - 1] = NaN // masked positions are never read
      entropy[T - 1] = NaN
    }
    const scalarAdv = uni(r, -2, 2)
    sequences.push({
      logp,
      oldLogp,
      refLogp,
      entropy,
      mask,
      advantages: opts.perTokenAdv ? adv : scalarAdv,
      weight: uni(r, 0.1, 1),
    })
  }
  return { sequences }
}

function policyFdCheck(cfg: PolicyObjectiveConfig, batch: PolicyBatch, label: string) {
  const obj = policyObjective(cfg)
  const res = obj.compute(batch)
  const loss = () => obj.compute(batch).loss
  batch.sequences.forEach((s, i) => {
    const mask = s.mask as Uint8Array
    for (let t = 0; t < s.logp.length; t++) {
      if (!mask[t]) {
        expect(res.a[i][t]).toBe(0)
        expect(res.b[i][t]).toBe(0)
        continue
      }
      expectClose(centralDiff(s.logp as Float64Array, t, loss), res.a[i][t], `${label} a[${i}][${t}]`)
      expectClose(centralDiff(s.entropy as Float64Array, t, loss), res.b[i][t], `${label} b[${i}][${t}]`)
    }
  })
  return res
}

/**
 * verl's compute_policy_loss_vanilla + kl_penalty + agg_loss transcribed line by line on padded
 * [batch × maxLen] matrices (mask 0 at padding), with COSE weights multiplying the pg matrix.
 */
function verlReference(batch: PolicyBatch, cfg: Required<Omit<PolicyObjectiveConfig, 'clip' | 'lossScaleFactor' | 'weightScope'>>) {
  const B = batch.sequences.length
  const L = Math.max(0, ...batch.sequences.map((s) => s.logp.length))
  const mat = () => Array.from({ length: B }, () => new Float64Array(L))
  const [lp, old, ref, ent, adv, msk] = [mat(), mat(), mat(), mat(), mat(), mat()]
  batch.sequences.forEach((s, i) => {
    for (let t = 0; t < s.logp.length; t++) {
      msk[i][t] = s.mask && !s.mask[t] ? 0 : 1
      if (!msk[i][t]) continue
      lp[i][t] = s.logp[t]
      old[i][t] = s.oldLogp![t]
      ref[i][t] = s.refLogp![t]
      ent[i][t] = s.entropy[t]
      adv[i][t] = typeof s.advantages === 'number' ? s.advantages : s.advantages[t]
    }
  })
  const clamp = (x: number, lo: number, hi: number) => Math.min(Math.max(x, lo), hi)
  const pg = mat()
  const kld = mat()
  for (let i = 0; i < B; i++) {
    for (let t = 0; t < L; t++) {
      const negativeApproxKl = clamp(lp[i][t] - old[i][t], -20, 20)
      const ratio = Math.exp(negativeApproxKl)
      const A = adv[i][t]
      const pgLosses1 = -A * ratio
      const pgLosses2 = -A * clamp(ratio, 1 - cfg.clipLow, 1 + cfg.clipHigh)
      const clipPgLosses1 = Math.max(pgLosses1, pgLosses2)
      let pgLosses = clipPgLosses1
      if (cfg.dualClip !== null) {
        const pgLosses3 = -A * cfg.dualClip
        const clipPgLosses2 = Math.min(pgLosses3, clipPgLosses1)
        pgLosses = A < 0 ? clipPgLosses2 : clipPgLosses1
      }
      pg[i][t] = pgLosses * (batch.sequences[i].weight ?? 1)
      const d = lp[i][t] - ref[i][t]
      if (cfg.klEstimator === 'k1') kld[i][t] = d
      else if (cfg.klEstimator === 'k2') kld[i][t] = 0.5 * d * d
      else {
        const kl = clamp(ref[i][t] - lp[i][t], -20, 20)
        kld[i][t] = clamp(Math.exp(kl) - kl - 1, -10, 10)
      }
    }
  }
  const aggLoss = (m: Float64Array[], mode: LossAggregation) => {
    const rowSum = m.map((row, i) => row.reduce((s, x, t) => s + x * msk[i][t], 0))
    const rowCnt = msk.map((row) => row.reduce((s, x) => s + x, 0))
    const seqMask = rowCnt.map((c): number => (c > 0 ? 1 : 0))
    const nSeq = seqMask.reduce((s, x) => s + x, 0)
    const nTok = rowCnt.reduce((s, x) => s + x, 0)
    // verl: `if is_zero_denom(denom): return loss_mat.sum() * 0.0`
    if (mode === 'token-mean') return nTok === 0 ? 0 : rowSum.reduce((s, x) => s + x, 0) / nTok
    if (mode === 'seq-mean-token-sum') return nSeq === 0 ? 0 : rowSum.reduce((s, x, i) => s + x * seqMask[i], 0) / nSeq
    if (mode === 'seq-mean-token-mean') return nSeq === 0 ? 0 : rowSum.reduce((s, x, i) => s + (seqMask[i] ? x / rowCnt[i] : 0), 0) / nSeq
    return L === 0 ? 0 : rowSum.reduce((s, x) => s + x, 0) / L
  }
  const pgLoss = aggLoss(pg, cfg.aggregation)
  const klLoss = aggLoss(kld, cfg.aggregation)
  const entropyLoss = aggLoss(ent, cfg.aggregation)
  return pgLoss + cfg.klCoef * klLoss - cfg.entropyCoef * entropyLoss
}

function onPolicyTokenBatch(advs: number[][], masks?: number[][], entropies?: number[][]): PolicyBatch {
  return {
    sequences: advs.map((A, i) => {
      const logp = new Float64Array(A.length).fill(-1)
      return {
        logp,
        oldLogp: logp.slice(),
        entropy: Float64Array.from(entropies?.[i] ?? A.map(() => 0)),
        advantages: A,
        mask: masks ? Uint8Array.from(masks[i]) : undefined,
      }
    }),
  }
}

function splitBatch<T>(items: readonly T[], cuts: number[]): T[][] {
  const out: T[][] = []
  let prev = 0
  for (const c of [...cuts, items.length]) {
    out.push(items.slice(prev, c))
    prev = c
  }
  return out
}

function expectInvalid(fn: () => unknown, field: string) {
  let caught: unknown
  try {
    fn()
  } catch (e) {
    caught = e
  }
  expect(caught, `expected InvalidArgumentError naming ${field}`).toBeInstanceOf(InvalidArgumentError)
  expect((caught as InvalidArgumentError).argument).toBe(field)
  expect((caught as Error).message).toContain(field.replace(/\[\d+\].*$/, ''))
}

// ---------------------------------------------------------------------------------------------
// (1) gradients against finite differences
// ---------------------------------------------------------------------------------------------

describe(`finite-difference gradient checks (h = ${H}, |fd − g| ≤ ${REL}|g| + ${ABS}; fresh seed ${FRESH})`, () => {
  for (const aggregation of LOSS_AGGREGATIONS) {
    for (const klEstimator of KL_ESTIMATORS) {
      it(`policy: ${aggregation}, ${klEstimator}`, () => {
        for (const seed of SEEDS) {
          for (const weightScope of ['policy', 'all'] as const) {
            const batch = randomPolicyBatch(seed * 7 + 1, { perTokenAdv: seed % 2 === 0 })
            const cfg: PolicyObjectiveConfig = {
              clipLow: CLIP_LOW,
              clipHigh: CLIP_HIGH,
              dualClip: seed % 3 === 0 ? null : DUAL,
              klCoef: 0.1,
              klEstimator,
              entropyCoef: 0.01,
              aggregation,
              weightScope,
            }
            const res = policyFdCheck(cfg, batch, `seed ${seed} ${weightScope}`)
            expect(Number.isFinite(res.loss)).toBe(true)
          }
        }
      })
    }
  }

  it('policy: the random batches visit every clip region', () => {
    let high = 0
    let low = 0
    let dual = 0
    for (const seed of SEEDS) {
      const m = policyObjective({ clipLow: CLIP_LOW, clipHigh: CLIP_HIGH, dualClip: DUAL }).compute(
        randomPolicyBatch(seed * 7 + 1, { perTokenAdv: true }),
      ).metrics
      high += m.clipFracHigh
      low += m.clipFracLow
      dual += m.dualClipFrac
    }
    expect(high).toBeGreaterThan(0)
    expect(low).toBeGreaterThan(0)
    expect(dual).toBeGreaterThan(0)
  })

  it('sft: a_t against finite differences, b_t = 0', () => {
    for (const seed of SEEDS) {
      const batch = randomPolicyBatch(seed) as unknown as SftBatch
      const obj = sftObjective()
      const res = obj.compute(batch)
      batch.sequences.forEach((s, i) => {
        for (let t = 0; t < s.logp.length; t++) {
          expect(res.b[i][t]).toBe(0)
          if (!(s.mask as Uint8Array)[t]) {
            expect(res.a[i][t]).toBe(0)
            continue
          }
          expectClose(centralDiff(s.logp as Float64Array, t, () => obj.compute(batch).loss), res.a[i][t], `seed ${seed} a[${i}][${t}]`)
        }
      })
    }
  })

  it('dpo: a_t of chosen and rejected tokens against finite differences', () => {
    for (const seed of SEEDS) {
      const r = rng(seed + 100)
      const base = randomPolicyBatch(seed + 100)
      const sequences = base.sequences.map((s, i) => ({
        logp: s.logp,
        refLogp: i % 3 === 2 ? uni(r, -20, -1) : s.refLogp!, // some references given as sums
        mask: s.mask,
      }))
      const pairs: [number, number][] = []
      for (let k = 0; k < 6; k++) {
        const c = Math.floor(r() * sequences.length)
        let j = Math.floor(r() * (sequences.length - 1))
        if (j >= c) j++
        pairs.push([c, j])
      }
      const batch: DpoBatch = { sequences, pairs }
      const beta = 0.1 + r()
      // plain DPO, with RPO's chosen-NLL term, and with DPO-Positive's penalty (both sides of its kink occur over the pairs)
      for (const obj of [dpoObjective({ beta }), dpoObjective({ beta, rpoAlpha: 0.2 + r() }), dpoObjective({ beta, dpopLambda: 1 + 50 * r() })]) {
        const res = obj.compute(batch)
        sequences.forEach((s, i) => {
          for (let t = 0; t < s.logp.length; t++) {
            expect(res.b[i][t]).toBe(0)
            if (!(s.mask as Uint8Array)[t]) continue
            expectClose(centralDiff(s.logp as Float64Array, t, () => obj.compute(batch).loss), res.a[i][t], `seed ${seed} rpoAlpha ${obj.config.rpoAlpha} dpopLambda ${obj.config.dpopLambda} a[${i}][${t}]`)
          }
        })
      }
    }
  })

  it('bradley-terry: dL/ds against finite differences', () => {
    for (const seed of SEEDS) {
      const r = rng(seed + 200)
      const scores = Float64Array.from({ length: 7 }, () => uni(r, -4, 4))
      const pairs: [number, number][] = [
        [0, 1],
        [2, 3],
        [4, 5],
        [6, 0],
        [1, 2],
        [3, 6],
      ]
      const batch: ScoreBatch = { scores, pairs }
      const obj = bradleyTerryObjective()
      const res = obj.compute(batch)
      for (let i = 0; i < scores.length; i++) {
        expectClose(centralDiff(scores, i, () => obj.compute(batch).loss), res.dScores[i], `seed ${seed} dS[${i}]`)
      }
    }
  })
})

// ---------------------------------------------------------------------------------------------
// verl semantics: the loss value equals verl's code transcribed on padded matrices
// ---------------------------------------------------------------------------------------------

describe("policy loss equals verl's compute_policy_loss_vanilla + kl_penalty + agg_loss", () => {
  it('on random batches, every aggregation × estimator × dual clip on/off', () => {
    for (const seed of SEEDS) {
      for (const aggregation of LOSS_AGGREGATIONS) {
        for (const klEstimator of KL_ESTIMATORS) {
          for (const dualClip of [DUAL, null]) {
            const batch = randomPolicyBatch(seed * 13 + 5, { perTokenAdv: true })
            const cfg = { clipLow: CLIP_LOW, clipHigh: CLIP_HIGH, dualClip, klCoef: 0.05, klEstimator, entropyCoef: 0.003, aggregation }
            const ours = policyObjective(cfg).compute(batch).loss
            const theirs = verlReference(batch, cfg)
            expect(Math.abs(ours - theirs), `seed ${seed} ${aggregation} ${klEstimator} c=${dualClip}`).toBeLessThanOrEqual(
              1e-12 * Math.max(1, Math.abs(theirs)),
            )
          }
        }
      }
    }
  })
})

// ---------------------------------------------------------------------------------------------
// (2) clip semantics, (7) signs
// ---------------------------------------------------------------------------------------------

describe('clip semantics', () => {
  const cfg = { clipLow: 0.2, clipHigh: 0.28, dualClip: 3 }
  // one token per sequence so each sequence's a is that token's gradient (token-mean, N = 6)
  const cases: Array<{ A: number; logRatio: number; zero: boolean; region: string }> = [
    { A: 1.5, logRatio: Math.log(1.5), zero: true, region: 'high' }, // r > 1 + ε_high
    { A: 1.5, logRatio: Math.log(0.5), zero: false, region: 'none' }, // A > 0, r < 1 − ε_low: unclipped (pessimistic)
    { A: -1.5, logRatio: Math.log(0.5), zero: true, region: 'low' }, // r < 1 − ε_low
    { A: -1.5, logRatio: Math.log(1.5), zero: false, region: 'none' }, // A < 0, 1 + ε_high < r < c: unclipped
    { A: -1.5, logRatio: Math.log(5), zero: true, region: 'dual' }, // r > c
    { A: 1.5, logRatio: Math.log(1.1), zero: false, region: 'none' },
  ]
  const batch: PolicyBatch = {
    sequences: cases.map(({ A, logRatio }) => ({
      logp: [-1],
      oldLogp: [-1 - logRatio],
      entropy: [1],
      advantages: A,
    })),
  }

  it('tokens outside the clip region for their advantage sign get exactly zero a_t', () => {
    const res = policyObjective(cfg).compute(batch)
    cases.forEach((c, i) => {
      if (c.zero) expect(Math.abs(res.a[i][0]), `case ${i} (${c.region})`).toBe(0)
      else expect(Math.abs(res.a[i][0]), `case ${i} (${c.region})`).toBeGreaterThan(0)
    })
    expect(res.metrics.clipFracHigh).toBeCloseTo(1 / 6, 15)
    expect(res.metrics.clipFracLow).toBeCloseTo(1 / 6, 15)
    expect(res.metrics.clipFrac).toBeCloseTo(2 / 6, 15)
    expect(res.metrics.dualClipFrac).toBeCloseTo(1 / 6, 15)
    // the unclipped ones are −A·r / N
    for (const i of [1, 3, 5]) expect(res.a[i][0]).toBeCloseTo((-cases[i].A * Math.exp(cases[i].logRatio)) / 6, 14)
  })

  it('the clipped branches are the constants −A(1+ε_high), −A(1−ε_low), −A·c', () => {
    const single = (i: number) => policyObjective(cfg).compute({ sequences: [batch.sequences[i]] }).loss
    expect(single(0)).toBeCloseTo(-1.5 * 1.28, 14)
    expect(single(2)).toBeCloseTo(1.5 * 0.8, 14)
    expect(single(4)).toBeCloseTo(1.5 * 3, 14)
  })

  it('dual clip bounds the per-token loss by −c·A for negative advantages, and only then', () => {
    const r = rng(7)
    for (let k = 0; k < 500; k++) {
      const A = -uni(r, 0.01, 5)
      const logRatio = uni(r, -10, 10)
      const seq = { logp: [-2], oldLogp: [-2 - logRatio], entropy: [0], advantages: A }
      const l = policyObjective(cfg).compute({ sequences: [seq] }).loss
      expect(l).toBeLessThanOrEqual(-3 * A * (1 + 1e-15))
      const unbounded = policyObjective({ ...cfg, dualClip: null }).compute({ sequences: [seq] })
      if (Math.exp(logRatio) > 3) {
        expect(unbounded.loss).toBeGreaterThan(-3 * A)
        expect(Math.abs(unbounded.a[0][0])).toBeGreaterThan(0)
      }
      // positive advantages are never dual-clipped
      const pos = policyObjective(cfg).compute({ sequences: [{ ...seq, advantages: -A }] })
      expect(pos.metrics.dualClipFrac).toBe(0)
    }
  })

  it('log ratio is clamped to ±20 as in verl: no gradient beyond', () => {
    const res = policyObjective({ ...cfg, dualClip: null }).compute({
      sequences: [{ logp: [-1], oldLogp: [-30], entropy: [0], advantages: -1 }],
    })
    expect(res.loss).toBeCloseTo(Math.exp(20), 3)
    expect(Math.abs(res.a[0][0])).toBe(0)
    expect(res.metrics.approxKl).toBe(-20)
  })

  it('(7) within the unclipped region, A > 0 gives a_t < 0 and A < 0 gives a_t > 0', () => {
    const r = rng(11)
    for (let k = 0; k < 300; k++) {
      const logRatio = uni(r, Math.log(0.81), Math.log(1.27)) // inside [1 − ε_low, 1 + ε_high]
      const A = uni(r, 0.01, 3)
      const mk = (adv: number) => ({ logp: [-1.3], oldLogp: [-1.3 - logRatio], refLogp: [-1.3], entropy: [2], advantages: adv })
      const o = policyObjective({ ...cfg, klCoef: 0.01, entropyCoef: 0.01 })
      expect(o.compute({ sequences: [mk(A)] }).a[0][0]).toBeLessThan(0)
      expect(o.compute({ sequences: [mk(-A)] }).a[0][0]).toBeGreaterThan(0)
    }
  })

  it('on-policy (no oldLogp): ratio 1, a_t = −w·A/N, never clipped', () => {
    const res = policyObjective(cfg).compute({
      sequences: [
        { logp: [-1, -2], entropy: [0, 0], advantages: 2, weight: 0.5 },
        { logp: [-3], entropy: [0], advantages: -1 },
      ],
    })
    expect(Array.from(res.a[0])).toEqual([(-0.5 * 2) / 3, (-0.5 * 2) / 3])
    expect(Array.from(res.a[1])).toEqual([1 / 3])
    expect(res.loss).toBeCloseTo((-0.5 * 2 * 2 + 1) / 3, 15)
    expect(res.metrics.clipFrac).toBe(0)
    expect(res.metrics.approxKl).toBe(0)
  })

  it('the per-sample weight scales the surrogate (COSE Eq. 4–5) and, with weightScope all, KL and entropy', () => {
    const seq = { logp: [-1], oldLogp: [-1.1], refLogp: [-1.5], entropy: [2], advantages: 1 }
    const c = { klCoef: 0.1, klEstimator: 'k1' as const, entropyCoef: 0.05 }
    const one = policyObjective(c).compute({ sequences: [seq] })
    const half = policyObjective(c).compute({ sequences: [{ ...seq, weight: 0.5 }] })
    const halfAll = policyObjective({ ...c, weightScope: 'all' }).compute({ sequences: [{ ...seq, weight: 0.5 }] })
    expect(half.metrics.policyLoss).toBeCloseTo(0.5 * one.metrics.policyLoss, 15)
    expect(half.metrics.kl).toBe(one.metrics.kl)
    expect(half.b[0][0]).toBe(one.b[0][0])
    expect(halfAll.loss).toBeCloseTo(0.5 * one.loss, 15)
    expect(halfAll.b[0][0]).toBeCloseTo(0.5 * one.b[0][0], 15)
  })
})

// ---------------------------------------------------------------------------------------------
// (3) aggregation modes by hand
// ---------------------------------------------------------------------------------------------

describe('aggregation modes equal their formulas on a hand example', () => {
  // on-policy, klCoef = entropyCoef = 0, so ℓ_t = −A_t: seq0 ℓ = [−1, −2, −3]; seq1 ℓ = [−4, −5]
  // (third token masked); seq2 fully masked (excluded from the sequence count, as verl does).
  const advs = [
    [1, 2, 3],
    [4, 5, 99],
    [7],
  ]
  const masks = [
    [1, 1, 1],
    [1, 1, 0],
    [0],
  ]
  const ents = [
    [0.5, 1, 1.5],
    [2, 3, 99],
    [99],
  ]
  const batch = onPolicyTokenBatch(advs, masks, ents)
  const expected: Record<LossAggregation, { loss: number; entropy: number; a: number[][] }> = {
    // Σ ℓ / N_tokens = −15/5
    'token-mean': { loss: -15 / 5, entropy: 8 / 5, a: [[-1 / 5, -2 / 5, -3 / 5], [-4 / 5, -5 / 5, 0], [0]] },
    // mean_i (Σ_t ℓ / n_i) = (−6/3 − 9/2)/2
    'seq-mean-token-mean': { loss: (-2 - 4.5) / 2, entropy: (1 + 2.5) / 2, a: [[-1 / 6, -2 / 6, -3 / 6], [-4 / 4, -5 / 4, 0], [0]] },
    // mean_i Σ_t ℓ = (−6 − 9)/2
    'seq-mean-token-sum': { loss: -15 / 2, entropy: 8 / 2, a: [[-1 / 2, -2 / 2, -3 / 2], [-4 / 2, -5 / 2, 0], [0]] },
    // Σ_i Σ_t ℓ / padded length (3)
    'seq-mean-token-sum-norm': { loss: -15 / 3, entropy: 8 / 3, a: [[-1 / 3, -2 / 3, -3 / 3], [-4 / 3, -5 / 3, 0], [0]] },
  }
  for (const mode of LOSS_AGGREGATIONS) {
    it(mode, () => {
      const res = policyObjective({ aggregation: mode }).compute(batch)
      expect(res.loss).toBeCloseTo(expected[mode].loss, 14)
      expect(res.metrics.policyLoss).toBeCloseTo(expected[mode].loss, 14)
      expect(res.metrics.entropy).toBeCloseTo(expected[mode].entropy, 14)
      res.a.forEach((ai, i) => ai.forEach((x, t) => expect(x).toBeCloseTo(expected[mode].a[i][t], 14)))
      expect(res.metrics.tokens).toBe(5)
      expect(res.metrics.sequences).toBe(2)
      // the entropy bonus: b_t = −entropyCoef · (the same per-token coefficient)
      const withEnt = policyObjective({ aggregation: mode, entropyCoef: 0.1 }).compute(batch)
      expect(withEnt.loss).toBeCloseTo(expected[mode].loss - 0.1 * expected[mode].entropy, 14)
      withEnt.b.forEach((bi, i) => bi.forEach((x, t) => expect(x).toBeCloseTo(0.1 * expected[mode].a[i][t] / advs[i][t], 14)))
    })
  }

  it('seq-mean-token-sum-norm with a constant lossScaleFactor (Dr. GRPO)', () => {
    const res = policyObjective({ aggregation: 'seq-mean-token-sum-norm', lossScaleFactor: 10 }).compute(batch)
    expect(res.loss).toBeCloseTo(-15 / 10, 15)
  })

  it('an empty batch (or one with every token masked) has loss 0 and zero gradients', () => {
    for (const mode of LOSS_AGGREGATIONS) {
      const res = policyObjective({ aggregation: mode }).compute(onPolicyTokenBatch([[1, 2]], [[0, 0]]))
      expect(res.loss).toBe(0)
      expect(Array.from(res.a[0])).toEqual([0, 0])
      expect(policyObjective({ aggregation: mode }).compute({ sequences: [] }).loss).toBe(0)
    }
  })
})

// ---------------------------------------------------------------------------------------------
// (4) KL estimators
// ---------------------------------------------------------------------------------------------

describe('KL estimators k1, k2, k3 (verl kl_penalty)', () => {
  it('values and derivatives at a hand point (logp = −1, ref = −1.5)', () => {
    expect(klK1(-1, -1.5)).toEqual({ value: 0.5, grad: 1 })
    expect(klK2(-1, -1.5)).toEqual({ value: 0.125, grad: 0.5 })
    const k3 = klK3(-1, -1.5) // x = ref − logp = −0.5: e^−0.5 + 0.5 − 1
    expect(k3.value).toBeCloseTo(0.10653065971263342, 15)
    expect(k3.grad).toBeCloseTo(1 - Math.exp(-0.5), 15)
    const k3b = klK3(-1.5, -1) // x = +0.5
    expect(k3b.value).toBeCloseTo(0.1487212707001282, 15)
    expect(k3b.grad).toBeCloseTo(-0.6487212707001282, 15)
    expect(klK3(-2, -2)).toEqual({ value: 0, grad: 0 })
  })

  it('k3 clamps: input ±20, output ±10, zero derivative where clamped', () => {
    expect(klK3(0, 25)).toEqual({ value: 10, grad: 0 }) // x clamped to 20, then output to 10
    expect(klK3(0, 3)).toEqual({ value: 10, grad: 0 }) // e³ − 4 = 16.09 → 10
    expect(klK3(0, -25)).toEqual({ value: 10, grad: 0 }) // x = −20: e^−20 + 19 → 10
    const k = klK3(5, 0) // x = −5, e^−5 + 4 = 4.0067 < 10: not clamped
    expect(k.value).toBeCloseTo(4.006737946999086, 14)
    expect(k.grad).toBeCloseTo(0.9932620530009145, 14)
    // the first unclamped point below the output clamp: x ≈ 2.528 gives 10
    expect(klK3(0, 2.5).value).toBeLessThan(10)
    expect(klK3(0, 2.5).grad).toBeCloseTo(1 - Math.exp(2.5), 13)
  })

  it('through the objective: metrics.kl is the aggregated estimator, klCoef scales it into the loss', () => {
    for (const [est, value] of [
      ['k1', 0.5],
      ['k2', 0.125],
      ['k3', 0.10653065971263342],
    ] as const) {
      const res = policyObjective({ klEstimator: est, klCoef: 0.2 }).compute({
        sequences: [{ logp: [-1], oldLogp: [-1], refLogp: [-1.5], entropy: [0], advantages: 0 }],
      })
      expect(res.metrics.kl).toBeCloseTo(value, 15)
      expect(res.loss).toBeCloseTo(0.2 * value, 15)
    }
    const clamped = policyObjective({ klEstimator: 'k3', klCoef: 1 }).compute({
      sequences: [{ logp: [-10], oldLogp: [-10], refLogp: [-5], entropy: [0], advantages: 0 }],
    })
    expect(clamped.metrics.kl).toBe(10)
    expect(Math.abs(clamped.a[0][0])).toBe(0)
  })

  it('metrics.kl is null when a sequence has no reference (and klCoef = 0)', () => {
    const res = policyObjective().compute(onPolicyTokenBatch([[1]]))
    expect(res.metrics.kl).toBeNull()
  })
})

// ---------------------------------------------------------------------------------------------
// (5) DPO, SFT and (6) Bradley–Terry by hand
// ---------------------------------------------------------------------------------------------

describe('DPO on a hand example', () => {
  it('β = 0.1: z = 0.1·[(−3 + 3.5) − (−5 + 4)] = 0.15', () => {
    const batch: DpoBatch = {
      sequences: [
        { logp: [-1, -2], refLogp: [-2, -1.5] }, // chosen: π = −3, ref = −3.5
        { logp: [-2, -2, -1, 7], refLogp: -4, mask: [1, 1, 1, 0] }, // rejected: π = −5, ref = −4 (sum given)
      ],
      pairs: [[0, 1]],
    }
    const res = dpoObjective({ beta: 0.1 }).compute(batch)
    expect(res.loss).toBeCloseTo(0.6209570477895321, 15) // log(1 + e^−0.15)
    expect(res.loss).toBeCloseTo(-Math.log(1 / (1 + Math.exp(-0.15))), 15)
    const g = -0.1 * 0.46257015465625045 // β·(−σ(−z))
    expect(res.a[0][0]).toBeCloseTo(g, 15)
    expect(res.a[0][1]).toBeCloseTo(g, 15)
    expect(Array.from(res.a[1]).slice(0, 3).every((x) => Math.abs(x + g) < 1e-15)).toBe(true)
    expect(res.a[1][3]).toBe(0)
    expect(res.metrics.rewardChosen).toBeCloseTo(0.05, 15)
    expect(res.metrics.rewardRejected).toBeCloseTo(-0.1, 15)
    expect(res.metrics.rewardMargin).toBeCloseTo(0.15, 15)
    expect(res.metrics.accuracy).toBe(1)
    expect(res.metrics.tokens).toBe(5)
  })

  it("RPO's term (Pang et al. 2024): + α·(chosen's mean token NLL), its gradient −α/T_c on each chosen token", () => {
    const batch: DpoBatch = {
      sequences: [
        { logp: [-1, -2], refLogp: [-2, -1.5] },
        { logp: [-2, -2, -1, 7], refLogp: -4, mask: [1, 1, 1, 0] },
      ],
      pairs: [[0, 1]],
    }
    const plain = dpoObjective({ beta: 0.1 }).compute(batch)
    const rpo = dpoObjective({ beta: 0.1, rpoAlpha: 0.5 }).compute(batch)
    expect(rpo.loss).toBeCloseTo(plain.loss + 0.5 * 1.5, 15) // chosen NLL (1 + 2) / 2
    expect(rpo.a[0][0]).toBeCloseTo(plain.a[0][0] - 0.5 / 2, 15)
    expect(rpo.a[0][1]).toBeCloseTo(plain.a[0][1] - 0.5 / 2, 15)
    expect(Array.from(rpo.a[1])).toEqual(Array.from(plain.a[1])) // the rejected side is DPO's alone
    expect(rpo.metrics.chosenNll).toBeCloseTo(1.5, 15)
    expect(plain.metrics.chosenNll).toBeCloseTo(1.5, 15) // measured either way
    expect(dpoObjective().config.rpoAlpha).toBe(0)
    expectInvalid(() => dpoObjective({ rpoAlpha: -1 }), 'rpoAlpha')
  })

  it("dpo-positive (Pal et al. 2024): the penalty β·λ·(ref_c − π_c) inside z once the chosen response is below its reference, nothing above it", () => {
    const pair = (chosenLogp: number[]): DpoBatch => ({
      sequences: [
        { logp: chosenLogp, refLogp: -3 },
        { logp: [-2, -3], refLogp: -4 },
      ],
      pairs: [[0, 1]],
    })
    const beta = 0.1
    const lambda = 50
    // chosen below its reference by 0.5: z = 0.1·((−3.5 + 3) − (−5 + 4)) − 0.1·50·0.5 = 0.05 − 2.5
    const below = dpoObjective({ beta, dpopLambda: lambda }).compute(pair([-1.5, -2]))
    const z = 0.05 - 2.5
    expect(below.loss).toBeCloseTo(Math.log1p(Math.exp(-z)), 14)
    const g = -beta / (1 + Math.exp(z)) // ∂L/∂π_r = −g … the rejected side is DPO's
    expect(below.a[1][0]).toBeCloseTo(-g, 14)
    expect(below.a[0][0]).toBeCloseTo(g * (1 + lambda), 14) // the chosen side, steeper by 1 + λ
    expect(below.metrics.chosenBelowReference).toBe(1)
    expect(below.metrics.accuracy).toBe(1) // the reward margin 0.05 > 0, the penalty aside
    // chosen above its reference: plain DPO exactly
    const above = [dpoObjective({ beta, dpopLambda: lambda }), dpoObjective({ beta })].map((o) => o.compute(pair([-1, -1.5])))
    expect(above[0].loss).toBe(above[1].loss)
    expect(Array.from(above[0].a[0])).toEqual(Array.from(above[1].a[0]))
    expect(above[0].metrics.chosenBelowReference).toBe(0)
    expect(dpoObjective().config.dpopLambda).toBe(0)
    expectInvalid(() => dpoObjective({ dpopLambda: -1 }), 'dpopLambda')
  })

  it('default β is 0.1 (UID B.3); the loss is stable for huge margins', () => {
    expect(dpoObjective().config.beta).toBe(0.1)
    const res = dpoObjective({ beta: 1 }).compute({
      sequences: [
        { logp: [-1], refLogp: -2000 },
        { logp: [-1], refLogp: 0 },
      ],
      pairs: [
        [0, 1],
        [1, 0],
      ],
    })
    expect(res.loss).toBeCloseTo(2000 / 2, 10) // pair 2: softplus(2000) = 2000; pair 1: ≈ 0
    expect(res.metrics.accuracy).toBe(0.5)
  })
})

describe('weighted SFT (UID Eq. 8)', () => {
  it('hand example: L = −(1/N) Σ_i (w_i/T_i) Σ_t logp', () => {
    const batch: SftBatch = {
      sequences: [
        { logp: [-1, -3], weight: 2 },
        { logp: [-2, -4, -100], weight: 0.5, mask: [1, 1, 0] },
        { logp: [-9], mask: [0] }, // no response tokens: not counted in N
      ],
    }
    const res = sftObjective().compute(batch)
    expect(res.loss).toBeCloseTo(-(2 * -2 + 0.5 * -3) / 2, 15)
    expect(Array.from(res.a[0])).toEqual([-2 / 4, -2 / 4])
    expect(Array.from(res.a[1])).toEqual([-0.5 / 4, -0.5 / 4, 0])
    expect(Array.from(res.a[2])).toEqual([0])
    expect(res.metrics.nll).toBeCloseTo(10 / 4, 15)
    expect(res.metrics.sequences).toBe(2)
  })

  it("agrees with the scalar oracle weightedSftLoss (test/reference/offline-losses64.ts)", () => {
    const r = rng(5)
    const logps = Array.from({ length: 6 }, () => Array.from({ length: 1 + Math.floor(r() * 9) }, () => uni(r, -6, 0)))
    const masks = logps.map((l) => l.map((_, t) => (t === 0 || r() < 0.7 ? 1 : 0)))
    const w = logps.map(() => uni(r, 0.2, 2))
    const res = sftObjective().compute({ sequences: logps.map((logp, i) => ({ logp, mask: masks[i], weight: w[i] })) })
    expect(res.loss).toBeCloseTo(weightedSftLoss(w, logps, masks), 13)
  })
})

describe('Bradley–Terry (JZ Eq. 13)', () => {
  it('equals −log σ(s⁺ − s⁻), mean over pairs', () => {
    const scores = [0.3, -1.2, 2.5, 2.0]
    const res = bradleyTerryObjective().compute({ scores, pairs: [[0, 1], [3, 2]] })
    const nls = (d: number) => -Math.log(1 / (1 + Math.exp(-d)))
    expect(res.loss).toBeCloseTo((nls(1.5) + nls(-0.5)) / 2, 15)
    expect(res.loss).toBeCloseTo(bradleyTerryLoss([0.3, 2.0], [-1.2, 2.5]), 15)
    const sig = (x: number) => 1 / (1 + Math.exp(-x))
    expect(res.dScores[0]).toBeCloseTo(-sig(-1.5) / 2, 15)
    expect(res.dScores[1]).toBeCloseTo(sig(-1.5) / 2, 15)
    expect(res.dScores[3]).toBeCloseTo(-sig(0.5) / 2, 15)
    expect(res.dScores[2]).toBeCloseTo(sig(0.5) / 2, 15)
    expect(res.metrics.accuracy).toBe(0.5)
    expect(res.metrics.margin).toBeCloseTo(0.5, 15)
  })

  it('is numerically stable for huge margins (softplus form)', () => {
    const res = bradleyTerryObjective().compute({ scores: [1000, -1000], pairs: [[0, 1], [1, 0]] })
    expect(res.loss).toBe(1000) // (softplus(−2000) + softplus(2000)) / 2
    // s0: −σ(−2000)/2 (pair 1) + σ(2000)/2 (pair 2) = 1/2; s1 the opposite
    expect(res.dScores[0]).toBeCloseTo(0.5, 15)
    expect(res.dScores[1]).toBeCloseTo(-0.5, 15)
    expect(Number.isFinite(bradleyTerryObjective().compute({ scores: [-1e6, 1e6], pairs: [[0, 1]] }).loss)).toBe(true)
  })
})

// ---------------------------------------------------------------------------------------------
// (8) typed errors
// ---------------------------------------------------------------------------------------------

describe('bad configs and batches throw typed errors naming the field', () => {
  it('policy config', () => {
    expectInvalid(() => policyObjective({ aggregation: 'token-sum' as LossAggregation }), 'aggregation')
    expectInvalid(() => policyObjective({ klEstimator: 'k4' as 'k1' }), 'klEstimator')
    expectInvalid(() => policyObjective({ clip: -0.1 }), 'clip')
    expectInvalid(() => policyObjective({ clipLow: -0.2 }), 'clipLow')
    expectInvalid(() => policyObjective({ clipLow: 1 }), 'clipLow')
    expectInvalid(() => policyObjective({ clipHigh: -1 }), 'clipHigh')
    expectInvalid(() => policyObjective({ clipHigh: Infinity }), 'clipHigh')
    expectInvalid(() => policyObjective({ dualClip: 1 }), 'dualClip')
    expectInvalid(() => policyObjective({ dualClip: -3 }), 'dualClip')
    expectInvalid(() => policyObjective({ klCoef: -0.01 }), 'klCoef')
    expectInvalid(() => policyObjective({ entropyCoef: NaN }), 'entropyCoef')
    expectInvalid(() => policyObjective({ lossScaleFactor: 0 }), 'lossScaleFactor')
    expectInvalid(() => policyObjective({ weightScope: 'kl' as 'all' }), 'weightScope')
    expectInvalid(() => policyObjective({ klcoef: 0.1 } as PolicyObjectiveConfig), 'klcoef')
    expect(policyObjective({ dualClip: null }).config.dualClip).toBeNull()
    expect(policyObjective({ clip: 0.2, clipHigh: 0.28 }).config).toMatchObject({ clipLow: 0.2, clipHigh: 0.28, dualClip: 3 })
  })

  it('other objectives and the registry', () => {
    expectInvalid(() => dpoObjective({ beta: 0 }), 'beta')
    expectInvalid(() => dpoObjective({ beta: -1 }), 'beta')
    expectInvalid(() => sftObjective({ alpha: 2 } as never), 'alpha')
    expectInvalid(() => bradleyTerryObjective({ margin: 1 } as never), 'margin')
    expectInvalid(() => getObjective('ppo' as 'policy'), 'name')
    expectInvalid(() => createObjective({ name: 'grpo' } as never), 'name')
    expectInvalid(() => createObjective({ name: 'policy', aggregation: 'x' } as never), 'aggregation')
    expect(getObjective('policy')).toBe(policyObjective)
    expect(getObjective('bradley-terry')).toBe(bradleyTerryObjective)
    expect(createObjective({ name: 'dpo', beta: 0.2 }).name).toBe('dpo')
    expect(createObjective({ name: 'bradley-terry' }).kind).toBe('score')
    expect(createObjective({ name: 'policy', klCoef: 0.01, clipHigh: 0.28 }).config).toMatchObject({ klCoef: 0.01, clipHigh: 0.28 })
  })

  it('malformed batches', () => {
    const p = policyObjective({ klCoef: 0.1 })
    const ok = { logp: [-1, -2], oldLogp: [-1, -2], refLogp: [-1, -2], entropy: [1, 1], advantages: 1 }
    expectInvalid(() => p.compute({ sequences: [ok, { ...ok, entropy: [1] }] }), 'sequences[1].entropy')
    expectInvalid(() => p.compute({ sequences: [{ ...ok, oldLogp: [1, 2, 3] }] }), 'sequences[0].oldLogp')
    expectInvalid(() => p.compute({ sequences: [{ ...ok, refLogp: undefined }] }), 'sequences[0].refLogp')
    expectInvalid(() => p.compute({ sequences: [{ ...ok, advantages: [1] }] }), 'sequences[0].advantages')
    expectInvalid(() => p.compute({ sequences: [{ ...ok, mask: new Uint8Array(3) }] }), 'sequences[0].mask')
    expectInvalid(() => p.compute({ sequences: [{ ...ok, weight: -0.5 }] }), 'sequences[0].weight')
    expectInvalid(() => p.compute({} as PolicyBatch), 'sequences')
    expectInvalid(() => p.compute({ sequences: [ok] }, { tokens: -1 }), 'normalizer.tokens')
    const d = dpoObjective()
    const ds = { logp: [-1], refLogp: [-1] }
    expectInvalid(() => d.compute({ sequences: [ds, ds], pairs: [[0, 2]] }), 'pairs[0][1]')
    expectInvalid(() => d.compute({ sequences: [ds, ds], pairs: [[1, 1]] }), 'pairs[0]')
    expectInvalid(() => bradleyTerryObjective().compute({ scores: [1, 2], pairs: [[0, 1.5]] as never }), 'pairs[0][1]')
  })

  it('NaN/Inf in unmasked inputs throws NonFiniteError naming the element; masked ones are ignored', () => {
    const p = policyObjective()
    const seq = () => ({ logp: [-1, -2], oldLogp: [-1, -2], entropy: [1, 1], advantages: [1, 1] as number[] })
    const expectNonFinite = (fn: () => unknown, field: string, stage: 'input' | 'output') => {
      let caught: unknown
      try {
        fn()
      } catch (e) {
        caught = e
      }
      expect(caught).toBeInstanceOf(NonFiniteError)
      expect((caught as NonFiniteError).field).toBe(field)
      expect((caught as NonFiniteError).stage).toBe(stage)
      expect((caught as NonFiniteError).code).toBe('NON_FINITE')
    }
    const s1 = seq()
    s1.logp[1] = NaN
    expectNonFinite(() => p.compute({ sequences: [seq(), s1] }), 'sequences[1].logp[1]', 'input')
    expect(Number.isFinite(p.compute({ sequences: [{ ...s1, mask: [1, 0] }] }).loss)).toBe(true)
    const s2 = seq()
    s2.advantages[0] = Infinity
    expectNonFinite(() => p.compute({ sequences: [s2] }), 'sequences[0].advantages[0]', 'input')
    const s3 = { ...seq(), entropy: [1, -Infinity] }
    expectNonFinite(() => p.compute({ sequences: [s3] }), 'sequences[0].entropy[1]', 'input')
    expectNonFinite(() => p.compute({ sequences: [{ ...seq(), weight: NaN }] }), 'sequences[0].weight', 'input')
    // finite inputs whose loss overflows
    expectNonFinite(
      () => policyObjective({ dualClip: null }).compute({ sequences: [{ ...seq(), oldLogp: [-2, -3], advantages: -1e308 }] }),
      'loss',
      'output',
    )
    expectNonFinite(() => sftObjective().compute({ sequences: [{ logp: [-1, NaN] }] }), 'sequences[0].logp[1]', 'input')
    expectNonFinite(
      () => dpoObjective().compute({ sequences: [{ logp: [-1], refLogp: NaN }, { logp: [-1], refLogp: 0 }], pairs: [[0, 1]] }),
      'sequences[0].refLogp',
      'input',
    )
    expectNonFinite(() => bradleyTerryObjective().compute({ scores: [0, Infinity], pairs: [[0, 1]] }), 'scores[1]', 'input')
  })
})

// ---------------------------------------------------------------------------------------------
// (9) micro-batches with a global normalizer
// ---------------------------------------------------------------------------------------------

describe('micro-batch split with the global normalizer sums to the full batch', () => {
  const TOL = 1e-13
  function expectSameSum(full: { loss: number; a: Float64Array[]; b: Float64Array[] }, parts: { loss: number; a: Float64Array[]; b: Float64Array[] }[]) {
    const loss = parts.reduce((s, p) => s + p.loss, 0)
    expect(Math.abs(loss - full.loss)).toBeLessThanOrEqual(TOL * Math.max(1, Math.abs(full.loss)))
    const a = parts.flatMap((p) => p.a)
    const b = parts.flatMap((p) => p.b)
    expect(a.length).toBe(full.a.length)
    // each sequence lives in exactly one micro-batch, so its coefficients must be identical
    full.a.forEach((ai, i) => expect(Array.from(a[i])).toEqual(Array.from(ai)))
    full.b.forEach((bi, i) => expect(Array.from(b[i])).toEqual(Array.from(bi)))
  }

  for (const aggregation of LOSS_AGGREGATIONS) {
    it(`policy, ${aggregation}`, () => {
      for (const seed of SEEDS) {
        const batch = randomPolicyBatch(seed * 31 + 3, { perTokenAdv: true })
        const obj = policyObjective({ clipLow: 0.2, clipHigh: 0.28, klCoef: 0.05, entropyCoef: 0.01, aggregation, weightScope: 'all' })
        const micro = splitBatch(batch.sequences, [1, Math.ceil(batch.sequences.length / 2)]).map((sequences) => ({ sequences }))
        const norm: BatchNormalizer = globalNormalizer(micro)
        const full = obj.compute(batch)
        const parts = micro.map((mb) => obj.compute(mb, norm))
        expectSameSum(full, parts)
        const kl = parts.reduce((s, p) => s + (p.metrics.kl ?? NaN), 0)
        expect(kl).toBeCloseTo(full.metrics.kl!, 13)
        // without the normalizer, token-mean micro-batches would not sum to the full loss
        if (aggregation === 'token-mean' && micro.filter((m) => globalNormalizer([m]).tokens > 0).length >= 2) {
          const naive = micro.reduce((s, mb) => s + obj.compute(mb).loss, 0)
          expect(Math.abs(naive - full.loss)).toBeGreaterThan(1e-9)
        }
      }
    })
  }

  it('sft, dpo and bradley-terry', () => {
    for (const seed of SEEDS) {
      const base = randomPolicyBatch(seed * 17 + 9)
      const sft = sftObjective()
      const micro = splitBatch(base.sequences, [2]).map((sequences) => ({ sequences }))
      const norm = globalNormalizer(micro)
      expectSameSum(sft.compute(base), micro.map((mb) => sft.compute(mb, norm)))

      const dpoSeqs = base.sequences.map((s) => ({ logp: s.logp, refLogp: s.refLogp!, mask: s.mask }))
      const dpo = dpoObjective({ beta: 0.3 })
      const n = dpoSeqs.length
      const full = dpo.compute({ sequences: dpoSeqs, pairs: [[0, n - 1], [n - 1, 0], [1, 0]] })
      // micro-batch k holds only its own pairs (all sequences are sent with each, gradients add)
      const m1 = { sequences: dpoSeqs, pairs: [[0, n - 1]] as [number, number][] }
      const m2 = { sequences: dpoSeqs, pairs: [[n - 1, 0], [1, 0]] as [number, number][] }
      const pn = { pairs: globalNormalizer([m1, m2]).pairs }
      const r1 = dpo.compute(m1, pn)
      const r2 = dpo.compute(m2, pn)
      expect(r1.loss + r2.loss).toBeCloseTo(full.loss, 14)
      full.a.forEach((ai, i) => ai.forEach((x, t) => expect(r1.a[i][t] + r2.a[i][t]).toBeCloseTo(x, 14)))

      const r = rng(seed)
      const scores = Float64Array.from({ length: 6 }, () => uni(r, -3, 3))
      const bt = bradleyTerryObjective()
      const fullBt = bt.compute({ scores, pairs: [[0, 1], [2, 3], [4, 5]] })
      const b1 = bt.compute({ scores: scores.subarray(0, 2), pairs: [[0, 1]] }, { pairs: 3 })
      const b2 = bt.compute({ scores: scores.subarray(2), pairs: [[0, 1], [2, 3]] }, { pairs: 3 })
      expect(b1.loss + b2.loss).toBeCloseTo(fullBt.loss, 14)
      expect([...b1.dScores, ...b2.dScores]).toEqual([...fullBt.dScores])
    }
  })
})
