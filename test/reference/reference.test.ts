// Tests of the float64 reference itself: hand-computed values for each op, structural properties
// of the forward pass (causality, KV cache, GQA, tying), brute-force checks of the statistics, the
// sampling distribution on hand-checked 5-token examples, and the chi-square helper against scipy.

import { describe, expect, test } from 'vitest'
import type { ModelConfig } from '../../src/engine/types.js'
import {
  applyRope64,
  attention64,
  createKVCache64,
  forward64,
  linear64,
  logitsRow64,
  rmsnorm64,
  ropeInvFreq64,
  swiglu64,
  weightShapes64,
  type Weights64,
} from './model64.js'
import { gaussian, mulberry32, randomWeights64, roundBf16, tinyConfig64 } from './random-weights.js'
import {
  chiSquareSf,
  chiSquareTest,
  lnGamma,
  penalizedLogits64,
  regularizedGammaP,
  samplingDistribution64,
  type SamplingParams64,
} from './sampling64.js'
import {
  chosenLogprob64,
  entropy64,
  klEstimators64,
  klExact64,
  logitStats64,
  logsumexp64,
  margin64,
  maxLogit64,
  topK64,
} from './stats64.js'

const ARCHS = ['llama', 'qwen2', 'qwen3'] as const

function expectClose(actual: ArrayLike<number>, expected: ArrayLike<number>, tol = 1e-12): void {
  expect(actual.length).toBe(expected.length)
  for (let i = 0; i < expected.length; i++) {
    const err = Math.abs(actual[i] - expected[i])
    if (!(err <= tol * Math.max(1, Math.abs(expected[i])))) {
      throw new Error(`element ${i}: ${actual[i]} vs expected ${expected[i]} (|err| ${err} > ${tol})`)
    }
  }
}

function randomRow(V: number, seed: number, scale = 1): Float64Array {
  const normal = gaussian(mulberry32(seed))
  return Float64Array.from({ length: V }, () => scale * normal())
}

function norm(x: ArrayLike<number>): number {
  let s = 0
  for (let i = 0; i < x.length; i++) s += x[i] * x[i]
  return Math.sqrt(s)
}

