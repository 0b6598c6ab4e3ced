// ONNX models as frozen ensemble members, Judges and reference scorers: an exported model run by
// onnxruntime-node in a worker thread samples exactly as the engine does (same kernels, same
// Philox stream), carries the same per-token statistics, scores completions as Model.score does,
// and never stalls the event loop.
//
// Bounds: statistics (logprob, entropy, logsumexp, KL) within 1e-4 absolute of the engine's —
// the logits agree to ~1e-5 relative (test/export/onnx.test.ts), and these are smooth functions of
// them. Sampled tokens are asserted equal: a draw flips only when the Philox uniform falls within
// ~1e-6 of a CDF boundary, which does not happen in these seeded runs.
import { copyFileSync, cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import ort from 'onnxruntime-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'

import type { EnsembleVariant, VariantSampler } from '../../src/ensemble/types.js'
import { exportOnnx } from '../../src/export/onnx.js'
import { loadModel, type Completion, type Model } from '../../src/index.js'
import { OnnxCausalLM, OnnxModelError, OnnxVariant } from '../../src/onnx/index.js'
import { DT, GraphBuilder, valueInfo } from '../../src/onnx/proto.js'
import { extractAnswerTag } from '../../src/tasks/extract.js'
import { disagreementReward, variantPlurality } from '../../src/tasks/vote.js'
import { evalSet, solverPrompt } from '../../src/worlds/arith/index.js'
import { writeTinyModel } from '../helpers/tiny-model.js'

const BUNDLED = 'models/arith-qwen3-tiny'
const STAT_TOL = 1e-4

let root: string
let exported: string
let engine: Model
let onnx: OnnxVariant
const prompts = evalSet(3, 6).map((q) => solverPrompt(q.question))

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'ad-onnx-rt-'))
  exported = join(root, 'bundled-onnx')
  await exportOnnx(BUNDLED, exported, { dtype: 'f32' })
  engine = await loadModel(BUNDLED, { threads: 1 })
  onnx = await OnnxVariant.open(exported, { threads: 1 })
})
afterAll(async () => {
  await onnx?.dispose()
  engine?.dispose()
  rmSync(root, { recursive: true, force: true })
})

function expectClose(a: ArrayLike<number>, b: ArrayLike<number>, what: string): void {
  expect(a.length, what).toBe(b.length)
  for (let i = 0; i < b.length; i++) expect(Math.abs(a[i] - b[i]), `${what}[${i}]`).toBeLessThanOrEqual(STAT_TOL)
}

/** Same tokens, text and finish; statistics within STAT_TOL. */
function expectSameSamples(got: Partial<Completion>[][], want: Completion[][]): void {
  expect(got.length).toBe(want.length)
  want.forEach((row, p) =>
    row.forEach((w, s) => {
      const g = got[p][s]
      expect(Array.from(g.tokens!), `prompt ${p} sample ${s}`).toEqual(Array.from(w.tokens))
      expect(g.text).toBe(w.text)
      expect(g.finishReason).toBe(w.finishReason)
      for (const k of ['logprobs', 'entropy', 'logsumexp', 'maxLogit', 'margin'] as const) expectClose(g[k]!, w[k], `${k} ${p}/${s}`)
      if (w.topK) expect(Array.from(g.topK!.ids)).toEqual(Array.from(w.topK.ids))
    }),
  )
}

