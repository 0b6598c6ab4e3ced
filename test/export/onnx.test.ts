// The ONNX witness: tiny random models of each family and the bundled model, exported to ONNX
// (f32 and f16), run by onnxruntime-node on the CPU, against our engine's logits for a prefill
// and for cached decode steps.
//
// Bounds, relative with an absolute floor at |logit| = 1 (as test/engine/forward.test.ts):
//   f32 export                          ≤ 1e-4   (two f32 implementations; measured ~1e-6)
//   f16 export of f16-stored weights    ≤ 1e-4   (same weights; the graph computes in f32)
//   f16 export of f32 weights           ≤ 2e-2   (the error of rounding the weights to f16; measured ~6e-3)
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import ort from 'onnxruntime-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'

import { exportOnnx, onnxFileName, ropeInvFreq, transpose2d, type OnnxDtype } from '../../src/export/onnx.js'
import { loadModel, type Model } from '../../src/index.js'
import { OnnxCausalLM } from '../../src/onnx/index.js'
import { writeTinyModel, type TinyModelOptions } from '../helpers/tiny-model.js'
import { maxRelError } from '../onnx/compare.js'

const BUNDLED = 'models/arith-qwen3-tiny'
const F32_TOL = 1e-4
const F16_ROUNDED_TOL = 2e-2

function randomTokens(n: number, vocab: number, seed: number): number[] {
  let s = seed >>> 0
  return Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0
    return s % vocab
  })
}

/** The engine's logits: prefill of `prefix` (every position), then one cached step per token of `steps`. */
async function engineLogits(model: Model, prefix: number[], steps: number[]): Promise<{ prefill: Float32Array; decode: Float32Array[] }> {
  const cache = model.handle.createCache(1, prefix.length + steps.length)
  const step = async (tokens: number[], mode: 1 | 2) =>
    (await model.handle.step(cache, { slots: Int32Array.of(0), counts: Int32Array.of(tokens.length), outModes: Uint8Array.of(mode), tokens: Int32Array.from(tokens), returnLogits: true })).logits!
  try {
    const prefill = await step(prefix, 2)
    const decode: Float32Array[] = []
    for (const t of steps) decode.push(await step([t], 1))
    return { prefill, decode }
  } finally {
    cache.dispose()
  }
}

async function onnxLogits(lm: OnnxCausalLM, prefix: number[], steps: number[]): Promise<{ prefill: Float32Array; decode: Float32Array[] }> {
  const cache = await lm.createCache()
  try {
    const prefill = await cache.extend(prefix, prefix.length, 0)
    const decode: Float32Array[] = []
    for (const t of steps) decode.push(await cache.extend([t], 1))
    return { prefill, decode }
  } finally {
    await cache.dispose()
  }
}

interface Row {
  model: string
  dtype: OnnxDtype
  bytes: number
  seconds: number
  prefill: number
  decode: number
}
const table: Row[] = []

const FAMILIES: [string, TinyModelOptions | null][] = [
  ['llama (llama3 rope scaling, attention bias, GQA)', { family: 'llama', dtype: 'F32', seed: 11, ropeScaling: true, attentionBias: true }],
  ['qwen2 (qkv bias, tied embeddings)', { family: 'qwen2', dtype: 'F32', seed: 12, tied: true }],
  ['qwen3 (q/k norm, head_dim ≠ hidden/heads)', { family: 'qwen3', dtype: 'F32', seed: 13 }],
  ['arith-qwen3-tiny (the bundled model)', null],
]

let root: string
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'ad-onnx-export-'))
})
afterAll(() => {
  rmSync(root, { recursive: true, force: true })
  if (table.length) {
    console.log('model | dtype | bytes | export s | max rel err prefill | max rel err decode')
    for (const r of table) console.log(`${r.model} | ${r.dtype} | ${r.bytes} | ${r.seconds.toFixed(3)} | ${r.prefill.toExponential(2)} | ${r.decode.toExponential(2)}`)
  }
})