// ------------------------------------------------------------------------------------------------
describe('ops', () => {
  test('rmsnorm64 on hand-computed values', () => {
    // mean(x²) = (1 + 4 + 9 + 16) / 4 = 7.5
    const r = 1 / Math.sqrt(7.5)
    expectClose(rmsnorm64(new Float64Array([1, 2, 3, 4]), new Float64Array([1, 1, 2, 0.5]), 0), [r, 2 * r, 6 * r, 2 * r], 1e-15)
    // Constant vector of 2s: rms = 2, so x / rms = 1; eps = 0.5 gives 2 / sqrt(4.5).
    expectClose(rmsnorm64(new Float64Array([2, 2, 2, 2]), new Float64Array([1, 2, 3, 4]), 0), [1, 2, 3, 4], 1e-15)
    const e = 2 / Math.sqrt(4.5)
    expectClose(rmsnorm64(new Float64Array([2, 2]), new Float64Array([1, -1]), 0.5), [e, -e], 1e-15)
  })

  test('linear64 uses [out, in] row-major weights and adds the bias', () => {
    const W = new Float64Array([1, 2, 3, 4, 5, 6]) // [[1,2],[3,4],[5,6]]
    expectClose(linear64(new Float64Array([1, -1]), W, new Float64Array([0.5, 0, 0]), 3), [-0.5, -1, -1], 0)
    expectClose(linear64(new Float64Array([2, 1]), W, null, 3), [4, 10, 16], 0)
    expect(() => linear64(new Float64Array([1, 2, 3]), W, null, 3)).toThrow()
  })

  test('swiglu64 = silu(gate) * up', () => {
    const sigmoid1 = 0.7310585786300049 // 1 / (1 + e^-1)
    expectClose(swiglu64(new Float64Array([1, 0, -1]), new Float64Array([2, 5, 1])), [2 * sigmoid1, 0, -(1 - sigmoid1)], 1e-15)
  })

  test('ropeInvFreq64 without scaling: theta^(-2i/d)', () => {
    const inv = ropeInvFreq64({ headDim: 4, ropeTheta: 10000, ropeScaling: null })
    expectClose(inv, [1, 0.01], 1e-15)
  })

  test('ropeInvFreq64 with Llama 3 scaling: each regime on a hand case', () => {
    // Base frequencies 1, 0.1, 0.01, 0.001 → wavelengths 2π·{1, 10, 100, 1000} ≈ 6.3, 63, 628, 6283.
    // original ctx 1024, low 1, high 4: wavelengths < 256 kept, > 1024 divided by 8, between blended.
    const inv = ropeInvFreq64({
      headDim: 8,
      ropeTheta: 10000,
      ropeScaling: { type: 'llama3', factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositionEmbeddings: 1024 },
    })
    const smooth = (1024 / (2 * Math.PI * 100) - 1) / (4 - 1) // ≈ 0.2099
    expectClose(inv, [1, 0.1, (1 - smooth) * (0.01 / 8) + smooth * 0.01, 0.001 / 8], 1e-15)
    expect(inv[2]).toBeCloseTo(0.003086760967011274, 15)
  })

  test('ropeInvFreq64 with Llama 3.1 8B parameters', () => {
    // head_dim 128, rope_theta 500000, factor 8, low 1, high 4, original 8192.
    const inv = ropeInvFreq64({
      headDim: 128,
      ropeTheta: 500000,
      ropeScaling: { type: 'llama3', factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositionEmbeddings: 8192 },
    })
    expect(inv[0]).toBe(1)
    expect(inv[28]).toBeCloseTo(0.0032114459947525913, 16) // wavelength 1956 < 2048: unchanged
    expect(inv[30] / 0.0013718935677611381).toBeCloseTo(1, 13) // wavelength 2948: blended
    expect(inv[35] / 9.556212353964683e-5).toBeCloseTo(1, 13) // wavelength 8219 > 8192: ÷ 8
    expect(inv[63] / (Math.pow(500000, -126 / 128) / 8)).toBeCloseTo(1, 13)
  })

  test('applyRope64 pairs element i with i + d/2 (rotate_half layout)', () => {
    const inv = new Float64Array([1, 0.01]) // headDim 4, theta 10000
    const [c, s] = [Math.cos(1), Math.sin(1)]
    expectClose(applyRope64(new Float64Array([1, 0, 0, 0]), 1, inv), [c, 0, s, 0], 1e-15)
    expectClose(applyRope64(new Float64Array([0, 0, 1, 0]), 1, inv), [-s, 0, c, 0], 1e-15)
    expectClose(applyRope64(new Float64Array([0, 1, 0, 0]), 100, inv), [0, c, 0, s], 1e-15) // angle 100·0.01
    expectClose(applyRope64(new Float64Array([0.3, -2, 5, 7]), 0, inv), [0.3, -2, 5, 7], 0) // position 0: identity
  })

  test('applyRope64 preserves the norm and makes q·k depend only on the position difference', () => {
    const inv = ropeInvFreq64({ headDim: 16, ropeTheta: 10000, ropeScaling: null })
    const q = randomRow(16, 1)
    const k = randomRow(16, 2)
    for (const pos of [0, 1, 7, 123, 4095]) expect(norm(applyRope64(q, pos, inv)) / norm(q)).toBeCloseTo(1, 14)
    const dot = (a: Float64Array, b: Float64Array) => a.reduce((acc, v, i) => acc + v * b[i], 0)
    const d1 = dot(applyRope64(q, 10, inv), applyRope64(k, 3, inv))
    const d2 = dot(applyRope64(q, 107, inv), applyRope64(k, 100, inv))
    expect(d1).toBeCloseTo(d2, 12)
  })

  test('attention64 on hand-computed values, with the GQA head mapping', () => {
    // One head, headDim 2: scores = q·k / sqrt(2) = 0 and ln 3, so softmax = [1/4, 3/4].
    const q = new Float64Array([1, 0])
    const keys = [new Float64Array([0, 0]), new Float64Array([Math.SQRT2 * Math.log(3), 0])]
    const values = [new Float64Array([1, 0]), new Float64Array([0, 1])]
    expectClose(attention64(q, keys, values, 1, 1, 2), [0.25, 0.75], 1e-15)
    // A single visible position returns its value exactly.
    expectClose(attention64(q, keys.slice(0, 1), values.slice(0, 1), 1, 1, 2), [1, 0], 0)
    // 4 heads over 2 kv heads: heads 0,1 read kv head 0, heads 2,3 read kv head 1.
    const q4 = new Float64Array([1, 0, 1, 0, 1, 0, 1, 0])
    const k2 = [new Float64Array([0, 0, 0, 0]), new Float64Array([Math.SQRT2 * Math.log(3), 0, 0, 0])]
    const v2 = [new Float64Array([1, 0, 5, 6]), new Float64Array([0, 1, 7, 8])]
    // kv head 0: weights [1/4, 3/4]; kv head 1: both keys 0, so weights [1/2, 1/2].
    expectClose(attention64(q4, k2, v2, 4, 2, 2), [0.25, 0.75, 0.25, 0.75, 6, 7, 6, 7], 1e-15)
  })
})

