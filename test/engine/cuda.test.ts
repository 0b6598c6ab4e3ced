// loadModel({ device: 'cuda' }): where CUDA cannot run, a typed DeviceUnavailableError with the
// reason the addon found; where it can, greedy tokens and teacher-forced statistics agree with the
// CPU engine within the bf16 tolerance (the GPU tests skip with the reason in their name).
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DeviceUnavailableError, doctorReport, loadModel } from '../../src/index.js'
import { formatDoctor } from '../../src/cli/doctor.js'
import { nativeAddon, type NativeInfo } from '../../src/native.js'
import { writeTinyModel, type TinyModel } from '../helpers/tiny-model.js'

let root: string
let tiny: TinyModel
let cuda: NativeInfo['cuda']

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'ad-cuda-'))
  tiny = await writeTinyModel(join(root, 'm'), { family: 'qwen3', dtype: 'BF16', seed: 31 })
  cuda = (await nativeAddon()).info().cuda
})
afterAll(() => rmSync(root, { recursive: true, force: true }))

const REASONS = ['not-built', 'stale', 'load-failed', 'abi-mismatch', 'no-driver', 'no-device', 'probe-failed']
const available = await nativeAddon().then((a) => a.info().cuda.available, () => false)
const skipNote = available ? '' : ' [skipped: no usable CUDA device here]'

describe('device cuda without a usable GPU', () => {
  it('info() reports the plugin state and a reason; doctor prints it', async () => {
    expect(typeof cuda.pluginPath).toBe('string')
    expect(cuda.pluginPath.endsWith('autodidact_cuda.so')).toBe(true)
    if (!cuda.available) {
      expect(REASONS).toContain(cuda.kind)
      expect(cuda.reason.length).toBeGreaterThan(10)
      expect(formatDoctor(await doctorReport())).toContain(cuda.reason)
    } else {
      expect(cuda.kind).toBe('ok')
    }
  })

  it.skipIf(available)('loadModel({ device: "cuda" }) throws DeviceUnavailableError with the reason', async () => {
    const err = await loadModel(tiny.dir, { device: 'cuda' }).then(
      () => null,
      (e: unknown) => e,
    )
    expect(err).toBeInstanceOf(DeviceUnavailableError)
    const e = err as DeviceUnavailableError
    expect(e.code).toBe('DEVICE_UNAVAILABLE')
    expect(e.reason).toBe(cuda.kind)
    expect(e.message).toContain(cuda.reason)
    // The CPU path is unaffected in the same process.
    const m = await loadModel(tiny.dir, { device: 'cpu', threads: 1 })
    expect(m.device).toBe('cpu')
    m.dispose()
  })

  it.skipIf(available)('AUTODIDACT_DEVICE=cuda is the default device of a load without one; a bad value is a typed error', async () => {
    const saved = process.env.AUTODIDACT_DEVICE
    try {
      process.env.AUTODIDACT_DEVICE = 'cuda'
      await expect(loadModel(tiny.dir, { threads: 1 })).rejects.toBeInstanceOf(DeviceUnavailableError)
      const m = await loadModel(tiny.dir, { device: 'cpu', threads: 1 }) // an explicit device wins
      expect(m.device).toBe('cpu')
      m.dispose()
      process.env.AUTODIDACT_DEVICE = 'gpu'
      await expect(loadModel(tiny.dir, { threads: 1 })).rejects.toThrow(/AUTODIDACT_DEVICE must be/)
    } finally {
      if (saved === undefined) delete process.env.AUTODIDACT_DEVICE
      else process.env.AUTODIDACT_DEVICE = saved
    }
  })

  it('rejects a bad device index before touching the device', async () => {
    await expect(loadModel(tiny.dir, { device: 'cuda', deviceIndex: -1 })).rejects.toThrow(/deviceIndex/)
  })
})

describe('device cuda on a GPU', () => {
  it.skipIf(!available)(`greedy tokens and scores match the CPU engine within bf16 tolerance${skipNote}`, async () => {
    const cpu = await loadModel(tiny.dir, { device: 'cpu', threads: 2 })
    const gpu = await loadModel(tiny.dir, { device: 'cuda' })
    try {
      expect(gpu.device).toBe('cuda')
      const prompt = [5, 17, 33, 2, 101, 64]
      const [[a]] = await cpu.generate([prompt], { temperature: 0, maxTokens: 8, stopTokenIds: [] })
      const [[b]] = await gpu.generate([prompt], { temperature: 0, maxTokens: 8, stopTokenIds: [] })
      // Equal up to the first near-tie (margin within the bf16 tolerance).
      for (let i = 0; i < a.tokens.length; ++i) {
        if (a.tokens[i] !== b.tokens[i]) {
          expect(a.margin[i]).toBeLessThan(6e-2 * Math.max(1, Math.abs(a.maxLogit[i])))
          break
        }
        expect(Math.abs(a.logprobs[i] - b.logprobs[i])).toBeLessThan(3e-2 * Math.max(1, Math.abs(a.logprobs[i])))
      }
      const pairs = [{ prompt, completion: Array.from(a.tokens) }]
      const [sc] = await cpu.score(pairs)
      const [sg] = await gpu.score(pairs)
      for (let i = 0; i < sc.logprobs.length; ++i) {
        expect(Math.abs(sc.logprobs[i] - sg.logprobs[i])).toBeLessThan(3e-2 * Math.max(1, Math.abs(sc.logprobs[i])))
        expect(Math.abs(sc.entropy[i] - sg.entropy[i])).toBeLessThan(3e-2 * Math.max(1, sc.entropy[i]))
      }
    } finally {
      cpu.dispose()
      gpu.dispose()
    }
  })
})
