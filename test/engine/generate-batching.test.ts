// Continuous batching (src/engine/scheduler.ts) on the CPU backend: a sample does not depend on
// what else is in the batch (the Philox keying by seed, sequence id and position, and each
// sequence's own KV), calls that arrive while others decode join their steps, finished rows free
// their slots for waiting sequences at once, and the n samples of a prompt share its prefix pages.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import fc from 'fast-check'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { loadModel, type Completion, type GenerateOptions, type Model } from '../../src/index.js'
import { pageBytes } from '../../src/engine/scheduler.js'
import { randomTokens } from '../helpers/random-tokens.js'
import { writeTinyModel, type TinyModel } from '../helpers/tiny-model.js'

let root: string
let tiny: TinyModel
let model: Model

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'ad-batching-'))
  tiny = await writeTinyModel(join(root, 'm'), { family: 'qwen3', dtype: 'F32', seed: 41 })
  model = await loadModel(tiny.dir, { threads: 2 })
  TARGET = tokens(23, 5)
})
afterAll(() => {
  model?.dispose()
  rmSync(root, { recursive: true, force: true })
})

const tokens = (n: number, seed: number) => randomTokens(n, seed, tiny.config.vocabSize)

// Everything a completion carries, as plain arrays (toEqual then compares bit for bit).
function trace(c: Completion) {
  return {
    tokens: Array.from(c.tokens),
    logprobs: Array.from(c.logprobs),
    entropy: Array.from(c.entropy),
    logsumexp: Array.from(c.logsumexp),
    maxLogit: Array.from(c.maxLogit),
    margin: Array.from(c.margin),
    topIds: c.topK ? Array.from(c.topK.ids) : null,
    topLogits: c.topK ? Array.from(c.topK.logits) : null,
    text: c.text,
    finishReason: c.finishReason,
  }
}

let TARGET: number[]
const TARGET_OPTIONS: GenerateOptions = { temperature: 1, topP: 0.9, seed: 42, sequenceOffset: 1000, maxTokens: 24, stopTokenIds: [], stats: { topK: 4 } }

async function withScheduler<T>(mode: 'waves' | 'continuous', f: () => Promise<T>): Promise<T> {
  const before = process.env.AUTODIDACT_SCHEDULER
  process.env.AUTODIDACT_SCHEDULER = mode
  try {
    return await f()
  } finally {
    if (before === undefined) delete process.env.AUTODIDACT_SCHEDULER
    else process.env.AUTODIDACT_SCHEDULER = before
  }
}

