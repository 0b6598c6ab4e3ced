// DPO's train.pairSpan 'first-difference' (a token-level Step-DPO, outside UID): each response of a
// pair is scored up to and including the first token where the two differ. Checked against the
// DPO objective: the shared prefix cancels in z, so the loss is DPO's on the two split tokens alone,
// and no token after the split gets a gradient.
import { describe, expect, it } from 'vitest'
import { ConfigError } from '../../src/engine/errors.js'
import { DPO_TOY_PRESET, resolveOfflineConfig } from '../../src/methods/offline/config.js'
import { firstDifference, pairSequences } from '../../src/methods/offline/loop.js'
import { dpoObjective } from '../../src/train/objectives/dpo.js'
import { Rng } from '../../src/util/prng.js'

describe('firstDifference', () => {
  it('is the first position where two token lists differ, or the shorter length', () => {
    expect(firstDifference([5, 1, 2, 9], [5, 1, 3, 9])).toBe(2)
    expect(firstDifference([7], [8])).toBe(0)
    expect(firstDifference([5, 1, 2], [5, 1, 2, 4])).toBe(3)
    expect(firstDifference([], [1])).toBe(0)
  })
})

describe("pairSequences: 'whole' and 'first-difference'", () => {
  const prompt = [3, 4]
  const chosen = [5, 34, 39, 27, 36, 31, 33, 39, 8, 2]
  const rejected = [5, 34, 39, 27, 36, 31, 34, 30, 8, 2, 2]

  it("'whole' leaves both responses unmasked (UID B.3)", () => {
    const [c, r] = pairSequences(prompt, chosen, rejected, 'whole')
    expect(c).toEqual({ prompt, completion: chosen })
    expect(r).toEqual({ prompt, completion: rejected })
  })

  it("'first-difference' keeps each response through the split token, every later token masked", () => {
    const [c, r] = pairSequences(prompt, chosen, rejected, 'first-difference')
    expect(Array.from(c.mask!)).toEqual([1, 1, 1, 1, 1, 1, 1, 0, 0, 0])
    expect(Array.from(r.mask!)).toEqual([1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0])
    expect(c.completion).toBe(chosen)
    expect(r.completion).toBe(rejected)
  })

  it('through the DPO objective: the loss of the split tokens alone, no gradient after the split, the prefix cancelling', () => {
    const rng = new Rng('pair-span')
    const beta = 0.1
    const split = 6
    const logp = (n: number) => Array.from({ length: n }, () => -3 * rng.nextFloat())
    // the shared prefix has the same logprobs in both responses (same tokens, same context), under the policy and the reference
    const prefix = logp(split)
    const refPrefix = logp(split)
    const c = { logp: [...prefix, ...logp(4)], refLogp: [...refPrefix, ...logp(4)] }
    const r = { logp: [...prefix, ...logp(5)], refLogp: [...refPrefix, ...logp(5)] }
    const [mc, mr] = pairSequences(prompt, chosen, rejected, 'first-difference').map((s) => s.mask!)
    const out = dpoObjective({ beta }).compute({ sequences: [{ ...c, mask: mc }, { ...r, mask: mr }], pairs: [[0, 1]] })
    const z = beta * (c.logp[split] - c.refLogp[split] - (r.logp[split] - r.refLogp[split]))
    expect(out.loss).toBeCloseTo(Math.log1p(Math.exp(-z)), 12)
    const g = -beta / (1 + Math.exp(z)) // ∂L/∂logπ(chosen split token)
    expect(out.a[0][split]).toBeCloseTo(g, 12)
    expect(out.a[1][split]).toBeCloseTo(-g, 12)
    for (let t = split + 1; t < c.logp.length; t++) expect(out.a[0][t]).toBe(0)
    for (let t = split + 1; t < r.logp.length; t++) expect(out.a[1][t]).toBe(0)
    // on the prefix the two responses' gradients are equal and opposite: they cancel in the shared weights
    for (let t = 0; t < split; t++) expect(out.a[0][t] + out.a[1][t]).toBeCloseTo(0, 15)
  })
})

describe('train.pairSpan in a config', () => {
  it("defaults to 'whole'; anything but the two spans is a ConfigError naming the field", () => {
    expect(resolveOfflineConfig({}, DPO_TOY_PRESET).train.pairSpan).toBe('whole')
    expect(resolveOfflineConfig({ train: { pairSpan: 'first-difference' } }, DPO_TOY_PRESET).train.pairSpan).toBe('first-difference')
    expect(() => resolveOfflineConfig({ train: { pairSpan: 'steps' } }, DPO_TOY_PRESET, 'c.json')).toThrow(ConfigError)
    expect(() => resolveOfflineConfig({ train: { pairSpan: 'steps' } }, DPO_TOY_PRESET, 'c.json')).toThrow(/pairSpan/)
  })
})
