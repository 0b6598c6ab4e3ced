// R-Zero with role adapters (issue 19): the Challenger and the Solver each their own LoRA adapter
// on one shared base of the bundled model, one trainer with a step clock per adapter. (a) each
// role's generate calls go through its adapter; (b) a Challenger step moves only the Challenger's
// adapter and a Solver step only the Solver's (the base never); (c) checkpoint → resume → one more
// step equals the straight run bit for bit, the resumed adapters and clocks being the saved ones.
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { DEFAULT_MODEL } from '../../src/cli/evolve.js'
import { ConfigError } from '../../src/engine/errors.js'
import type { GenerateOptions, Prompt } from '../../src/engine/model.js'
import { readSafetensorsHeader } from '../../src/engine/hf/safetensors.js'
import { nativeAddon } from '../../src/native.js'
import { checkpointDir, drive, type DriveOptions } from '../../src/methods/common/driver.js'
import { EnginePolicy, openPolicy, type OpenPolicy } from '../../src/methods/common/policy.js'
import { RolePolicy } from '../../src/methods/common/role-adapters.js'
import type { Trainer } from '../../src/train/trainer.js'
import { resolveRzeroConfig, type RzeroConfig } from '../../src/methods/rzero/config.js'
import { RzeroRun, type ChallengerRecord, type SolverRecord } from '../../src/methods/rzero/loop.js'
import { rzeroFlagsToOverride, spec } from '../../src/methods/rzero/spec.js'
import { arithWorld } from '../../src/worlds/arith/index.js'
import { metrics, untimed } from './run-metrics.js'

