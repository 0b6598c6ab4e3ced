// The memory plan at work: `profile --estimate`, the typed refusal with the numbers, and the
// trainer's checks on a device (the device's free memory stood in for through the addon's
// deviceMemory, which on this machine has no device to read).
import { describe, expect, it, vi } from 'vitest'
import { formatDoctor, doctorReport } from '../../src/cli/doctor.js'
import { profileCommand } from '../../src/cli/profile.js'
import { DeviceMemoryError, InvalidArgumentError } from '../../src/engine/errors.js'
import { readModelConfig } from '../../src/engine/hf/folder.js'
import { assertFits, trainingMemoryPlan } from '../../src/engine/memory-plan.js'
import { loadModel } from '../../src/engine/model.js'
import { nativeAddon, type NativeDeviceMemory } from '../../src/native.js'

const MODEL = 'models/arith-qwen3-tiny'

async function captured(run: () => Promise<number>): Promise<{ code: number; out: string }> {
  const lines: string[] = []
  const spy = vi.spyOn(console, 'log').mockImplementation((...a: unknown[]) => void lines.push(a.join(' ')))
  try {
    return { code: await run(), out: lines.join('\n') }
  } finally {
    spy.mockRestore()
  }
}

describe('autodidact profile --estimate', () => {
  it('prints the plan of the shape asked for, from config.json alone', async () => {
    const { code, out } = await captured(() => profileCommand(['--estimate', '--model', MODEL, '--batch', '2', '--seq', '64', '--lora', '4', '--json']))
    expect(code).toBe(0)
    const printed = JSON.parse(out) as { peakBytes: number; items: { name: string; bytes: number }[]; shape: unknown }
    const { config } = await readModelConfig(MODEL)
    const plan = trainingMemoryPlan(config, { batch: 2, sequenceLength: 64 }, { lora: { rank: 4 }, gradientCheckpointing: false, scoreLabels: 0 })
    expect(printed.peakBytes).toBe(plan.peakBytes)
    expect(printed.items.map((i) => i.name)).toEqual(plan.items.map((i) => i.name))
    expect(printed.shape).toEqual({ batch: 2, sequenceLength: 64 })
  })

  it('text: one line per item and the peak; checkpointing lowers it', async () => {
    const full = await captured(() => profileCommand(['--estimate', '--model', MODEL, '--batch', '8', '--seq', '256']))
    expect(full.out).toMatch(/full fine-tuning, 8 × 256 tokens/)
    for (const name of ['weights', 'gradients', 'optimizer', 'activations', 'kv-cache', 'lm-head', 'peak']) expect(full.out).toContain(name)
    const peakOf = (s: string) => Number(/peak\s+([\d.]+) GiB/.exec(s)![1])
    const ck = await captured(() => profileCommand(['--estimate', '--model', MODEL, '--batch', '8', '--seq', '256', '--checkpointing']))
    expect(peakOf(ck.out)).toBeLessThan(peakOf(full.out))
  })

  it('bad values are typed errors', async () => {
    await expect(profileCommand(['--estimate', '--model', MODEL, '--lora', '0'])).rejects.toThrow(InvalidArgumentError)
    await expect(profileCommand(['--estimate', '--model', MODEL, '--seq', '1'])).rejects.toThrow(InvalidArgumentError)
    await expect(profileCommand(['--estimate', '--model', '/nonexistent/model'])).rejects.toThrow(/model folder not found/)
  })
})

