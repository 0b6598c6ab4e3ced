// generate / stream / score through the public API on a tiny random Qwen3 folder.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { InvalidArgumentError, loadModel, type Model } from '../../src/index.js'
import { forward64 } from '../reference/model64.js'
import { klEstimators64, klExact64, logitStats64 } from '../reference/stats64.js'
import { writeTinyModel, type TinyModel } from '../helpers/tiny-model.js'

let root: string
let tiny: TinyModel
let other: TinyModel
let model: Model
let reference: Model

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'ad-gen-'))
  tiny = await writeTinyModel(join(root, 'policy'), { family: 'qwen3', dtype: 'F32', seed: 21 })
  other = await writeTinyModel(join(root, 'reference'), { family: 'qwen3', dtype: 'F32', seed: 22 })
  model = await loadModel(tiny.dir, { threads: 2 })
  reference = await loadModel(other.dir, { threads: 1 })
})
afterAll(() => {
  model?.dispose()
  reference?.dispose()
  rmSync(root, { recursive: true, force: true })
})

const V = () => tiny.config.vocabSize
const PROMPT = [5, 17, 33, 2, 101, 64]

function argmax(row: Float64Array): number {
  let best = 0
  for (let i = 1; i < row.length; ++i) if (row[i] > row[best]) best = i
  return best
}

