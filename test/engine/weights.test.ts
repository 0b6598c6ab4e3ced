// A model kept below f32 in memory (loadModel's `weights`: bf16, f16, int8, checkpoint) on tiny
// random models, through the public API:
//  - bf16 / f16 kept from a bf16 / f16 checkpoint: every logit (prefill and decode) has the bits of
//    the f32 model loaded from the same file (the f32 load of a bf16 file is exact, the GEMM widens
//    the same values in registers and sums in the same order) — stronger than the f32 GEMM bound;
//  - int8: the logits have the bits of the f32 model whose weights are the dequantized q·d (the
//    format's only error is the weights' own rounding); against the f32 original the error is
//    stated and checked on this seeded model (hidden 64, 2 layers, random weights): per position
//    |Δlogit| ≤ 0.08·max|logit| (measured 0.045) and top-1 agreement on ≥ 90% of 48 positions
//    (measured 47/48);
//  - the weight storage the engine reports (describe().parameterBytes) is the stored bytes: 2 per
//    Linear / LM head / embedding weight (int8: 1 + 2/32), 4 for norms and biases;
//  - a frozen model refuses training, LoRA and tensor export with a typed error, loses nothing.
import { mkdtempSync, rmSync } from 'node:fs'
import { copyFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { InvalidArgumentError, loadModel, type Model } from '../../src/index.js'
import { writeSafetensors } from '../../src/engine/hf/safetensors.js'
import { nativeAddon } from '../../src/native.js'
import { writeTinyModel, type TinyModel, type TinyModelOptions } from '../helpers/tiny-model.js'

const KEPT = /(_proj\.weight|lm_head\.weight|embed_tokens\.weight)$/ // kept at the weights type; the rest f32

function randomPrompts(count: number, length: number, vocab: number, seed: number): number[][] {
  let s = seed >>> 0
  return Array.from({ length: count }, () =>
    Array.from({ length }, () => {
      s = (Math.imul(s, 1664525) + 1013904223) >>> 0
      return s % vocab
    }),
  )
}

// Logits of a prefill of every prompt (all positions) then two decode steps of each: one array.
async function logitsOf(model: Model, prompts: number[][]): Promise<Float32Array> {
  const cache = model.handle.createCache(prompts.length, 64)
  const out: number[] = []
  const step = async (tokens: number[][]) => {
    const r = await model.handle.step(cache, {
      slots: Int32Array.from(tokens, (_, i) => i),
      counts: Int32Array.from(tokens, (t) => t.length),
      outModes: Uint8Array.from(tokens, () => 2),
      tokens: Int32Array.from(tokens.flat()),
      returnLogits: true,
    })
    out.push(...r.logits!)
  }
  await step(prompts)
  await step(prompts.map((p) => [p[0]]))
  await step(prompts.map((p) => [p[1]]))
  return Float32Array.from(out)
}

function expectSameBits(a: Float32Array, b: Float32Array, what: string): void {
  expect(a.length, what).toBe(b.length)
  for (let i = 0; i < a.length; i++) {
    if (Number.isNaN(a[i])) expect.fail(`${what}: logit ${i} is NaN`)
    if (!Object.is(a[i], b[i])) expect.fail(`${what}: logit ${i} is ${a[i]}, the f32 model's ${b[i]}`)
  }
}

function expectedBytes(tiny: TinyModel, keptBytesPerWeight: (cols: number) => number): number {
  let bytes = 0
  for (const [name, shape] of tiny.tensorShapes) {
    const n = shape.reduce((a, b) => a * b, 1)
    bytes += KEPT.test(name) ? (n / shape[shape.length - 1]) * keptBytesPerWeight(shape[shape.length - 1]) : 4 * n
  }
  return bytes
}

let root: string
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'ad-weights-'))
})
afterAll(() => rmSync(root, { recursive: true, force: true }))

const HALF: [string, TinyModelOptions, 'bf16' | 'f16' | 'checkpoint', string][] = [
  ['qwen3 bf16 checkpoint', { family: 'qwen3', dtype: 'BF16', seed: 21 }, 'checkpoint', 'bf16'],
  ['qwen2 bf16, tied (the LM head is the embedding)', { family: 'qwen2', dtype: 'BF16', seed: 22, tied: true }, 'bf16', 'bf16'],
  ['llama f16, attention bias', { family: 'llama', dtype: 'F16', seed: 23, attentionBias: true }, 'f16', 'f16'],
]