describe('assertFits', () => {
  const plan = async () => trainingMemoryPlan((await readModelConfig(MODEL)).config, { batch: 4, sequenceLength: 128 })

  it('refuses with the numbers when a phase needs more than is free', async () => {
    const p = await plan()
    const trainer = p.trainerBytes
    expect(() => assertFits(p, 'trainer', trainer, 'x')).not.toThrow()
    let error: unknown
    try {
      assertFits(p, 'trainer', trainer - 1, 'creating the trainer')
    } catch (e) {
      error = e
    }
    expect(error).toBeInstanceOf(DeviceMemoryError)
    const e = error as DeviceMemoryError
    expect([e.phase, e.neededBytes, e.freeBytes]).toEqual(['trainer', trainer, trainer - 1])
    expect(e.message).toMatch(/creating the trainer needs .* GiB more device memory/)
    expect(e.message).toMatch(/gradients/)
    expect(e.message).toMatch(/does not fit/)
  })

  it('what is already held for a phase is not asked again', async () => {
    const p = await plan()
    expect(() => assertFits(p, 'step', 0, 'x', p.stepBytes)).not.toThrow()
    expect(() => assertFits(p, 'step', 10, 'x', p.stepBytes - 11)).toThrow(DeviceMemoryError)
  })
})

describe('the trainer on a device checks the plan before the native work', () => {
  it('deviceMemory is null for the CPU backend (and for CUDA where it cannot run)', async () => {
    const addon = await nativeAddon()
    expect(addon.deviceMemory('cpu', 0)).toBeNull()
    if (!addon.info().cuda.available) expect(addon.deviceMemory('cuda', 0)).toBeNull()
  })

  it('refuses a trainer, then a step shape, that would not fit the free memory', async () => {
    const addon = await nativeAddon()
    const model = await loadModel(MODEL, { device: 'cpu', threads: 1 })
    let free = 0
    const memory = vi.spyOn(addon, 'deviceMemory').mockImplementation((): NativeDeviceMemory => ({ free, total: 80e9, allocated: 0, peakAllocated: 0 }))
    // the handle describes itself as on a device; the work still runs on the CPU engine
    const describe = model.handle.describe.bind(model.handle)
    Object.defineProperty(model.handle, 'describe', { value: () => ({ ...describe(), backend: 'cuda', deviceIndex: 0 }), configurable: true })
    try {
      const plan = trainingMemoryPlan(model.config, { batch: 1, sequenceLength: 2 })
      free = plan.trainerBytes - 1
      await expect(model.trainer({ objective: { name: 'sft' }, optimizer: { lr: 1e-3 } })).rejects.toThrow(DeviceMemoryError)
      free = plan.trainerBytes
      const trainer = await model.trainer({ objective: { name: 'sft' }, optimizer: { lr: 1e-3 }, microBatchSize: 4 })
      const seq = { prompt: [1, 5, 6], completion: [7, 8, 9] }
      const small = trainingMemoryPlan(model.config, { batch: 1, sequenceLength: 6, completionLength: 3 })
      free = small.stepBytes
      await trainer.step({ sequences: [seq] }) // fits exactly: runs
      expect(trainer.steps).toBe(1)
      // four sequences of 6: more than the held shape's scratch plus 1 byte free
      free = 1
      await expect(trainer.step({ sequences: [seq, seq, seq, seq] })).rejects.toThrow(/a training step of 4 sequences of up to 6 tokens needs/)
      expect(trainer.steps).toBe(1)
      await trainer.step({ sequences: [seq] }) // the held shape needs nothing more
      expect(trainer.steps).toBe(2)
    } finally {
      memory.mockRestore()
      model.dispose()
    }
  })
})

describe('doctor: each device\'s memory', () => {
  it('prints free memory and the peak this process held, and how to plan a run', async () => {
    const r = await doctorReport()
    expect(r.native, r.nativeError ?? '').not.toBeNull()
    if (!r.native) return
    const device = { index: 0, name: 'H200', totalMemory: 150e9, computeCapability: '9.0', multiprocessors: 132 }
    const text = formatDoctor({
      ...r,
      native: { ...r.native, cuda: { ...r.native.cuda, available: true, devices: [device] } },
      deviceMemory: [{ free: 2 ** 30 * 100, total: 150e9, allocated: 0, peakAllocated: 2 ** 30 * 3 }],
    })
    expect(text).toMatch(/\[0\] H200: 139\.7 GiB \(100\.0 GiB free now; peak held by this process 3\.0 GiB\)/)
    expect(text).toMatch(/profile --estimate/)
  })
})
