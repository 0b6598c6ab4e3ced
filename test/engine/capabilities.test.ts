// The capability matrix `autodidact doctor` prints (verb × backend, from the engine's own
// support()) against what each backend really does: every verb has an exercise here; a verb the
// matrix lists runs, a verb it does not list answers the one typed error (ERR_AD_UNSUPPORTED)
// with the matrix's reason. The CPU backend runs here; the CUDA rows run where a GPU is.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { doctorReport, loadModel, type Model } from '../../src/index.js'
import { formatDoctor } from '../../src/cli/doctor.js'
import { nativeAddon, type NativeAddon, type NativeInfo } from '../../src/native.js'
import { writeTinyModel } from '../helpers/tiny-model.js'

let root: string
let dir: string
let addon: NativeAddon
let matrix: NativeInfo['capabilities']

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'ad-capabilities-'))
  dir = (await writeTinyModel(join(root, 'm'), { family: 'qwen3', dtype: 'F32', seed: 81, hiddenSize: 16, intermediate: 24, headDim: 8 })).dir
  addon = await nativeAddon()
  matrix = addon.info().capabilities
})
afterAll(() => rmSync(root, { recursive: true, force: true }))

const seq = { tokens: Int32Array.of(1, 2, 3, 4), lengths: Int32Array.of(4), promptLengths: Int32Array.of(2) }

// One exercise per verb of the matrix, on a model of the backend under test.
const EXERCISES: Record<string, (m: Model, other: () => Promise<Model>) => Promise<unknown>> = {
  load: async (m) => m.handle.describe(),
  step: async (m) => m.handle.step(m.handle.createCache(1, 4), { slots: Int32Array.of(0), counts: Int32Array.of(2), outModes: Uint8Array.of(1), tokens: Int32Array.of(1, 2) }),
  'step.reference': async (m, other) => {
    const ref = await other()
    const req = { slots: Int32Array.of(0), counts: Int32Array.of(2), outModes: Uint8Array.of(1), tokens: Int32Array.of(1, 2), targets: Int32Array.of(3) }
    const r = await m.handle.step(m.handle.createCache(1, 4), { ...req, reference: { model: ref.handle, cache: ref.handle.createCache(1, 4) } })
    ref.dispose()
    if (!r.klExact || !Number.isFinite(r.klExact[0])) throw new Error('no KL from the reference')
  },
  'step.pagedCache': async (m) => {
    const cache = m.handle.createCache(2, 8, { pageSize: 2, pages: 4 })
    await m.handle.step(cache, { slots: Int32Array.of(0), counts: Int32Array.of(3), outModes: Uint8Array.of(0), tokens: Int32Array.of(1, 2, 3) })
    cache.copyPrefix(0, 1, 3)
    if (cache.describe().sharedBytes <= 0) throw new Error('the prefix was not shared')
  },
  trainForward: async (m) => addon.train.forward(m.handle, seq),
  'trainForward.reference': async (m, other) => {
    const ref = await other()
    const r = await addon.train.forward(m.handle, { ...seq, reference: ref.handle })
    ref.dispose()
    if (!r.refLogp) throw new Error('no reference logprobs')
  },
  gradientCheckpointing: async (m) => addon.train.forward(m.handle, { ...seq, checkpoint: true }),
  trainBackward: async (m) => {
    addon.train.setTrainable(m.handle, true, false)
    await addon.train.forward(m.handle, seq)
    await addon.train.backward(m.handle, { a: Float32Array.of(1, 1), b: Float32Array.of(0, 0) })
    addon.train.zeroGrad(m.handle)
  },
  optimizerStep: async (m) => {
    addon.train.setTrainable(m.handle, true, false)
    await addon.train.forward(m.handle, seq)
    await addon.train.backward(m.handle, { a: Float32Array.of(1, 1), b: Float32Array.of(0, 0) })
    const r = await addon.train.optimizerStep(m.handle, { step: 1, lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0, clipGradNorm: 1 })
    if (!(r.parameters > 0)) throw new Error('the optimizer updated nothing')
  },
  tensors: async (m) => addon.train.importTensors(m.handle, await addon.train.exportTensors(m.handle)),
  gradients: async (m) => {
    addon.train.setTrainable(m.handle, true, false)
    await addon.train.forward(m.handle, seq)
    await addon.train.backward(m.handle, { a: Float32Array.of(1, 1), b: Float32Array.of(0, 0) })
    if (!(await addon.train.exportGradients(m.handle)).length) throw new Error('no gradients')
  },
  optimizerState: async (m) => addon.train.importOptimizerState(m.handle, await addon.train.exportOptimizerState(m.handle)),
  lora: async (m) => {
    addon.train.attachLora(m.handle, { rank: 2, alpha: 4, targets: ['q_proj'], seed: 1 })
    addon.train.setLoraEnabled(m.handle, false)
    await addon.train.mergeLora(m.handle)
  },
  scoreHead: async (m) => {
    addon.train.attachScoreHead(m.handle, { labels: 1, std: 0.02, seed: 0 })
    await addon.train.scoreForward(m.handle, { tokens: Int32Array.of(1, 2, 3), lengths: Int32Array.of(3), tape: false })
  },
  profile: async () => {
    addon.profiler.enable(true)
    addon.profiler.snapshot()
    addon.profiler.reset()
    addon.profiler.enable(false)
  },
}

