// Sequence packing on the CPU backend: a ragged batch (lengths 5–300) packed into one token
// stream — every GEMM over Σ len rows, attention per sequence over its own keys, no padding row
// anywhere — gives what each sequence gives alone: the same per-token logprobs and entropies,
// the same gradient of every parameter (full fine-tuning and LoRA), the same score() logprobs,
// and through the trainer the same loss and gradient norm whatever the micro-batching.
//
// Bounds (f32 engine; a packed and a lone forward run the same arithmetic per row but GEMM
// blocks of a different M): per-token values |Δ| ≤ 1e-5·max(1, |x|); gradients, per tensor,
// max |Δ| ≤ 1e-5 · max |g| of that tensor (the sums over sequences are accumulated in a
// different order).
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { loadModel, type Model } from '../../src/index.js'
import { nativeAddon, type NativeTrain } from '../../src/native.js'
import { trainingStepFlops } from '../../src/train/mfu.js'
import { writeTinyModel } from '../helpers/tiny-model.js'

const LENGTHS = [5, 300, 37, 123, 9, 211, 64, 150]
const VALUE_BOUND = 1e-5
const GRADIENT_BOUND = 1e-5

function rng(seed: number) {
  let s = seed >>> 0
  return () => {
    s = (Math.imul(s ^ (s >>> 15), 0x2c1b3c6d) + 0x6d2b79f5) >>> 0
    return s / 2 ** 32
  }
}

interface Seq {
  prompt: number[]
  completion: number[]
}

// Ragged sequences: each of LENGTHS tokens, cut at a random prompt length in [1, len − 1].
function raggedBatch(seed: number, vocab: number): Seq[] {
  const r = rng(seed)
  return LENGTHS.map((n) => {
    const tokens = Array.from({ length: n }, () => Math.floor(r() * vocab))
    const p = 1 + Math.floor(r() * (n - 1))
    return { prompt: tokens.slice(0, p), completion: tokens.slice(p) }
  })
}

const request = (seqs: Seq[]) => ({
  tokens: Int32Array.from(seqs.flatMap((s) => [...s.prompt, ...s.completion])),
  lengths: Int32Array.from(seqs, (s) => s.prompt.length + s.completion.length),
  promptLengths: Int32Array.from(seqs, (s) => s.prompt.length),
})

function expectClose(what: string, got: ArrayLike<number>, want: ArrayLike<number>, bound: number) {
  expect(got.length, `${what}: length`).toBe(want.length)
  let worst = 0
  for (let i = 0; i < want.length; i++) {
    expect(Number.isFinite(got[i]) && Number.isFinite(want[i]), `${what}[${i}] finite`).toBe(true)
    worst = Math.max(worst, Math.abs(got[i] - want[i]) / Math.max(1, Math.abs(want[i])))
  }
  expect(worst, `${what}: worst relative difference`).toBeLessThanOrEqual(bound)
}

function expectSameGradients(packed: { name: string; data: Float32Array }[], alone: { name: string; data: Float32Array }[]) {
  expect(packed.map((g) => g.name)).toEqual(alone.map((g) => g.name))
  expect(packed.length).toBeGreaterThan(0)
  packed.forEach((g, k) => {
    const want = alone[k].data
    let scale = 0
    let worst = 0
    for (let i = 0; i < want.length; i++) {
      expect(Number.isFinite(g.data[i]), `${g.name}[${i}] finite`).toBe(true)
      scale = Math.max(scale, Math.abs(want[i]))
      worst = Math.max(worst, Math.abs(g.data[i] - want[i]))
    }
    expect(scale, `${g.name}: a gradient that is not all zero`).toBeGreaterThan(0)
    expect(worst / scale, `${g.name}: max |Δ| / max |g|`).toBeLessThanOrEqual(GRADIENT_BOUND)
  })
}

const roots: string[] = []
afterAll(() => roots.forEach((r) => rmSync(r, { recursive: true, force: true })))

