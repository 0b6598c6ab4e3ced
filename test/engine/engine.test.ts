// The Engine interface's whole-model verbs on the CPU backend: optimizer state and tensor imports
// check everything before they change anything (issue 23, finding 1), and the LoRA merge runs on
// the engine's threads with the arithmetic of W + α/r·B·A in float64.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { loadModel, type Model } from '../../src/index.js'
import { nativeAddon, type NativeTrain } from '../../src/native.js'
import { writeTinyModel } from '../helpers/tiny-model.js'

let root: string
let model: Model
let train: NativeTrain

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'ad-engine-'))
  const tiny = await writeTinyModel(join(root, 'm'), { family: 'llama', dtype: 'F32', seed: 71, hiddenSize: 16, intermediate: 24, attentionBias: true })
  model = await loadModel(tiny.dir, { threads: 2 })
  train = (await nativeAddon()).train
  // One optimizer step, so that every parameter has AdamW moments.
  const trainer = await model.trainer({ objective: { name: 'sft' }, optimizer: { lr: 1e-3 } })
  await trainer.step({ sequences: [{ prompt: [1, 2, 3], completion: [4, 5, 6] }] })
})
afterAll(() => {
  model.dispose()
  rmSync(root, { recursive: true, force: true })
})

const snapshot = async () => (await train.exportOptimizerState(model.handle)).map((s) => ({ name: s.name, m: Array.from(s.m), v: Array.from(s.v) }))

describe('importOptimizerState checks every entry before it touches the state', () => {
  it.each([
    ['an unknown tensor', (s: Entry[]) => [...s, { ...s[0], name: 'model.layers.9.mlp.up_proj.weight' }], /no parameter named model\.layers\.9\.mlp\.up_proj\.weight/],
    ['m of the wrong size', (s: Entry[]) => s.map((e, i) => (i === 2 ? { ...e, m: e.m.slice(1) } : e)), /has \d+ elements, the parameter \d+/],
    ['v of the wrong size (m right)', (s: Entry[]) => s.map((e, i) => (i === 3 ? { ...e, v: new Float32Array(e.v.length + 1) } : e)), /has \d+ elements, the parameter \d+/],
    ['a NaN in m', (s: Entry[]) => s.map((e, i) => (i === 1 ? { ...e, m: e.m.map((x, j) => (j === 2 ? NaN : x)) } : e)), /m\[2\] = nan \(must be finite\)/],
    ['an infinity in v', (s: Entry[]) => s.map((e, i) => (i === 0 ? { ...e, v: e.v.map((x, j) => (j === 0 ? Infinity : x)) } : e)), /v\[0\] = inf/],
    ['a negative second moment', (s: Entry[]) => s.map((e, i) => (i === 4 ? { ...e, v: e.v.map((x, j) => (j === 1 ? -1e-6 : x)) } : e)), /the second moment must be finite and ≥ 0/],
    ['the same tensor twice', (s: Entry[]) => [...s, s[0]], /names .* twice/],
  ])('%s: a typed error naming the tensor; the state is unchanged', async (_what, corrupt, message) => {
    const before = await snapshot()
    const state = await train.exportOptimizerState(model.handle)
    const bad = corrupt(state)
    const err = await train.importOptimizerState(model.handle, bad).then(
      () => null,
      (e: unknown) => e as Error & { code?: string },
    )
    expect(err).toBeInstanceOf(Error)
    expect(err!.code).toMatch(/^ERR_AD_(INVALID_ARGUMENT|OUT_OF_RANGE)$/)
    expect(err!.message).toMatch(message)
    expect(err!.message).toMatch(/model\.|lm_head/)
    expect(await snapshot()).toEqual(before)
  })

  it('a good state imports, exports back equal, and the next optimizer step runs', async () => {
    const state = await train.exportOptimizerState(model.handle)
    const scaled = state.map((s) => ({ name: s.name, m: s.m.map((x) => x / 2), v: s.v.map((x) => x * 2) }))
    await train.importOptimizerState(model.handle, scaled)
    const back = await train.exportOptimizerState(model.handle)
    expect(back.map((s) => s.name)).toEqual(scaled.map((s) => s.name))
    back.forEach((s, i) => {
      expect(Array.from(s.m)).toEqual(Array.from(scaled[i].m))
      expect(Array.from(s.v)).toEqual(Array.from(scaled[i].v))
    })
    const trainer = await model.trainer({ objective: { name: 'sft' }, optimizer: { lr: 1e-3 } })
    const m = await trainer.step({ sequences: [{ prompt: [1, 2], completion: [3, 4] }] })
    expect(m.skipped).toBe(false)
  })
})