describe('OnnxVariant: the exported bundled model samples as the engine does', () => {
  it('greedy answers equal the engine greedy answers, with the same per-token statistics', async () => {
    const o = { temperature: 0, maxTokens: 48, stats: { topK: 4 } }
    const [got, want] = await Promise.all([onnx.sample(prompts, o), engine.generate(prompts, o)])
    expectSameSamples(got, want)
    expect(want.flat().some((c) => c.finishReason === 'stop')).toBe(true)
  })

  it('seeded sampling (n, temperature, top-k, top-p, min-p, stop strings) equals the engine sample for sample', async () => {
    const o = { n: 4, temperature: 1, topK: 40, topP: 0.95, minP: 0.02, seed: 1234, maxTokens: 40, stop: ['</think>'], stats: { topK: 3 } }
    const [got, want] = await Promise.all([onnx.sample(prompts, o), engine.generate(prompts, o)])
    expectSameSamples(got, want)
    const texts = new Set(want.flat().map((c) => c.text))
    expect(texts.size).toBeGreaterThan(prompts.length) // the samples do differ from each other
  })

  it('repetition, presence and frequency penalties, sequence offsets and stop ids follow the engine too', async () => {
    const o = { n: 3, temperature: 0.8, repetitionPenalty: 1.3, presencePenalty: 0.4, frequencyPenalty: 0.2, seed: 9, maxTokens: 32, sequenceOffset: 17, stopTokenIds: [2, 5] }
    const [got, want] = await Promise.all([onnx.model.generate(prompts.slice(0, 3), o), engine.generate(prompts.slice(0, 3), o)])
    expectSameSamples(got, want)
  })

  it('perPrompt seeds, sequence ids and signals follow the engine too', async () => {
    const gone = new AbortController()
    gone.abort()
    const o = { n: 2, temperature: 0.9, maxTokens: 16, perPrompt: [{ seed: 41, sequenceOffset: 0 }, { signal: gone.signal }, { seed: 7, sequenceOffset: 5 }] }
    const [got, want] = await Promise.all([onnx.model.generate(prompts.slice(0, 3), o), engine.generate(prompts.slice(0, 3), o)])
    expectSameSamples(got, want)
    expect(got[1].map((c) => c.finishReason)).toEqual(['abort', 'abort'])
  })

  it('an aborted signal ends every sample with finishReason abort, as the engine does', async () => {
    const ctl = new AbortController()
    ctl.abort()
    const got = await onnx.sample(prompts.slice(0, 2), { n: 2, signal: ctl.signal, maxTokens: 8 })
    const want = await engine.generate(prompts.slice(0, 2), { n: 2, signal: ctl.signal, maxTokens: 8 })
    expect(got.flat().map((c) => [c.finishReason, c.tokens!.length])).toEqual(want.flat().map((c) => [c.finishReason, c.tokens.length]))
    expect(got.flat().every((c) => c.finishReason === 'abort')).toBe(true)
  })

  it('an ensemble with an engine member and ONNX members: concurrent sampling, the DIS disagreement reward', async () => {
    const engineMember: VariantSampler = { name: 'engine@arith', sample: (p, o) => engine.generate(p, o) }
    const hot = await OnnxVariant.open(exported, { threads: 1, name: 'onnx:arith@hot' })
    const ensemble: EnsembleVariant[] = [
      { sampler: engineMember, temperature: 0.7, k: 4 },
      { sampler: onnx, temperature: 0.7, k: 4 },
      { sampler: hot, temperature: 1.5, k: 4 },
    ]
    try {
      const results = await Promise.all(ensemble.map((v) => v.sampler.sample(prompts, { n: v.k, temperature: v.temperature, seed: 5, maxTokens: 48, stats: { topK: 2 } })))
      // the ONNX member at the engine member's settings gives the engine member's samples
      expectSameSamples(results[1], results[0] as Completion[][])
      for (const r of results) {
        expect(r.map((row) => row.length)).toEqual(prompts.map(() => 4))
        for (const s of r.flat()) {
          expect(s.logprobs!.length).toBe(s.tokens!.length)
          expect(Array.from(s.logprobs!).every((x) => x <= 1e-6 && Number.isFinite(x))).toBe(true)
          expect(Array.from(s.entropy!).every((x) => x >= -1e-6)).toBe(true)
        }
      }
      // DIS §4.2: each variant's plurality answer per question; the reward is their disagreement
      const rewards = prompts.map((_, p) => disagreementReward(results.map((r) => variantPlurality(r[p].map((s) => extractAnswerTag(s.text))))))
      for (const r of rewards) expect(r >= 0 && r <= 1).toBe(true)
    } finally {
      await hot.dispose()
    }
  })
})

