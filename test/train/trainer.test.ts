// The trainer end to end on tiny random models: the direction of policy updates, SFT learning a
// corpus, LoRA as a no-op at init, checkpoints that reload bit for bit, exact resume, NaN steps.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { InvalidArgumentError, loadModel, type Model } from '../../src/index.js'
import { writeTinyModel } from '../helpers/tiny-model.js'

const root = mkdtempSync(join(tmpdir(), 'ad-trainer-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))
let counter = 0

async function tinyModel(seed = 41): Promise<Model> {
  const tiny = await writeTinyModel(join(root, `m${counter++}`), { family: 'qwen3', dtype: 'F32', seed })
  return loadModel(tiny.dir, { threads: 2 })
}

const PROMPT = [10, 20, 30, 40]

async function logprobsOf(model: Model, completion: number[]): Promise<Float32Array> {
  const [s] = await model.score([{ prompt: PROMPT, completion }])
  return s.logprobs
}

async function logitsOf(model: Model, tokens: number[]): Promise<Float32Array> {
  const cache = model.handle.createCache(1, tokens.length)
  const r = await model.handle.step(cache, { slots: Int32Array.of(0), counts: Int32Array.of(tokens.length), outModes: Uint8Array.of(2), tokens: Int32Array.from(tokens), returnLogits: true })
  cache.dispose()
  return r.logits!
}

describe('policy updates', () => {
  it.each([
    [+1, 'raises'],
    [-1, 'lowers'],
  ])('advantage %d %s the sampled tokens’ logprobs', async (advantage) => {
    const model = await tinyModel()
    const [[c]] = await model.generate([PROMPT], { maxTokens: 6, seed: 1, stopTokenIds: [] })
    const completion = Array.from(c.tokens)
    const before = await logprobsOf(model, completion)
    const trainer = await model.trainer({ objective: { name: 'policy' }, optimizer: { lr: 1e-3 } })
    const m = await trainer.step({ sequences: [{ prompt: PROMPT, completion, oldLogprobs: c.logprobs, advantages: advantage }] })
    expect(m.skipped).toBe(false)
    expect(m.gradNorm).toBeGreaterThan(0)
    const after = await logprobsOf(model, completion)
    const change = after.reduce((s, v, i) => s + v - before[i], 0)
    expect(Math.sign(change)).toBe(advantage)
    model.dispose()
  })
})

describe('sft', () => {
  it('drives the loss down on a small corpus until greedy decoding reproduces it', async () => {
    const model = await tinyModel(42)
    const corpus = [
      { prompt: [5, 6, 7], completion: [100, 101, 102, 103] },
      { prompt: [8, 9], completion: [200, 150, 120] },
    ]
    const trainer = await model.trainer({ objective: { name: 'sft' }, optimizer: { lr: 3e-2 }, clipGradNorm: 1 })
    const losses: number[] = []
    for (let i = 0; i < 40; ++i) losses.push((await trainer.step({ sequences: corpus })).loss)
    expect(losses.at(-1)!).toBeLessThan(losses[0] * 0.1)
    for (const item of corpus) {
      const [[g]] = await model.generate([item.prompt], { temperature: 0, maxTokens: item.completion.length, stopTokenIds: [] })
      expect(Array.from(g.tokens)).toEqual(item.completion)
    }
    model.dispose()
  })
})

describe('LoRA and checkpoints', () => {
  it('LoRA with B = 0 leaves outputs unchanged; a step then changes them; the PEFT adapter reloads exactly', async () => {
    const model = await tinyModel(43)
    const tokens = [3, 1, 4, 1, 5, 9, 2, 6]
    const before = await logitsOf(model, tokens)
    const trainer = await model.trainer({ objective: { name: 'sft' }, lora: { rank: 4, alpha: 8 }, optimizer: { lr: 1e-2 } })
    expect(Array.from(await logitsOf(model, tokens))).toEqual(Array.from(before))
    await trainer.step({ sequences: [{ prompt: [1, 2], completion: [3, 4, 5] }] })
    const trained = await logitsOf(model, tokens)
    expect(Array.from(trained)).not.toEqual(Array.from(before))
    const adapterDir = join(root, 'adapter')
    await model.save(adapterDir)
    const fresh = await loadModel(model.dir, { threads: 2 })
    await fresh.loadAdapter(adapterDir)
    expect(Array.from(await logitsOf(fresh, tokens))).toEqual(Array.from(trained))
    // merged full save reloads to the same function (within f32 rounding of the merge)
    const mergedDir = join(root, 'merged')
    await model.save(mergedDir, { adapterOnly: false })
    const merged = await loadModel(mergedDir, { threads: 2 })
    const ml = await logitsOf(merged, tokens)
    let worst = 0
    for (let i = 0; i < ml.length; ++i) worst = Math.max(worst, Math.abs(ml[i] - trained[i]))
    expect(worst).toBeLessThan(1e-4)
    for (const m of [model, fresh, merged]) m.dispose()
  })

  it('resume: N steps straight equal k steps + save + resume + (N − k) steps, bit for bit', async () => {
    const batches = [0, 1, 2, 3].map((k) => ({ sequences: [{ prompt: [1 + k, 2], completion: [7, 8 + k, 9], advantages: k % 2 ? 1 : -0.5, oldLogprobs: [-5, -5, -5] }] }))
    const opts = { objective: { name: 'policy' as const }, optimizer: { lr: 1e-2 }, schedule: { kind: 'cosine' as const, warmupSteps: 1, totalSteps: 4 } }
    const tokens = [9, 8, 7, 6, 5]

    const straight = await tinyModel(44)
    const t1 = await straight.trainer(opts)
    for (const b of batches) await t1.step(b)
    const want = await logitsOf(straight, tokens)

    const first = await tinyModel(44)
    const t2 = await first.trainer(opts)
    for (const b of batches.slice(0, 2)) await t2.step(b)
    const ckpt = join(root, 'ckpt')
    await first.save(ckpt)
    await t2.saveState(ckpt)
    first.dispose()

    const resumed = await loadModel(ckpt, { threads: 2 })
    const t3 = await resumed.trainer(opts)
    await t3.loadState(ckpt)
    expect(t3.steps).toBe(2)
    for (const b of batches.slice(2)) await t3.step(b)
    expect(Array.from(await logitsOf(resumed, tokens))).toEqual(Array.from(want))
    straight.dispose()
    resumed.dispose()
  })

  it('a step with a non-finite loss is skipped, reported and leaves the weights as they were', async () => {
    const model = await tinyModel(45)
    const tokens = [1, 2, 3, 4]
    const before = await logitsOf(model, tokens)
    const trainer = await model.trainer({ objective: { name: 'policy' }, optimizer: { lr: 1e-2 } })
    const m = await trainer.step({ sequences: [{ prompt: [1], completion: [2, 3], advantages: NaN }] })
    expect(m.skipped).toBe(true)
    expect(m.skipReason).toMatch(/non-finite/)
    expect(trainer.steps).toBe(0)
    expect(Array.from(await logitsOf(model, tokens))).toEqual(Array.from(before))
    model.dispose()
  })

  it('dpo with a LoRA policy and its base as reference raises the chosen-over-rejected margin', async () => {
    const model = await tinyModel(46)
    const chosen = [50, 51, 52]
    const rejected = [60, 61, 62]
    const margin = async () => (await logprobsOf(model, chosen)).reduce((a, b) => a + b, 0) - (await logprobsOf(model, rejected)).reduce((a, b) => a + b, 0)
    const before = await margin()
    const trainer = await model.trainer({ objective: { name: 'dpo', beta: 0.1 }, lora: { rank: 4, alpha: 8 }, optimizer: { lr: 1e-2 } })
    for (let i = 0; i < 3; ++i) await trainer.step({ sequences: [{ prompt: PROMPT, completion: chosen }, { prompt: PROMPT, completion: rejected }], pairs: [[0, 1]] })
    expect(await margin()).toBeGreaterThan(before)
    model.dispose()
  })
})

describe('the native training forward', () => {
  it('rejects malformed sequences with typed errors before touching the model', async () => {
    const model = await tinyModel()
    const { nativeAddon } = await import('../../src/native.js')
    const train = (await nativeAddon()).train
    const req = (tokens: number[], lengths: number[], promptLengths: number[]) =>
      train.forward(model.handle, { tokens: Int32Array.from(tokens), lengths: Int32Array.from(lengths), promptLengths: Int32Array.from(promptLengths) })
    expect(() => req([1, 2, 3], [3], [3])).toThrow(/prompt of ≥ 1 token and a completion/)
    expect(() => req([1, 2, 3], [3, 2], [1])).toThrow(/equal length/)
    expect(() => req([1, 2, 3], [4], [1])).toThrow(/sum of lengths/)
    model.dispose()
  })
})

describe('trainer.step checks its batch as generate checks its prompts (issue 21)', () => {
  it.each([
    ['a token id past the vocabulary', { prompt: [1, 2], completion: [99999, 3] }, /batch\.sequences\[0\]\.completion holds token id 99999, outside the vocabulary \[0, \d+\)/],
    ['a negative token id', { prompt: [-1, 2], completion: [3] }, /batch\.sequences\[0\]\.prompt holds token id -1/],
    ['a fractional token id', { prompt: [1, 2], completion: [1.5] }, /holds token id 1\.5/],
    ['a sequence longer than the context', { prompt: Array.from({ length: 1020 }, (_, i) => i % 300), completion: [1, 2, 3, 4, 5] }, /batch\.sequences\[0\] is 1025 tokens long, beyond the model's context of 1024 positions/],
    ['oldLogprobs of the wrong length', { prompt: [1], completion: [2, 3], oldLogprobs: [-1], advantages: 1 }, /oldLogprobs must have one value per completion token \(2\), got 1/],
    ['advantages of the wrong length', { prompt: [1], completion: [2, 3], advantages: [1, 2, 3] }, /advantages must have one value per completion token \(2\), got 3/],
  ])('%s: an InvalidArgumentError, the model untouched', async (_what, sequence, message) => {
    const model = await tinyModel(47)
    const tokens = [1, 2, 3, 4]
    const before = await logitsOf(model, tokens)
    const trainer = await model.trainer({ objective: { name: 'policy' }, optimizer: { lr: 1e-2 } })
    const err = await trainer.step({ sequences: [{ advantages: 1, ...sequence }] }).then(() => null, (e: unknown) => e)
    expect(err).toBeInstanceOf(InvalidArgumentError)
    expect((err as InvalidArgumentError).code).toBe('INVALID_ARGUMENT')
    expect((err as Error).message).toMatch(message)
    expect(trainer.steps).toBe(0)
    expect(Array.from(await logitsOf(model, tokens))).toEqual(Array.from(before))
    // the same ids in a prompt are the same error from generate
    if ('completion' in sequence && sequence.completion.includes(99999))
      await expect(model.generate([[1, 99999]], { maxTokens: 1 })).rejects.toThrow(/prompt holds token id 99999, outside the vocabulary/)
    model.dispose()
  })
})