type Entry = { name: string; m: Float32Array; v: Float32Array }

describe('importTensors', () => {
  it('a wrong size anywhere writes nothing', async () => {
    const before = await train.exportTensors(model.handle)
    const bad = before.map((t, i) => ({ name: t.name, data: i === before.length - 1 ? new Float32Array(t.data.length - 1) : t.data.map((x) => x + 1) }))
    const err = await train.importTensors(model.handle, bad).then(() => null, (e: Error & { code?: string }) => e)
    expect(err?.code).toBe('ERR_AD_OUT_OF_RANGE')
    expect(err?.message).toContain(before[before.length - 1].name)
    const after = await train.exportTensors(model.handle)
    after.forEach((t, i) => expect(Array.from(t.data)).toEqual(Array.from(before[i].data)))
  })
})

describe('LoRA merge on the engine', () => {
  it('exportTensors({ mergeLora }) and mergeLora() give W + α/r·B·A (float64 reference) and keep the function', async () => {
    const dir = (await writeTinyModel(join(root, 'lora'), { family: 'qwen3', dtype: 'F32', seed: 72, hiddenSize: 16, intermediate: 24, headDim: 8 })).dir
    const m = await loadModel(dir, { threads: 2 })
    const rank = 3
    const alpha = 5
    train.attachLora(m.handle, { rank, alpha, targets: ['q_proj', 'o_proj', 'down_proj'], seed: 9 })
    m.lora = { rank, alpha, targets: ['q_proj', 'o_proj', 'down_proj'] }
    const plain = await train.exportTensors(m.handle)
    // B = 0 at attach: give it values, so the merge has something to fold in.
    const Bs = plain.filter((t) => t.name.endsWith('lora_B.weight')).map((t) => ({ name: t.name, data: t.data.map((_, i) => Math.sin(3 * i + 1) / 4) }))
    await train.importTensors(m.handle, Bs)
    const byName = new Map((await train.exportTensors(m.handle)).map((t) => [t.name, t]))
    const merged = new Map((await train.exportTensors(m.handle, { mergeLora: true })).map((t) => [t.name, t]))
    expect([...merged.keys()].some((n) => n.includes('lora_'))).toBe(false)
    let checked = 0
    for (const [name, A] of byName) {
      if (!name.endsWith('lora_A.weight')) continue
      const B = byName.get(name.replace('lora_A', 'lora_B'))!
      const Wname = name.replace('.lora_A.weight', '.weight')
      const W = byName.get(Wname)!
      const [out, inDim] = W.shape
      for (let o = 0; o < out; ++o)
        for (let i = 0; i < inDim; ++i) {
          let delta = 0
          for (let k = 0; k < rank; ++k) delta += B.data[o * rank + k] * A.data[k * inDim + i]
          const want = W.data[o * inDim + i] + (alpha / rank) * delta
          const got = merged.get(Wname)!.data[o * inDim + i]
          expect(Math.abs(got - want), `${Wname}[${o}, ${i}]`).toBeLessThanOrEqual(1e-6 * Math.max(1, Math.abs(want)))
          ++checked
        }
    }
    expect(checked).toBeGreaterThan(1000)
    const tokens = [3, 1, 4, 1, 5, 9, 2, 6]
    const logits = async () => {
      const cache = m.handle.createCache(1, tokens.length)
      const r = await m.handle.step(cache, { slots: Int32Array.of(0), counts: Int32Array.of(tokens.length), outModes: Uint8Array.of(2), tokens: Int32Array.from(tokens), returnLogits: true })
      cache.dispose()
      return r.logits!
    }
    const withAdapters = await logits()
    await m.mergeLora()
    const folded = await logits()
    let worst = 0
    for (let i = 0; i < folded.length; ++i) worst = Math.max(worst, Math.abs(folded[i] - withAdapters[i]))
    expect(worst).toBeLessThan(1e-4)
    // In place: the weights now equal the merged export, and every B is zero.
    const now = new Map((await train.exportTensors(m.handle)).map((t) => [t.name, t]))
    for (const [name, t] of merged) expect(Array.from(now.get(name)!.data)).toEqual(Array.from(t.data))
    for (const [name, t] of now) if (name.endsWith('lora_B.weight')) expect(t.data.every((x) => x === 0)).toBe(true)
    m.dispose()
  })
})

