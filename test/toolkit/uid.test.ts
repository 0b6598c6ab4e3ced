import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import fc from 'fast-check'
import { afterAll, describe, expect, it } from 'vitest'
import {
  binBoundaries,
  empiricalCdfMidrank,
  entropyBins,
  fitUidCalibration,
  huber1,
  isUidEligible,
  loadUidCalibration,
  meanNormalizeBins,
  midrankQuantiles,
  offlineUidFeatures,
  onlineUidFeatures,
  responseTrajectory,
  robustScale,
  saveUidCalibration,
  scoreOfflineUid,
  selfCertaintyGroupScoresOnline,
  topKTokenStats,
  uidConj,
  uidGroupScoresOnline,
  uidMix,
} from '../../src/signals/index.js'

const dirs: string[] = []
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true })
})

describe('UID A.1 relative-position bins', () => {
  it('uses boundaries ⌊kT/B⌋', () => {
    expect(Array.from(binBoundaries(64, 32))).toEqual(Array.from({ length: 33 }, (_, k) => 2 * k))
    const b = binBoundaries(33, 32)
    expect(b[0]).toBe(0)
    expect(b[31]).toBe(31)
    expect(b[32]).toBe(33)
  })

  it('averages the entropies of each bin (T = 33: the last bin holds two tokens)', () => {
    const H = Float64Array.from({ length: 33 }, (_, t) => t + 1)
    const h = entropyBins(H) as Float64Array
    expect(h).not.toBeNull()
    expect(Array.from(h.subarray(0, 31))).toEqual(Array.from({ length: 31 }, (_, k) => k + 1))
    expect(h[31]).toBe(32.5)
  })

  it('bins only the masked positions', () => {
    const H = Float32Array.from({ length: 40 }, (_, t) => t)
    const mask = Uint8Array.from({ length: 40 }, (_, t) => (t < 8 ? 0 : 1)) // 32 valid positions
    const h = entropyBins(H, mask) as Float64Array
    expect(Array.from(h)).toEqual(Array.from({ length: 32 }, (_, k) => k + 8))
  })

  it('is ineligible below 32 scored tokens (B.1)', () => {
    expect(entropyBins(new Float32Array(31))).toBeNull()
    expect(entropyBins(new Float32Array(40), new Uint8Array(40).fill(1).fill(0, 0, 9))).toBeNull()
    expect(entropyBins(new Float32Array(0))).toBeNull()
    expect(isUidEligible(31)).toBe(false)
    expect(isUidEligible(32)).toBe(true)
  })
})

describe('UID B.1 response trajectory from top-K logits', () => {
  it('renormalizes the top 25 of K = 64 logits, bins the masked entropies and averages C_t', () => {
    const T = 40
    const K = 64
    const rows = new Float32Array(T * K)
    for (let t = 0; t < T; t++) for (let j = 0; j < K; j++) rows[t * K + j] = Math.sin(t * 0.7 + j * 1.3) * 3 - j * 0.05
    const mask = Uint8Array.from({ length: T }, (_, t) => (t % 9 === 4 ? 0 : 1)) // t = 4, 13, 22, 31 dropped: 36 scored
    const tr = responseTrajectory(rows, K, mask)
    const stats = topKTokenStats(rows, K, { k: 25 })
    expect(tr.tokens).toBe(36)
    expect(Array.from(tr.bins!)).toEqual(Array.from(entropyBins(stats.entropy, mask)!))
    const kept = Array.from(stats.selfCertainty).filter((_, t) => mask[t])
    expect(tr.selfCertainty).toBeCloseTo(kept.reduce((a, b) => a + b, 0) / kept.length, 12)
    // with all 64 logits the statistics differ
    expect(responseTrajectory(rows, K, mask, { k: 64 }).selfCertainty).not.toBeCloseTo(tr.selfCertainty, 3)
  })

  it('marks short responses ineligible for UID but keeps their Self-Certainty', () => {
    const tr = responseTrajectory([1, 0, 2, 2], 2)
    expect(tr.tokens).toBe(2)
    expect(tr.bins).toBeNull()
    // rows (1, 0): C = log(e + 1) − ½ − log 2; rows (2, 2): C = 0
    expect(tr.selfCertainty).toBeCloseTo((Math.log(Math.E + 1) - 0.5 - Math.log(2)) / 2, 12)
    expect(responseTrajectory([1, 0], 2, [false]).selfCertainty).toBeNaN()
  })
})

describe('UID Eq. 10–11 online features', () => {
  it('normalizes by the mean and computes population variance and −mean |Δ|', () => {
    expect(Array.from(meanNormalizeBins([1, 2, 3, 2]))).toEqual([0.5, 1, 1.5, 1])
    const f = onlineUidFeatures([1, 2, 3, 2])
    expect(f.G).toBeCloseTo(0.125, 15)
    expect(f.S).toBeCloseTo(-0.5, 15)
  })

  it('gives G = S = 0 for a constant or all-zero trajectory (|h̄| floored at 1e-8)', () => {
    expect(onlineUidFeatures([2, 2, 2, 2])).toEqual({ G: 0, S: 0 })
    const z = onlineUidFeatures(new Float64Array(32))
    expect(z.G).toBe(0)
    expect(z.S).toBe(0)
  })

  it('is invariant to rescaling the entropy trajectory', () => {
    const a = onlineUidFeatures([0.3, 1.2, 0.7, 2.5, 0.1])
    const b = onlineUidFeatures([0.9, 3.6, 2.1, 7.5, 0.3])
    expect(b.G).toBeCloseTo(a.G, 12)
    expect(b.S).toBeCloseTo(a.S, 12)
  })
})