describe('OnnxCausalLM as a frozen scorer / reference', () => {
  it('teacher-forced statistics of given completions equal Model.score', async () => {
    const [greedy] = await engine.generate(prompts.slice(0, 3), { temperature: 0, maxTokens: 32 })
    const pairs = prompts.slice(0, 3).map((prompt, i) => ({ prompt, completion: i === 2 ? ' <answer>42</answer>' : greedy[0].text || 'x' }))
    const [got, want] = await Promise.all([onnx.model.score(pairs, { stats: { topK: 5 } }), engine.score(pairs, { stats: { topK: 5 } })])
    got.forEach((g, i) => {
      expect(Array.from(g.tokens)).toEqual(Array.from(want[i].tokens))
      expect(g.promptTokens).toBe(want[i].promptTokens)
      for (const k of ['logprobs', 'entropy', 'logsumexp', 'maxLogit', 'margin'] as const) expectClose(g[k], want[i][k], k)
      expect(Array.from(g.topK!.ids)).toEqual(Array.from(want[i].topK!.ids))
    })
  })

  it('KL estimators to an ONNX reference equal the engine with the matching reference model', async () => {
    const a = await writeTinyModel(join(root, 'ref-a'), { family: 'qwen3', dtype: 'F32', seed: 61 })
    const b = await writeTinyModel(join(root, 'ref-b'), { family: 'llama', dtype: 'F32', seed: 62 })
    await exportOnnx(a.dir, join(root, 'ref-a-onnx'), { dtype: 'f32' })
    await exportOnnx(b.dir, join(root, 'ref-b-onnx'), { dtype: 'f32' })
    const [ea, eb] = await Promise.all([loadModel(a.dir, { threads: 1 }), loadModel(b.dir, { threads: 1 })])
    const [oa, ob] = await Promise.all([OnnxCausalLM.open(join(root, 'ref-a-onnx'), { threads: 1 }), OnnxCausalLM.open(join(root, 'ref-b-onnx'), { threads: 1 })])
    try {
      const pairs = [{ prompt: [5, 6, 7], completion: [8, 9, 10, 11] }, { prompt: 'Hello world', completion: ' the cat' }]
      const got = await oa.score(pairs, { reference: ob })
      const want = await ea.score(pairs, { reference: eb })
      got.forEach((g, i) => {
        for (const k of ['k1', 'k2', 'k3', 'exact'] as const) expectClose(g.kl![k], want[i].kl![k], k)
        expect(Math.max(...want[i].kl!.exact)).toBeGreaterThan(1e-3) // two different models
      })
    } finally {
      ea.dispose()
      eb.dispose()
      await Promise.all([oa.dispose(), ob.dispose()])
    }
  })
})

describe('the worker thread keeps the event loop free', () => {
  /** Runs `work` while a 1 ms timer ticks; the longest interval without a tick, and the work's duration. */
  async function longestStall(work: () => Promise<unknown>): Promise<{ stall: number; duration: number }> {
    const stamps: number[] = []
    let on = true
    const tick = () => {
      stamps.push(performance.now())
      if (on) setTimeout(tick, 1)
    }
    tick()
    const t0 = performance.now()
    await work()
    const end = performance.now()
    on = false
    stamps.push(end)
    let stall = 0
    for (let i = 1; i < stamps.length; i++) stall = Math.max(stall, stamps[i] - stamps[i - 1])
    return { stall, duration: end - t0 }
  }

  it('timers tick during a long onnxruntime run in the worker; the same run on the main thread stalls them', async () => {
    const tiny = await writeTinyModel(join(root, 'big'), { family: 'qwen3', dtype: 'F32', seed: 71, hiddenSize: 128, intermediate: 512, layers: 4, heads: 4, kvHeads: 2, headDim: 32, vocabSize: 1024 })
    const out = join(root, 'big-onnx')
    await exportOnnx(tiny.dir, out, { dtype: 'f32' })
    const tokens = Array.from({ length: 640 }, (_, i) => (i * 37) % 1000)
    const lm = await OnnxCausalLM.open(out, { threads: 1 })
    const session = await ort.InferenceSession.create(join(out, 'onnx', 'model.onnx'), { intraOpNumThreads: 1, interOpNumThreads: 1 })
    try {
      await lm.logits(tokens.slice(0, 8)) // warm both
      // three runs back to back: one took 37 ms on a quiet machine, under the 40 ms the check needs to see a stall
      const worker = await longestStall(async () => {
        for (let run = 0; run < 3; run++) await lm.logits(tokens)
      })
      const feeds: Record<string, ort.Tensor> = {
        input_ids: new ort.Tensor('int64', BigInt64Array.from(tokens, BigInt), [1, tokens.length]),
        attention_mask: new ort.Tensor('int64', new BigInt64Array(tokens.length).fill(1n), [1, tokens.length]),
        position_ids: new ort.Tensor('int64', BigInt64Array.from(tokens, (_, i) => BigInt(i)), [1, tokens.length]),
      }
      for (let l = 0; l < 4; l++) for (const k of ['key', 'value']) feeds[`past_key_values.${l}.${k}`] = new ort.Tensor('float32', new Float32Array(0), [1, 2, 0, 32])
      const main = await longestStall(() => session.run(feeds))
      console.log(`event loop: worker run ${worker.duration.toFixed(0)} ms, longest stall ${worker.stall.toFixed(1)} ms; main-thread run ${main.duration.toFixed(0)} ms, longest stall ${main.stall.toFixed(1)} ms`)
      expect(main.stall).toBeGreaterThan(0.8 * main.duration) // the control: onnxruntime blocks its thread
      expect(worker.duration).toBeGreaterThan(40) // long enough for a stall to show
      expect(worker.stall).toBeLessThan(worker.duration / 3)
    } finally {
      await lm.dispose()
      await session.release()
    }
  })
})

