// `autodidact eval --weights W` and `autodidact select --weights W` load the model with the CPU
// backend keeping its weights as W (what the engine itself reports it keeps), and a bad W is a
// typed error before any model loads.
import { beforeEach, describe, expect, it, vi } from 'vitest'
import { evalCommand } from '../../src/cli/eval.js'
import { selectCommand } from '../../src/cli/select.js'
import { InvalidArgumentError } from '../../src/engine/errors.js'

// Every model the commands load, with the weight type its engine reports keeping.
const loads = vi.hoisted(() => [] as Array<{ dir: string; requested: unknown; kept: string | undefined }>)
vi.mock('../../src/engine/model.js', async (importOriginal) => {
  const real = await importOriginal<typeof import('../../src/engine/model.js')>()
  return {
    ...real,
    loadModel: async (dir: string, options: Parameters<typeof real.loadModel>[1]) => {
      const model = await real.loadModel(dir, options)
      loads.push({ dir, requested: options?.weights, kept: model.handle.describe().weights })
      return model
    },
  }
})

beforeEach(() => {
  loads.length = 0
})

/** Runs a command with its stdout table silenced. */
async function quietly(run: () => Promise<number>): Promise<number> {
  const log = vi.spyOn(console, 'log').mockImplementation(() => {})
  const err = vi.spyOn(process.stderr, 'write').mockImplementation(() => true)
  try {
    return await run()
  } finally {
    log.mockRestore()
    err.mockRestore()
  }
}

const CHOICES = /--weights must be one of f32, bf16, f16, int8, checkpoint, got f8/

describe('eval --weights', () => {
  it('bf16: the bundled model is evaluated with its weights kept as bf16', async () => {
    expect(await quietly(() => evalCommand(['--levels', '1', '--size', '2', '--k', '1', '--threads', '1', '--weights', 'bf16']))).toBe(0)
    expect(loads.map((l) => [l.requested, l.kept])).toEqual([['bf16', 'bf16']])
  })

  it('a bad value is refused with the choices before the model loads', async () => {
    const refused = evalCommand(['--levels', '1', '--size', '2', '--weights', 'f8'])
    await expect(refused).rejects.toBeInstanceOf(InvalidArgumentError)
    await expect(refused).rejects.toThrow(CHOICES)
    expect(loads).toEqual([])
  })
})

describe('select --weights', () => {
  it('int8: the bundled model samples the pools with its weights kept as int8', async () => {
    const code = await quietly(() => selectCommand(['--size', '4', '--calibration', '4', '--n', '2', '--ns', '1,2', '--max-tokens', '48', '--threads', '1', '--weights', 'int8']))
    expect(code).toBe(0)
    expect(loads.map((l) => [l.requested, l.kept])).toEqual([['int8', 'int8']])
  })

  it('a bad value is refused with the choices before the model loads', async () => {
    const refused = selectCommand(['--size', '2', '--weights', 'f8'])
    await expect(refused).rejects.toBeInstanceOf(InvalidArgumentError)
    await expect(refused).rejects.toThrow(CHOICES)
    expect(loads).toEqual([])
  })
})
