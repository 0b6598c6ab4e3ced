// The evolve command's method registry: method selection, resume reads the method from the run folder.
import { mkdtempSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, vi } from 'vitest'
import { deviceOption } from '../../src/cli/args.js'
import { evolveCommand } from '../../src/cli/evolve.js'
import { DeviceUnavailableError, InvalidArgumentError } from '../../src/engine/errors.js'
import { METHODS } from '../../src/methods/index.js'

describe('autodidact evolve', () => {
  it('rejects an unknown method, naming the available ones', async () => {
    await expect(evolveCommand(['--method', 'nope'])).rejects.toThrow(InvalidArgumentError)
    await expect(evolveCommand(['--method', 'nope'])).rejects.toThrow(/available: .*cose/)
  })

  it('--device accepts cpu or cuda only; cuda without a usable GPU is the typed DeviceUnavailableError', async () => {
    const saved = process.env.AUTODIDACT_DEVICE
    try {
      await expect(evolveCommand(['--method', 'cose', '--device', 'tpu'])).rejects.toThrow(/--device must be cpu or cuda/)
      const { nativeAddon } = await import('../../src/native.js')
      if (!(await nativeAddon()).info().cuda.available) {
        const out = mkdtempSync(join(tmpdir(), 'ad-evolve-dev-'))
        await expect(evolveCommand(['--method', 'cose', '--device', 'cuda', '--steps', '1', '--out', out, '--threads', '1'])).rejects.toThrow(DeviceUnavailableError)
      }
    } finally {
      if (saved === undefined) delete process.env.AUTODIDACT_DEVICE
      else process.env.AUTODIDACT_DEVICE = saved
    }
  })

  it('deviceOption (evolve, eval, select, serve, profile): cpu, cuda or a typed error', async () => {
    expect(deviceOption({})).toBeUndefined()
    expect(deviceOption({ device: 'cuda' })).toBe('cuda')
    expect(() => deviceOption({ device: 'gpu' })).toThrow(InvalidArgumentError)
    const { serveCommand } = await import('../../src/cli/serve.js')
    await expect(serveCommand(['--device', 'gpu', '--port', '0'])).rejects.toThrow(/--device must be cpu or cuda/)
  })

  it('every registered method has presets, its default among them, and charts', () => {
    for (const spec of Object.values(METHODS)) {
      expect(Object.keys(spec.presets)).toContain(spec.defaultPreset)
      expect(spec.series.length).toBeGreaterThan(0)
    }
  })

  it('runs a method, then resumes the run from its folder alone and extends it with --steps', async () => {
    const out = join(mkdtempSync(join(tmpdir(), 'ad-evolve-')), 'run')
    const log = vi.spyOn(console, 'log').mockImplementation(() => {})
    const err = vi.spyOn(process.stderr, 'write').mockImplementation(() => true)
    try {
      expect(await evolveCommand(['--method', 'cose', '--steps', '1', '--out', out, '--threads', '1'])).toBe(0)
      expect(JSON.parse(readFileSync(join(out, 'latest.json'), 'utf8'))).toMatchObject({ method: 'cose', step: 1 })
      expect(await evolveCommand(['--resume', out, '--steps', '2', '--threads', '1'])).toBe(0)
      await expect(evolveCommand(['--resume', out, '--method', 'ttrl-not-this'])).rejects.toThrow(/is a cose run/)
    } finally {
      log.mockRestore()
      err.mockRestore()
    }
    const steps = readFileSync(join(out, 'metrics.jsonl'), 'utf8').trim().split('\n').map((l) => (JSON.parse(l) as { step: number }).step)
    expect(steps).toEqual([0, 1, 2])
    expect(JSON.parse(readFileSync(join(out, 'latest.json'), 'utf8'))).toMatchObject({ method: 'cose', step: 2 })
  }, 60_000)
})