describe.each(FAMILIES)('ONNX export witness: %s', (name, opts) => {
  let dir: string
  let model: Model

  beforeAll(async () => {
    dir = opts ? (await writeTinyModel(join(root, name.split(' ')[0]), opts)).dir : BUNDLED
    model = await loadModel(dir, { threads: 1 })
  })
  afterAll(() => model?.dispose())

  it.each(['f32', 'f16'] as const)('%s: prefill and cached decode logits match the engine', async (dtype) => {
    const out = join(root, `${name.split(' ')[0]}-${dtype}`)
    const r = await exportOnnx(dir, out, { dtype })
    expect(r.files[0]).toBe(join(out, 'onnx', onnxFileName(dtype)))
    expect(r.files).toContain(join(out, 'config.json'))
    expect(r.files).toContain(join(out, 'tokenizer.json'))
    const lm = await OnnxCausalLM.open(out, { threads: 1, dtype })
    try {
      const V = model.config.vocabSize
      expect(lm.vocabSize).toBe(V)
      const tokens = randomTokens(16, V, 3)
      const prefix = tokens.slice(0, 13)
      const steps = tokens.slice(13)
      const want = await engineLogits(model, prefix, steps)
      const got = await onnxLogits(lm, prefix, steps)
      const prefill = maxRelError(got.prefill, want.prefill)
      const decode = Math.max(...got.decode.map((d, i) => maxRelError(d, want.decode[i])))
      table.push({ model: name.split(' ')[0], dtype, bytes: r.bytes, seconds: r.seconds, prefill, decode })
      const tol = dtype === 'f32' ? F32_TOL : F16_ROUNDED_TOL
      expect(prefill).toBeLessThanOrEqual(tol)
      expect(decode).toBeLessThanOrEqual(tol)
    } finally {
      await lm.dispose()
    }
  })
})

describe('ONNX export: f16 weights, external data, LoRA', () => {
  it('an f16 export of f16-stored weights matches the engine at f32 precision (compute is f32)', async () => {
    const tiny = await writeTinyModel(join(root, 'llama-f16'), { family: 'llama', dtype: 'F16', seed: 15, kvHeads: 4, heads: 4 })
    const model = await loadModel(tiny.dir, { threads: 1 })
    await exportOnnx(tiny.dir, join(root, 'llama-f16-out'), { dtype: 'f16' })
    const lm = await OnnxCausalLM.open(join(root, 'llama-f16-out'), { threads: 1 })
    const tokens = randomTokens(12, tiny.config.vocabSize, 9)
    const want = await engineLogits(model, tokens.slice(0, 10), tokens.slice(10))
    const got = await onnxLogits(lm, tokens.slice(0, 10), tokens.slice(10))
    expect(maxRelError(got.prefill, want.prefill)).toBeLessThanOrEqual(F32_TOL)
    got.decode.forEach((d, i) => expect(maxRelError(d, want.decode[i])).toBeLessThanOrEqual(F32_TOL))
    await lm.dispose()
    model.dispose()
  })

  it('external data: weights in model.onnx_data give the same logits, and config.json tells transformers.js', async () => {
    const tiny = await writeTinyModel(join(root, 'qwen3-ext'), { family: 'qwen3', dtype: 'F32', seed: 21, tied: true })
    const inline = await exportOnnx(tiny.dir, join(root, 'ext-inline'), { dtype: 'f32' })
    const ext = await exportOnnx(tiny.dir, join(root, 'ext-external'), { dtype: 'f32', externalData: true })
    const data = join(root, 'ext-external', 'onnx', 'model.onnx_data')
    expect(ext.files).toContain(data)
    expect(inline.files.some((f) => f.endsWith('_data'))).toBe(false)
    // the graph file holds only the small tensors; the data file holds the rest
    expect(readFileSync(ext.files[0]).length).toBeLessThan(readFileSync(inline.files[0]).length / 4)
    const cfg = JSON.parse(readFileSync(join(root, 'ext-external', 'config.json'), 'utf8'))
    expect(cfg['transformers.js_config']).toEqual({ kv_cache_dtype: 'float32', use_external_data_format: { 'model.onnx': 1 } })
    const tokens = randomTokens(9, tiny.config.vocabSize, 4)
    const [a, b] = await Promise.all([inline, ext].map(async (_, i) => {
      const lm = await OnnxCausalLM.open(join(root, i ? 'ext-external' : 'ext-inline'), { threads: 1 })
      const l = await lm.logits(tokens)
      await lm.dispose()
      return l
    }))
    expect(Array.from(b)).toEqual(Array.from(a))
  })

  it('a trained LoRA adapter folder exports merged and matches the engine with the adapter attached', async () => {
    const tiny = await writeTinyModel(join(root, 'qwen2-lora'), { family: 'qwen2', dtype: 'F32', seed: 31 })
    const model = await loadModel(tiny.dir, { threads: 1 })
    const trainer = await model.trainer({ objective: { name: 'sft' }, lora: { rank: 4, alpha: 8 }, optimizer: { lr: 5e-2 } })
    await trainer.step({ sequences: [{ prompt: [1, 2, 3], completion: [4, 5, 6, 7] }] })
    const adapter = join(root, 'qwen2-adapter')
    await model.save(adapter) // PEFT adapter folder
    await exportOnnx(adapter, join(root, 'qwen2-lora-out'), { dtype: 'f32' })
    const lm = await OnnxCausalLM.open(join(root, 'qwen2-lora-out'), { threads: 1 })
    const tokens = randomTokens(11, tiny.config.vocabSize, 5)
    const want = await engineLogits(model, tokens, [])
    const base = await loadModel(tiny.dir, { threads: 1 })
    const baseLogits = await engineLogits(base, tokens, [])
    const got = await lm.logits(tokens)
    expect(maxRelError(got, want.prefill)).toBeLessThanOrEqual(F32_TOL)
    expect(maxRelError(baseLogits.prefill, want.prefill)).toBeGreaterThan(1e-3) // the adapter did change the model
    await lm.dispose()
    model.dispose()
    base.dispose()
  })
})

