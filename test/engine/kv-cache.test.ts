// The paged KV cache (the step.pagedCache verb) against the slot layout on the CPU backend: the
// same steps give bit-identical logits and statistics whatever the page size, shared prefixes are
// counted and copied on write, pages go back on truncate, and a step that would need more pages
// than are free is a typed error that writes nothing.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { loadModel, type Model } from '../../src/index.js'
import type { NativeKVCache, NativeStepRequest } from '../../src/native.js'
import { randomTokens } from '../helpers/random-tokens.js'
import { writeTinyModel, type TinyModel } from '../helpers/tiny-model.js'

let root: string
let tiny: TinyModel
let model: Model

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'ad-kv-'))
  tiny = await writeTinyModel(join(root, 'm'), { family: 'qwen3', dtype: 'F32', seed: 31 })
  model = await loadModel(tiny.dir, { threads: 2 })
})
afterAll(() => {
  model?.dispose()
  rmSync(root, { recursive: true, force: true })
})

const tokens = (n: number, seed: number) => randomTokens(n, seed, tiny.config.vocabSize)

// Prefill `prompt` into slot 0, share it into slots 1..3, then decode the four slots together
// (each its own tokens), returning every step's logits.
async function forkAndDecode(cache: NativeKVCache, prompt: number[], steps: number): Promise<Float32Array[]> {
  const out: Float32Array[] = []
  await model.handle.step(cache, { slots: Int32Array.of(0), counts: Int32Array.of(prompt.length), outModes: Uint8Array.of(0), tokens: Int32Array.from(prompt) })
  for (let s = 1; s < 4; ++s) cache.copyPrefix(0, s, prompt.length - (s === 3 ? 5 : 0))  // slot 3 shares a shorter prefix
  for (let t = 0; t < steps; ++t) {
    const req: NativeStepRequest = {
      slots: Int32Array.of(0, 1, 2, 3),
      counts: Int32Array.of(1, 1, 1, 2),
      outModes: Uint8Array.of(1, 1, 1, 2),
      tokens: Int32Array.from(tokens(5, 100 + t)),
      topK: 3,
      returnLogits: true,
    }
    const r = await model.handle.step(cache, req)
    out.push(r.logits!)
    out.push(Float32Array.from([...r.entropy, ...r.logsumexp, ...r.topkLogits]))
  }
  return out
}

describe('the paged KV cache', () => {
  it('gives bit-identical logits to the slot layout, for page sizes that do and do not divide the prompt', async () => {
    const prompt = tokens(37, 7)
    const capacity = 37 + 2 * 12
    const slots = model.handle.createCache(4, capacity)
    const expected = await forkAndDecode(slots, prompt, 12)
    slots.dispose()
    for (const pageSize of [1, 5, 16, capacity]) {
      const paged = model.handle.createCache(4, capacity, { pageSize, pages: Math.ceil(capacity / pageSize) * 4 + 4 })  // + copy-on-write pages
      const got = await forkAndDecode(paged, prompt, 12)
      expect(got.length).toBe(expected.length)
      for (let i = 0; i < got.length; ++i) expect(got[i], `page size ${pageSize}, output ${i}`).toEqual(expected[i])
      paged.dispose()
    }
  })

  it('shares full prefix pages (counted), copies a shared page on its first write, frees pages on truncate', async () => {
    const P = 8
    const cache = model.handle.createCache(4, 64, { pageSize: P, pages: 20 })
    const prompt = tokens(20, 3)  // 2 full pages + a partial one
    await model.handle.step(cache, { slots: Int32Array.of(0), counts: Int32Array.of(20), outModes: Uint8Array.of(0), tokens: Int32Array.from(prompt) })
    let d = cache.describe()
    expect([d.pageSize, d.pages, d.freePages, d.sharedBytes]).toEqual([P, 20, 17, 0])
    cache.copyPrefix(0, 1, 20)
    cache.copyPrefix(0, 2, 20)
    d = cache.describe()
    expect(d.freePages).toBe(17)  // nothing copied
    expect(d.sharedBytes).toBe(2 * 3 * d.pageBytes)  // three pages, each held twice more
    expect(d.sharedBytesTotal).toBe(2 * 2 * d.pageBytes)  // full pages shared instead of copied
    expect(d.pageBytes).toBe(tiny.config.numLayers * 2 * P * tiny.config.numKvHeads * tiny.config.headDim * 4)
    // slot 1 writes into the shared partial page: it gets its own copy
    await model.handle.step(cache, { slots: Int32Array.of(1), counts: Int32Array.of(1), outModes: Uint8Array.of(0), tokens: Int32Array.of(4) })
    d = cache.describe()
    expect(d.freePages).toBe(16)
    expect(d.sharedBytes).toBe((2 * 2 + 1) * d.pageBytes)
    expect(cache.length(1)).toBe(21)
    expect(cache.length(0)).toBe(20)
    cache.truncate(1, 0)
    cache.truncate(2, 0)
    d = cache.describe()
    expect([d.freePages, d.sharedBytes]).toEqual([17, 0])
    cache.truncate(0, 0)
    expect(cache.describe().freePages).toBe(20)
    cache.dispose()
  })

  it('a step needing more pages than are free is a typed error and writes nothing', async () => {
    const cache = model.handle.createCache(2, 64, { pageSize: 4, pages: 5 })
    await model.handle.step(cache, { slots: Int32Array.of(0), counts: Int32Array.of(12), outModes: Uint8Array.of(0), tokens: Int32Array.from(tokens(12, 1)) })
    const tooMuch = model.handle.step(cache, { slots: Int32Array.of(0, 1), counts: Int32Array.of(1, 8), outModes: Uint8Array.of(0, 0), tokens: Int32Array.from(tokens(9, 2)) })
    await expect(tooMuch).rejects.toMatchObject({ code: 'ERR_AD_OUT_OF_RANGE', message: expect.stringMatching(/2 free pages; this step needs 3/) })
    expect([cache.length(0), cache.length(1), cache.describe().freePages]).toEqual([12, 0, 2])
    cache.dispose()
  })

  it('the last holder of a shared page writes in place: n slots forking one partial page need n − 1 copies', async () => {
    const cache = model.handle.createCache(3, 16, { pageSize: 8, pages: 3 })
    await model.handle.step(cache, { slots: Int32Array.of(0), counts: Int32Array.of(5), outModes: Uint8Array.of(0), tokens: Int32Array.from(tokens(5, 4)) })
    cache.copyPrefix(0, 1, 5)
    cache.copyPrefix(0, 2, 5)
    expect(cache.describe().freePages).toBe(2)
    await model.handle.step(cache, { slots: Int32Array.of(0, 1, 2), counts: Int32Array.of(1, 1, 1), outModes: Uint8Array.of(0, 0, 0), tokens: Int32Array.of(1, 2, 3) })
    expect([cache.describe().freePages, cache.describe().sharedBytes]).toEqual([0, 0])
    expect([cache.length(0), cache.length(1), cache.length(2)]).toEqual([6, 6, 6])
    cache.dispose()
  })

  it('checks the layout: page size within capacity, a positive page count', () => {
    expect(() => model.handle.createCache(2, 16, { pageSize: 17, pages: 4 })).toThrow(/pageSize/)
    expect(() => model.handle.createCache(2, 16, { pageSize: 4, pages: 0 })).toThrow(/pages/)
    expect(() => model.handle.createCache(2, 16, { pageSize: 0.5, pages: 4 } as never)).toThrow(RangeError)
  })
})