async function tinyModel(seed: number): Promise<Model> {
  const root = mkdtempSync(join(tmpdir(), 'ad-pack-'))
  roots.push(root)
  const tiny = await writeTinyModel(join(root, 'm'), { family: 'qwen3', dtype: 'F32', seed, hiddenSize: 32, intermediate: 48, headDim: 8 })
  return loadModel(tiny.dir, { threads: 2 })
}

describe('packed ragged batches (CPU)', () => {
  let model: Model
  let train: NativeTrain
  let seqs: Seq[]
  beforeAll(async () => {
    model = await tinyModel(41)
    train = (await nativeAddon()).train
    seqs = raggedBatch(7, model.config.vocabSize)
  })
  afterAll(() => model?.dispose())

  // Packed: one forward and one backward of every sequence. Alone: one of each per sequence,
  // gradients accumulating. The per-token coefficients a, b are the same random values.
  async function packedAndAlone() {
    const r = rng(3)
    const coefficients = seqs.map((s) => ({ a: Float32Array.from(s.completion, () => r() - 0.5), b: Float32Array.from(s.completion, () => 0.2 * (r() - 0.5)) }))
    train.zeroGrad(model.handle)
    const packed = await train.forward(model.handle, request(seqs))
    await train.backward(model.handle, { a: Float32Array.from(coefficients.flatMap((c) => [...c.a])), b: Float32Array.from(coefficients.flatMap((c) => [...c.b])) })
    const packedGrads = await train.exportGradients(model.handle)
    train.zeroGrad(model.handle)
    const alone = []
    for (const [i, s] of seqs.entries()) {
      alone.push(await train.forward(model.handle, request([s])))
      await train.backward(model.handle, coefficients[i])
    }
    const aloneGrads = await train.exportGradients(model.handle)
    train.zeroGrad(model.handle)
    return { packed, alone, packedGrads, aloneGrads }
  }

  function expectSameRows(packed: { logp: Float32Array; entropy: Float32Array }, alone: { logp: Float32Array; entropy: Float32Array }[]) {
    let row = 0
    seqs.forEach((s, i) => {
      const n = s.completion.length
      expectClose(`sequence ${i} (${LENGTHS[i]} tokens) logp`, packed.logp.subarray(row, row + n), alone[i].logp, VALUE_BOUND)
      expectClose(`sequence ${i} entropy`, packed.entropy.subarray(row, row + n), alone[i].entropy, VALUE_BOUND)
      row += n
    })
    expect(row).toBe(packed.logp.length)
  }

  it('full fine-tuning: the same logprobs, entropies and gradients of every parameter as each sequence alone', async () => {
    train.setTrainable(model.handle, true, false)
    const { packed, alone, packedGrads, aloneGrads } = await packedAndAlone()
    expectSameRows(packed, alone)
    // every tensor of the model has a gradient (embedding, norms, q/k norms, linears, LM head)
    expect(packedGrads.length).toBe((await train.exportTensors(model.handle)).length)
    expectSameGradients(packedGrads, aloneGrads)
  })

  it('score(): the same logprobs and entropies batched as alone, and as the training forward', async () => {
    const batched = await model.score(seqs)
    const lone = await Promise.all(seqs.map((s) => model.score([s]).then((x) => x[0])))
    train.setTrainable(model.handle, true, false)
    const forward = await train.forward(model.handle, request(seqs))
    await train.backward(model.handle, { a: new Float32Array(forward.logp.length), b: new Float32Array(forward.logp.length) })
    train.zeroGrad(model.handle)
    let row = 0
    seqs.forEach((s, i) => {
      const n = s.completion.length
      expectClose(`sequence ${i} score logprobs batched vs alone`, batched[i].logprobs, lone[i].logprobs, VALUE_BOUND)
      expectClose(`sequence ${i} score entropy batched vs alone`, batched[i].entropy, lone[i].entropy, VALUE_BOUND)
      expectClose(`sequence ${i} score vs training forward`, batched[i].logprobs, forward.logp.subarray(row, row + n), VALUE_BOUND)
      row += n
    })
  })
})