describe('one tensor table (native/model/tensor_table.def)', () => {
  it.each([
    ['llama with attention bias (q, k, v and o_proj.bias)', { family: 'llama' as const, attentionBias: true }],
    ['qwen2, tied embeddings', { family: 'qwen2' as const, tied: true }],
    ['qwen3 (q/k norm)', { family: 'qwen3' as const, headDim: 8 }],
  ])('TypeScript reads the list the native finalize binds: %s', async (_name, opts) => {
    const tiny = await writeTinyModel(join(root, `table-${opts.family}`), { ...opts, dtype: 'F32', seed: 73, hiddenSize: 16, intermediate: 24 })
    const m = await loadModel(tiny.dir, { threads: 1 })
    const { modelTensors } = await import('../../src/engine/tensor-table.js')
    const fromTable = modelTensors(m.config).map((t) => [t.name, t.shape])
    const fromEngine = (await train.exportTensors(m.handle)).map((t) => [t.name, t.shape])
    expect(new Map(fromEngine)).toEqual(new Map(fromTable))
    expect(fromTable.length).toBe(fromEngine.length)
    if (opts.family === 'llama') expect(fromTable.map(([n]) => n)).toContain('model.layers.1.self_attn.o_proj.bias')
    m.dispose()
  })
})

describe('loadAdapter reads and checks the whole adapter before the model changes', () => {
  it('a missing or misshapen adapter tensor is a typed error; the model keeps no adapters', async () => {
    const { writeSafetensors } = await import('../../src/engine/hf/safetensors.js')
    const { mkdirSync, writeFileSync } = await import('node:fs')
    const { MissingTensorError, TensorShapeError } = await import('../../src/index.js')
    const dir = (await writeTinyModel(join(root, 'adapter-base'), { family: 'qwen3', dtype: 'F32', seed: 74, hiddenSize: 16, intermediate: 24, headDim: 8 })).dir
    const m = await loadModel(dir, { threads: 1 })
    const write = async (name: string, tensors: { name: string; shape: number[] }[]) => {
      const d = join(root, name)
      mkdirSync(d, { recursive: true })
      writeFileSync(join(d, 'adapter_config.json'), JSON.stringify({ r: 2, lora_alpha: 4, target_modules: ['q_proj'] }))
      await writeSafetensors(join(d, 'adapter_model.safetensors'), tensors.map((t) => ({ ...t, dtype: 'F32' as const, data: new Float32Array(t.shape[0] * t.shape[1]) })))
      return d
    }
    const q = m.config.numHeads * m.config.headDim
    const layers = Array.from({ length: m.config.numLayers }, (_, l) => `base_model.model.model.layers.${l}.self_attn.q_proj`)
    const complete = layers.flatMap((p) => [{ name: `${p}.lora_A.weight`, shape: [2, 16] }, { name: `${p}.lora_B.weight`, shape: [q, 2] }])
    const tokens = Int32Array.of(1, 2, 3)
    const logits = async () => (await m.handle.step(m.handle.createCache(1, 3), { slots: Int32Array.of(0), counts: Int32Array.of(3), outModes: Uint8Array.of(2), tokens, returnLogits: true })).logits!
    const before = Array.from(await logits())
    await expect(m.loadAdapter(await write('adapter-missing', complete.slice(1)))).rejects.toBeInstanceOf(MissingTensorError)
    await expect(m.loadAdapter(await write('adapter-shape', complete.map((t, i) => (i === 1 ? { ...t, shape: [q, 3] } : t))))).rejects.toBeInstanceOf(TensorShapeError)
    expect(m.lora).toBeNull()
    expect((await train.exportTensors(m.handle)).some((t) => t.name.includes('lora_'))).toBe(false)
    expect(Array.from(await logits())).toEqual(before)
    await m.loadAdapter(await write('adapter-good', complete))
    expect(m.lora).toEqual({ rank: 2, alpha: 4, targets: ['q_proj'] })
    m.dispose()
  })
})