// ------------------------------------------------------------------------------------------------
describe('forward64', () => {
  const TOKENS = [3, 17, 5, 96, 0, 42, 42, 8, 11, 60]

  // Golden logits from an independent NumPy transliteration of transformers' modeling code
  // (batched [heads, T, d] tensors, rotate_half, repeat_kv, a -inf triu mask), on the same weights.
  const goldenCases: { name: string; config: ModelConfig; seed: number; last: number[]; first90: number[] }[] = [
    {
      name: 'llama + llama3 rope scaling + attention_bias',
      config: tinyConfig64('llama', {
        ropeScaling: { type: 'llama3', factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositionEmbeddings: 64 },
        ropeTheta: 10000,
        qkvBias: true,
        oBias: true,
      }),
      seed: 1234,
      last: [0.4274309490423836, -1.2282433109328614, -0.4469417895905013, -0.7677670693373227],
      first90: [-0.2892894916296715, -0.388007812490292, 0.2693408506530716],
    },
    {
      name: 'qwen2 (qkv bias, tied)',
      config: tinyConfig64('qwen2'),
      seed: 1235,
      last: [-1.041318165622652, 0.4482836429790896, -0.20467249242758867, 0.6037786842622429],
      first90: [1.063689555674258, 0.17041059949869342, 0.1807795246575947],
    },
    {
      name: 'qwen3 (q/k norm, head_dim 16 ≠ hidden/heads, tied)',
      config: tinyConfig64('qwen3'),
      seed: 1236,
      last: [-0.8786057817572994, -0.5496180864214222, 0.6500158449797515, 0.3999450954730321],
      first90: [2.570218247361127, 0.20702569476344748, -0.6983265208877746],
    },
    {
      name: 'qwen3, one kv head, untied',
      config: tinyConfig64('qwen3', { numKvHeads: 1, tieWordEmbeddings: false }),
      seed: 1237,
      last: [-0.6664206080299958, 1.259554094675102, -0.10669604880993473, 0.17815287512342765],
      first90: [0.8788509095179687, -2.169220784033697, 1.3924559257462383],
    },
  ]
  for (const c of goldenCases) {
    test(`matches HF-style NumPy logits: ${c.name}`, () => {
      const V = c.config.vocabSize
      const logits = forward64(c.config, randomWeights64(c.config, c.seed), TOKENS, 3)
      expect(logits.length).toBe(TOKENS.length * V)
      expectClose(logitsRow64(logits, V, TOKENS.length - 1).subarray(0, 4), c.last, 1e-12)
      expectClose(logitsRow64(logits, V, 0).subarray(90, 93), c.first90, 1e-12)
    })
  }

  for (const arch of ARCHS) {
    const config = tinyConfig64(arch)
    const weights = randomWeights64(config, 7)
    const V = config.vocabSize

    test(`${arch}: causal — changing a later token leaves earlier logits bit-identical`, () => {
      const a = forward64(config, weights, TOKENS)
      const b = forward64(config, weights, [...TOKENS.slice(0, 6), 1, ...TOKENS.slice(7)])
      expect(b.subarray(0, 6 * V)).toEqual(a.subarray(0, 6 * V))
      expect(b.subarray(6 * V, 7 * V)).not.toEqual(a.subarray(6 * V, 7 * V))
      for (const x of a) expect(Number.isFinite(x)).toBe(true)
    })

    test(`${arch}: KV-cache prefill + token-by-token decode equals the full forward exactly`, () => {
      const full = forward64(config, weights, TOKENS)
      const cache = createKVCache64(config)
      const prefill = forward64(config, weights, TOKENS.slice(0, 4), 0, cache)
      expect(prefill).toEqual(full.subarray(0, 4 * V))
      for (let t = 4; t < TOKENS.length; t++) {
        const row = forward64(config, weights, [TOKENS[t]], t, cache)
        expect(row).toEqual(full.subarray(t * V, (t + 1) * V))
      }
      expect(cache.length).toBe(TOKENS.length)
      // Uneven chunks, startPos defaulting to the cache length.
      const cache2 = createKVCache64(config)
      const chunks = [TOKENS.slice(0, 3), TOKENS.slice(3, 4), TOKENS.slice(4, 9), TOKENS.slice(9)]
      const pieces = chunks.map((chunk) => forward64(config, weights, chunk, undefined, cache2))
      expect(Float64Array.from(pieces.flatMap((p) => Array.from(p)))).toEqual(full)
      expect(() => forward64(config, weights, [1], 3, cache2)).toThrow(/startPos/)
    })

    test(`${arch}: RoPE is relative — shifting every position changes logits only by rounding`, () => {
      const a = forward64(config, weights, TOKENS, 0)
      const b = forward64(config, weights, TOKENS, 1000)
      expectClose(b, a, 1e-9)
      expect(b).not.toEqual(a)
    })
  }

  test('GQA equals MHA with each kv head repeated for its query heads (repeat_kv)', () => {
    for (const arch of ['qwen2', 'qwen3'] as const) {
      const gqa = tinyConfig64(arch, { numHeads: 4, numKvHeads: 2 })
      const mha: ModelConfig = { ...gqa, numKvHeads: 4 }
      const w = randomWeights64(gqa, 11)
      const wm: Weights64 = new Map(w)
      const d = gqa.headDim
      const group = gqa.numHeads / gqa.numKvHeads
      const repeatRows = (t: Float64Array, rowLen: number) => {
        const out = new Float64Array(mha.numKvHeads * d * rowLen)
        for (let h = 0; h < mha.numKvHeads; h++) {
          const kv = Math.floor(h / group)
          out.set(t.subarray(kv * d * rowLen, (kv + 1) * d * rowLen), h * d * rowLen)
        }
        return out
      }
      for (let l = 0; l < gqa.numLayers; l++) {
        for (const proj of ['k_proj', 'v_proj']) {
          const name = `model.layers.${l}.self_attn.${proj}`
          wm.set(`${name}.weight`, repeatRows(w.get(`${name}.weight`)!, gqa.hiddenSize))
          if (gqa.qkvBias) wm.set(`${name}.bias`, repeatRows(w.get(`${name}.bias`)!, 1))
        }
      }
      expect(forward64(mha, wm, TOKENS)).toEqual(forward64(gqa, w, TOKENS))
    }
  })

  test('tied embeddings equal an lm_head that copies embed_tokens', () => {
    const tied = tinyConfig64('qwen2', { tieWordEmbeddings: true })
    const untied: ModelConfig = { ...tied, tieWordEmbeddings: false }
    const w = randomWeights64(tied, 3)
    expect(w.has('lm_head.weight')).toBe(false)
    const wu: Weights64 = new Map(w)
    wu.set('lm_head.weight', w.get('model.embed_tokens.weight')!.slice())
    expect(forward64(untied, wu, TOKENS)).toEqual(forward64(tied, w, TOKENS))
  })

  test('zero biases equal no biases; nonzero biases matter', () => {
    const plain = tinyConfig64('llama')
    const biased: ModelConfig = { ...plain, qkvBias: true, oBias: true }
    const wb = randomWeights64(biased, 5)
    const wz: Weights64 = new Map(wb)
    for (const [name, t] of wb) if (name.endsWith('.bias')) wz.set(name, new Float64Array(t.length))
    const wp: Weights64 = new Map([...wb].filter(([name]) => !name.endsWith('.bias')))
    expect(forward64(biased, wz, TOKENS)).toEqual(forward64(plain, wp, TOKENS))
    expect(forward64(biased, wb, TOKENS)).not.toEqual(forward64(plain, wp, TOKENS))
  })

  test('qwen3 q/k norm: per-head RMSNorm makes logits invariant to scaling q_proj and k_proj', () => {
    for (const qkNorm of [true, false]) {
      const config = tinyConfig64('qwen3', { qkNorm, rmsNormEps: 0 })
      const w = randomWeights64(config, 9)
      const scaled: Weights64 = new Map(w)
      for (let l = 0; l < config.numLayers; l++) {
        for (const proj of ['q_proj', 'k_proj']) {
          const name = `model.layers.${l}.self_attn.${proj}.weight`
          scaled.set(name, w.get(name)!.map((x) => 3 * x))
        }
      }
      const a = forward64(config, w, TOKENS)
      const b = forward64(config, scaled, TOKENS)
      if (qkNorm) expectClose(b, a, 1e-12)
      else expect(Math.max(...a.map((x, i) => Math.abs(x - b[i])))).toBeGreaterThan(1e-3)
    }
  })

  test('bad inputs throw: missing tensor, wrong size, token out of range', () => {
    const config = tinyConfig64('llama')
    const w = randomWeights64(config, 1)
    const missing: Weights64 = new Map(w)
    missing.delete('model.layers.1.mlp.up_proj.weight')
    expect(() => forward64(config, missing, [1])).toThrow(/missing tensor model.layers.1.mlp.up_proj.weight/)
    const wrong: Weights64 = new Map(w)
    wrong.set('model.norm.weight', new Float64Array(3))
    expect(() => forward64(config, wrong, [1])).toThrow(/model.norm.weight/)
    expect(() => forward64(config, w, [config.vocabSize])).toThrow(/out of range/)
  })

  test('randomWeights64: deterministic, every tensor present, f32/bf16-representable', () => {
    const config = tinyConfig64('qwen3', { qkvBias: true, oBias: true, tieWordEmbeddings: false })
    const a = randomWeights64(config, 42)
    const b = randomWeights64(config, 42)
    expect([...a.keys()].sort()).toEqual([...weightShapes64(config).keys()].sort())
    for (const [name, t] of a) {
      expect(t).toEqual(b.get(name))
      for (const x of t) expect(Math.fround(x)).toBe(x)
    }
    expect(randomWeights64(config, 43).get('model.norm.weight')).not.toEqual(a.get('model.norm.weight'))
    for (const t of randomWeights64(config, 42, { round: 'bf16' }).values()) for (const x of t) expect(roundBf16(x)).toBe(x)
    expect(roundBf16(1 + 2 ** -8)).toBe(1) // tie → even
    expect(roundBf16(1 + 3 * 2 ** -8)).toBe(1 + 2 ** -6) // tie → even (up)
    expect(roundBf16(1 + 2 ** -8 + 2 ** -20)).toBe(1 + 2 ** -7) // above the tie → up
  })
})