const world = arithWorld()
const root = mkdtempSync(join(tmpdir(), 'ad-rzero-roles-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))

const adapterBytes = (modelDir: string) => Object.fromEntries(['challenger', 'solver'].map((n) => [n, readFileSync(join(modelDir, n, 'adapter_model.safetensors')).toString('base64')]))

describe('R-Zero role adapters: config and flag', () => {
  it('refuses roleAdapters without grpo.loraRank (a ConfigError naming the field); --role-adapters R sets both', () => {
    expect(() => resolveRzeroConfig({ roleAdapters: true })).toThrow(ConfigError)
    expect(() => resolveRzeroConfig({ roleAdapters: true, grpo: { loraRank: 0 } })).toThrow(/roleAdapters.*grpo\.loraRank > 0/)
    expect(resolveRzeroConfig({}).roleAdapters).toBe(false)
    expect(spec.flags?.['role-adapters']).toBe('number')
    const c = resolveRzeroConfig(rzeroFlagsToOverride({ 'role-adapters': 3, beta: 0 }))
    expect([c.roleAdapters, c.grpo.loraRank, c.reward.beta]).toEqual([true, 3, 0])
    expect(rzeroFlagsToOverride({})).toEqual({})
  })
})

/** An engine OpenPolicy whose policies record each generate call's adapter choice. */
function recordingEngine(): OpenPolicy & { calls: { prompts: Prompt[]; adapter: unknown }[] } {
  const calls: { prompts: Prompt[]; adapter: unknown }[] = []
  class Recording extends EnginePolicy {
    override generate(prompts: Prompt[], options?: GenerateOptions) {
      calls.push({ prompts, adapter: options?.adapter })
      return super.generate(prompts, options)
    }
  }
  const open = async (ref: Parameters<OpenPolicy>[0]) => new Recording(((await openPolicy(ref)) as EnginePolicy).model)
  return Object.assign(open, { calls })
}

describe.skipIf(!existsSync(join(DEFAULT_MODEL, 'model.safetensors')))('R-Zero role adapters on the bundled model', () => {
  // plain R-Zero (β = 0: the Solver alone answers), one Challenger step then one Solver step
  const small: RzeroConfig = resolveRzeroConfig({
    steps: 2,
    phases: { challengerSteps: 1, solverSteps: 1 },
    reward: { beta: 0 },
    challenger: { batch: 6, levels: [3], temperature: 1, maxTokens: 40 },
    ensemble: { solverOnly: { temperature: 1, k: 4 }, maxTokens: 48 },
    solver: { candidates: 8, band: [0, 1], questions: 4, n: 6, temperature: 1, maxTokens: 48 },
    grpo: { loraRank: 4, loraAlpha: 8, lr: 1e-3, warmupSteps: 0 },
    eval: { every: 1, size: 4, benchmarks: [] },
    checkpointEvery: 1,
    roleAdapters: true,
  })
  const driveOptions = (outDir: string, stop = false): DriveOptions => ({ outDir, method: 'rzero', totalSteps: small.steps, evalEvery: 1, checkpointEvery: 1, series: [], describe: () => '', stopRequested: stop ? () => true : undefined })

  it("each role samples through its adapter; each phase moves only its role's adapter; resume is bit for bit", async () => {
    const train = (await nativeAddon()).train
    const open = recordingEngine()
    const run = await RzeroRun.start(DEFAULT_MODEL, small, world, { threads: 2, openPolicy: open })
    expect(run.challenger).toBeInstanceOf(RolePolicy)
    const base = (run.challenger as RolePolicy).base
    expect((run.solver as RolePolicy).base).toBe(base) // one base for both roles, no frozen reference copy
    expect([...base.adapterNames].sort()).toEqual(['challenger', 'solver'])
    const handle = (base as EnginePolicy).model.handle
    const snapshot = async () => new Map((await train.exportTensors(handle)).map((t) => [t.name, Float32Array.from(t.data)]))
    const kind = (name: string) => /\.lora_[AB]\.(challenger|solver)\.weight$/.exec(name)?.[1] ?? (name.includes('.lora_') ? 'other' : 'base')
    const moved = (a: Map<string, Float32Array>, b: Map<string, Float32Array>, role: string) => [...a.keys()].filter((n) => kind(n) === role && Array.from(a.get(n)!).some((x, i) => !Object.is(x, b.get(n)![i])))
    const trainer = run['challengerTrainer'] as unknown as Trainer
    expect(run['solverTrainer']).toBe(trainer)

    // Challenger phase: its batch through 'challenger', the Solver's answers (the ensemble) through 'solver'
    const before = await snapshot()
    const c = (await run.runStep()) as ChallengerRecord
    const afterChallenger = await snapshot()
    expect(c.phase).toBe('challenger')
    expect(c.train?.skipped).toBe(false)
    expect(c.reward.std).toBeGreaterThan(0) // a non-zero GRPO advantage: the Challenger's adapter must move
    const [questions, ...answers] = open.calls
    expect(questions.adapter).toBe('challenger')
    expect(questions.prompts.every((p) => p === world.rzero.challengerPrompt(3))).toBe(true)
    expect(answers.length).toBeGreaterThan(0)
    for (const a of answers) expect(a.adapter).toBe('solver')
    expect(moved(afterChallenger, before, 'challenger').length).toBeGreaterThan(0)
    expect(moved(afterChallenger, before, 'solver')).toEqual([])
    expect(moved(afterChallenger, before, 'base')).toEqual([])
    expect([trainer.adapterSteps('challenger'), trainer.adapterSteps('solver')]).toEqual([1, 0])

    // Solver phase: candidates from the frozen Challenger through 'challenger', answers and rollouts through 'solver'
    const calls = open.calls.length
    const s = (await run.runStep()) as SolverRecord
    const afterSolver = await snapshot()
    expect(s.phase).toBe('solver')
    expect(s.kept).toBeGreaterThan(0)
    expect(s.train?.skipped).toBe(false)
    expect(s.reward.std, JSON.stringify(s.reward)).toBeGreaterThan(0) // rollouts that agree and disagree with their pseudo-label: the Solver's adapter must move
    const [candidates, ...solving] = open.calls.slice(calls)
    expect(candidates.adapter).toBe('challenger')
    expect(solving.length).toBeGreaterThan(0)
    for (const a of solving) expect(a.adapter).toBe('solver')
    expect(moved(afterSolver, afterChallenger, 'solver').length).toBeGreaterThan(0)
    expect(moved(afterSolver, afterChallenger, 'challenger')).toEqual([])
    expect(moved(afterSolver, afterChallenger, 'base')).toEqual([])
    expect([trainer.adapterSteps('challenger'), trainer.adapterSteps('solver')]).toEqual([1, 1])
    // the held-out evaluation is the Solver's
    const evalFrom = open.calls.length
    await run.evaluate()
    for (const e of open.calls.slice(evalFrom)) expect(e.adapter).toBe('solver')
    run.dispose()

    // two steps straight vs. one step, checkpoint, resume, one more
    const straightDir = join(root, 'straight')
    const a = await RzeroRun.start(DEFAULT_MODEL, small, world, { threads: 2 })
    await drive(a, driveOptions(straightDir))
    a.dispose()
    const splitDir = join(root, 'split')
    const b = await RzeroRun.start(DEFAULT_MODEL, small, world, { threads: 2 })
    expect((await drive(b, driveOptions(splitDir, true))).stoppedEarly).toBe(true)
    const saved = new Map((await train.exportTensors(((b.challenger as RolePolicy).base as EnginePolicy).model.handle)).map((t) => [t.name, Array.from(t.data)]))
    b.dispose()
    const ckpt = checkpointDir(splitDir, 1)
    expect(existsSync(join(ckpt, 'challenger')) || existsSync(join(ckpt, 'solver'))).toBe(false) // one role: the base with both adapters
    for (const n of ['challenger', 'solver']) expect(JSON.parse(readFileSync(join(ckpt, 'model', n, 'adapter_config.json'), 'utf8')).r).toBe(4)
    const moments = (await readSafetensorsHeader(join(ckpt, 'model-state', 'optimizer.safetensors'))).tensors.map((t) => t.name)
    expect(moments.length).toBeGreaterThan(0)
    expect(moments.every((n) => /\.lora_[AB]\.challenger\.weight::[mv]$/.test(n))).toBe(true) // after the Challenger step: its moments only
    expect(JSON.parse(readFileSync(join(ckpt, 'model-state', 'trainer_state.json'), 'utf8')).adapterSteps).toEqual({ challenger: 1, solver: 0 })
    const r = await RzeroRun.resume(ckpt, world, { threads: 2 })
    expect(r.step).toBe(1)
    const resumedBase = (r.challenger as RolePolicy).base as EnginePolicy
    const resumed = new Map((await train.exportTensors(resumedBase.model.handle)).map((t) => [t.name, Array.from(t.data)]))
    expect([...resumed.keys()].sort()).toEqual([...saved.keys()].sort())
    for (const [name, data] of saved) if (kind(name) !== 'base') expect(resumed.get(name), name).toEqual(data)
    expect([(r['challengerTrainer'] as unknown as Trainer).adapterSteps('challenger'), (r['challengerTrainer'] as unknown as Trainer).adapterSteps('solver')]).toEqual([1, 0])
    await drive(r, driveOptions(splitDir))
    r.dispose()
    expect(untimed(metrics(splitDir))).toEqual(untimed(metrics(straightDir)))
    expect(adapterBytes(join(checkpointDir(splitDir, 2), 'model'))).toEqual(adapterBytes(join(checkpointDir(straightDir, 2), 'model')))
    expect(readFileSync(join(checkpointDir(splitDir, 2), 'model-state', 'optimizer.safetensors'))).toEqual(readFileSync(join(checkpointDir(straightDir, 2), 'model-state', 'optimizer.safetensors')))
  }, 600_000)
})