async function checkBackend(backend: 'cpu' | 'cuda') {
  const load = () => loadModel(dir, backend === 'cuda' ? { device: 'cuda' } : { device: 'cpu', threads: 1 })
  for (const row of matrix) {
    const exercise = EXERCISES[row.verb]
    expect(exercise, `the matrix lists '${row.verb}', which this test has no exercise for`).toBeDefined()
    const cell = row.backends[backend]
    const m = await load()
    const outcome = await exercise(m, load).then(
      () => null,
      (e: unknown) => e as Error & { code?: string; verb?: string; backend?: string },
    )
    m.dispose()
    if (cell.supported) {
      expect(outcome, `${row.verb} on ${backend}: ${outcome?.message}`).toBeNull()
    } else {
      expect(outcome?.code, `${row.verb} on ${backend} must answer the unsupported-verb error`).toBe('ERR_AD_UNSUPPORTED')
      expect(outcome!.verb).toBe(row.verb)
      expect(outcome!.backend).toBe(backend)
      expect(outcome!.message).toContain(cell.reason)
    }
  }
}

const cudaAvailable = await nativeAddon().then((a) => a.info().cuda.available, () => false)

describe('the capability matrix', () => {
  it('lists every verb for every backend; a verb a backend lacks carries its reason; doctor prints it', async () => {
    expect(matrix.map((r) => r.verb).sort()).toEqual(Object.keys(EXERCISES).sort())
    for (const row of matrix) {
      expect(Object.keys(row.backends).sort()).toEqual(['cpu', 'cuda'])
      for (const cell of Object.values(row.backends)) if (!cell.supported) expect(cell.reason.length).toBeGreaterThan(20)
    }
    const text = formatDoctor(await doctorReport())
    expect(text).toContain('capabilities (verb × backend):')
    for (const row of matrix) expect(text).toMatch(new RegExp(`^  ${row.verb.replace('.', '\\.')} +(yes|no)`, 'm'))
    for (const row of matrix) for (const cell of Object.values(row.backends)) if (!cell.supported) expect(text).toContain(cell.reason)
  })

  it('the CPU backend does every verb the matrix gives it', async () => {
    expect(matrix.every((r) => r.backends.cpu.supported)).toBe(true)
    await checkBackend('cpu')
  })

  it.skipIf(!cudaAvailable)(`the CUDA backend does what its row says, and refuses the rest with the row's reason${cudaAvailable ? '' : ' [skipped: no usable CUDA device here]'}`, async () => {
    await checkBackend('cuda')
  })
})