describe('generate', () => {
  it('greedy decoding follows the float64 argmax token by token, with statistics of each step', async () => {
    const [[c]] = await model.generate([PROMPT], { temperature: 0, maxTokens: 8, stopTokenIds: [], stats: { topK: 4 } })
    expect(c.tokens.length).toBe(8)
    expect(c.finishReason).toBe('length')
    const seq = [...PROMPT]
    for (let i = 0; i < c.tokens.length; ++i) {
      const logits = forward64(tiny.config, tiny.weights, seq)
      const row = logits.subarray((seq.length - 1) * V(), seq.length * V())
      expect(c.tokens[i]).toBe(argmax(row))
      const s = logitStats64(row, { target: c.tokens[i], topK: 4 })
      expect(Math.abs(c.logprobs[i] - s.chosenLogprob!)).toBeLessThan(1e-4)
      expect(Math.abs(c.entropy[i] - s.entropy)).toBeLessThan(1e-4)
      expect(Math.abs(c.logsumexp[i] - s.logsumexp)).toBeLessThan(1e-4)
      expect(Array.from(c.topK!.ids.subarray(i * 4, i * 4 + 4))).toEqual(Array.from(s.topK!.ids))
      seq.push(c.tokens[i])
    }
  })

  it('the same seed gives the same tokens whatever else is in the batch', async () => {
    const other = [9, 8, 7]
    const opts = { temperature: 1, maxTokens: 12, seed: 1234, stopTokenIds: [] as number[] }
    // PROMPT alone as sequence id 3 == PROMPT as prompt index 1 (of n = 3), sample 0.
    const [[solo]] = await model.generate([PROMPT], { ...opts, sequenceOffset: 3 })
    const batched = await model.generate([other, PROMPT], { ...opts, n: 3 })
    expect(Array.from(batched[1][0].tokens)).toEqual(Array.from(solo.tokens))
    expect(Array.from(batched[1][0].logprobs)).toEqual(Array.from(solo.logprobs))
    // the n samples of one prompt are different draws
    const distinct = new Set(batched[1].map((c) => c.tokens.join(',')))
    expect(distinct.size).toBeGreaterThan(1)
    // maxBatch waves do not change any sample
    const waved = await model.generate([other, PROMPT], { ...opts, n: 3, maxBatch: 2 })
    expect(waved.map((g) => g.map((c) => Array.from(c.tokens)))).toEqual(batched.map((g) => g.map((c) => Array.from(c.tokens))))
  })

  it('perPrompt: a prompt with its own seed and sequence ids samples what it would in a call of its own', async () => {
    const other = [9, 8, 7]
    const opts = { temperature: 1, maxTokens: 12, n: 2, stopTokenIds: [] as number[] }
    const merged = await model.generate([other, PROMPT], { ...opts, seed: 1, perPrompt: [{ seed: 77, sequenceOffset: 0 }, { seed: 5, sequenceOffset: 0 }] })
    const [aloneOther] = await model.generate([other], { ...opts, seed: 77 })
    const [alonePrompt] = await model.generate([PROMPT], { ...opts, seed: 5 })
    const tokens = (g: { tokens: Int32Array | number[] }[]) => g.map((c) => Array.from(c.tokens))
    expect(tokens(merged[0])).toEqual(tokens(aloneOther))
    expect(tokens(merged[1])).toEqual(tokens(alonePrompt))
    expect(Array.from(merged[1][1].logprobs)).toEqual(Array.from(alonePrompt[1].logprobs))
    // without perPrompt the call's seed and offsets apply: the merged prompts then differ from those solo runs
    const plain = await model.generate([other, PROMPT], { ...opts, seed: 1 })
    expect(tokens(plain[1])).not.toEqual(tokens(alonePrompt))
  })

  it("perPrompt: one prompt's signal ends only its samples", async () => {
    const gone = new AbortController()
    gone.abort()
    const [left, stayed] = await model.generate([PROMPT, [9, 8, 7]], { temperature: 1, seed: 3, n: 2, maxTokens: 6, stopTokenIds: [], perPrompt: [{ signal: gone.signal }, {}] })
    expect(left.map((c) => [c.finishReason, c.tokens.length])).toEqual([['abort', 0], ['abort', 0]])
    expect(stayed.map((c) => [c.finishReason, c.tokens.length])).toEqual([['length', 6], ['length', 6]])
  })

  it('perPrompt is checked: one entry per prompt, seeds and offsets non-negative integers', async () => {
    await expect(model.generate([PROMPT, PROMPT], { maxTokens: 2, perPrompt: [{}] })).rejects.toThrow(/one entry per prompt/)
    await expect(model.generate([PROMPT], { maxTokens: 2, perPrompt: [{ seed: -1 }] })).rejects.toThrow(InvalidArgumentError)
    await expect(model.generate([PROMPT], { maxTokens: 2, perPrompt: [{ sequenceOffset: 0.5 }] })).rejects.toThrow(/sequenceOffset/)
  })

  it('stops at stop token ids (kept in tokens, not in text) and at stop strings (cut from text)', async () => {
    const [[free]] = await model.generate([PROMPT], { temperature: 0, maxTokens: 10, stopTokenIds: [] })
    const stopId = free.tokens[3]
    const [[byId]] = await model.generate([PROMPT], { temperature: 0, maxTokens: 10, stopTokenIds: [stopId] })
    const firstAt = Array.from(free.tokens).indexOf(stopId)
    expect(byId.finishReason).toBe('stop')
    expect(Array.from(byId.tokens)).toEqual(Array.from(free.tokens.subarray(0, firstAt + 1)))
    expect(byId.text).toBe(model.tokenizer.decode(Array.from(free.tokens.subarray(0, firstAt))))

    const text = free.text
    const stop = text.slice(Math.floor(text.length / 2), Math.floor(text.length / 2) + 2)
    if (stop.length === 2) {
      const [[byString]] = await model.generate([PROMPT], { temperature: 0, maxTokens: 10, stopTokenIds: [], stop: [stop] })
      expect(byString.finishReason).toBe('stop')
      expect(byString.text).toBe(text.slice(0, text.indexOf(stop)))
    }
  })

  it('an AbortSignal stops generation and returns what was produced', async () => {
    const controller = new AbortController()
    const chunks: number[] = []
    const iterator = model.stream(PROMPT, { temperature: 1, maxTokens: 10_000, stopTokenIds: [], signal: controller.signal })
    let result
    for (;;) {
      const next = await iterator.next()
      if (next.done) {
        result = next.value
        break
      }
      chunks.push(next.value.token)
      if (chunks.length === 5) controller.abort()
    }
    expect(result.finishReason).toBe('abort')
    expect(result.tokens.length).toBeGreaterThanOrEqual(5)
    expect(result.tokens.length).toBeLessThan(10_000)
    expect(Array.from(result.tokens)).toEqual(chunks)
  })

  it('stream yields the same tokens, text and per-token statistics (logsumexp, top-K) as generate', async () => {
    const opts = { temperature: 0.9, topP: 0.9, maxTokens: 16, seed: 7, stopTokenIds: [] as number[], stats: { topK: 3 } }
    const [[whole]] = await model.generate([PROMPT], opts)
    let text = ''
    const tokens: number[] = []
    let t = 0
    for await (const chunk of model.stream(PROMPT, opts)) {
      text += chunk.text
      tokens.push(chunk.token)
      expect(chunk.logprob).toBe(whole.logprobs[t])
      expect(chunk.logsumexp).toBe(whole.logsumexp[t])
      expect(Array.from(chunk.topK!.ids)).toEqual(Array.from(whole.topK!.ids.subarray(3 * t, 3 * t + 3)))
      expect(Array.from(chunk.topK!.logits)).toEqual(Array.from(whole.topK!.logits.subarray(3 * t, 3 * t + 3)))
      t++
    }
    expect(tokens).toEqual(Array.from(whole.tokens))
    expect(text).toBe(whole.text)
    for await (const chunk of model.stream(PROMPT, { ...opts, stats: undefined, maxTokens: 2 })) expect(chunk.topK).toBeNull()
  })

  it('rejects bad options with typed errors', async () => {
    await expect(model.generate([PROMPT], { n: 0 })).rejects.toBeInstanceOf(InvalidArgumentError)
    await expect(model.generate([PROMPT], { temperature: -1 })).rejects.toBeInstanceOf(InvalidArgumentError)
    await expect(model.generate([PROMPT], { stats: { topK: 65 } })).rejects.toBeInstanceOf(InvalidArgumentError)
    await expect(model.generate([[V()]])).rejects.toBeInstanceOf(InvalidArgumentError)
    await expect(model.generate([[]])).rejects.toBeInstanceOf(InvalidArgumentError)
  })
})