describe('bad input gets typed errors', () => {
  it('a missing path, a file that is not ONNX, and an ONNX graph that is not a causal LM', async () => {
    await expect(OnnxCausalLM.open(join(root, 'absent'))).rejects.toMatchObject({ code: 'ONNX_MODEL_ERROR', reason: 'not-found' })
    const emptyDir = join(root, 'empty')
    mkdirSync(emptyDir)
    await expect(OnnxCausalLM.open(emptyDir)).rejects.toMatchObject({ reason: 'not-found' })

    const junk = join(root, 'junk.onnx')
    writeFileSync(junk, 'this is not a protobuf')
    const e = await OnnxCausalLM.open(junk).catch((x) => x)
    expect(e).toBeInstanceOf(OnnxModelError)
    expect(e).toMatchObject({ reason: 'load', file: junk })

    const g = new GraphBuilder()
    g.op1('Identity', ['x'], {}, 'y')
    const identity = join(root, 'identity.onnx')
    writeFileSync(identity, g.encode({ name: 'id', inputs: [valueInfo('x', DT.FLOAT, [2])], outputs: [valueInfo('y', DT.FLOAT, [2])], opset: 14, producer: 'test' }))
    await expect(OnnxCausalLM.open(identity)).rejects.toMatchObject({ reason: 'layout', message: expect.stringMatching(/missing input input_ids/) })
  })

  it('a graph that does not belong to its config.json, and token ids outside the vocabulary', async () => {
    const mismatched = join(root, 'mismatched')
    cpSync(exported, mismatched, { recursive: true })
    const cfg = JSON.parse(readFileSync(join(mismatched, 'config.json'), 'utf8'))
    writeFileSync(join(mismatched, 'config.json'), JSON.stringify({ ...cfg, num_hidden_layers: cfg.num_hidden_layers + 1 }))
    await expect(OnnxCausalLM.open(mismatched, { threads: 1 })).rejects.toMatchObject({ reason: 'mismatch', message: expect.stringMatching(/num_hidden_layers/) })

    // a lone .onnx file (no config.json, no tokenizer) still runs on token ids
    const lone = join(root, 'lone')
    mkdirSync(lone)
    copyFileSync(join(exported, 'onnx', 'model.onnx'), join(lone, 'm.onnx'))
    const lm = await OnnxCausalLM.open(join(lone, 'm.onnx'), { threads: 1 })
    try {
      expect(lm.tokenizer).toBeNull()
      await expect(lm.generate('text needs a tokenizer')).rejects.toMatchObject({ code: 'TOKENIZER_ERROR' })
      const [[c]] = await lm.generate([[1, 2, 3]], { temperature: 0, maxTokens: 3, stopTokenIds: [] })
      expect(c.tokens.length).toBe(3)
      await expect(lm.generate([[lm.vocabSize]])).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' })
      await expect(lm.generate([[1]], { temperature: -1 })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', argument: 'temperature' })
    } finally {
      await lm.dispose()
    }
    await expect(lm.generate([[1]])).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' }) // disposed
  })
})