describe('UID Eq. 12 midrank quantiles', () => {
  it('counts smaller values plus half the ties, self included', () => {
    expect(Array.from(midrankQuantiles([3, 1, 3, 2]))).toEqual([0.75, 0.125, 0.75, 0.375])
    expect(Array.from(midrankQuantiles([7]))).toEqual([0.5])
    expect(Array.from(midrankQuantiles([4, 4, 4, 4]))).toEqual([0.5, 0.5, 0.5, 0.5])
    expect(Array.from(midrankQuantiles([]))).toEqual([])
    expect(() => midrankQuantiles([1, NaN])).toThrow(RangeError)
  })

  it('lies in (0, 1) and is permutation-equivariant (property)', () => {
    fc.assert(
      fc.property(
        fc.array(fc.oneof(fc.double({ noNaN: true }), fc.integer({ min: -3, max: 3 })), { minLength: 1, maxLength: 40 }),
        fc.integer(),
        (values, seed) => {
          const q = midrankQuantiles(values)
          for (const x of q) if (!(x > 0 && x < 1)) return false
          // a seeded permutation of the inputs permutes the outputs the same way
          const perm = values.map((_, i) => i)
          let s = seed >>> 0
          for (let i = perm.length - 1; i > 0; i--) {
            s = (Math.imul(s, 1664525) + 1013904223) >>> 0
            const j = s % (i + 1)
            ;[perm[i], perm[j]] = [perm[j], perm[i]]
          }
          const qp = midrankQuantiles(perm.map((i) => values[i]))
          return perm.every((i, k) => qp[k] === q[i])
        },
      ),
    )
  })
})

describe('UID online group scores (Eq. 1–2, D.2, B.1)', () => {
  it('ranks eligible responses, multiplies (Conj) or averages (Mix) the quantiles, scores ineligible as 0', () => {
    // G: [0.125, 0, —, 0.25]; S: [−0.5, 0, —, −1]
    const bins = [[1, 2, 3, 2], [2, 2, 2, 2], null, [1, 3, 1, 3]]
    const conj = uidGroupScoresOnline(bins, 'conj')
    expect(Array.from(conj.eligible)).toEqual([1, 1, 0, 1])
    expect(conj.u[0]).toBeCloseTo(0.5, 15)
    expect(conj.u[1]).toBeCloseTo(1 / 6, 15)
    expect(conj.u[3]).toBeCloseTo(5 / 6, 15)
    expect(conj.v[1]).toBeCloseTo(5 / 6, 15)
    expect(conj.u[2]).toBeNaN()
    expect(conj.scores[0]).toBeCloseTo(0.25, 15)
    expect(conj.scores[1]).toBeCloseTo(5 / 36, 15)
    expect(conj.scores[2]).toBe(0)
    expect(conj.scores[3]).toBeCloseTo(5 / 36, 15)
    const mix = uidGroupScoresOnline(bins, 'mix')
    expect(Array.from(mix.scores)).toEqual([0.5, 0.5, 0, 0.5])
    expect(uidConj(0.5, 0.4)).toBe(0.2)
    expect(uidMix(0.5, 0.4)).toBeCloseTo(0.45, 15)
  })

  it('handles empty, single-response and all-tied groups', () => {
    expect(uidGroupScoresOnline([]).scores.length).toBe(0)
    expect(Array.from(uidGroupScoresOnline([[1, 2, 3]]).scores)).toEqual([0.25])
    expect(Array.from(uidGroupScoresOnline([[1, 1], [2, 2], [3, 3]], 'conj').scores)).toEqual([0.25, 0.25, 0.25])
    expect(Array.from(uidGroupScoresOnline([null, null]).scores)).toEqual([0, 0])
  })

  it('Self-Certainty: midranks of response means; null, NaN or too few tokens are ineligible', () => {
    const r = selfCertaintyGroupScoresOnline([0.3, null, 0.1, NaN, 0.3])
    expect(Array.from(r.eligible)).toEqual([1, 0, 1, 0, 1])
    expect(r.scores[0]).toBeCloseTo(2 / 3, 15)
    expect(r.scores[2]).toBeCloseTo(1 / 6, 15)
    expect(r.scores[1]).toBe(0)
    const withCounts = selfCertaintyGroupScoresOnline([0.3, 0.2, 0.1], { tokenCounts: [40, 0, 12], minTokens: 32 })
    expect(Array.from(withCounts.scores)).toEqual([0.5, 0, 0])
  })
})

