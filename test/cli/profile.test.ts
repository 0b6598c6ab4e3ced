// `autodidact profile --device cuda` where no GPU can run: a typed error naming the cause, before
// any work; and the device floors' binding, which answers the same way (issue 26).
import { describe, expect, it } from 'vitest'
import { profileCommand } from '../../src/cli/profile.js'
import { DeviceUnavailableError } from '../../src/engine/errors.js'
import { nativeAddon } from '../../src/native.js'

const cuda = (await nativeAddon()).info().cuda

describe.skipIf(cuda.available)('profile --device cuda without a usable GPU', () => {
  it('rejects with DeviceUnavailableError naming why (no plugin, driver or device)', async () => {
    const error = await profileCommand(['--device', 'cuda', '--no-train', '--decode-tokens', '1']).then(
      () => null,
      (e: unknown) => e,
    )
    expect(error).toBeInstanceOf(DeviceUnavailableError)
    const e = error as DeviceUnavailableError
    expect(e.reason).toBeTruthy()
    expect(e.message).toContain(cuda.reason)
  })

  it("measureDeviceFloors: null for the CPU backend, ERR_AD_DEVICE_UNAVAILABLE for cuda with the backend's reason", async () => {
    const p = (await nativeAddon()).profiler
    expect(p.measureDeviceFloors('cpu', 0)).toBeNull()
    let thrown: (Error & { code?: string; kind?: string }) | null = null
    try {
      p.measureDeviceFloors('cuda', 0)
    } catch (e) {
      thrown = e as Error & { code?: string; kind?: string }
    }
    expect(thrown?.code).toBe('ERR_AD_DEVICE_UNAVAILABLE')
    expect(thrown?.kind).toBe(cuda.kind)
  })
})

describe('profile --weights', () => {
  it('profiles a model kept as int8 (its decode reads the int8 weights) and skips the training step a frozen model cannot take', async () => {
    const lines: string[] = []
    const log = console.log
    console.log = (...args: unknown[]) => void lines.push(args.join(' '))
    try {
      expect(await profileCommand(['--weights', 'int8', '--json', '--prompt-tokens', '8', '--decode-tokens', '2', '--threads', '1'])).toBe(0)
    } finally {
      console.log = log
    }
    const out = JSON.parse(lines.join('\n')) as { weights: string; phases: { phase: string; kernels: { name: string; calls: number; bytes: number }[] }[] }
    expect(out.weights).toBe('int8')
    const names = out.phases.map((p) => p.phase)
    expect(names.some((n) => n.startsWith('decode'))).toBe(true)
    expect(names).not.toContain('train step')
    const decode = out.phases.find((p) => p.phase.startsWith('decode'))!
    const q = decode.kernels.find((k) => k.name === 'fwd.q_proj')!
    expect(q.calls).toBeGreaterThan(0)
    // bytes counted at the storage's width: int8 codes + an f16 scale per 32 (the bundled model: hidden 160, 4 heads × 40), one row per call
    const H = 160, Q = 4 * 40
    expect(q.bytes / q.calls).toBeCloseTo((1 + 2 / 32) * H * Q + 4 * (H + Q), 6)
  })

  it('refuses a storage it does not know with InvalidArgumentError', async () => {
    await expect(profileCommand(['--weights', 'int4', '--no-train'])).rejects.toThrow(/--weights must be one of/)
  })
})
