// The native CPU forward pass against the float64 reference (test/reference/model64.ts) on tiny
// random models of each family, written as Hugging Face folders and loaded through the public API.
//
// Bound: |native − f64| ≤ 1e-5 · max(|f64|, 1) for every logit (relative error 1e-5, with an
// absolute floor at logit magnitude 1, where f32 rounding of O(1) values lives).
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { loadModel, type Model } from '../../src/index.js'
import { forward64 } from '../reference/model64.js'
import { writeTinyModel, type TinyModel, type TinyModelOptions } from '../helpers/tiny-model.js'

const LOGIT_TOL = 1e-5

export function expectClose(actual: ArrayLike<number>, expected: ArrayLike<number>, tol: number, what: string): void {
  expect(actual.length, `${what}: length`).toBe(expected.length)
  let worst = 0
  let at = -1
  for (let i = 0; i < expected.length; ++i) {
    const a = actual[i]
    const e = expected[i]
    if (!Number.isFinite(a)) throw new Error(`${what}[${i}] is ${a} (expected ${e})`)
    const err = Math.abs(a - e) / Math.max(Math.abs(e), 1)
    if (err > worst) {
      worst = err
      at = i
    }
  }
  expect(worst, `${what}: worst relative error at ${at}`).toBeLessThanOrEqual(tol)
}

function randomTokens(n: number, vocab: number, seed: number): number[] {
  let s = seed >>> 0
  const out: number[] = []
  for (let i = 0; i < n; ++i) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0
    out.push(s % vocab)
  }
  return out
}

const FAMILIES: [string, TinyModelOptions][] = [
  ['llama (rope scaling, attention bias, GQA)', { family: 'llama', dtype: 'F32', seed: 11, ropeScaling: true, attentionBias: true }],
  ['qwen2 (qkv bias, tied)', { family: 'qwen2', dtype: 'F32', seed: 12, tied: true }],
  ['qwen3 (q/k norm, head_dim ≠ hidden/heads)', { family: 'qwen3', dtype: 'F32', seed: 13 }],
  ['qwen3 bf16 sharded', { family: 'qwen3', dtype: 'BF16', seed: 14, sharded: true }],
  ['llama f16 MHA', { family: 'llama', dtype: 'F16', seed: 15, kvHeads: 4, heads: 4 }],
]

describe.each(FAMILIES)('native forward: %s', (_name, opts) => {
  let root: string
  let tiny: TinyModel
  let model: Model

  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), 'ad-fwd-'))
    tiny = await writeTinyModel(join(root, 'model'), opts)
    model = await loadModel(tiny.dir, { threads: 2 })
  })
  afterAll(() => {
    model?.dispose()
    rmSync(root, { recursive: true, force: true })
  })

  async function nativeLogits(batch: { tokens: number[]; mode: 0 | 1 | 2 }[], cache = model.handle.createCache(batch.length, 64)) {
    const r = await model.handle.step(cache, {
      slots: Int32Array.from(batch, (_, i) => i),
      counts: Int32Array.from(batch, (b) => b.tokens.length),
      outModes: Uint8Array.from(batch, (b) => b.mode),
      tokens: Int32Array.from(batch.flatMap((b) => b.tokens)),
      returnLogits: true,
    })
    return { r, cache }
  }

  it('prefill logits match the float64 reference for every position', async () => {
    const V = tiny.config.vocabSize
    const tokens = randomTokens(23, V, 1)
    const ref = forward64(tiny.config, tiny.weights, tokens)
    const { r, cache } = await nativeLogits([{ tokens, mode: 2 }])
    cache.dispose()
    expect(r.rows).toBe(tokens.length)
    expectClose(r.logits!, ref, LOGIT_TOL, 'logits')
  })

  it('decode with the KV cache equals the full forward', async () => {
    const V = tiny.config.vocabSize
    const tokens = randomTokens(20, V, 2)
    const ref = forward64(tiny.config, tiny.weights, tokens)
    const cache = model.handle.createCache(1, 32)
    await nativeLogits([{ tokens: tokens.slice(0, 14), mode: 0 }], cache)
    for (let t = 14; t < tokens.length; ++t) {
      const { r } = await nativeLogits([{ tokens: [tokens[t]], mode: 1 }], cache)
      expectClose(r.logits!, ref.subarray(t * V, (t + 1) * V), LOGIT_TOL, `decode logits at ${t}`)
    }
    expect(cache.length(0)).toBe(tokens.length)
    cache.dispose()
  })

  it('a ragged batch (prefill and decode together) equals each sequence alone, bit for bit', async () => {
    const V = tiny.config.vocabSize
    const a = randomTokens(9, V, 3)
    const b = randomTokens(4, V, 4)
    const c = randomTokens(17, V, 5)
    const together = await nativeLogits([{ tokens: a, mode: 2 }, { tokens: b, mode: 1 }, { tokens: c, mode: 2 }])
    together.cache.dispose()
    const alone = await Promise.all([a, b, c].map(async (t, i) => (await nativeLogits([{ tokens: t, mode: i === 1 ? 1 : 2 }])).r.logits!))
    const joined = new Float32Array([...alone[0], ...alone[1], ...alone[2]])
    expect(Array.from(together.r.logits!)).toEqual(Array.from(joined))
  })
})

describe('native forward: bad input', () => {
  let root: string
  let model: Model
  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), 'ad-fwd-bad-'))
    const tiny = await writeTinyModel(join(root, 'model'), { family: 'qwen3', dtype: 'F32', seed: 3 })
    model = await loadModel(tiny.dir, { threads: 1 })
  })
  afterAll(() => {
    model?.dispose()
    rmSync(root, { recursive: true, force: true })
  })

  it('rejects token ids outside the vocabulary, overfull caches and malformed requests', async () => {
    const cache = model.handle.createCache(1, 4)
    const step = (tokens: number[], extra: object = {}) =>
      model.handle.step(cache, { slots: Int32Array.of(0), counts: Int32Array.of(tokens.length), outModes: Uint8Array.of(1), tokens: Int32Array.from(tokens), ...extra })
    await expect(step([model.config.vocabSize])).rejects.toThrow(/outside the vocabulary/)
    await expect(step([1, 2, 3, 4, 5])).rejects.toThrow(/capacity/)
    expect(() => model.handle.step(cache, { slots: Int32Array.of(0), counts: Int32Array.of(2), outModes: Uint8Array.of(1), tokens: Int32Array.of(1) })).toThrow(/sum of counts/)
    expect(() => step([1], { topK: 65 })).toThrow(/between 0 and 64/)
    // nothing was appended by the failed steps
    expect(cache.length(0)).toBe(0)
    cache.dispose()
  })
})
