// The kernel profiler: off unless asked, counts every instrumented call once, FLOPs and bytes
// from the shapes, and phases that separate prefill, decode, a score() and a training step.
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { loadModel, type Model } from '../../src/engine/model.js'
import { formatProfile, kernelRows, measureFloors, profileModel, withProfile } from '../../src/engine/profiler.js'
import { nativeAddon } from '../../src/native.js'
import { writeTinyModel } from '../helpers/tiny-model.js'

let model: Model
const L = 3, H = 64, HEADS = 4, KV = 2, HD = 16, I = 96

beforeAll(async () => {
  const dir = join(mkdtempSync(join(tmpdir(), 'ad-prof-')), 'm')
  await writeTinyModel(dir, { family: 'llama', dtype: 'F32', seed: 5, layers: L, hiddenSize: H, heads: HEADS, kvHeads: KV, headDim: HD, intermediate: I })
  model = await loadModel(dir, { threads: 2 })
})
afterAll(() => model?.dispose())

describe('kernel profiler', () => {
  it('records nothing while off', async () => {
    const p = (await nativeAddon()).profiler
    p.reset()
    await model.generate([[1, 2, 3]], { maxTokens: 2, temperature: 0 })
    expect(p.snapshot()).toEqual([])
  })

  it('counts each linear once per layer and step, with FLOPs from the shapes', async () => {
    const T = 7
    const prompt = Array.from({ length: T + 1 }, (_, i) => 10 + i)
    // generate prefills T tokens (all but the last), then feeds the last one: two forwards, T + 1 rows.
    const { counters, wallSeconds } = await withProfile(() => model.generate([prompt], { maxTokens: 1, temperature: 0, stopTokenIds: [] }))
    const by = new Map(counters.map((c) => [c.name, c]))
    const q = by.get('fwd.q_proj')!
    expect(q.calls).toBe(2 * L)
    expect(q.flops).toBe(2 * (T + 1) * H * HEADS * HD * L)
    expect(by.get('fwd.down_proj')!.flops).toBe(2 * (T + 1) * I * H * L)
    expect(by.get('lm_head')!.calls).toBe(1)
    expect(by.get('sampling')!.calls).toBe(1)
    for (const c of counters) {
      expect(c.seconds).toBeGreaterThanOrEqual(0)
      expect(c.seconds).toBeLessThanOrEqual(wallSeconds)
      expect(Number.isFinite(c.bytes) && c.bytes >= 0).toBe(true)
    }
    // Off again afterwards.
    const p = (await nativeAddon()).profiler
    await model.generate([prompt], { maxTokens: 1 })
    expect(p.snapshot()).toEqual([])
  })

  it('profiles prefill, decode, a score() and a training step apart', async () => {
    const floors = await measureFloors(2)
    expect(floors.copyBytesPerSecond).toBeGreaterThan(1e8)
    expect(floors.gemmFlopsPerSecond).toBeGreaterThan(1e8)
    const D = 5, B = 2, P = 16
    const phases = await profileModel(model, floors, { promptTokens: P, batch: B, decodeTokens: D })
    expect(phases.map((p) => p.phase)).toEqual(['prefill', 'decode', 'score', 'train step'])
    const kernel = (phase: number, name: string) => phases[phase].kernels.find((k) => k.name === name)
    expect(kernel(0, 'fwd.q_proj')!.calls).toBe(L)
    expect(kernel(1, 'fwd.q_proj')!.calls).toBe(D * L)
    expect(kernel(1, 'lm_head')!.calls).toBe(D)
    expect(kernel(1, 'fwd.q_proj')!.flops).toBe(2 * B * D * H * HEADS * HD * L)
    // score(): the prompts' prefill, then the completion rows: two forwards, the LM head on the B·P/2 completion rows
    expect(kernel(2, 'fwd.q_proj')!.calls).toBe(2 * L)
    expect(kernel(2, 'lm_head')!.flops).toBe(2 * B * (P / 2) * H * model.config.vocabSize)
    expect(kernel(3, 'bwd.q_proj')!.calls).toBe(L)
    expect(kernel(3, 'adamw')!.calls).toBe(1)
    expect(phases[3].mfu! > 0 && phases[3].mfu! < 1, `train step MFU ${phases[3].mfu}`).toBe(true)
    for (const ph of phases) {
      expect(ph.wallSeconds).toBeGreaterThan(0)
      const covered = ph.kernels.reduce((s, k) => s + k.seconds, 0)
      expect(covered).toBeLessThanOrEqual(ph.wallSeconds * 1.001)
      for (const k of ph.kernels) expect(Number.isFinite(k.floorPercent) && k.floorPercent >= 0).toBe(true)
    }
    const text = formatProfile(phases, floors)
    expect(text).toMatch(/prefill: 2×16 prompt tokens/)
    expect(text).toMatch(/score: 2×\(8 prompt \+ 8 completion\) tokens/)
    expect(text).toMatch(/train step: .* tok\/s, MFU [0-9.]+%/)
    expect(text).toMatch(/bwd\.attention/)
  }, 60_000)

  it('rates kernels against the floors: % floor is the floor time over the time taken', () => {
    const rows = kernelRows([{ name: 'k', calls: 2, seconds: 0.5, bytes: 1e9, flops: 1e9 }], { copyBytesPerSecond: 4e9, gemmFlopsPerSecond: 1e10, threads: 1 }, 1)
    expect(rows[0].floorPercent).toBeCloseTo(50) // floor: max(1e9/4e9, 1e9/1e10) = 0.25 s of 0.5 s
    expect(rows[0].meanSeconds).toBeCloseTo(0.25)
    expect(rows[0].bytesPerSecond).toBeCloseTo(2e9)
  })

  it('a device phase (no bytes, no FLOPs counted) has no floor and prints a dash', () => {
    const floors = { copyBytesPerSecond: 4e9, gemmFlopsPerSecond: 1e10, threads: 1 }
    const rows = kernelRows([{ name: 'cuda:fwd.attention', calls: 28, seconds: 0.004, bytes: 0, flops: 0 }], floors, 0.01)
    expect(Number.isNaN(rows[0].floorPercent)).toBe(true)
    expect(rows[0].timeShare).toBeCloseTo(0.4)
    const text = formatProfile([{ phase: 'decode', detail: 'x', wallSeconds: 0.01, tokens: 8, kernels: rows }], floors)
    const line = text.split('\n').find((l) => l.startsWith('cuda:fwd.attention'))!
    expect(line.trim().split(/\s+/).at(-1)).toBe('–')
  })
})
