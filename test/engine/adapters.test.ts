// Several LoRA adapters on one base, chosen per sequence (issue 19), on the CPU backend:
//  - a row with adapter X inside a mixed batch equals the same row alone with X, bit for bit
//    (sampled tokens and every per-token statistic; teacher-forced logits), and a null row
//    equals the base model; each adapter's logprobs match the float64 reference of W + α/r·B·A;
//  - in a mixed training batch each adapter's gradients match central finite differences of the
//    float64 loss where every sequence runs through its own adapter; an adapter that no sequence
//    uses, or that does not train, and the base get no gradient and no optimizer state;
//  - PEFT's multi-adapter folder layout saves and reloads every adapter equal; malformed folders
//    and unknown names are typed errors that leave the model as it was.
import { existsSync, mkdtempSync, rmSync } from 'node:fs'
import { rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { InvalidArgumentError, loadModel, SeveralAdaptersError, type Completion, type Model } from '../../src/index.js'
import { nativeAddon, type NativeTrain } from '../../src/native.js'
import { loraElements, trainingMemoryPlan } from '../../src/engine/memory-plan.js'
import { openCollective } from '../../src/parallel/collective.js'
import { forward64 } from '../reference/model64.js'
import { randomTokens } from '../helpers/random-tokens.js'
import { seededUniform, writeTinyModel, type TinyModel } from '../helpers/tiny-model.js'
import type { ModelConfig } from '../../src/engine/types.js'

let root: string
let tiny: TinyModel
let train: NativeTrain

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'ad-adapters-'))
  tiny = await writeTinyModel(join(root, 'm'), { family: 'qwen3', dtype: 'F32', seed: 61, hiddenSize: 16, intermediate: 24, headDim: 8 })
  train = (await nativeAddon()).train
})
afterAll(() => rmSync(root, { recursive: true, force: true }))

/** Whether an engine tensor name is one of adapter `name`'s matrices. */
const ofAdapter = (tensor: string, name: string) => (name === 'default' ? /\.lora_[AB]\.weight$/.test(tensor) : tensor.includes(`.lora_A.${name}.`) || tensor.includes(`.lora_B.${name}.`))

/** Gives adapter `name`'s B (zero at attach) random values, so the adapter changes the function. */
async function randomizeB(m: Model, name: string, seed: number): Promise<void> {
  const r = seededUniform(seed)
  const Bs = (await train.exportTensors(m.handle)).filter((t) => ofAdapter(t.name, name) && t.name.includes('.lora_B'))
  expect(Bs.length).toBeGreaterThan(0)
  await train.importTensors(m.handle, Bs.map((t) => ({ name: t.name, data: t.data.map(() => (r() * 2 - 1) * 0.4) })))
}

/** The base weights with adapter `name` folded in, in float64 (W + α/r·B·A, LoRA Eq. 3). */
async function mergedWeights(m: Model, name: string | null, override?: Map<string, Float64Array>): Promise<Map<string, Float64Array>> {
  const out = new Map(tiny.weights)
  if (name === null) return out
  const info = m.adapters.get(name)!
  const all = new Map((await train.exportTensors(m.handle)).map((t) => [t.name, { shape: t.shape, data: override?.get(t.name) ?? Float64Array.from(t.data) }]))
  for (const [tensor, A] of all) {
    if (!ofAdapter(tensor, name) || !tensor.includes('.lora_A')) continue
    const B = all.get(tensor.replace('.lora_A', '.lora_B'))!
    const base = tensor.replace(/\.lora_A(\.[A-Za-z0-9_-]+)?\.weight$/, '.weight')
    const [rows, cols, r] = [B.shape[0], A.shape[1], info.rank]
    const W = Float64Array.from(tiny.weights.get(base)!)
    for (let o = 0; o < rows; ++o)
      for (let i = 0; i < cols; ++i) {
        let s = 0
        for (let k = 0; k < r; ++k) s += B.data[o * r + k] * A.data[k * cols + i]
        W[o * cols + i] += (info.alpha / r) * s
      }
    out.set(base, W)
  }
  return out
}