describe('packed ragged batches with LoRA (CPU)', () => {
  it('adapters only: the same gradients of every adapter as each sequence alone', async () => {
    const model = await tinyModel(43)
    try {
      const train = (await nativeAddon()).train
      const seqs = raggedBatch(9, model.config.vocabSize)
      train.attachLora(model.handle, { rank: 4, alpha: 8, targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'], seed: 5 })
      // B starts at zero, which leaves dA = 0: give B values first so that every adapter carries gradient.
      const tensors = await train.exportTensors(model.handle)
      const r = rng(11)
      await train.importTensors(model.handle, tensors.filter((t) => t.name.endsWith('lora_B.weight')).map((t) => ({ name: t.name, data: Float32Array.from(t.data, () => 0.1 * (r() - 0.5)) })))
      train.setTrainable(model.handle, false, true)
      const a = seqs.map((s) => Float32Array.from(s.completion, () => r() - 0.5))
      const b = seqs.map((s) => new Float32Array(s.completion.length))
      train.zeroGrad(model.handle)
      await train.forward(model.handle, request(seqs))
      await train.backward(model.handle, { a: Float32Array.from(a.flatMap((x) => [...x])), b: Float32Array.from(b.flatMap((x) => [...x])) })
      const packed = await train.exportGradients(model.handle)
      train.zeroGrad(model.handle)
      for (const [i, s] of seqs.entries()) {
        await train.forward(model.handle, request([s]))
        await train.backward(model.handle, { a: a[i], b: b[i] })
      }
      const alone = await train.exportGradients(model.handle)
      expect(packed.every((g) => g.name.includes('lora_'))).toBe(true)
      expect(packed.length).toBe(2 * 7 * model.config.numLayers)
      expectSameGradients(packed, alone)
    } finally {
      model.dispose()
    }
  })
})

describe('the trainer packs micro-batches by tokens', () => {
  it('one packed micro-batch, one per sequence, or a token budget: the same loss, gradient norm and FLOPs', async () => {
    const model = await tinyModel(47)
    try {
      const seqs = raggedBatch(13, model.config.vocabSize)
      const r = rng(17)
      const sequences = seqs.map((s) => ({ ...s, advantages: r() - 0.5, oldLogprobs: Float32Array.from(s.completion, () => -5.8 + 0.1 * r()) }))
      const stepWith = async (o: { microBatchSize: number; microBatchTokens?: number }) => {
        const trainer = await model.trainer({ objective: { name: 'policy', clip: 0.2, klCoef: 0 }, optimizer: { lr: 0 }, clipGradNorm: 0, ...o })
        return trainer.step({ sequences })
      }
      const packed = await stepWith({ microBatchSize: 64 })
      const alone = await stepWith({ microBatchSize: 1 })
      const budget = await stepWith({ microBatchSize: 64, microBatchTokens: 256 })
      for (const m of [packed, alone, budget]) {
        expect(m.skipped).toBe(false)
        expect(Number.isFinite(m.loss) && m.loss !== 0).toBe(true)
      }
      expect(Math.abs(alone.loss - packed.loss)).toBeLessThanOrEqual(1e-6 * Math.abs(packed.loss))
      expect(Math.abs(budget.loss - packed.loss)).toBeLessThanOrEqual(1e-6 * Math.abs(packed.loss))
      expect(Math.abs(alone.gradNorm - packed.gradNorm)).toBeLessThanOrEqual(1e-5 * packed.gradNorm)
      expect(Math.abs(budget.gradNorm - packed.gradNorm)).toBeLessThanOrEqual(1e-5 * packed.gradNorm)
      // FLOPs are the step's shapes, whatever the grouping: the rows fed (len − 1 each) and the completion rows.
      const want = trainingStepFlops(model.config, {
        lengths: LENGTHS.map((n) => n - 1),
        headRows: seqs.reduce((a, s) => a + s.completion.length, 0),
        headWidth: model.config.vocabSize,
        trainBase: true,
        lora: null,
      })
      for (const m of [packed, alone, budget]) expect(m.flops).toBeCloseTo(want, -1)
      expect(packed.mfu).toBeGreaterThan(0)
      expect(packed.mfu).toBeLessThan(1)
    } finally {
      model.dispose()
    }
  })
})