describe('continuous batching', () => {
  it('a sample is the same alone and inside a batch of 256 that other calls join and leave: tokens and every statistic', async () => {
    const [[solo]] = await model.generate([TARGET], TARGET_OPTIONS)
    expect(solo.tokens.length).toBe(24)

    const crowd = await loadModel(tiny.dir, { threads: 2 })
    crowd.configureScheduler({ maxRows: 256, pageSize: 8 })
    try {
      const mixed = (count: number, seed: number) => Array.from({ length: count }, (_, i) => tokens(1 + ((i * 7 + seed) % 40), seed + i))
      // A: 128 short sequences; B: 64 long ones sharing prompts n = 8; both start at once.
      const a = crowd.generate(mixed(32, 1), { n: 4, temperature: 1, seed: 7, maxTokens: 12, stopTokenIds: [] })
      let bDone = false
      const b = crowd
        .generate(mixed(8, 2), { n: 8, temperature: 0.7, topK: 20, seed: 8, maxTokens: 60, stopTokenIds: [], stats: { topK: 2 } })
        .finally(() => (bDone = true))
      // A few steps in, the target, a stream and more work arrive: 276 sequences for 256 rows, so some
      // wait until A's rows leave.
      while ((crowd.schedulerStats()?.steps ?? 0) < 4) await new Promise((r) => setTimeout(r, 1))
      expect(bDone).toBe(false)
      const target = crowd.generate([tokens(3, 9), TARGET, tokens(30, 10)], { ...TARGET_OPTIONS, perPrompt: [{}, { sequenceOffset: 1000 }, {}] })
      const c = crowd.generate(mixed(40, 3), { n: 2, temperature: 1.3, minP: 0.05, seed: 9, maxTokens: 12, stopTokenIds: [] })
      const streamed: number[] = []
      const stream = (async () => {
        for await (const chunk of crowd.stream(tokens(17, 11), { temperature: 1, seed: 3, maxTokens: 20, stopTokenIds: [] })) streamed.push(chunk.token)
      })()
      const [, , joined] = await Promise.all([a, b, target, c, stream])
      expect(trace(joined[1][0])).toEqual(trace(solo))

      const stats = crowd.schedulerStats()!
      expect(stats.largestStep).toBe(256)
      expect(stats.sharedSteps).toBeGreaterThan(10)
      expect(stats.admitted).toBe(128 + 64 + 3 + 80 + 1)
      // the streamed sequence equals the same request alone
      const [[streamAlone]] = await model.generate([tokens(17, 11)], { temperature: 1, seed: 3, maxTokens: 20, stopTokenIds: [] })
      expect(streamed).toEqual(Array.from(streamAlone.tokens))
    } finally {
      crowd.dispose()
    }
  })

  it('gives the samples of the pre-scheduler waves (AUTODIDACT_SCHEDULER=waves), paged or on fixed slots, prompts of mixed lengths, n > 1, maxBatch', async () => {
    const prompts = [tokens(40, 1), tokens(1, 2), tokens(9, 3), tokens(16, 4), tokens(17, 5)]
    const options: GenerateOptions = { n: 3, temperature: 1, seed: 11, maxTokens: 10, stopTokenIds: [], stats: { topK: 3 }, maxBatch: 4 }
    const waves = await withScheduler('waves', () => model.generate(prompts, options))
    const continuous = await withScheduler('continuous', () => model.generate(prompts, options))
    expect(continuous.map((g) => g.map(trace))).toEqual(waves.map((g) => g.map(trace)))
    // the slot layout (what a backend without paged caches gets: fixed slots, prefixes copied)
    const slots = await loadModel(tiny.dir, { threads: 2 })
    slots.configureScheduler({ paged: false, maxRows: 5 })
    try {
      const fixed = await slots.generate(prompts, options)
      expect(fixed.map((g) => g.map(trace))).toEqual(waves.map((g) => g.map(trace)))
      expect(slots.schedulerStats()!.peakSharedBytes).toBe(0)
    } finally {
      slots.dispose()
    }
    const greedyWaves = await withScheduler('waves', () => model.generate(prompts, { ...options, temperature: 0 }))
    const greedy = await model.generate(prompts, { ...options, temperature: 0 })
    expect(greedy.map((g) => g.map(trace))).toEqual(greedyWaves.map((g) => g.map(trace)))
  })

  it('a finished row takes the next waiting sequence at once: fewer steps than waves, the batch kept full', async () => {
    const m = await loadModel(tiny.dir, { threads: 2 })
    try {
      // A fifth of the vocabulary ends a sequence: lengths vary from 1 to maxTokens.
      const stopTokenIds = Array.from({ length: Math.floor(tiny.config.vocabSize / 5) }, (_, i) => i * 5)
      const [samples] = await m.generate([tokens(5, 1)], { n: 24, temperature: 1, seed: 5, maxTokens: 30, stopTokenIds, maxBatch: 4 })
      const lengths = samples.map((c) => c.tokens.length)
      expect(new Set(lengths).size).toBeGreaterThan(3)
      const stats = m.schedulerStats()!
      let waveSteps = 1  // the prefill
      for (let w = 0; w < 24; w += 4) waveSteps += Math.max(...lengths.slice(w, w + 4))
      const total = lengths.reduce((x, y) => x + y, 0)
      expect(stats.largestStep).toBe(4)
      expect(stats.steps).toBeLessThan(waveSteps)
      expect(stats.steps).toBeGreaterThanOrEqual(Math.ceil(total / 4))
    } finally {
      m.dispose()
    }
  })

  it("the n samples of a prompt share its prefix pages (the memory saved is counted); one call's abort leaves the others' samples alone", async () => {
    const m = await loadModel(tiny.dir, { threads: 2 })
    m.configureScheduler({ pageSize: 16 })
    try {
      const prompt = tokens(50, 8)  // 49 prefilled positions: 3 full pages of 16
      const gone = new AbortController()
      const doomed = m.generate([tokens(12, 3)], { n: 4, temperature: 1, seed: 1, maxTokens: 1000, stopTokenIds: [], signal: gone.signal })
      const kept = m.generate([prompt], { n: 8, temperature: 1, seed: 2, maxTokens: 16, stopTokenIds: [] })
      while ((m.schedulerStats()?.steps ?? 0) < 3) await new Promise((r) => setTimeout(r, 1))
      gone.abort()
      const [aborted, [samples]] = await Promise.all([doomed, kept])
      expect(aborted[0].every((c) => c.finishReason === 'abort' && c.tokens.length < 1000)).toBe(true)
      const [alone] = await model.generate([prompt], { n: 8, temperature: 1, seed: 2, maxTokens: 16, stopTokenIds: [] })
      expect(samples.map(trace)).toEqual(alone.map(trace))
      const stats = m.schedulerStats()!
      const page = pageBytes(tiny.config, 16)
      expect(stats.sharedBytesTotal).toBe(7 * 3 * page)
      expect(stats.peakSharedBytes).toBeGreaterThanOrEqual(7 * 3 * page)
      expect(stats.cache).toBeNull()  // the cache went with the last sequence
    } finally {
      m.dispose()
    }
  })

  it('a KV budget smaller than the batch admits sequences as pages free up, with the same samples', async () => {
    const m = await loadModel(tiny.dir, { threads: 2 })
    const P = 8
    // Room for about three sequences of (20 + 12) positions at a time.
    m.configureScheduler({ pageSize: P, kvCacheBytes: 3 * 4 * pageBytes(tiny.config, P) })
    try {
      const prompts = [tokens(20, 1), tokens(20, 2), tokens(20, 3)]
      const options: GenerateOptions = { n: 4, temperature: 1, seed: 3, maxTokens: 12, stopTokenIds: [] }
      const tight = await m.generate(prompts, options)
      const roomy = await model.generate(prompts, options)
      expect(tight.map((g) => g.map(trace))).toEqual(roomy.map((g) => g.map(trace)))
      const stats = m.schedulerStats()!
      expect(stats.largestStep).toBeLessThan(12)
      expect(stats.largestStep).toBeGreaterThan(1)
    } finally {
      m.dispose()
    }
  })

  it('a model disposed while its scheduler decodes rejects every running call with a typed error', async () => {
    const m = await loadModel(tiny.dir, { threads: 2 })
    const a = m.generate([tokens(5, 1)], { n: 4, temperature: 1, seed: 1, maxTokens: 5000, stopTokenIds: [] })
    const b = m.generate([tokens(9, 2)], { temperature: 1, seed: 2, maxTokens: 5000, stopTokenIds: [] })
    while ((m.schedulerStats()?.steps ?? 0) < 3) await new Promise((r) => setTimeout(r, 1))
    m.dispose()
    await expect(a).rejects.toThrow(/disposed/)
    await expect(b).rejects.toThrow(/disposed/)
    expect(m.schedulerStats()!.cache).toBeNull()
  })

  it('any mix of concurrent calls, page sizes and tight KV budgets: every call completes with the samples it gets alone', async () => {
    const call = fc.record({
      prompts: fc.array(fc.integer({ min: 1, max: 40 }), { minLength: 1, maxLength: 4 }),
      n: fc.integer({ min: 1, max: 4 }),
      maxTokens: fc.integer({ min: 1, max: 20 }),
      seed: fc.integer({ min: 0, max: 1000 }),
      maxBatch: fc.integer({ min: 1, max: 16 }),
      delaySteps: fc.integer({ min: 0, max: 6 }),
    })
    const property = fc.asyncProperty(
      fc.array(call, { minLength: 1, maxLength: 4 }),
      fc.integer({ min: 1, max: 24 }),
      fc.integer({ min: 1, max: 40 }),
      fc.integer({ min: 1, max: 12 }),
      async (calls, pageSize, budgetPages, maxRows) => {
        const m = await loadModel(tiny.dir, { threads: 1 })
        m.configureScheduler({ pageSize, maxRows, kvCacheBytes: budgetPages * pageBytes(tiny.config, pageSize) })
        try {
          const options = (c: (typeof calls)[number]): GenerateOptions => ({ n: c.n, temperature: 1, seed: c.seed, maxTokens: c.maxTokens, maxBatch: c.maxBatch, stopTokenIds: [] })
          const promptsOf = (c: (typeof calls)[number], i: number) => c.prompts.map((len, j) => tokens(len, 100 * i + j))
          const running = calls.map(async (c, i) => {
            while ((m.schedulerStats()?.steps ?? 0) < c.delaySteps && i > 0 && m.schedulerStats()?.cache) await new Promise((r) => setTimeout(r, 0))
            return m.generate(promptsOf(c, i), options(c))
          })
          const got = await Promise.all(running)
          for (let i = 0; i < calls.length; ++i) {
            const alone = await model.generate(promptsOf(calls[i], i), options(calls[i]))
            expect(got[i].map((g) => g.map(trace))).toEqual(alone.map((g) => g.map(trace)))
          }
        } finally {
          m.dispose()
        }
      },
    )
    await fc.assert(property, { numRuns: 15, seed: 2026 })
  })

  it('scheduler options and AUTODIDACT_KV_CACHE_BYTES are checked: typed errors naming them', async () => {
    expect(() => model.configureScheduler({ pageSize: 0 })).toThrow(/pageSize/)
    expect(() => model.configureScheduler({ maxRows: 1.5 })).toThrow(/maxRows/)
    expect(() => model.configureScheduler({ kvCacheBytes: -1 })).toThrow(/kvCacheBytes/)
    const m = await loadModel(tiny.dir, { threads: 1 })
    process.env.AUTODIDACT_KV_CACHE_BYTES = 'lots'
    try {
      await expect(m.generate([tokens(3, 1)], { maxTokens: 2 })).rejects.toThrow(/AUTODIDACT_KV_CACHE_BYTES/)
    } finally {
      delete process.env.AUTODIDACT_KV_CACHE_BYTES
      m.dispose()
    }
  })
})
