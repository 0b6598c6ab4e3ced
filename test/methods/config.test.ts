// Run configs are typed and validated: unknown keys and wrong types are errors naming the path.
import { describe, expect, it } from 'vitest'
import { ConfigError } from '../../src/engine/errors.js'
import { PAPER_PRESET, resolveCoseConfig, TOY_PRESET } from '../../src/methods/cose/config.js'
import { parseArgs } from '../../src/cli/args.js'
import { InvalidArgumentError } from '../../src/engine/errors.js'

describe('COSE config', () => {
  it('fills defaults from the preset and overrides nested keys', () => {
    const c = resolveCoseConfig({ solver: { n: 8 }, switches: { weighting: false } }, TOY_PRESET, 'x.json')
    expect(c.solver.n).toBe(8)
    expect(c.solver.questions).toBe(TOY_PRESET.solver.questions)
    expect(c.switches).toEqual({ weighting: false, priority: 'cose', judge: 'policy' })
    expect(resolveCoseConfig({}, PAPER_PRESET).ppo).toMatchObject({ lr: 1e-6, clip: 0.2, klCoef: 0.01 })
  })

  it.each([
    [{ solver: { m: 3 } }, 'solver.m', /unknown key 'solver.m'/],
    [{ solver: { n: '4' } }, 'solver.n', /solver.n: expected a number, got "4"/],
    [{ proposer: { levels: 3 } }, 'proposer.levels', /expected an array/],
    [{ switches: { priority: 'sometimes' } }, 'switches.priority', /cose \| uniform \| one-minus-p/],
    [{ steps: 0 }, 'steps', /integer ≥ 1/],
    [{ validator: { acceptThreshold: 2 } }, 'validator.acceptThreshold', /\[0, 1\]/],
    [[1, 2], null, /expected an object/],
  ])('rejects %j naming %s', (override, field, message) => {
    let error: unknown
    try {
      resolveCoseConfig(override, TOY_PRESET, 'run.json')
    } catch (e) {
      error = e
    }
    expect(error).toBeInstanceOf(ConfigError)
    expect((error as ConfigError).field).toBe(field)
    expect((error as Error).message).toMatch(message)
    expect((error as Error).message).toContain('run.json')
  })
})

describe('CLI arguments', () => {
  it('parses --k v, --k=v and flags, and rejects unknown options and bad numbers', () => {
    const spec = { steps: 'number', out: 'string', help: 'boolean' } as const
    expect(parseArgs(['--steps', '3', '--out=x', '--help'], spec).options).toEqual({ steps: 3, out: 'x', help: true })
    expect(() => parseArgs(['--stpes', '3'], spec)).toThrow(InvalidArgumentError)
    expect(() => parseArgs(['--steps', 'three'], spec)).toThrow(/needs a number/)
    expect(() => parseArgs(['--out'], spec)).toThrow(/needs a value/)
  })
})