// ------------------------------------------------------------------------------------------------
describe('stats64', () => {
  test('max, logsumexp, entropy, chosen logprob against brute force', () => {
    for (const seed of [1, 2, 3]) {
      const z = randomRow(50, seed, 3)
      const p = Array.from(z, (x) => Math.exp(x))
      const Z = p.reduce((a, b) => a + b, 0)
      expect(maxLogit64(z)).toBe(Math.max(...z))
      expect(logsumexp64(z)).toBeCloseTo(Math.log(Z), 13)
      expect(entropy64(z)).toBeCloseTo(-p.reduce((h, e) => h + (e / Z) * Math.log(e / Z), 0), 13)
      expect(chosenLogprob64(z, 17)).toBeCloseTo(Math.log(p[17] / Z), 13)
    }
    // Uniform over 8: logsumexp = c + ln 8, entropy = ln 8; large logits do not overflow.
    const big = new Float64Array(8).fill(1000)
    expect(logsumexp64(big)).toBeCloseTo(1000 + Math.log(8), 12)
    expect(entropy64(big)).toBeCloseTo(Math.log(8), 14)
    // A token at -Infinity has p = 0 and contributes nothing.
    expect(entropy64(new Float64Array([0, 0, -Infinity]))).toBeCloseTo(Math.log(2), 15)
  })

  test('topK: descending values, ties by lower id, K clamped to V', () => {
    const z = new Float64Array([1, 3, 3, 2, 3, -1])
    expect(topK64(z, 3)).toEqual({ ids: [1, 2, 4], logits: [3, 3, 3] })
    expect(topK64(z, 4)).toEqual({ ids: [1, 2, 4, 3], logits: [3, 3, 3, 2] })
    expect(topK64(z, 2).ids).toEqual([1, 2])
    expect(topK64(z, 100).ids).toEqual([1, 2, 4, 3, 0, 5])
    expect(topK64(z, 0).ids).toEqual([])
    // Brute force on a random row with many ties (values from a small set).
    const u = mulberry32(5)
    const r = Float64Array.from({ length: 200 }, () => Math.floor(u() * 7))
    const expected = Array.from(r, (v, i) => [v, i]).sort((a, b) => b[0] - a[0] || a[1] - b[1]).map(([, i]) => i)
    expect(topK64(r, 64).ids).toEqual(expected.slice(0, 64))
  })

  test('margin: top1 − top2 as values; a repeated maximum gives 0', () => {
    expect(margin64(new Float64Array([1, 3, 2]))).toBe(1)
    expect(margin64(new Float64Array([3, 1, 2]))).toBe(1)
    expect(margin64(new Float64Array([5, 1, 5]))).toBe(0)
    expect(margin64(new Float64Array([-2, -7]))).toBe(5)
    expect(margin64(new Float64Array([4]))).toBe(Infinity)
  })

  test('KL estimators on a hand case, and clamping as verl low_var_kl', () => {
    // p = softmax(z) = [1/2, 1/4, 1/4], q = softmax(y) = [1/4, 1/4, 1/2]
    const z = new Float64Array([Math.log(2), 0, 0])
    const y = new Float64Array([0, 0, Math.log(2)])
    const e = klEstimators64(z, y, 0)
    expect(e.logp).toBeCloseTo(Math.log(0.5), 15)
    expect(e.logq).toBeCloseTo(Math.log(0.25), 15)
    expect(e.k1).toBeCloseTo(Math.log(2), 15)
    expect(e.k2).toBeCloseTo(0.5 * Math.log(2) ** 2, 15)
    expect(e.k3).toBeCloseTo(0.5 + Math.log(2) - 1, 15) // q/p − log(q/p) − 1 with q/p = 1/2
    expect(klExact64(z, y)).toBeCloseTo(0.5 * Math.log(2) + 0.25 * 0 + 0.25 * Math.log(0.5), 15)
    expect(klExact64(z, z)).toBe(0)
    // logq − logp = 30 → kl clamped to 20 → exp(20) − 21 clamped to 10.
    const far = klEstimators64(new Float64Array([0, 30]), new Float64Array([30, 0]), 0)
    expect(far.k1).toBeCloseTo(-30, 12)
    expect(far.k3).toBe(10)
    // logq − logp = −30 → kl clamped to −20 → exp(−20) + 19 clamped to 10.
    expect(klEstimators64(new Float64Array([30, 0]), new Float64Array([0, 30]), 0).k3).toBe(10)
  })

  test('k1 and k3 are unbiased: Σ_t p_t k(t) = KL(p‖q) exactly', () => {
    const z = randomRow(40, 8, 0.3)
    const y = randomRow(40, 9, 0.3)
    const logp = Array.from(z, (_, t) => chosenLogprob64(z, t))
    let e1 = 0
    let e3 = 0
    for (let t = 0; t < z.length; t++) {
      const est = klEstimators64(z, y, t)
      expect(est.k3).toBeLessThan(10) // unclamped here
      e1 += Math.exp(logp[t]) * est.k1
      e3 += Math.exp(logp[t]) * est.k3
    }
    const kl = klExact64(z, y)
    expect(kl).toBeGreaterThan(0)
    expect(e1).toBeCloseTo(kl, 14)
    expect(e3).toBeCloseTo(kl, 14)
  })

  test('logitStats64 bundles the statistics; shifting logits shifts only max and logsumexp', () => {
    const z = randomRow(30, 4)
    const y = randomRow(30, 6)
    const s = logitStats64(z, { target: 3, topK: 5, reference: y })
    const shifted = logitStats64(z.map((x) => x + 10), { target: 3, topK: 5, reference: y })
    expect(shifted.maxLogit).toBeCloseTo(s.maxLogit + 10, 12)
    expect(shifted.logsumexp).toBeCloseTo(s.logsumexp + 10, 12)
    expect(shifted.entropy).toBeCloseTo(s.entropy, 12)
    expect(shifted.chosenLogprob).toBeCloseTo(s.chosenLogprob!, 12)
    expect(shifted.margin).toBeCloseTo(s.margin, 12)
    expect(shifted.topK!.ids).toEqual(s.topK!.ids)
    expect(shifted.kl!.exact).toBeCloseTo(s.kl!.exact, 12)
    expect(logitStats64(z)).toEqual({ maxLogit: s.maxLogit, logsumexp: s.logsumexp, entropy: s.entropy, margin: s.margin })
  })

  test('a Qwen-sized row (151,936): ordered top-K and a sampling distribution that sums to 1', () => {
    const z = randomRow(151936, 12, 4)
    const s = logitStats64(z, { target: 5, topK: 64, reference: randomRow(151936, 13, 4) })
    const dist = samplingDistribution64(z, { temperature: 0.7, topK: 1000, topP: 0.9, minP: 0.01 })
    expect(s.topK!.logits.every((v, i, a) => i === 0 || a[i - 1] >= v)).toBe(true)
    expect(dist.reduce((a, b) => a + b, 0)).toBeCloseTo(1, 12)
  })
})

