// With the CUDA plugin absent (pointed elsewhere before the addon first looks for it), the CPU
// addon still loads and works, and device 'cuda' fails with reason 'not-built'. Runs in its own
// process (vitest pool 'forks'), so the override cannot leak into other files.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { writeTinyModel, type TinyModel } from '../helpers/tiny-model.js'

process.env.AUTODIDACT_CUDA_PLUGIN = '/nonexistent/autodidact_cuda.so'
const { DeviceUnavailableError, loadModel } = await import('../../src/index.js')
const { nativeAddon } = await import('../../src/native.js')

let root: string
let tiny: TinyModel
beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'ad-noplugin-'))
  tiny = await writeTinyModel(join(root, 'm'), { family: 'llama', dtype: 'F32', seed: 3 })
})
afterAll(() => rmSync(root, { recursive: true, force: true }))

describe('without the CUDA plugin', () => {
  it('the addon reports not-built, the CPU path works, device cuda throws a typed error', async () => {
    const info = (await nativeAddon()).info()
    expect(info.backends).toEqual(['cpu'])
    expect(info.cuda.compiled).toBe(false)
    expect(info.cuda.kind).toBe('not-built')
    expect(info.cuda.reason).toContain('/nonexistent/autodidact_cuda.so')
    const err = await loadModel(tiny.dir, { device: 'cuda' }).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(DeviceUnavailableError)
    expect((err as InstanceType<typeof DeviceUnavailableError>).reason).toBe('not-built')
    const m = await loadModel(tiny.dir, { device: 'cpu', threads: 1 })
    const [[c]] = await m.generate([[1, 2, 3]], { temperature: 0, maxTokens: 3, stopTokenIds: [] })
    expect(c.tokens.length).toBe(3)
    m.dispose()
  })
})
