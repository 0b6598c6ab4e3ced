// The evolve command's method registry: method selection, resume reads the method from the run folder.
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, relative } from 'node:path'
import { describe, expect, it, vi } from 'vitest'
import { deviceOption } from '../../src/cli/args.js'
import { evolveCommand } from '../../src/cli/evolve.js'
import { DeviceUnavailableError, InvalidArgumentError } from '../../src/engine/errors.js'
import { METHODS } from '../../src/methods/index.js'
import { TOY_PRESET as COSE_TOY, resolveCoseConfig } from '../../src/methods/cose/config.js'
import { advantageEstimators } from '../../src/rl/advantages.js'
import { priorityModes } from '../../src/replay/index.js'

/** With --keep 1: the latest checkpoint and the best evaluated one (the earliest of the highest held-out accuracy). */
function keptCheckpoints(run: string, latest: number): string[] {
  const rows = readFileSync(join(run, 'metrics.jsonl'), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as { step: number; heldOutAccuracy?: number })
  const evaluated = rows.filter((r) => r.step > 0 && typeof r.heldOutAccuracy === 'number')
  const best = evaluated.reduce((b, r) => (r.heldOutAccuracy! > b.heldOutAccuracy! ? r : b), evaluated[0])
  const name = (step: number) => `step-${String(step).padStart(6, '0')}`
  return [...new Set([name(best.step), name(latest)])].sort()
}

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

  /** Runs evolve with console and stderr captured; returns its exit code and what it printed. */
  async function quiet(args: string[]): Promise<{ code: number; out: string }> {
    let out = ''
    const log = vi.spyOn(console, 'log').mockImplementation((x: unknown) => void (out += `${String(x)}\n`))
    const err = vi.spyOn(process.stderr, 'write').mockImplementation(() => true)
    try {
      return { code: await evolveCommand(args), out }
    } finally {
      log.mockRestore()
      err.mockRestore()
    }
  }

  it('the example method grpo is registered and runs through evolve: verifier rewards, checkpoints, resume', async () => {
    expect(Object.keys(METHODS)).toContain('grpo')
    const dir = mkdtempSync(join(tmpdir(), 'ad-evolve-grpo-'))
    const cfg = join(dir, 'grpo.json')
    writeFileSync(cfg, JSON.stringify({ questions: { level: 2, perStep: 4 }, rollout: { n: 4, temperature: 1, topP: 1, maxTokens: 48 }, eval: { every: 1, size: 8, benchmarks: [] }, checkpointEvery: 1 }))
    const out = join(dir, 'run')
    expect((await quiet(['--method', 'grpo', '--config', cfg, '--steps', '1', '--out', out, '--threads', '1'])).code).toBe(0)
    expect((await quiet(['--resume', out, '--steps', '2', '--threads', '1'])).code).toBe(0)
    const rows = readFileSync(join(out, 'metrics.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l))
    expect(rows.map((r) => r.step)).toEqual([0, 1, 2])
    for (const r of rows.slice(1)) {
      expect(r.questions).toBe(4)
      expect(r.reward.n).toBe(16)
      expect(r.reward.min >= 0 && r.reward.max <= 1).toBe(true)
      expect(r.train.skipped).toBe(false)
      expect(typeof r.heldOutAccuracy).toBe('number')
    }
    expect(JSON.parse(readFileSync(join(out, 'latest.json'), 'utf8'))).toEqual({ method: 'grpo', step: 2, checkpoint: 'checkpoints/step-000002' })
  }, 120_000)

  it('--role-adapters R: a COSE run whose roles each have their own rank-R adapter on one base; its checkpoint holds all three and resumes', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ad-evolve-roles-'))
    const cfg = join(dir, 'cose.json')
    writeFileSync(cfg, JSON.stringify({ proposer: { count: 4, levels: [2, 3], temperature: 1, maxTokens: 32 }, solver: { questions: 2, freshFirst: 2, n: 2, temperature: 1, maxTokens: 40 }, eval: { every: 1, size: 4, benchmarks: [] }, checkpointEvery: 1 }))
    const out = join(dir, 'run')
    expect((await quiet(['--method', 'cose', '--config', cfg, '--role-adapters', '2', '--steps', '1', '--out', out, '--threads', '1'])).code).toBe(0)
    const model = join(out, 'checkpoints', 'step-000001', 'model')
    expect(readdirSync(model).sort()).toEqual(['judge', 'proposer', 'solver'])
    for (const role of ['judge', 'proposer', 'solver']) expect(JSON.parse(readFileSync(join(model, role, 'adapter_config.json'), 'utf8')).r).toBe(2)
    expect(JSON.parse(readFileSync(join(out, 'checkpoints', 'step-000001', 'run_state.json'), 'utf8')).config).toMatchObject({ roleAdapters: true, ppo: { loraRank: 2 } })
    expect((await quiet(['--resume', out, '--steps', '2', '--threads', '1'])).code).toBe(0)
    expect(JSON.parse(readFileSync(join(out, 'latest.json'), 'utf8'))).toMatchObject({ method: 'cose', step: 2 })
    await expect(quiet(['--method', 'cose', '--role-adapters', '0', '--steps', '1', '--out', join(dir, 'refused')])).rejects.toThrow(/roleAdapters.*ppo\.loraRank > 0/)
  }, 120_000)

  it('--role-adapters R with rzero: the Challenger and the Solver each a rank-R adapter on one base; the checkpoint holds both and resumes; jzero and rzero refuse R = 0', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ad-evolve-rzero-roles-'))
    const cfg = join(dir, 'rzero.json')
    // plain R-Zero (the Solver alone answers): no second ensemble model to build
    writeFileSync(cfg, JSON.stringify({ phases: { challengerSteps: 1, solverSteps: 1 }, reward: { beta: 0 }, challenger: { batch: 4, levels: [3], temperature: 1, maxTokens: 32 }, ensemble: { solverOnly: { temperature: 1, k: 2 }, maxTokens: 40 }, solver: { candidates: 4, band: [0, 1], questions: 2, n: 2, temperature: 1, maxTokens: 40 }, eval: { every: 1, size: 4, benchmarks: [] }, checkpointEvery: 1 }))
    const out = join(dir, 'run')
    expect((await quiet(['--method', 'rzero', '--config', cfg, '--role-adapters', '2', '--steps', '1', '--out', out, '--threads', '1'])).code).toBe(0)
    const ckpt = join(out, 'checkpoints', 'step-000001')
    expect(readdirSync(join(ckpt, 'model')).sort()).toEqual(['challenger', 'solver'])
    for (const role of ['challenger', 'solver']) expect(JSON.parse(readFileSync(join(ckpt, 'model', role, 'adapter_config.json'), 'utf8')).r).toBe(2)
    expect(JSON.parse(readFileSync(join(ckpt, 'run_state.json'), 'utf8')).config).toMatchObject({ roleAdapters: true, grpo: { loraRank: 2 } })
    expect((await quiet(['--resume', out, '--steps', '2', '--threads', '1'])).code).toBe(0)
    expect(JSON.parse(readFileSync(join(out, 'latest.json'), 'utf8'))).toMatchObject({ method: 'rzero', step: 2 })
    await expect(quiet(['--method', 'rzero', '--role-adapters', '0', '--steps', '1', '--out', join(dir, 'refused')])).rejects.toThrow(/roleAdapters.*grpo\.loraRank > 0/)
    await expect(quiet(['--method', 'jzero', '--role-adapters', '0', '--steps', '1', '--out', join(dir, 'refused-j')])).rejects.toThrow(/roleAdapters.*ppo\.loraRank > 0/)
  }, 120_000)

  it('--config-schema prints the JSON Schema of config files: every key optional, the preset as defaults, registered choices', async () => {
    const { code, out } = await quiet(['--method', 'cose', '--config-schema'])
    expect(code).toBe(0)
    const schema = JSON.parse(out)
    expect(schema.type).toBe('object')
    expect(schema.required).toBeUndefined()
    expect(schema.additionalProperties).toBe(false)
    expect(schema.properties.solver.properties.n.default).toBe(COSE_TOY.solver.n)
    expect(schema.properties.ppo.properties.lr.default).toBe(COSE_TOY.ppo.lr)
    expect(schema.properties.ppo.properties.advantage.enum).toEqual(advantageEstimators.names())
    expect(schema.properties.switches.properties.priority.enum).toEqual(priorityModes.names())
    const paper = JSON.parse((await quiet(['--method', 'cose', '--preset', 'paper', '--config-schema'])).out)
    expect(paper.properties.steps.default).toBe(260)
    for (const m of Object.keys(METHODS)) expect(JSON.parse((await quiet(['--method', m, '--config-schema'])).out).type).toBe('object')
  })

  it('enum choices come from the registries: every registered estimator is a valid COSE advantage', () => {
    for (const name of advantageEstimators.names()) expect(resolveCoseConfig({ ppo: { advantage: name } }).ppo.advantage).toBe(name)
    expect(() => resolveCoseConfig({ ppo: { advantage: 'ppo-gae' } })).toThrow(/reinforce\+\+-baseline/)
  })

  it('a relative --out and --keep: the run folder resumes from any working directory', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ad-evolve-rel-'))
    const cfg = join(dir, 'cose.json')
    writeFileSync(cfg, JSON.stringify({ proposer: { count: 4, levels: [3], temperature: 1, maxTokens: 32 }, solver: { questions: 2, n: 2, temperature: 1, maxTokens: 48 }, eval: { every: 1, size: 4, benchmarks: [] }, checkpointEvery: 1 }))
    const out = relative(process.cwd(), join(dir, 'run'))
    expect((await quiet(['--method', 'cose', '--config', cfg, '--steps', '2', '--keep', '1', '--out', out, '--threads', '1'])).code).toBe(0)
    // --keep 1 keeps the latest and the best evaluated checkpoint (the collapse guard's rollback target)
    expect(readdirSync(join(dir, 'run', 'checkpoints'))).toEqual(keptCheckpoints(join(dir, 'run'), 2))
    const cwd = process.cwd()
    try {
      process.chdir(tmpdir())
      expect((await quiet(['--resume', join(dir, 'run'), '--steps', '3', '--keep', '1', '--threads', '1'])).code).toBe(0)
    } finally {
      process.chdir(cwd)
    }
    expect(readdirSync(join(dir, 'run', 'checkpoints'))).toEqual(keptCheckpoints(join(dir, 'run'), 3))
    await expect(evolveCommand(['--method', 'cose', '--keep', '0'])).rejects.toThrow(/--keep must be an integer ≥ 1/)
  }, 120_000)
})