// ------------------------------------------------------------------------------------------------
describe('samplingDistribution64', () => {
  // softmax(z) = P exactly (up to rounding): 5 tokens whose probabilities are easy to reason about.
  const P = [0.1, 0.2, 0.4, 0.05, 0.25]
  const z = new Float64Array(P.map(Math.log))
  const dist = (params: SamplingParams64, history: number[] = [], generated: number[] = []) =>
    samplingDistribution64(z, params, history, generated)
  const normalize = (w: number[]) => {
    const s = w.reduce((a, b) => a + b, 0)
    return w.map((x) => x / s)
  }

  test('defaults: plain softmax', () => {
    expectClose(dist({}), P, 1e-15)
    expectClose(dist({ temperature: 1, topK: 0, topP: 1, minP: 0, repetitionPenalty: 1 }), P, 1e-15)
  })

  test('temperature: p^(1/T) renormalized; T = 0 is greedy with the lowest id on ties', () => {
    expectClose(dist({ temperature: 0.5 }), normalize(P.map((p) => p * p)), 1e-14)
    expectClose(dist({ temperature: 2 }), normalize(P.map(Math.sqrt)), 1e-14)
    expectClose(dist({ temperature: 0 }), [0, 0, 1, 0, 0], 0)
    expectClose(samplingDistribution64(new Float64Array([0, 5, 5, 1, 5]), { temperature: 0, topK: 1 }), [0, 1, 0, 0, 0], 0)
  })

  test('top-k keeps the k largest, resolving boundary ties toward lower ids', () => {
    expectClose(dist({ topK: 2 }), [0, 0, 0.4 / 0.65, 0, 0.25 / 0.65], 1e-15)
    expectClose(dist({ topK: 1 }), [0, 0, 1, 0, 0], 0)
    expectClose(dist({ topK: 5 }), P, 1e-15)
    expectClose(dist({ topK: 50 }), P, 1e-15)
    expectClose(samplingDistribution64(new Float64Array([1, 2, 2, 2, 0]), { topK: 2 }), [0, 0.5, 0.5, 0, 0], 1e-15)
  })

  test('top-p keeps the shortest prefix reaching p (at least one token), ties by lower id', () => {
    expectClose(dist({ topP: 0.6 }), [0, 0, 0.4 / 0.65, 0, 0.25 / 0.65], 1e-15) // 0.4 + 0.25 ≥ 0.6
    expectClose(dist({ topP: 0.7 }), [0, 0.2 / 0.85, 0.4 / 0.85, 0, 0.25 / 0.85], 1e-15) // + 0.2
    expectClose(dist({ topP: 0.3 }), [0, 0, 1, 0, 0], 0) // 0.4 alone
    expectClose(dist({ topP: 0 }), [0, 0, 1, 0, 0], 0) // at least one token
    const tied = new Float64Array([0, 0, 0, Math.log(1 / 3)]) // [0.3, 0.3, 0.3, 0.1]
    expectClose(samplingDistribution64(tied, { topP: 0.5 }), [0.5, 0.5, 0, 0], 1e-15)
  })

  test('min-p keeps tokens with prob ≥ m · maxProb', () => {
    expectClose(dist({ minP: 0.6 }), [0, 0, 0.4 / 0.65, 0, 0.25 / 0.65], 1e-15) // threshold 0.24
    expectClose(dist({ minP: 0.3 }), [0, 0.2 / 0.85, 0.4 / 0.85, 0, 0.25 / 0.85], 1e-15) // threshold 0.12
    expectClose(dist({ minP: 0.2 }), normalize([0.1, 0.2, 0.4, 0, 0.25]), 1e-15) // threshold 0.08
    expectClose(dist({ minP: 1 }), [0, 0, 1, 0, 0], 0)
  })

  test('repetition penalty (HF): once per distinct id in history, divides positives and multiplies negatives', () => {
    const raw = new Float64Array([1, 2, -1, 0.5, 0])
    // History [0, 2, 2]: z0 = 1 / 2, z2 = −1 · 2 (once, not twice).
    const pen = penalizedLogits64(raw, { repetitionPenalty: 2 }, [0, 2, 2])
    expectClose(pen, [0.5, 2, -2, 0.5, 0], 0)
    const e = [0.5, 2, -2, 0.5, 0].map(Math.exp)
    expectClose(samplingDistribution64(raw, { repetitionPenalty: 2 }, [0, 2, 2]), normalize(e), 1e-15)
  })

  test('presence and frequency penalties (OpenAI): z −= p + f · count over generated ids', () => {
    const raw = new Float64Array([1, 2, -1, 0.5, 0])
    // Generated [1, 1, 3]: z1 −= 0.5 + 0.25·2, z3 −= 0.5 + 0.25·1; history alone is not penalized.
    const pen = penalizedLogits64(raw, { presencePenalty: 0.5, frequencyPenalty: 0.25 }, [0, 1, 1, 3], [1, 1, 3])
    expectClose(pen, [1, 1, -1, -0.25, 0], 1e-15)
  })

  test('order: repetition before presence/frequency, then temperature', () => {
    const raw = new Float64Array([0, 2, 0, 0, 0])
    const params = { repetitionPenalty: 2, presencePenalty: 0.5, frequencyPenalty: 0.25 }
    // 2 / 2 − (0.5 + 0.25·2) = 0; the other order would give (2 − 1) / 2 = 0.5.
    expectClose(penalizedLogits64(raw, params, [1, 1], [1, 1]), [0, 0, 0, 0, 0], 0)
    expectClose(samplingDistribution64(raw, { ...params, temperature: 0.5 }, [1, 1], [1, 1]), [0.2, 0.2, 0.2, 0.2, 0.2], 1e-15)
  })

  test('order: top-p sees probabilities renormalized after top-k', () => {
    // top-k 2 → [0.4, 0.25] / 0.65 = [0.615, 0.385]; top-p 0.6 then keeps only the first.
    // (On the un-renormalized 0.4 < 0.6 it would keep both.)
    expectClose(dist({ topK: 2, topP: 0.6 }), [0, 0, 1, 0, 0], 0)
  })

  test('order: min-p after top-p', () => {
    // top-p 0.5 keeps {0.4, 0.25}; min-p 0.55 (threshold 0.22) keeps both.
    // (min-p first would keep {0.4, 0.25}, renormalized to 0.615 ≥ 0.5, then top-p keeps one.)
    expectClose(dist({ topP: 0.5, minP: 0.55 }), [0, 0, 0.4 / 0.65, 0, 0.25 / 0.65], 1e-15)
  })

  test('bad parameters throw', () => {
    expect(() => dist({ temperature: -1 })).toThrow()
    expect(() => dist({ repetitionPenalty: 0 })).toThrow()
    expect(() => dist({ repetitionPenalty: 1.2 }, [5])).toThrow(/out of range/)
  })
})

