// The CPU training forward keeps its logits for the backward (when they fit: native
// cpu_engine.cpp kKeptLogitsBytes); AUTODIDACT_KEEP_LOGITS=0 makes the backward compute them
// again chunk by chunk, as before. Both paths must give the same gradient of every parameter:
//  - one chunk (a small vocabulary): the same GEMMs on the same logits, so the same bits;
//  - several chunks (vocabulary 40,000, 600 rows: chunks of 419): dW of the LM head sums the
//    chunks in turn, so per tensor max |Δ| ≤ 1e-5 · max |g| (a different order of f32 sums).
// The coefficients a (logprob) and b (entropy) are random, so both terms of dz are exercised.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, afterEach, describe, expect, it } from 'vitest'
import { loadModel } from '../../src/index.js'
import { nativeAddon } from '../../src/native.js'
import { mulberry32 } from '../reference/random-weights.js'
import { writeTinyModel } from '../helpers/tiny-model.js'

const roots: string[] = []
afterAll(() => roots.forEach((r) => rmSync(r, { recursive: true, force: true })))
afterEach(() => {
  delete process.env.AUTODIDACT_KEEP_LOGITS
})

async function gradientsBothWays(vocabSize: number, lengths: number[], seed: number) {
  const root = mkdtempSync(join(tmpdir(), 'ad-kept-'))
  roots.push(root)
  const tiny = await writeTinyModel(join(root, 'm'), { family: 'qwen3', dtype: 'F32', seed, hiddenSize: 32, intermediate: 48, headDim: 8, vocabSize })
  const model = await loadModel(tiny.dir, { threads: 2 })
  try {
    const train = (await nativeAddon()).train
    train.setTrainable(model.handle, true, false)
    const r = mulberry32(seed)
    const seqs = lengths.map((n) => Array.from({ length: n }, () => Math.floor(r() * vocabSize)))
    const request = {
      tokens: Int32Array.from(seqs.flat()),
      lengths: Int32Array.from(seqs, (s) => s.length),
      promptLengths: Int32Array.from(seqs, () => 1),
    }
    const rows = lengths.reduce((t, n) => t + n - 1, 0)
    const coefficients = { a: Float32Array.from({ length: rows }, () => r() - 0.5), b: Float32Array.from({ length: rows }, () => 0.3 * (r() - 0.5)) }
    const gradients = async (keep: boolean) => {
      if (keep) delete process.env.AUTODIDACT_KEEP_LOGITS
      else process.env.AUTODIDACT_KEEP_LOGITS = '0'
      train.zeroGrad(model.handle)
      const forward = await train.forward(model.handle, request)
      await train.backward(model.handle, coefficients)
      const g = await train.exportGradients(model.handle)
      train.zeroGrad(model.handle)
      return { forward, g }
    }
    return { kept: await gradients(true), recomputed: await gradients(false) }
  } finally {
    model.dispose()
  }
}

describe('kept logits vs logits computed again in the backward (CPU)', () => {
  it('one chunk: the same bits of every gradient', async () => {
    const { kept, recomputed } = await gradientsBothWays(320, [40, 17, 63], 11)
    expect(Array.from(kept.forward.logp)).toEqual(Array.from(recomputed.forward.logp))
    expect(kept.g.map((t) => t.name)).toEqual(recomputed.g.map((t) => t.name))
    kept.g.forEach((t, k) => {
      expect(t.data.every(Number.isFinite), `${t.name} finite`).toBe(true)
      expect(t.data.some((x) => x !== 0), `${t.name} not all zero`).toBe(true)
      expect(Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength).equals(
        Buffer.from(recomputed.g[k].data.buffer, recomputed.g[k].data.byteOffset, recomputed.g[k].data.byteLength)), `${t.name} bits`).toBe(true)
    })
  })

  it('several chunks: every gradient within 1e-5 of its largest element', async () => {
    const { kept, recomputed } = await gradientsBothWays(40000, [301, 150, 152], 12)
    expect(kept.g.map((t) => t.name)).toEqual(recomputed.g.map((t) => t.name))
    kept.g.forEach((t, k) => {
      const want = recomputed.g[k].data
      let scale = 0
      let worst = 0
      for (let i = 0; i < want.length; i++) {
        scale = Math.max(scale, Math.abs(want[i]))
        worst = Math.max(worst, Math.abs(t.data[i] - want[i])) // NaN on either side makes worst NaN
      }
      expect(t.data.every(Number.isFinite) && want.every(Number.isFinite), `${t.name} finite`).toBe(true)
      expect(scale, `${t.name} not all zero`).toBeGreaterThan(0)
      expect(worst / scale, `${t.name}: max |Δ| / max |g|`).toBeLessThanOrEqual(1e-5)
    })
  })
})