describe('UID Eq. 13–15 offline features and calibration', () => {
  it('robust scale is 1.4826·MAD with a 1e-3 floor', () => {
    expect(robustScale([1, 2, 3, 4, 100])).toBeCloseTo(1.4826, 15)
    expect(robustScale([1, 2, 3, 4])).toBeCloseTo(1.4826, 15) // median 2.5, |dev| = 1.5, .5, .5, 1.5 → MAD 1
    expect(robustScale([0.7, 0.7, 0.7])).toBe(1e-3)
    expect(() => robustScale([])).toThrow(RangeError)
  })

  it('Huber ρ₁ is quadratic inside |d| ≤ 1 and linear outside', () => {
    expect(huber1(0.5)).toBe(0.125)
    expect(huber1(1)).toBe(0.5)
    expect(huber1(-1)).toBe(0.5)
    expect(huber1(-3)).toBe(2.5)
    expect(huber1(0)).toBe(0)
  })

  it('G^off and S^off on a hand example', () => {
    // h̄ = 2, (h − h̄)/0.5 = (−2, 0, 2, 0) → G = 2; Δh/0.5 = (2, 2, −2) → ρ = 1.5 each → S = −1.5
    const f = offlineUidFeatures([1, 2, 3, 2], 0.5)
    expect(f.G).toBeCloseTo(2, 15)
    expect(f.S).toBeCloseTo(-1.5, 15)
    expect(() => offlineUidFeatures([1, 2], 0)).toThrow(RangeError)
  })

  it('empirical CDF uses the midrank convention', () => {
    const cal = [1, 2, 2, 3]
    expect(empiricalCdfMidrank(cal, 2)).toBe(0.5)
    expect(empiricalCdfMidrank(cal, 0)).toBe(0)
    expect(empiricalCdfMidrank(cal, 4)).toBe(1)
    expect(empiricalCdfMidrank(cal, 2.5)).toBe(0.75)
    expect(empiricalCdfMidrank(cal, 1)).toBe(0.125)
    expect(() => empiricalCdfMidrank([], 1)).toThrow(RangeError)
  })

  function sampleBins(seed: number): number[] {
    let s = seed
    return Array.from({ length: 32 }, (_, b) => {
      s = (s * 16807) % 2147483647
      return 1 + 0.5 * Math.sin(b / (2 + (seed % 5))) + (s / 2147483647) * 0.3
    })
  }

  it('fits a frozen calibration and scores responses against it', () => {
    const samples = Array.from({ length: 9 }, (_, i) => ({ bins: sampleBins(i + 1), selfCertainty: i / 10 }))
    const cal = fitUidCalibration(samples)
    const pooled = samples.flatMap((s) => s.bins)
    expect(cal.scale).toBeCloseTo(robustScale(pooled), 15)
    expect(cal.count).toBe(9)
    expect(cal.G).toEqual([...cal.G].sort((a, b) => a - b))
    const f = offlineUidFeatures(samples[3].bins, cal.scale)
    const sc = scoreOfflineUid(cal, samples[3].bins, 0.3)
    expect(sc.G).toBeCloseTo(f.G, 15)
    expect(sc.u).toBe(empiricalCdfMidrank(cal.G, f.G))
    expect(sc.v).toBe(empiricalCdfMidrank(cal.S, f.S))
    expect(sc.conj).toBeCloseTo(sc.u * sc.v, 15)
    expect(sc.mix).toBeCloseTo((sc.u + sc.v) / 2, 15)
    expect(sc.selfCertainty).toBeCloseTo(3.5 / 9, 15) // 3 smaller values + half of itself
    expect(scoreOfflineUid(cal, samples[0].bins).selfCertainty).toBeNaN()
    expect(() => scoreOfflineUid(cal, [1, 2, 3])).toThrow(RangeError)
    expect(() => fitUidCalibration([])).toThrow(RangeError)
    expect(() => fitUidCalibration([{ bins: [1, 2] }, { bins: [1, 2, 3] }])).toThrow(RangeError)
  })

  it('saves atomically and loads the same calibration; rejects corrupt files', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'ad-cal-'))
    dirs.push(dir)
    const cal = fitUidCalibration(Array.from({ length: 5 }, (_, i) => ({ bins: sampleBins(i + 7) })))
    const path = join(dir, 'uid-calibration.json')
    await saveUidCalibration(path, cal)
    expect(await readdir(dir)).toEqual(['uid-calibration.json'])
    expect(await loadUidCalibration(path)).toEqual(cal)
    await writeFile(join(dir, 'truncated.json'), JSON.stringify(cal).slice(0, 40))
    await expect(loadUidCalibration(join(dir, 'truncated.json'))).rejects.toThrow(TypeError)
    await writeFile(join(dir, 'unsorted.json'), JSON.stringify({ ...cal, G: [...cal.G].reverse() }))
    await expect(loadUidCalibration(join(dir, 'unsorted.json'))).rejects.toThrow(/ascending/)
    await writeFile(join(dir, 'other.json'), JSON.stringify({ format: 'something-else' }))
    await expect(loadUidCalibration(join(dir, 'other.json'))).rejects.toThrow(/format/)
  })
})