describe.each(HALF)('weights kept at half precision: %s', (name, opts, weights, kept) => {
  let tiny: TinyModel
  let f32: Model, half: Model
  beforeAll(async () => {
    tiny = await writeTinyModel(join(root, name.replace(/\W+/g, '-')), opts)
    f32 = await loadModel(tiny.dir, { threads: 2 })
    half = await loadModel(tiny.dir, { threads: 2, weights })
  })
  afterAll(() => {
    f32?.dispose()
    half?.dispose()
  })

  it('prefill and decode logits have the bits of the f32 model loaded from the same file', async () => {
    const prompts = randomPrompts(3, 7, tiny.config.vocabSize, opts.seed)
    expectSameBits(await logitsOf(half, prompts), await logitsOf(f32, prompts), name)
  })

  it('reports the weights type and stores 2 bytes per Linear, LM head and embedding weight', () => {
    expect(f32.handle.describe().weights).toBe('f32')
    expect(half.handle.describe().weights).toBe(kept)
    expect(f32.handle.describe().parameterBytes).toBe(expectedBytes(tiny, (cols) => 4 * cols))
    expect(half.handle.describe().parameterBytes).toBe(expectedBytes(tiny, (cols) => 2 * cols))
    expect(half.handle.describe().parameterBytes / f32.handle.describe().parameterBytes).toBeLessThan(0.56)
  })

  it('as the frozen reference of a training forward and of a step\'s KL: the bits of the f32 reference', async () => {
    const train = (await nativeAddon()).train
    const policy = await loadModel(tiny.dir, { threads: 2 })
    try {
      const [p] = randomPrompts(1, 9, tiny.config.vocabSize, opts.seed + 2)
      const seq = { tokens: Int32Array.from(p), lengths: Int32Array.of(9), promptLengths: Int32Array.of(3) }
      const withHalf = await train.forward(policy.handle, { ...seq, reference: half.handle })
      const withF32 = await train.forward(policy.handle, { ...seq, reference: f32.handle })
      expectSameBits(withHalf.refLogp!, withF32.refLogp!, 'reference logprobs')
      const req = { slots: Int32Array.of(0), counts: Int32Array.of(4), outModes: Uint8Array.of(2), tokens: Int32Array.from(p.slice(0, 4)), targets: Int32Array.from(p.slice(1, 5)) }
      const kl = async (ref: Model) => (await policy.handle.step(policy.handle.createCache(1, 8), { ...req, reference: { model: ref.handle, cache: ref.handle.createCache(1, 8) } })).klExact!
      expectSameBits(await kl(half), await kl(f32), 'step KL against the reference')
    } finally {
      policy.dispose()
    }
  })

  it('generates what the f32 model generates (greedy)', async () => {
    const prompt = randomPrompts(1, 5, tiny.config.vocabSize, opts.seed + 1)[0]
    const [a] = await half.generate(prompt, { temperature: 0, maxTokens: 6 } as never)
    const [b] = await f32.generate(prompt, { temperature: 0, maxTokens: 6 } as never)
    expect(a[0].tokens).toEqual(b[0].tokens)
  })
})