/** Σ_t a_t·log p_t + b_t·H_t over a sequence's completion tokens, float64 (the functional backward differentiates). */
function loss64(config: ModelConfig, weights: Map<string, Float64Array>, tokens: number[], P: number, a: number[], b: number[]): number {
  const V = config.vocabSize
  const logits = forward64(config, weights, tokens.slice(0, -1))
  let loss = 0
  for (let t = P - 1, r = 0; t < tokens.length - 1; ++t, ++r) {
    const z = logits.subarray(t * V, (t + 1) * V)
    let m = -Infinity
    for (const v of z) m = Math.max(m, v)
    let s = 0
    for (const v of z) s += Math.exp(v - m)
    const lse = m + Math.log(s)
    let H = 0
    for (const v of z) H -= Math.exp(v - lse) * (v - lse)
    loss += a[r] * (z[tokens[t + 1]] - lse) + b[r] * H
  }
  return loss
}

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
  }
}

/** The tiny base with adapters 'default' (rank 2, every linear) and 'solver' (rank 3, attention only), both with random B. */
async function twoAdapters(): Promise<Model> {
  const m = await loadModel(tiny.dir, { threads: 2 })
  await m.addAdapter('default', { rank: 2, alpha: 4, seed: 3 })
  await m.addAdapter('solver', { rank: 3, alpha: 6, targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj'], seed: 4 })
  await randomizeB(m, 'default', 11)
  await randomizeB(m, 'solver', 12)
  return m
}

describe('per-sequence adapters: a mixed batch equals each row alone', () => {
  let m: Model
  let base: Model
  beforeAll(async () => {
    m = await twoAdapters()
    base = await loadModel(tiny.dir, { threads: 2 })
  })
  afterAll(() => {
    m?.dispose()
    base?.dispose()
  })
  const prompts = () => [randomTokens(5, 1, tiny.config.vocabSize), randomTokens(7, 2, tiny.config.vocabSize), randomTokens(4, 3, tiny.config.vocabSize), randomTokens(6, 4, tiny.config.vocabSize)]
  const choice = ['solver', 'default', null, 'solver'] as const
  const options = { temperature: 1, topP: 0.95, seed: 7, maxTokens: 12, stopTokenIds: [], stats: { topK: 4 }, n: 2 }

  it('generate: sampled tokens and statistics of every sample are those of its prompt alone with its adapter; null rows are the base', async () => {
    const ps = prompts()
    const mixed = await m.generate(ps, { ...options, adapter: [...choice] })
    for (let p = 0; p < ps.length; ++p) {
      // alone: the same sequence ids (offset p·n) and the same adapter
      const alone = await m.generate([ps[p]], { ...options, sequenceOffset: p * options.n, adapter: choice[p] })
      expect(mixed[p].map(trace)).toEqual(alone[0].map(trace))
      if (choice[p] === null) expect(mixed[p].map(trace)).toEqual((await base.generate([ps[p]], { ...options, sequenceOffset: p * options.n }))[0].map(trace))
    }
    // the pre-scheduler loop keeps the rows in prompt order (adapters interleaved, one run per change): the same samples
    const before = process.env.AUTODIDACT_SCHEDULER
    process.env.AUTODIDACT_SCHEDULER = 'waves'
    try {
      expect((await m.generate(ps, { ...options, adapter: [...choice] })).map((g) => g.map(trace))).toEqual(mixed.map((g) => g.map(trace)))
    } finally {
      if (before === undefined) delete process.env.AUTODIDACT_SCHEDULER
      else process.env.AUTODIDACT_SCHEDULER = before
    }
    // the adapters change what is sampled (else the test above would prove nothing)
    const asBase = await m.generate([ps[0]], { ...options, adapter: null })
    expect(asBase[0].map(trace)).not.toEqual(mixed[0].map(trace))
  })

  it('score: teacher-forced statistics in a mixed batch equal each item alone, and match the float64 reference of W + α/r·B·A', async () => {
    const ps = prompts()
    const pairs = ps.map((prompt, i) => ({ prompt, completion: randomTokens(5, 20 + i, tiny.config.vocabSize) }))
    const mixed = await m.score(pairs, { adapter: [...choice], stats: { topK: 3 } })
    for (let i = 0; i < pairs.length; ++i) {
      const [alone] = await m.score([pairs[i]], { adapter: choice[i], stats: { topK: 3 } })
      expect(Array.from(mixed[i].logprobs)).toEqual(Array.from(alone.logprobs))
      expect(Array.from(mixed[i].entropy)).toEqual(Array.from(alone.entropy))
      expect(Array.from(mixed[i].topK!.logits)).toEqual(Array.from(alone.topK!.logits))
      // float64: log p of each completion token under the weights with this item's adapter merged
      const weights = await mergedWeights(m, choice[i])
      const tokens = [...pairs[i].prompt, ...pairs[i].completion]
      const V = tiny.config.vocabSize
      const logits = forward64(tiny.config, weights, tokens.slice(0, -1))
      for (let t = pairs[i].prompt.length - 1, r = 0; t < tokens.length - 1; ++t, ++r) {
        const z = logits.subarray(t * V, (t + 1) * V)
        const mx = Math.max(...z)
        const lse = mx + Math.log(z.reduce((s, v) => s + Math.exp(v - mx), 0))
        const want = z[tokens[t + 1]] - lse
        expect(Number.isFinite(mixed[i].logprobs[r])).toBe(true)
        expect(Math.abs(mixed[i].logprobs[r] - want), `item ${i} row ${r}`).toBeLessThanOrEqual(1e-4 * Math.max(1, Math.abs(want)))
      }
    }
    // and the two adapters give different functions
    expect(Array.from(mixed[0].logprobs)).not.toEqual(Array.from((await m.score([pairs[0]], { adapter: 'default' }))[0].logprobs))
  })

  it('an unknown adapter name is an InvalidArgumentError naming it, before any work', async () => {
    const ps = prompts()
    await expect(m.generate(ps, { adapter: 'judge' })).rejects.toThrow(InvalidArgumentError)
    await expect(m.generate(ps, { adapter: 'judge' })).rejects.toThrow(/'judge'/)
    await expect(m.generate(ps, { adapter: ['solver', 'default'] })).rejects.toThrow(InvalidArgumentError)  // one per prompt
    await expect(m.score([{ prompt: ps[0], completion: ps[1] }], { adapter: ['nope'] })).rejects.toThrow(/'nope'/)
    await expect(m.addAdapter('solver', { rank: 1, alpha: 1 })).rejects.toThrow(InvalidArgumentError)  // taken
    await expect(m.addAdapter('bad.name', { rank: 1, alpha: 1 })).rejects.toThrow(InvalidArgumentError)
    expect([...m.adapters.keys()]).toEqual(['default', 'solver'])
    // the engine refuses an index past the attached adapters (a typed RangeError, not a crash)
    const cache = m.handle.createCache(1, 4)
    expect(() => m.handle.step(cache, { slots: Int32Array.of(0), counts: Int32Array.of(1), outModes: Uint8Array.of(1), adapters: Int32Array.of(2), tokens: Int32Array.of(1) })).toThrow(RangeError)
    cache.dispose()
    await expect(m.mergeLora()).rejects.toThrow(InvalidArgumentError)  // merging needs one adapter
  })
})

describe('per-sequence adapters: training', () => {
  const fdStep = 1e-4
  const checkGrad = (name: string, native: Float32Array, fd: Map<number, number>) => {
    const scale = Math.max(...[...fd.values()].map(Math.abs))
    for (const [i, g] of fd) {
      expect(Number.isFinite(native[i]), `${name}[${i}]`).toBe(true)
      expect(Math.abs(native[i] - g), `${name}[${i}]: native ${native[i]} vs finite difference ${g}`).toBeLessThanOrEqual(2e-3 * Math.abs(g) + 1e-4 * scale + 1e-9)
    }
  }

  it('each adapter gets the gradient of its own sequences only (finite differences); the base and an unused adapter get none', async () => {
    const m = await twoAdapters()
    await m.addAdapter('judge', { rank: 1, alpha: 1, targets: ['down_proj'], seed: 5 })  // attached, trained, but in no sequence
    await randomizeB(m, 'judge', 13)
    train.setTrainable(m.handle, false, true, Int32Array.of(0, 1, 2))
    const r = seededUniform(99)
    const seqs = [
      { tokens: randomTokens(7, 31, tiny.config.vocabSize), P: 3, adapter: 'solver' as string | null },
      { tokens: randomTokens(6, 32, tiny.config.vocabSize), P: 2, adapter: 'default' },
      { tokens: randomTokens(5, 33, tiny.config.vocabSize), P: 2, adapter: null },
      { tokens: randomTokens(6, 34, tiny.config.vocabSize), P: 4, adapter: 'solver' },
    ]
    const coef = seqs.map((s) => ({ a: Array.from({ length: s.tokens.length - s.P }, () => r() * 2 - 1), b: Array.from({ length: s.tokens.length - s.P }, () => r() * 2 - 1) }))
    const index = (a: string | null) => (a === null ? -1 : [...m.adapters.keys()].indexOf(a))
    await train.forward(m.handle, {
      tokens: Int32Array.from(seqs.flatMap((s) => s.tokens)),
      lengths: Int32Array.from(seqs, (s) => s.tokens.length),
      promptLengths: Int32Array.from(seqs, (s) => s.P),
      adapters: Int32Array.from(seqs, (s) => index(s.adapter)),
    })
    await train.backward(m.handle, { a: Float32Array.from(coef.flatMap((c) => c.a)), b: Float32Array.from(coef.flatMap((c) => c.b)) })
    const grads = new Map((await train.exportGradients(m.handle)).map((g) => [g.name, g.data]))
    // gradients for exactly the adapters with sequences: no base tensor, nothing of 'judge'
    expect([...grads.keys()].every((n) => n.includes('.lora_'))).toBe(true)
    expect([...grads.keys()].some((n) => ofAdapter(n, 'judge'))).toBe(false)
    const tensors = await train.exportTensors(m.handle)
    for (const name of ['default', 'solver'])
      expect([...grads.keys()].filter((n) => ofAdapter(n, name)).sort()).toEqual(tensors.filter((t) => ofAdapter(t.name, name)).map((t) => t.name).sort())

    // L = Σ over sequences of each one's loss under its own adapter's merged weights
    const totalLoss = async (override: Map<string, Float64Array>) => {
      let L = 0
      for (const [k, s] of seqs.entries()) L += loss64(tiny.config, await mergedWeights(m, s.adapter, override), s.tokens, s.P, coef[k].a, coef[k].b)
      return L
    }
    for (const t of tensors) {
      if (!t.name.includes('.lora_') || ofAdapter(t.name, 'judge') || !/layers\.(0|1)\./.test(t.name)) continue
      const fd = new Map<number, number>()
      for (let k = 0; k < 2; ++k) {
        const i = Math.floor(r() * t.data.length)
        const at = async (x: number) => {
          const w = Float64Array.from(t.data)
          w[i] = x
          return totalLoss(new Map([[t.name, w]]))
        }
        fd.set(i, ((await at(t.data[i] + fdStep)) - (await at(t.data[i] - fdStep))) / (2 * fdStep))
      }
      checkGrad(t.name, grads.get(t.name)!, fd)
    }

    // AdamW moves only what a sequence's loss reached: moments for 'default' and 'solver' only, 'judge' and the base untouched
    const before = new Map(tensors.map((t) => [t.name, Array.from(t.data)]))
    await train.optimizerStep(m.handle, { step: 1, lr: 1e-2, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.1, clipGradNorm: 0 })
    const moments = (await train.exportOptimizerState(m.handle)).map((s) => s.name)
    expect(moments.sort()).toEqual([...grads.keys()].sort())
    for (const t of await train.exportTensors(m.handle)) {
      const moved = Array.from(t.data).some((v, i) => v !== before.get(t.name)![i])
      expect(moved, t.name).toBe(t.name.includes('.lora_') && !ofAdapter(t.name, 'judge'))
    }
    m.dispose()
  }, 120_000)

  it('an adapter that does not train is applied to its sequences but gets no gradient', async () => {
    const m = await twoAdapters()
    train.setTrainable(m.handle, false, true, Int32Array.of(1))  // 'solver' trains, 'default' frozen
    const tokens = [...randomTokens(6, 41, tiny.config.vocabSize), ...randomTokens(5, 42, tiny.config.vocabSize)]
    const request = { tokens: Int32Array.from(tokens), lengths: Int32Array.of(6, 5), promptLengths: Int32Array.of(2, 2), adapters: Int32Array.of(0, 1) }
    const fwd = await train.forward(m.handle, request)
    await train.backward(m.handle, { a: new Float32Array(fwd.logp.length).fill(1), b: new Float32Array(fwd.logp.length) })
    const names = (await train.exportGradients(m.handle)).map((g) => g.name)
    expect(names.length).toBeGreaterThan(0)
    expect(names.every((n) => ofAdapter(n, 'solver'))).toBe(true)
    // the frozen adapter still shapes its sequence's logprobs: they differ from the base's
    const asBase = await train.forward(m.handle, { ...request, adapters: Int32Array.of(-1, 1) })
    expect(Array.from(asBase.logp.subarray(0, 4))).not.toEqual(Array.from(fwd.logp.subarray(0, 4)))
    expect(Array.from(asBase.logp.subarray(4))).toEqual(Array.from(fwd.logp.subarray(4)))
    await train.backward(m.handle, { a: new Float32Array(asBase.logp.length), b: new Float32Array(asBase.logp.length) })
    m.dispose()
  })

  it('a trainer over two named adapters: the KL reference is the base, and a checkpoint resumes bit for bit', async () => {
    const run = join(root, 'run')
    const seqOf = (i: number, adapter: string) => {
      const prompt = randomTokens(3, 50 + i, tiny.config.vocabSize)
      const completion = randomTokens(4, 60 + i, tiny.config.vocabSize)
      return { prompt, completion, adapter, advantages: i % 2 ? 1 : -0.5, oldLogprobs: new Float32Array(4).fill(-5) }
    }
    const batch = (k: number) => ({ sequences: [seqOf(k, 'proposer'), seqOf(k + 1, 'solver'), seqOf(k + 2, 'solver')] })
    const options = { objective: { name: 'policy' as const, klCoef: 0.05 }, optimizer: { lr: 1e-2 }, adapter: ['proposer', 'solver'] }
    const fresh = async () => {
      const m = await loadModel(tiny.dir, { threads: 2 })
      await m.addAdapter('proposer', { rank: 2, alpha: 4, seed: 1 })
      await m.addAdapter('solver', { rank: 2, alpha: 4, targets: ['q_proj', 'v_proj'], seed: 2 })
      return m
    }
    const a = await fresh()
    const ta = await a.trainer(options)
    const s1 = await ta.step(batch(0))
    expect(s1.skipped).toBe(false)
    expect(Number.isFinite(s1.objective.kl ?? NaN)).toBe(true)
    await a.save(run)
    await ta.saveState(run)
    expect(existsSync(join(run, 'adapter_config.json'))).toBe(false)  // no 'default' adapter: nothing at the root
    expect(existsSync(join(run, 'proposer', 'adapter_model.safetensors')) && existsSync(join(run, 'solver', 'adapter_config.json'))).toBe(true)
    await ta.step(batch(3))
    const continued = await train.exportTensors(a.handle)

    const b = await loadModel(tiny.dir, { threads: 2 })
    expect(await b.loadAdapters(run)).toEqual(['proposer', 'solver'])
    const tb = await b.trainer(options)
    await tb.loadState(run)
    expect(tb.steps).toBe(1)
    await tb.step(batch(3))
    const resumed = await train.exportTensors(b.handle)
    expect(resumed.map((t) => t.name)).toEqual(continued.map((t) => t.name))
    resumed.forEach((t, i) => expect(Array.from(t.data), t.name).toEqual(Array.from(continued[i].data)))
    // a sequence that names no adapter is refused when the trainer trains two
    await expect(tb.step({ sequences: [{ ...seqOf(9, 'solver'), adapter: undefined }] })).rejects.toThrow(InvalidArgumentError)
    await expect(tb.step({ sequences: [{ ...seqOf(9, 'solver'), adapter: 'judge' }] })).rejects.toThrow(/'judge'/)
    await expect(b.trainer({ ...options, adapter: ['proposer', 'judge'] })).rejects.toThrow(/'judge'/)
    // data-parallel training of several adapters is refused when the trainer is created, not at its first step
    const single = await openCollective({ backend: 'single' })
    await expect(b.trainer({ ...options, collective: single })).rejects.toThrow(/data-parallel training of several adapters/)
    await single.close()
    a.dispose()
    b.dispose()
  }, 120_000)

  it("the trainer's memory plan counts each adapter at its own rank and targets, gradients and moments for the trained ones", async () => {
    const m = await loadModel(tiny.dir, { threads: 2 })
    await m.addAdapter('proposer', { rank: 2, alpha: 4, seed: 1 })
    await m.addAdapter('solver', { rank: 3, alpha: 6, targets: ['q_proj', 'v_proj'], seed: 2 })
    await m.addAdapter('judge', { rank: 1, alpha: 2, targets: ['down_proj'], seed: 3 })
    const t = await m.trainer({ objective: { name: 'policy', klCoef: 0.05 }, optimizer: { lr: 1e-2 }, adapter: ['proposer', 'solver'] })
    const plan = trainingMemoryPlan(m.config, { batch: 2, sequenceLength: 8 }, t['planOptions']())
    const bytes = (name: string) => plan.items.find((i) => i.name === name)?.bytes
    // element counts per adapter (loraElements is checked against a hand count in memory-plan.test.ts)
    const [P, S, J] = [loraElements(m.config, 2), loraElements(m.config, 3, ['q_proj', 'v_proj']), loraElements(m.config, 1, ['down_proj'])]
    expect(bytes('attached-adapters')).toBe((P + S + J) * 6)
    expect(bytes('gradients')).toBe((P + S) * 4)
    expect(bytes('optimizer')).toBe((P + S) * 8)
    expect(bytes('adapter-scratch')).toBe(2 * 2 * 7 * 3 * 2) // u and du: T = 2·7 rows at the largest rank, 3, bf16
    expect(bytes('reference-kv-cache')).toBe(bytes('kv-cache')) // KL against the base with the adapters off
    m.dispose()
  })
})

describe('per-sequence adapters: PEFT folders', () => {
  it('merging a model of several adapters is a SeveralAdaptersError naming them that changes nothing; merging one attached alone folds in exactly it', async () => {
    const m = await twoAdapters()
    const before = await train.exportTensors(m.handle)
    const refused = await m.mergeLora().catch((e: unknown) => e)
    expect(refused).toBeInstanceOf(SeveralAdaptersError)
    expect(refused).toBeInstanceOf(InvalidArgumentError)
    expect((refused as SeveralAdaptersError).adapters).toEqual(['default', 'solver'])
    expect((refused as Error).message).toMatch(/'default', 'solver'/)
    expect((refused as Error).message).toMatch(/model\.loadAdapter\(DIR\/NAME\)/)
    const merged = join(root, 'merged-two')
    await expect(m.save(merged, { adapterOnly: false })).rejects.toThrow(SeveralAdaptersError)
    expect(existsSync(merged)).toBe(false) // nothing written
    const after = await train.exportTensors(m.handle)
    expect(after.map((t) => t.name)).toEqual(before.map((t) => t.name))
    after.forEach((t, i) => expect(Array.from(t.data), t.name).toEqual(Array.from(before[i].data)))

    // the recipe the error gives: save, attach 'solver' alone on the base, merge — equals the float64 W + α/r·B·A of 'solver'
    const saved = join(root, 'merge-recipe')
    await m.save(saved)
    const one = await loadModel(tiny.dir, { threads: 2 })
    await one.loadAdapter(join(saved, 'solver'), { name: 'solver' })
    const want = await mergedWeights(m, 'solver')
    await one.mergeLora()
    const got = new Map((await train.exportTensors(one.handle)).map((t) => [t.name, t.data]))
    let worst = 0
    for (const [name, W] of want) {
      const g = got.get(name)!
      for (let i = 0; i < W.length; i++) worst = Math.max(worst, Math.abs(g[i] - W[i]) / Math.max(1, Math.abs(W[i])))
    }
    expect(worst).toBeLessThan(1e-6) // f32 accumulation of a rank-3 product
    m.dispose()
    one.dispose()
  })

  it('save writes the default adapter at the root and the others in sub-folders; loadAdapters reloads them equal', async () => {
    const m = await twoAdapters()
    const dir = join(root, 'saved')
    await m.save(dir)
    expect(existsSync(join(dir, 'adapter_config.json')) && existsSync(join(dir, 'solver', 'adapter_model.safetensors'))).toBe(true)
    const n = await loadModel(tiny.dir, { threads: 2 })
    expect(await n.loadAdapters(dir)).toEqual(['default', 'solver'])
    expect(n.adapters.get('solver')).toEqual(m.adapters.get('solver'))
    const [x, y] = [await train.exportTensors(m.handle), await train.exportTensors(n.handle)]
    expect(y.map((t) => t.name)).toEqual(x.map((t) => t.name))
    y.forEach((t, i) => expect(Array.from(t.data)).toEqual(Array.from(x[i].data)))
    // one adapter folder on its own, under another name
    const o = await loadModel(tiny.dir, { threads: 2 })
    await o.loadAdapter(join(dir, 'solver'), { name: 'judge' })
    const prompt = randomTokens(5, 70, tiny.config.vocabSize)
    const opts = { temperature: 1, seed: 3, maxTokens: 6, stopTokenIds: [] }
    expect(trace((await o.generate([prompt], { ...opts, adapter: 'judge' }))[0][0])).toEqual(trace((await m.generate([prompt], { ...opts, adapter: 'solver' }))[0][0]))
    await expect(m.save(join(root, 'merged'), { adapterOnly: false })).rejects.toThrow(InvalidArgumentError)  // two adapters do not merge
    for (const x of [m, n, o]) x.dispose()
  })

  it('a malformed adapter folder is a typed error and attaches nothing; a missing sub-folder file too', async () => {
    const m = await twoAdapters()
    const dir = join(root, 'broken')
    await m.save(dir)
    m.dispose()
    await rm(join(dir, 'solver', 'adapter_model.safetensors'))
    const n = await loadModel(tiny.dir, { threads: 2 })
    await expect(n.loadAdapters(dir)).rejects.toThrow()
    expect(n.adapters.size).toBe(0)  // the root's good adapter was not attached either
    expect((await train.exportTensors(n.handle)).some((t) => t.name.includes('.lora_'))).toBe(false)
    await writeFile(join(dir, 'solver', 'adapter_model.safetensors'), Buffer.from([1, 2, 3]))
    await expect(n.loadAdapter(join(dir, 'solver'), { name: 'solver' })).rejects.toThrow()
    await expect(n.loadAdapter(dir, { name: 'no/such' })).rejects.toThrow(InvalidArgumentError)
    expect(n.adapters.size).toBe(0)
    await expect(n.loadAdapters(join(root, 'm'))).rejects.toThrow(InvalidArgumentError)  // a model folder holds no adapter
    n.dispose()
  })
})