describe('score', () => {
  it('teacher-forced statistics and KL estimators match float64 for every completion token', async () => {
    const completion = [40, 41, 42, 7, 9]
    const [s] = await model.score([{ prompt: PROMPT, completion }], { stats: { topK: 3 }, reference })
    const seq = [...PROMPT, ...completion]
    const p = forward64(tiny.config, tiny.weights, seq)
    const q = forward64(other.config, other.weights, seq)
    for (let i = 0; i < completion.length; ++i) {
      const t = PROMPT.length - 1 + i
      const zp = p.subarray(t * V(), (t + 1) * V())
      const zq = q.subarray(t * V(), (t + 1) * V())
      const st = logitStats64(zp, { target: completion[i], topK: 3 })
      const kl = klEstimators64(zp, zq, completion[i])
      expect(Math.abs(s.logprobs[i] - st.chosenLogprob!)).toBeLessThan(1e-4)
      expect(Math.abs(s.entropy[i] - st.entropy)).toBeLessThan(1e-4)
      expect(Array.from(s.topK!.ids.subarray(i * 3, i * 3 + 3))).toEqual(Array.from(st.topK!.ids))
      expect(Math.abs(s.kl!.k1[i] - kl.k1)).toBeLessThan(1e-4)
      expect(Math.abs(s.kl!.k2[i] - kl.k2)).toBeLessThan(1e-4)
      expect(Math.abs(s.kl!.k3[i] - kl.k3)).toBeLessThan(1e-4)
      expect(Math.abs(s.kl!.exact[i] - klExact64(zp, zq))).toBeLessThan(1e-4)
    }
  })

  it('sampling-time logprobs equal teacher-forced logprobs of the same tokens', async () => {
    const [[c]] = await model.generate([PROMPT], { temperature: 1, maxTokens: 10, seed: 3, stopTokenIds: [] })
    const [s] = await model.score([{ prompt: PROMPT, completion: Array.from(c.tokens) }])
    let worst = 0
    for (let i = 0; i < c.tokens.length; ++i) worst = Math.max(worst, Math.abs(c.logprobs[i] - s.logprobs[i]))
    expect(worst).toBeLessThan(1e-4)
  })
})