// ------------------------------------------------------------------------------------------------
describe('chi-square', () => {
  test('lnGamma on known values', () => {
    expect(lnGamma(1)).toBeCloseTo(0, 14)
    expect(lnGamma(2)).toBeCloseTo(0, 14)
    expect(lnGamma(0.5)).toBeCloseTo(0.5 * Math.log(Math.PI), 14)
    expect(lnGamma(10)).toBeCloseTo(Math.log(362880), 13)
    expect(lnGamma(0.1)).toBeCloseTo(2.252712651734206, 13) // ln Γ(0.1), reflection branch
    expect(lnGamma(500) / 2605.115850361734).toBeCloseTo(1, 14) // ln 499!
  })

  test('chiSquareSf against scipy.stats.chi2.sf', () => {
    // [x, dof, scipy.stats.chi2.sf(x, dof)] from scipy 1.17.
    const known: [number, number, number][] = [
      [3.841458820694124, 1, 0.04999999999999989],
      [18.307038053275146, 10, 0.05000000000000005],
      [0.5, 1, 0.47950012218695337],
      [0.001, 1, 0.9747728793699604],
      [2.5, 3, 0.4752910833430205],
      [50, 7, 1.4444852779215397e-8],
      [124.34211340400407, 100, 0.0500000000000001],
      [80, 100, 0.9296649333406051],
      [200, 100, 1.1784500720979781e-8],
      [300, 30, 2.64804848563084e-46],
      [700, 600, 0.0028957725318222776],
      [1000, 1000, 0.49405285382923964],
      [1200, 1000, 1.2255942330622893e-5],
      [0.5, 2, 0.7788007830714049],
      [40, 1, 2.5396285894708634e-10],
    ]
    for (const [x, dof, sf] of known) expect(chiSquareSf(x, dof) / sf, `sf(${x}, ${dof})`).toBeCloseTo(1, 11)
    expect(chiSquareSf(1e-8, 3)).toBeCloseTo(0.999999999999734, 14)
    expect(chiSquareSf(0, 5)).toBe(1)
    expect(chiSquareSf(Infinity, 5)).toBe(0)
    // dof 2: sf = exp(−x/2) exactly, across both branches.
    for (const x of [0.01, 0.7, 1.9, 2.1, 5, 30, 300]) expect(chiSquareSf(x, 2) / Math.exp(-x / 2)).toBeCloseTo(1, 13)
    // Even dof 2n: sf = e^(−x/2) Σ_{i<n} (x/2)^i / i!.
    for (const [x, n] of [[10, 5], [3, 4], [60, 20]]) {
      let term = 1
      let sum = 1
      for (let i = 1; i < n; i++) sum += (term *= x / 2 / i)
      expect(chiSquareSf(x, 2 * n) / (Math.exp(-x / 2) * sum)).toBeCloseTo(1, 12)
    }
    expect(regularizedGammaP(3, 2) + chiSquareSf(4, 6)).toBeCloseTo(1, 15)
  })

  test('chiSquareTest: statistic, dof, merging of small bins, impossible draws', () => {
    // Expected [20, 20, 20]: stat = (100 + 0 + 100) / 20 = 10 on 2 dof, p = e^−5.
    const r = chiSquareTest([10, 20, 30], [1, 1, 1])
    expect(r.stat).toBeCloseTo(10, 13)
    expect(r.dof).toBe(2)
    expect(r.pValue).toBeCloseTo(Math.exp(-5), 14)
    // Expected [50, 45, 3, 2]: the last two pool into one bin of expected 5.
    expect(chiSquareTest([50, 45, 3, 2], [50, 45, 3, 2])).toMatchObject({ stat: 0, dof: 2, pValue: 1, bins: 3 })
    // Expected [50, 46, 3, 1]: the pool (4) is too small and joins the smallest bin (46 → 50).
    const m = chiSquareTest([50, 40, 6, 4], [50, 46, 3, 1])
    expect(m.bins).toBe(2)
    expect(m.stat).toBeCloseTo(0, 13)
    // A draw on a probability-0 token fails outright.
    expect(chiSquareTest([50, 49, 1], [0.5, 0.5, 0])).toMatchObject({ stat: Infinity, pValue: 0, impossible: 1 })
    expect(chiSquareTest([50, 50, 0], [0.5, 0.5, 0])).toMatchObject({ stat: 0, dof: 1, pValue: 1, impossible: 0 })
  })

  test('end to end: samples from the target pass, samples from a neighbour fail', () => {
    const logits = randomRow(300, 21, 1.5)
    const params: SamplingParams64 = { temperature: 0.8, topK: 100, topP: 0.95 }
    const target = samplingDistribution64(logits, params)
    const draw = (probs: Float64Array, n: number, seed: number) => {
      const u = mulberry32(seed)
      const counts = new Array<number>(probs.length).fill(0)
      for (let s = 0; s < n; s++) {
        let x = u()
        let i = 0
        while (i < probs.length - 1 && (x -= probs[i]) >= 0) i++
        while (probs[i] === 0) i-- // rounding at the top end: back onto a possible token
        counts[i]++
      }
      return counts
    }
    const good = chiSquareTest(draw(target, 50_000, 1), target)
    expect(good.pValue).toBeGreaterThan(1e-3)
    expect(good.dof).toBeGreaterThan(20)
    const neighbour = samplingDistribution64(logits, { ...params, temperature: 0.85 })
    expect(chiSquareTest(draw(neighbour, 50_000, 2), target).pValue).toBeLessThan(1e-6)
  })
})