describe('ONNX export: the transformers.js layout', () => {
  let out: string
  let session: ort.InferenceSession
  const cfg = { family: 'llama' as const, dtype: 'F32' as const, seed: 41, ropeScaling: true }
  let V: number, KV: number, D: number, L: number

  beforeAll(async () => {
    const tiny = await writeTinyModel(join(root, 'llama-layout'), cfg)
    out = join(root, 'llama-layout-out')
    await exportOnnx(tiny.dir, out, { dtype: 'f32' })
    session = await ort.InferenceSession.create(join(out, 'onnx', 'model.onnx'), { intraOpNumThreads: 1 })
    ;({ vocabSize: V, numKvHeads: KV, headDim: D, numLayers: L } = tiny.config)
  })
  afterAll(() => session?.release())

  it('names inputs and outputs as transformers.js and optimum do, with symbolic batch and lengths', () => {
    const past = Array.from({ length: L }, (_, l) => [`past_key_values.${l}.key`, `past_key_values.${l}.value`]).flat()
    expect(session.inputNames).toEqual(['input_ids', 'attention_mask', 'position_ids', ...past])
    expect(session.outputNames).toEqual(['logits', ...past.map((p) => p.replace('past_key_values', 'present'))])
    const meta = Object.fromEntries([...session.inputMetadata, ...session.outputMetadata].map((m) => [m.name, m.isTensor ? [m.type, m.shape] : null]))
    expect(meta['input_ids']).toEqual(['int64', ['batch_size', 'sequence_length']])
    expect(meta['past_key_values.0.key']).toEqual(['float32', ['batch_size', KV, 'past_sequence_length', D]])
    expect(meta['logits']).toEqual(['float32', ['batch_size', 'sequence_length', V]])
  })

  /** Runs a batch; rows are [ids, mask]; position_ids as transformers.js computes them (cumsum(mask) − 1, padding → 1). */
  async function run(rows: { ids: number[]; mask: number[] }[], past: Record<string, ort.Tensor> | null) {
    const B = rows.length
    const S = rows[0].ids.length
    const T = rows[0].mask.length
    const pos = rows.flatMap(({ mask }) => {
      let c = 0
      const all = mask.map((m) => (c += m) - 1)
      return all.slice(T - S).map((p, i) => (mask[T - S + i] ? p : 1))
    })
    const i64 = (a: number[], dims: number[]) => new ort.Tensor('int64', BigInt64Array.from(a, BigInt), dims)
    const feeds: Record<string, ort.Tensor> = { input_ids: i64(rows.flatMap((r) => r.ids), [B, S]), attention_mask: i64(rows.flatMap((r) => r.mask), [B, T]), position_ids: i64(pos, [B, S]) }
    for (let l = 0; l < L; l++)
      for (const k of ['key', 'value']) feeds[`past_key_values.${l}.${k}`] = past?.[`present.${l}.${k}`] ?? new ort.Tensor('float32', new Float32Array(0), [B, KV, 0, D])
    return session.run(feeds)
  }

  it('a left-padded batch (prefill, then a cached step) gives each row the logits it has alone', async () => {
    const a = randomTokens(3, V, 7)
    const b = randomTokens(5, V, 8)
    const padded = await run([{ ids: [0, 0, ...a], mask: [0, 0, 1, 1, 1] }, { ids: b, mask: [1, 1, 1, 1, 1] }], null)
    const aloneA = await run([{ ids: a, mask: [1, 1, 1] }], null)
    const aloneB = await run([{ ids: b, mask: [1, 1, 1, 1, 1] }], null)
    const rowLogits = (t: ort.Tensor, row: number, from: number, to: number) => (t.data as Float32Array).slice((row * t.dims[1] + from) * V, (row * t.dims[1] + to) * V)
    expect(maxRelError(rowLogits(padded.logits, 0, 2, 5), rowLogits(aloneA.logits, 0, 0, 3))).toBeLessThanOrEqual(1e-5)
    expect(maxRelError(rowLogits(padded.logits, 1, 0, 5), rowLogits(aloneB.logits, 0, 0, 5))).toBeLessThanOrEqual(1e-5)
    const next = [11, 12]
    const step = await run([{ ids: [next[0]], mask: [0, 0, 1, 1, 1, 1] }, { ids: [next[1]], mask: [1, 1, 1, 1, 1, 1] }], padded)
    const stepA = await run([{ ids: [next[0]], mask: [1, 1, 1, 1] }], aloneA)
    const stepB = await run([{ ids: [next[1]], mask: [1, 1, 1, 1, 1, 1] }], aloneB)
    expect(maxRelError(rowLogits(step.logits, 0, 0, 1), rowLogits(stepA.logits, 0, 0, 1))).toBeLessThanOrEqual(1e-5)
    expect(maxRelError(rowLogits(step.logits, 1, 0, 1), rowLogits(stepB.logits, 0, 0, 1))).toBeLessThanOrEqual(1e-5)
    expect(step['present.0.key'].dims).toEqual([2, KV, 6, D])
  })
})