describe('weights kept as int8 (Q8_0-style)', () => {
  let tiny: TinyModel
  let f32: Model, int8: Model, dequantized: Model
  beforeAll(async () => {
    tiny = await writeTinyModel(join(root, 'int8'), { family: 'qwen3', dtype: 'F32', seed: 31, hiddenSize: 64, intermediate: 96 })
    f32 = await loadModel(tiny.dir, { threads: 2 })
    int8 = await loadModel(tiny.dir, { threads: 2, weights: 'int8' })
    // the same model with every kept weight replaced by its q·d, as f32
    const gemm = ((await nativeAddon()) as unknown as { gemm: { stored(w: string, x: Float32Array, r: number, c: number): { values: Float32Array } } }).gemm
    const dir = join(root, 'int8-dequantized')
    await writeTinyModel(dir, { family: 'qwen3', dtype: 'F32', seed: 31, hiddenSize: 64, intermediate: 96 })
    const tensors = [...tiny.weights].map(([name, values]) => {
      const shape = tiny.tensorShapes.get(name)!
      const data = Float32Array.from(values)
      return { name, dtype: 'F32' as const, shape, data: KEPT.test(name) ? gemm.stored('int8', data, shape[0], shape[1]).values : data }
    })
    await writeSafetensors(join(dir, 'model.safetensors'), tensors)
    await copyFile(join(tiny.dir, 'config.json'), join(dir, 'config.json'))
    dequantized = await loadModel(dir, { threads: 2 })
  })
  afterAll(() => {
    for (const m of [f32, int8, dequantized]) m?.dispose()
  })

  it('logits have the bits of the f32 model over the dequantized weights q·d', async () => {
    const prompts = randomPrompts(3, 7, tiny.config.vocabSize, 5)
    expectSameBits(await logitsOf(int8, prompts), await logitsOf(dequantized, prompts), 'int8 vs dequantized f32')
  })

  it('against the f32 weights: |Δlogit| ≤ 0.08·max|logit| per position, top-1 agrees on ≥ 90% of 48 positions', async () => {
    const prompts = randomPrompts(4, 10, tiny.config.vocabSize, 6)
    const a = await logitsOf(int8, prompts), b = await logitsOf(f32, prompts)
    const V = tiny.config.vocabSize
    let agree = 0, worst = 0
    const positions = a.length / V
    for (let p = 0; p < positions; p++) {
      let top = 0, ref = 0, scale = 0, err = 0
      for (let v = 0; v < V; v++) {
        const x = a[p * V + v], y = b[p * V + v]
        if (!Number.isFinite(x)) expect.fail(`logit ${p}/${v} is ${x}`)
        if (x > a[p * V + top]) top = v
        if (y > b[p * V + ref]) ref = v
        scale = Math.max(scale, Math.abs(y))
        err = Math.max(err, Math.abs(x - y))
      }
      if (top === ref) agree++
      worst = Math.max(worst, err / scale)
    }
    console.log(`int8 vs f32: worst |Δlogit|/max|logit| ${worst.toExponential(2)}, top-1 agreement ${agree}/${positions}`)
    expect(worst).toBeLessThanOrEqual(0.08)
    expect(agree / positions).toBeGreaterThanOrEqual(0.9)
  })

  it('stores 1 byte per weight plus an f16 scale per 32', () => {
    expect(int8.handle.describe().weights).toBe('int8')
    expect(int8.handle.describe().parameterBytes).toBe(expectedBytes(tiny, (cols) => cols + 2 * Math.ceil(cols / 32)))
  })

  it('a frozen model refuses training, LoRA merges and tensor export with a typed error, and still runs', async () => {
    await expect(int8.trainer({ objective: { name: 'sft' }, optimizer: { lr: 1e-3 } })).rejects.toMatchObject({ code: 'ERR_AD_INVALID_ARGUMENT', message: expect.stringMatching(/keeps its weights as int8.*weights 'f32'/) })
    await expect(int8.trainer({ objective: { name: 'sft' }, lora: { rank: 2, alpha: 4 }, optimizer: { lr: 1e-3 } })).rejects.toThrow(/attaching LoRA adapters needs a model loaded with weights 'f32'/)
    expect(int8.lora).toBeNull()
    const train = (await nativeAddon()).train
    await expect(train.exportTensors(int8.handle)).rejects.toThrow(/keeps its weights as int8/)
    await expect(int8.save(join(root, 'int8-saved'))).rejects.toThrow(/weights 'f32'/)
    const prompts = randomPrompts(1, 4, tiny.config.vocabSize, 9)
    expectSameBits(await logitsOf(int8, prompts), await logitsOf(dequantized, prompts), 'after the refusals')
  })

  it('refuses a bad weights option and weights below f32 on CUDA before loading', async () => {
    await expect(loadModel(tiny.dir, { weights: 'int4' as never })).rejects.toBeInstanceOf(InvalidArgumentError)
    await expect(loadModel(tiny.dir, { device: 'cuda', weights: 'bf16' })).rejects.toBeInstanceOf(InvalidArgumentError)
  })
})