describe('ONNX export: pieces and bad input', () => {
  it('RoPE inv_freq folds Llama 3 scaling: high frequencies kept, low ones divided by factor, a blend between', () => {
    const config = { headDim: 8, ropeTheta: 500000, ropeScaling: { type: 'llama3' as const, factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositionEmbeddings: 256 } }
    const plain = ropeInvFreq({ ...config, ropeScaling: null })
    const scaled = ropeInvFreq(config)
    expect(scaled[0]).toBe(plain[0]) // wavelength 2π < 256/4
    expect(scaled[3]).toBeCloseTo(plain[3] / 8, 15) // wavelength ≫ 256
    const wavelen = (2 * Math.PI) / plain[1]
    const smooth = (256 / wavelen - 1) / (4 - 1)
    expect(wavelen > 64 && wavelen < 256).toBe(true)
    expect(scaled[1]).toBeCloseTo((1 - smooth) * (plain[1] / 8) + smooth * plain[1], 15)
  })

  it('transpose2d turns [out, in] into [in, out]', () => {
    expect(Array.from(transpose2d(Float32Array.of(1, 2, 3, 4, 5, 6), 2, 3))).toEqual([1, 4, 2, 5, 3, 6])
  })

  it('refuses a folder without a model, an unknown dtype, and a reward model, with typed errors', async () => {
    await expect(exportOnnx(join(root, 'nope'), join(root, 'x'), { dtype: 'f32' })).rejects.toMatchObject({ code: 'CONFIG_ERROR' })
    await expect(exportOnnx(BUNDLED, join(root, 'x'), { dtype: 'bf16' as OnnxDtype })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', argument: 'dtype' })
    const tiny = await writeTinyModel(join(root, 'rm'), { family: 'qwen3', dtype: 'F32', seed: 51 })
    const rm = await loadModel(tiny.dir, { threads: 1 })
    await rm.attachScoreHead()
    await rm.save(join(root, 'rm-saved'))
    rm.dispose()
    await expect(exportOnnx(join(root, 'rm-saved'), join(root, 'x'), { dtype: 'f32' })).rejects.toMatchObject({ code: 'UNSUPPORTED_ARCHITECTURE' })
  })
})
